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
    keys = keys or KeyReader()
    status = StatusLine(quiet=config.quiet)
    summary = RunSummary()
    period = 1.0 / config.hz
    started = time.monotonic()
    episode_no = 0
    while episode_no < config.episodes:
        seed = config.seed + episode_no
        episode = str(uuid.uuid4())
        policy.reset(seed)
        obs = robot.reset(seed=seed)
        streamer.send_json(
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
        status.line(f"episode {episode_no + 1}/{config.episodes} {episode} (seed {seed})")
        observations, actions = [obs], []
        index, first_success, reset_requested = 0, None, False
        next_tick = time.monotonic()
        _send_step(streamer, episode, index, obs, [], config)
        summary.steps += 1
        while True:
            pressed = keys.drain()
            policy.on_keys([k for k in pressed if k not in ("c", "a", "r")])
            for key in pressed:
                if key in OPERATOR_KEYS:
                    streamer.send_json(
                        {"type": "label", "episode": episode, "index": index, "value": OPERATOR_KEYS[key]}
                    )
                    summary.labels += 1
                    status.line(f"  step {index}: labeled {OPERATOR_KEYS[key]}")
                elif key == "r":
                    reset_requested = True
            if reset_requested or obs.done or index >= config.max_steps:
                break
            after = config.stop_on_success_after
            if first_success is not None and after is not None and index - first_success >= after:
                break
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.monotonic()
            action = np.asarray(policy.act(obs), dtype=np.float32)
            obs = robot.send_action(action)
            index += 1
            observations.append(obs)
            actions.append(action)
            if obs.success and first_success is None:
                first_success = index
            _send_step(streamer, episode, index, obs, action.tolist(), config)
            summary.steps += 1
            elapsed = time.monotonic() - started
            summary.rate_hz = summary.steps / elapsed if elapsed > 0 else 0.0
            stats = streamer.stats
            prob = "-" if stats.last_probability is None else f"{stats.last_probability:.3f}"
            lat = "-" if stats.last_latency_ms is None else f"{stats.last_latency_ms:.0f} ms"
            status.update(
                f"step {index:4d} | {summary.rate_hz:5.1f} Hz | env_reward {obs.reward:6.3f} | "
                f"env_success {int(obs.success)} | p(success) {prob} | latency {lat} | "
                f"dropped {stats.dropped_server + stats.dropped_local}"
            )
        success = any(o.success for o in observations)
        summary.successes += int(success)
        streamer.send_json({"type": "episode_end", "episode": episode, "success": success, "reset": reset_requested})
        status.line(f"episode {episode} ended after {index} steps, env success {success}")
        if config.save_dir:
            from .replay_robot import save_episode

            path = save_episode(Path(config.save_dir) / f"{episode}.npz", observations, actions)
            status.line(f"  saved {path}")
        summary.episodes.append(episode)
        episode_no += 1
    return summary


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
