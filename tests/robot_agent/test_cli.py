"""The command line's own answers (no server needed)."""

from robot_agent.cli import main


def test_check_reports_vulkan_maniskill_and_spacemouse(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "vulkan:" in out and "maniskill: 3.0.1 importable" in out and "spacemouse:" in out


def test_a_missing_token_is_explained(capsys, monkeypatch):
    monkeypatch.delenv("RS_AGENT_TOKEN", raising=False)
    assert main(["replay", "--project", "PickCube"]) == 2
    assert "--token" in capsys.readouterr().err


def test_an_unreachable_server_is_reported_not_hung(capsys):
    code = main(["replay", "--server", "http://127.0.0.1:9", "--token", "x", "--project", "P", "--synthetic-steps", "3",
                 "--hz", "50", "--quiet", "--connect-timeout", "0.5"])  # fmt: skip
    err = capsys.readouterr().err
    assert "server not reachable yet" in err and "done: 1 episodes, 3 steps" in err
    assert code == 1 and "error: 3 steps never reached the server" in err  # a run whose steps were lost fails
