"""The control loop with the replay robot: step layout, operator keys, saved episodes, keyboard teleop."""

import json

import numpy as np

from robot_agent.keys import KeyReader
from robot_agent.policies import KeyboardTeleop, RandomPolicy, ReplayPolicy
from robot_agent.protocol import decode_image, unpack_step
from robot_agent.replay_robot import ReplayRobot, synthetic_episode
from robot_agent.robot import Observation
from robot_agent.runner import RunConfig, run_episodes
from robot_agent.streamer import LinkStats


class RecordingLink:
    """Stands in for the WebSocket link: keeps what the loop would send."""

    def __init__(self):
        self.messages = []
        self.stats = LinkStats()

    def send_json(self, message):
        self.messages.append(json.loads(json.dumps(message)))

    def send_step(self, payload):
        self.messages.append(unpack_step(payload))


class KeysAt(KeyReader):
    """Presses keys when the loop reaches given step indices."""

    def __init__(self, plan: dict[int, str]):
        super().__init__()
        self.plan, self.calls = plan, 0

    def drain(self):
        key = self.plan.get(self.calls)
        self.calls += 1
        return [key] if key else []


def test_steps_start_with_the_reset_observation_and_carry_every_camera(tmp_path):
    robot = ReplayRobot(synthetic_episode(8, size=16))
    link = RecordingLink()
    with robot:
        summary = run_episodes(robot, ReplayPolicy(robot), link, RunConfig(hz=200, quiet=True, save_dir=tmp_path))
    kinds = [m["type"] if isinstance(m, dict) else "step" for m in link.messages]
    assert kinds[0] == "episode_start" and kinds[-1] == "episode_end" and kinds.count("step") == 8
    steps = [m for m in link.messages if isinstance(m, tuple)]
    assert [h["index"] for h, _ in steps] == list(range(8))
    assert steps[0][0]["action"] == [] and len(steps[1][0]["action"]) == 7
    header, images = steps[-1]
    assert header["truncated"] and header["success"] and set(images) == {"main", "extra"}
    assert decode_image(images["main"]).shape == (16, 16, 3)
    assert link.messages[-1]["success"] is True and summary.steps == 8

    saved = ReplayRobot.from_file(tmp_path / f"{summary.episodes[0]}.npz")
    assert saved.length == 8 and saved.cameras == ["main", "extra"]
    assert np.abs(saved.frames["main"].astype(int) - robot.frames["main"].astype(int)).max() == 0


def test_operator_keys_label_the_current_frame_and_reset_the_episode():
    robot = ReplayRobot(synthetic_episode(30, size=8))
    link = RecordingLink()
    keys = KeysAt({3: "c", 5: "a", 7: "r"})
    with robot:
        summary = run_episodes(robot, ReplayPolicy(robot), link, RunConfig(hz=500, quiet=True), keys)
    labels = [m for m in link.messages if isinstance(m, dict) and m["type"] == "label"]
    assert [(m["index"], m["value"]) for m in labels] == [(3, "success"), (5, "fail")]
    end = link.messages[-1]
    assert end["type"] == "episode_end" and end["reset"] is True
    assert summary.steps == 8 and summary.labels == 2  # r at step 7 ended the episode early


def test_keyboard_teleop_moves_while_a_key_is_fresh_and_toggles_the_gripper():
    now = [0.0]
    policy = KeyboardTeleop(hold_s=0.2, clock=lambda: now[0])
    obs = Observation(images={})
    policy.on_keys(["i", "u"])
    assert np.allclose(policy.act(obs), [1, 0, 1, 0, 0, 0, 1])
    now[0] = 0.5
    assert np.allclose(policy.act(obs), [0, 0, 0, 0, 0, 0, 1])
    policy.on_keys(["g", "l"])
    assert np.allclose(policy.act(obs), [0, -1, 0, 0, 0, 0, -1])


def test_random_policy_is_reproducible_per_seed():
    a, b = RandomPolicy(7), RandomPolicy(7)
    a.reset(3)
    b.reset(3)
    obs = Observation(images={})
    assert np.array_equal(a.act(obs), b.act(obs))
    assert np.all(np.abs(a.act(obs)) <= 1)
