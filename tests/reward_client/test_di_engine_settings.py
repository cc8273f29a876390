"""The DI-engine adapter's settings as DI-engine users give them, without a server (the calls it makes are
recorded): observation layouts (reward_client/frames.py), the success rule (reward_client/success.py),
`uploads`, the token check at construction and the figures written to `tb_logger`."""

from __future__ import annotations

import base64
import io
import logging

import numpy as np
import pytest
from PIL import Image

from reward_client import DIEngineRewardModel
from reward_client.client import RewardResult
from reward_client.frames import ObservationError, layout_for
from reward_client.success import success_rule

ALL_ALLOWED = dict.fromkeys(("rewards", "ingest", "propose_labels", "train", "switch_model"), True)


class FakeService:
    """Answers the adapter's calls: the access check (`allowed`), uploads (kept), rewards (the mean pixel /
    255 of each frame, so the frame scored can be told), with the images it was sent."""

    deployment = "d"

    def __init__(self, allowed: dict | None = None, refused: dict | None = None) -> None:
        self.allowed = ALL_ALLOWED if allowed is None else allowed
        self.refused = refused or {}
        self.episodes: dict[str, dict] = {}
        self.scored: list[np.ndarray] = []

    def call(self, method: str, url: str, json: dict | None = None, **kwargs):
        if url == "/api/deployments/d/access":
            return {"deployment": "d", "project": 3, "allowed": self.allowed, "refused": self.refused}
        if url == "/api/episodes":
            self.episodes[json["uuid"]] = {"steps": [], "metadata": json["metadata"]}
        elif url.endswith("/steps"):
            self.episodes[url.split("/")[3]]["steps"].extend(json["steps"])
        elif url.endswith("/finish"):
            self.episodes[url.split("/")[3]]["success"] = json["success"]
        return {}

    def compute_rewards(self, images, env_rewards=None, dones=None) -> RewardResult:
        self.scored.append(images)
        p = images.reshape(len(images), -1).mean(axis=1).astype(np.float32) / 255
        return RewardResult(rewards=p, probabilities=p, success=p > 0.5, scored=np.ones(len(p), bool), version=7)


class Recorder:
    """tb_logger's add_scalar, as DI-engine's SummaryWriter takes it."""

    def __init__(self) -> None:
        self.scalars: dict[str, list[tuple[int, float]]] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.setdefault(tag, []).append((step, value))


def model(service: FakeService | None = None, tb_logger=None, **config) -> DIEngineRewardModel:
    return DIEngineRewardModel(config, "cpu", tb_logger, client=service or FakeService())


def stack_episode(steps: int, *, reward_at_end: float = 1.0, size: int = 8) -> list[dict]:
    """Atari-style transitions: float32 [4,size,size] grayscale stacks in [0, 1], the newest frame last, its
    value the step number / 10; DI-engine's keys only (no info)."""

    def stack(t: int) -> np.ndarray:
        return np.stack([np.full((size, size), max(0, t - k) / 10, np.float32) for k in (3, 2, 1, 0)])

    return [
        {
            "obs": stack(t),
            "next_obs": stack(t + 1),
            "action": np.array([0]),
            "reward": np.array([reward_at_end if t == steps - 1 else 0.0], np.float32),
            "done": t == steps - 1,
        }
        for t in range(steps)
    ]


@pytest.mark.parametrize(
    ("shape", "kind", "channels_first"),
    [
        ((84, 84, 3), "rgb", False),
        ((3, 84, 84), "rgb", True),
        ((84, 84), "gray", False),
        ((1, 84, 84), "gray", True),
        ((84, 84, 1), "gray", False),
        ((4, 84, 84), "gray_stack", True),
        ((84, 84, 4), "gray_stack", False),
        ((4, 84, 84, 3), "rgb_stack", False),
        ((4, 3, 84, 84), "rgb_stack", True),
    ],
)
def test_observation_layouts_are_read_from_the_shape(shape, kind, channels_first):
    layout = layout_for(shape)
    assert (layout.kind, layout.channels_first) == (kind, channels_first)
    frames = layout.render(np.zeros((2, *shape), np.float32))
    assert frames.shape == (2, 84, 84, 3)


def test_a_stack_is_scored_by_its_newest_frame_replicated_to_three_channels():
    stacks = np.stack([np.stack([np.full((5, 6), 10 * k + b, np.uint8) for k in range(4)]) for b in range(2)])
    frames = layout_for((4, 5, 6)).render(stacks)
    assert frames.shape == (2, 5, 6, 3) and frames[:, 0, 0].tolist() == [[30, 30, 30], [31, 31, 31]]
    oldest = layout_for((4, 5, 6), stack_index=0).render(stacks)
    assert oldest[:, 0, 0, 0].tolist() == [0, 1]
    rgb = np.arange(2 * 6 * 8 * 8).reshape(2, 6, 8, 8)
    newest_rgb = layout_for((6, 8, 8), "rgb_stack").render(rgb)  # two RGB frames along the channels
    np.testing.assert_array_equal(newest_rgb, rgb[:, 3:6].transpose(0, 2, 3, 1))


@pytest.mark.parametrize(
    ("shape", "fmt", "message"),
    [
        ((4,), "auto", r"shape \[4\]: a vector \(like CartPole's state\), not an image"),
        ((), "auto", r"shape \[\]: a vector"),
        (
            (6, 84, 84),
            "auto",
            r"shape \[6, 84, 84\].*6 grayscale frames \(gray_stack\) or 2 RGB frames.*set obs_format to rgb, gray",
        ),
        ((32, 84, 84), "auto", r"shape \[32, 84, 84\].*set obs_format to rgb, gray, gray_stack or rgb_stack"),
        ((4, 84, 84), "rgb", r"shape \[4, 84, 84\].*not a rgb layout.*set another obs_format"),
        ((4, 84, 84), "nope", "obs_format must be one of"),
    ],
)
def test_observations_that_are_no_frames_are_refused_naming_the_shape(shape, fmt, message):
    with pytest.raises(ObservationError, match=message):
        layout_for(shape, fmt)


def test_a_vector_env_is_refused_at_the_first_call_and_obs_shape_refuses_it_at_construction():
    cartpole = [{"obs": np.zeros(4, np.float32), "next_obs": np.ones(4, np.float32), "reward": 1.0, "done": False}]
    service = FakeService()
    adapter = model(service)
    with pytest.raises(ObservationError, match=r"shape \[4\]"):
        adapter.collect_data(cartpole)
    with pytest.raises(ObservationError, match=r"shape \[4\]"):
        adapter.estimate(cartpole)
    assert service.scored == []
    with pytest.raises(ObservationError, match=r"shape \[4\]"):
        model(obs_shape=[4])


def test_estimate_scores_the_newest_frame_of_float_stacks():
    service = FakeService()
    batch = stack_episode(3)
    model(service).estimate(batch)
    scored = service.scored[0]
    assert scored.dtype == np.uint8 and scored.shape == (3, 8, 8, 3)
    assert scored[:, 0, 0].tolist() == [[26, 26, 26], [51, 51, 51], [77, 77, 77]]  # (t + 1) / 10 * 255


@pytest.mark.parametrize(
    ("rule", "flags"),
    [
        ("done_reward>=1", [False, False, False, True]),
        ("reward>=0", [True, True, True, True]),
        ("return>=1.5", [False, False, False, False]),
        ("return>=1", [False, False, False, True]),
        ("none", [False, False, False, False]),
    ],
)
def test_success_rules_on_dis_transitions(rule, flags):
    assert success_rule(rule).flags(stack_episode(4)) == flags


def test_a_success_rule_that_cannot_be_read_names_the_forms():
    with pytest.raises(ValueError, match="reward>=X, done_reward>=X, return>=X"):
        success_rule("reward > 1")


def test_uploads_off_every_nth_and_all():
    for uploads, expected in (("off", 0), ("all", 5), (2, 3), ("3", 2)):
        service = FakeService()
        adapter = model(service, uploads=uploads)
        for _ in range(5):
            adapter.collect_data(stack_episode(2))
        assert len(service.episodes) == expected, uploads
        assert adapter.finished_episodes == (5 if expected else 0)
    with pytest.raises(ValueError, match="uploads must be 'all', 'off' or N >= 1"):
        model(uploads=0.5)


def test_uploads_carry_the_rendered_frames_and_the_rules_success():
    service = FakeService()
    adapter = model(service, uploads="all", success_rule="done_reward>=1")
    adapter.collect_data(stack_episode(3))
    adapter.collect_data(stack_episode(2, reward_at_end=0.0))
    success, failure = service.episodes.values()
    assert [s["success"] for s in success["steps"]] == [False, False, False, True] and success["success"]
    assert not any(s["success"] for s in failure["steps"]) and not failure["success"]
    assert success["metadata"]["success_rule"] == "done_reward>=1"
    pixels = [np.asarray(Image.open(io.BytesIO(base64.b64decode(s["images"]["main"])))) for s in success["steps"]]
    assert all(p.shape == (8, 8, 3) for p in pixels)
    assert [int(p[0, 0, 0]) for p in pixels] == [0, 26, 51, 77]  # the reset frame's newest, then each next_obs


def test_without_a_success_in_dis_transitions_the_adapter_says_so_at_the_first_call(caplog):
    caplog.set_level(logging.WARNING, "reward_client.di_engine")
    adapter = model(uploads="all")
    adapter.collect_data(stack_episode(2))
    assert adapter.rule.kind == "none" and len(adapter.warnings) == 1
    assert "carry no info['success']" in adapter.warnings[0] and "set success_rule" in caplog.text
    with pytest.raises(ValueError, match="success_rule='info' but the transitions carry no info"):
        model(success_rule="info").collect_data(stack_episode(2))
    with_info = [{**t, "info": {"success": t["done"]}} for t in stack_episode(2)]
    informed = model(uploads="all")
    informed.collect_data(with_info)
    assert informed.rule.kind == "info" and informed.warnings == []


def test_a_retrain_without_labels_is_said_at_construction():
    assert "uploads are off" in model(retrain_after_transitions=10).warnings[0]
    none = model(retrain_after_transitions=10, uploads="all", success_rule="none")
    assert "proposals are all fail" in none.warnings[0]
    assert model(retrain_after_transitions=10, uploads="all", success_rule="done_reward>=1").warnings == []


def test_a_token_without_a_scope_the_settings_need_is_refused_at_construction():
    refused = {"ingest": "this token lacks the 'ingest' scope needed to ingest episodes"}
    only_rewards = {"rewards": True, "ingest": False, "propose_labels": False, "train": False, "switch_model": False}
    with pytest.raises(PermissionError, match=r"ingest \(this token lacks the 'ingest' scope.*uploads='all'"):
        model(FakeService(only_rewards, refused), uploads="all")
    with pytest.raises(PermissionError, match=r"train \(refused\), needed by retrain_after_transitions=5"):
        model(FakeService(only_rewards), retrain_after_transitions=5)
    with pytest.raises(PermissionError, match=r"rewards \(refused\), needed by estimate"):
        model(FakeService({}))
    adapter = model(FakeService(only_rewards))  # uploads off, no retrain: rewards are enough
    assert adapter.cfg["project"] == 3  # from the answer


def test_a_refused_caller_hears_so_at_construction():
    from reward_client.errors import AuthenticationError

    class Refusing(FakeService):
        def call(self, method, url, json=None, **kwargs):
            raise AuthenticationError("Invalid token.", 401)

    with pytest.raises(AuthenticationError, match="refused a caller without a token .outside TRUSTED_CIDRS.: Invalid"):
        model(Refusing())
    with pytest.raises(AuthenticationError, match="HTTP 401: the service refused the token: Invalid token"):
        model(Refusing(), token="rs_revoked")


def test_serving_and_upload_figures_go_to_tb_logger():
    recorder = Recorder()
    service = FakeService()
    adapter = model(service, recorder, uploads="all", success_rule="done_reward>=1", estimate_batch=2)
    adapter.collect_data(stack_episode(3))
    batch = stack_episode(3)
    adapter.estimate(batch)
    adapter.estimate(batch[:1])
    s = recorder.scalars
    assert s["reward_studio/served_frames"] == [(1, 3), (2, 4)]
    assert s["reward_studio/model_version"] == [(1, 7), (2, 7)]
    assert s["reward_studio/reward_mean"][0] == (1, pytest.approx(np.mean([0.1, 0.2, 0.3]), abs=0.01))
    assert s["reward_studio/probability_mean"][1] == (2, pytest.approx(0.1, abs=0.01))
    assert [step for step, _ in s["reward_studio/latency_ms"]] == [1, 2]
    assert all(ms >= 0 for _, ms in s["reward_studio/latency_ms"])
    assert s["reward_studio/uploaded_episodes"] == [(1, 1)] and s["reward_studio/success_episodes"] == [(1, 1)]
