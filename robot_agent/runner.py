"""The control loop: policy -> robot -> stream, at a fixed rate, with the operator's keys and a status line.

Step 0 of an episode is the reset observation (no action), as RLinf's episodes hold N+1 observations.
Operator keys: `c` labels the current frame success, `a` fail, `r` ends the episode and resets.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from .keys import KeyReader
from .policies import Policy
from .protocol import encode_image, pack_step
from .robot import Observation, Robot

if TYPE_CHECKING:
    from .streamer import Streamer

OPERATOR_KEYS = {"c": "success", "a": "fail"}


@dataclass
class RunConfig:
    hz: float = 10.0
    episodes: int = 1
    max_steps: int = 100
    seed: int = 0
    image_format: str = "png"
    jpeg_quality: int = 85
    save_dir: Path | None = None
    stop_on_success_after: int | None = None  # steps to keep going after the env first reports success
    quiet: bool = False


@dataclass
class RunSummary:
    episodes: list[str] = field(default_factory=list)
    steps: int = 0
    labels: int = 0
    successes: int = 0
    rate_hz: float = 0.0


class StatusLine:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self._last = 0.0

    def update(self, text: str, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else 2.0):
            return
        self._last = now
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()


def run_episodes(
    robot: Robot, policy: Policy, streamer: Streamer, config: RunConfig, keys: KeyReader | None = None
) -> RunSummary:
    """Drive `config.episodes` episodes, streaming each step; returns what was sent."""
    driver = _Driver(robot, policy, streamer, config, keys or KeyReader(), StatusLine(quiet=config.quiet))
    for episode_no in range(config.episodes):
        driver.episode_run(episode_no)
    return driver.summary


@dataclass
class _Episode:
    """One episode as the loop drives it: what was observed and done, and why it may stop."""

    id: str
    observations: list[Observation]
    actions: list[np.ndarray] = field(default_factory=list)
    index: int = 0
    first_success: int | None = None
    reset_requested: bool = False

    @property
    def obs(self) -> Observation:
        return self.observations[-1]

    def over(self, config: RunConfig) -> bool:
        """The operator asked for a reset, the env is done, the step budget is spent, or the steps kept going
        after the first success (`stop_on_success_after`) are."""
        if self.reset_requested or self.obs.done or self.index >= config.max_steps:
            return True
        after = config.stop_on_success_after
        return self.first_success is not None and after is not None and self.index - self.first_success >= after


class _Driver:
    """The loop's parts, one method per step of an episode, sharing the robot, policy, stream and summary."""

    def __init__(
        self, robot: Robot, policy: Policy, streamer: Streamer, config: RunConfig, keys: KeyReader, status: StatusLine
    ) -> None:
        self.robot, self.policy, self.streamer, self.config = robot, policy, streamer, config
        self.keys, self.status = keys, status
        self.summary = RunSummary()
        self.period = 1.0 / config.hz
        self.started = time.monotonic()

    def episode_run(self, episode_no: int) -> None:
        """Reset, then step at `config.hz` until the episode is over; stream, report and save it."""
        episode = self.episode_start(episode_no)
        next_tick = time.monotonic()
        _send_step(self.streamer, episode.id, 0, episode.obs, [], self.config)
        self.summary.steps += 1
        while True:
            self.operator_keys(episode)
            if episode.over(self.config):
                break
            next_tick = _tick_wait(next_tick + self.period)
            self.step(episode)
            self.status_update(episode)
        self.episode_end(episode)

    def episode_start(self, episode_no: int) -> _Episode:
        config, robot, policy = self.config, self.robot, self.policy
        seed = config.seed + episode_no
        episode = str(uuid.uuid4())
        policy.reset(seed)
        obs = robot.reset(seed=seed)
        self.streamer.send_json(
            {
                "type": "episode_start",
                "episode": episode,
                "seed": seed,
                "env_id": robot.env_id,
                "source": robot.source,
                "policy": policy.name,
                "cameras": robot.cameras,
            }
        )
        self.status.line(f"episode {episode_no + 1}/{config.episodes} {episode} (seed {seed})")
        return _Episode(episode, [obs])

    def operator_keys(self, episode: _Episode) -> None:
        """The keys pressed since the last step: labels and reset for the operator, the rest to the policy."""
        pressed = self.keys.drain()
        self.policy.on_keys([k for k in pressed if k not in ("c", "a", "r")])
        for key in pressed:
            if key in OPERATOR_KEYS:
                self.streamer.send_json(
                    {"type": "label", "episode": episode.id, "index": episode.index, "value": OPERATOR_KEYS[key]}
                )
                self.summary.labels += 1
                self.status.line(f"  step {episode.index}: labeled {OPERATOR_KEYS[key]}")
            elif key == "r":
                episode.reset_requested = True

    def step(self, episode: _Episode) -> None:
        action = np.asarray(self.policy.act(episode.obs), dtype=np.float32)
        obs = self.robot.send_action(action)
        episode.index += 1
        episode.observations.append(obs)
        episode.actions.append(action)
        if obs.success and episode.first_success is None:
            episode.first_success = episode.index
        _send_step(self.streamer, episode.id, episode.index, obs, action.tolist(), self.config)
        self.summary.steps += 1

    def status_update(self, episode: _Episode) -> None:
        summary, obs = self.summary, episode.obs
        elapsed = time.monotonic() - self.started
        summary.rate_hz = summary.steps / elapsed if elapsed > 0 else 0.0
        stats = self.streamer.stats
        prob = "-" if stats.last_probability is None else f"{stats.last_probability:.3f}"
        lat = "-" if stats.last_latency_ms is None else f"{stats.last_latency_ms:.0f} ms"
        self.status.update(
            f"step {episode.index:4d} | {summary.rate_hz:5.1f} Hz | env_reward {obs.reward:6.3f} | "
            f"env_success {int(obs.success)} | p(success) {prob} | latency {lat} | "
            f"dropped {stats.dropped_server + stats.dropped_local}"
        )

    def episode_end(self, episode: _Episode) -> None:
        success = any(o.success for o in episode.observations)
        self.summary.successes += int(success)
        self.streamer.send_json(
            {"type": "episode_end", "episode": episode.id, "success": success, "reset": episode.reset_requested}
        )
        self.status.line(f"episode {episode.id} ended after {episode.index} steps, env success {success}")
        if self.config.save_dir:
            from .replay_robot import save_episode

            path = save_episode(Path(self.config.save_dir) / f"{episode.id}.npz", episode.observations, episode.actions)
            self.status.line(f"  saved {path}")
        self.summary.episodes.append(episode.id)


def _tick_wait(next_tick: float) -> float:
    """Sleep until `next_tick` (monotonic); when already late, the next period counts from now (no catch-up burst)."""
    delay = next_tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
        return next_tick
    return time.monotonic()


def _send_step(streamer: Streamer, episode: str, index: int, obs: Observation, action: list, config: RunConfig) -> None:
    images = {
        camera: encode_image(array, config.image_format, config.jpeg_quality) for camera, array in obs.images.items()
    }
    header = {
        "episode": episode,
        "index": index,
        "sent_at": time.time(),
        "action": action,
        "reward": obs.reward,
        "success": obs.success,
        "terminated": obs.terminated,
        "truncated": obs.truncated,
        "info": obs.info,
    }
    streamer.send_step(pack_step(header, images, config.image_format))
