"""RLinf raw episode pickles as plain Python: file names, the per-step success rule, validation.

An RLinf episode with N actions has N+1 observations (entry 0 is the reset). We keep that shape:
`ParsedStep` i holds observation i with `rewards[i]`, `terminated[i]`, `truncated[i]`, `infos[i]`,
and the action that led to it, `actions[i-1]` (step 0, the reset, has no action: `[]`). So a
step is everything one env transition returned, and observation indices (which RLinf's frame labels
and trend windows use) equal step indices.

Cameras (`observation_cameras`): `main_images` -> "main"; the extra views -> "extra", "extra_1", ...: first
`third_view_images` when the observation has it (RLinf's trend preprocessing takes it before `extra_view_images[0]`
as a window's second view), then every view of `extra_view_images`; `wrist_images` -> "wrist", "wrist_1", ....
A view array may be `[H,W,3]` or `[V,H,W,3]`.

Values may be numpy arrays or torch tensors; both become numpy/Python here. No Django imports.
The format is what RLinf 0.3.0's `CollectEpisode` wrapper writes with `export_format="pickle"` (docs/ingest.md,
"Importing existing data"; tests/interop/test_rlinf_recordings.py imports files written by it).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REQUIRED_KEYS = ("success", "observations", "actions", "rewards", "terminated", "truncated", "infos")
FILE_NAME_RE = re.compile(
    r"^rank_(?P<rank>\d+)_env_(?P<env_idx>\d+)_episode_(?P<episode_id>\d+)"
    r"(?:_step_(?P<step>\d+))?_(?P<outcome>success|fail)\.pkl$"
)
MAIN_CAMERA = "main"
MAX_INFO_ARRAY_ELEMENTS = 65_536  # an array inside an env info becomes a JSON list; bigger ones are refused


class EpisodeFormatError(ValueError):
    """The data is not an RLinf episode; the message names the key or step at fault."""


@dataclass(frozen=True)
class EpisodeFileName:
    rank: int
    env_idx: int
    episode_id: int
    global_step: int | None
    success: bool


@dataclass
class ParsedStep:
    index: int
    action: list[float]
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    score: float | None
    info: dict
    images: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ParsedEpisode:
    success: bool
    steps: list[ParsedStep]
    rank: int | None = None
    env_idx: int | None = None
    episode_id: int | None = None
    global_step: int | None = None
    task_description: str = ""
    env_id: str = ""
    score_source: str = "rewards"

    @property
    def num_actions(self) -> int:
        return len(self.steps) - 1

    def cameras(self) -> list[str]:
        return sorted({camera for step in self.steps for camera in step.images})


def parse_file_name(name: str) -> EpisodeFileName | None:
    """`rank_{r}_env_{e}_episode_{i}[_step_{s}]_{success|fail}.pkl`, or None for other names."""
    match = FILE_NAME_RE.match(name)
    if match is None:
        return None
    step = match["step"]
    return EpisodeFileName(
        rank=int(match["rank"]),
        env_idx=int(match["env_idx"]),
        episode_id=int(match["episode_id"]),
        global_step=int(step) if step is not None else None,
        success=match["outcome"] == "success",
    )


def step_success(info: Any) -> bool:
    """RLinf's rule: `info.get("success", info.get("episode", {}).get("success_once", False))`."""
    if not isinstance(info, Mapping):
        return False
    if "success" in info:
        return to_bool(info["success"])
    episode = info.get("episode", {})
    return to_bool(episode.get("success_once", False)) if isinstance(episode, Mapping) else False


def camera_name(view: int, base: str = "extra") -> str:
    """The extra views in order -> "extra", "extra_1", ...; with base="wrist": "wrist", "wrist_1", ..."""
    return base if view == 0 else f"{base}_{view}"


def parse_episode(data: Any, *, file_name: str = "") -> ParsedEpisode:
    """Validate an unpickled RLinf episode dict and turn it into plain steps."""
    if not isinstance(data, Mapping):
        raise EpisodeFormatError(f"expected a dict with keys {', '.join(REQUIRED_KEYS)}; got {type(data).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise EpisodeFormatError(f"missing key(s): {', '.join(missing)}")
    observations = _sequence(data, "observations")
    if not observations:
        raise EpisodeFormatError("observations is empty; it needs at least the reset observation")
    num_obs = len(observations)
    actions = _sequence(data, "actions")
    if len(actions) != num_obs - 1:
        raise EpisodeFormatError(f"actions has {len(actions)} entries; expected {num_obs - 1} (observations - 1)")
    per_obs = {key: _sequence(data, key) for key in ("rewards", "terminated", "truncated", "infos")}
    gae = _sequence(data, "gae") if data.get("gae") is not None else None
    if gae is not None:
        per_obs["gae"] = gae
    for key, values in per_obs.items():
        if len(values) != num_obs:
            raise EpisodeFormatError(f"{key} has {len(values)} entries; expected {num_obs} (one per observation)")

    steps = []
    for index in range(num_obs):
        where = f"step {index}"
        try:
            steps.append(
                ParsedStep(
                    index=index,
                    action=to_float_list(actions[index - 1]) if index > 0 else [],
                    reward=to_float(per_obs["rewards"][index]),
                    terminated=to_bool(per_obs["terminated"][index]),
                    truncated=to_bool(per_obs["truncated"][index]),
                    success=step_success(per_obs["infos"][index]),
                    score=to_float(gae[index]) if gae is not None else None,
                    info=_step_info(per_obs["infos"][index], observations[index]),
                    images=_observation_images(observations[index]),
                )
            )
        except EpisodeFormatError as exc:
            raise EpisodeFormatError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise EpisodeFormatError(f"{where}: {exc}") from None

    named = parse_file_name(file_name) if file_name else None
    return ParsedEpisode(
        success=to_bool(data["success"]),
        steps=steps,
        rank=_optional_int(data, "rank", named.rank if named else None),
        env_idx=_optional_int(data, "env_idx", named.env_idx if named else None),
        episode_id=_optional_int(data, "episode_id", named.episode_id if named else None),
        global_step=_optional_int(data, "step", named.global_step if named else None),
        task_description=_task_description(observations[0]),
        env_id=str(data.get("env_id") or ""),
        score_source="gae" if gae is not None else "rewards",
    )


def is_tensor(value: Any) -> bool:
    """A torch tensor, without importing torch: a value can only be one once torch is loaded (the pickle or
    `.pt` reader loads it), so the web process's pages that import this module do not load torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _sequence(data: Mapping, key: str) -> Sequence:
    value = data[key]
    if isinstance(value, np.ndarray) or is_tensor(value):
        return list(value)
    if not isinstance(value, list | tuple):
        raise EpisodeFormatError(f"{key} must be a list; got {type(value).__name__}")
    return value


def _optional_int(data: Mapping, key: str, fallback: int | None) -> int | None:
    value = data.get(key)
    if value is None:
        return fallback
    try:
        return int(to_float(value))
    except (TypeError, ValueError):
        raise EpisodeFormatError(f"{key} must be an integer; got {value!r}") from None


def _observation_images(observation: Any) -> dict[str, np.ndarray]:
    if not isinstance(observation, Mapping):
        raise EpisodeFormatError(f"observation must be a dict; got {type(observation).__name__}")
    images: dict[str, np.ndarray] = {}
    main = observation.get("main_images")
    if main is not None:
        images[MAIN_CAMERA] = _image(main, "main_images")
    extra = [*_views(observation, "third_view_images"), *_views(observation, "extra_view_images")]
    wrist = _views(observation, "wrist_images")
    for base, views in (("extra", extra), ("wrist", wrist)):
        for view, (array, what) in enumerate(views):
            images[camera_name(view, base)] = _image(array, what)
    return images


def _views(observation: Mapping, key: str) -> list[tuple[np.ndarray, str]]:
    """The views of `observation[key]` (`[H,W,3]` is one view, `[V,H,W,3]` V views), each with its name."""
    value = observation.get(key)
    if value is None:
        return []
    views = to_numpy(value)
    if views.ndim == 3:  # a single view without its view axis
        return [(views, key)]
    if views.ndim != 4:
        raise EpisodeFormatError(f"{key} must be [H,W,3] or [V,H,W,3]; got shape {list(views.shape)}")
    return [(views[view], f"{key}[{view}]") for view in range(views.shape[0])]


def _image(value: Any, what: str) -> np.ndarray:
    array = to_numpy(value)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3 or array.shape[-1] != 3:
        raise EpisodeFormatError(f"{what} must be [H,W,3]; got shape {list(array.shape)}")
    if array.dtype != np.uint8:
        raise EpisodeFormatError(f"{what} must be uint8; got {array.dtype}")
    return np.ascontiguousarray(array)


def _task_description(observation: Any) -> str:
    value = observation.get("task_descriptions") if isinstance(observation, Mapping) else None
    while isinstance(value, list | tuple) and value:
        value = value[0]
    return value if isinstance(value, str) else ""


def _step_info(info: Any, observation: Any) -> dict:
    """The env info as JSON; the observation's state vector, when present, under `_states`."""
    converted = to_json(info) if info is not None else {}
    if not isinstance(converted, dict):
        raise EpisodeFormatError(f"info must be a dict; got {type(info).__name__}")
    states = observation.get("states") if isinstance(observation, Mapping) else None
    if states is not None:
        converted["_states"] = to_float_list(states)
    return converted


def to_numpy(value: Any) -> np.ndarray:
    if is_tensor(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def to_float(value: Any) -> float:
    array = to_numpy(value)
    if array.size != 1:
        raise ValueError(f"expected one number; got shape {list(array.shape)}")
    return float(array.reshape(-1)[0])


def to_bool(value: Any) -> bool:
    array = to_numpy(value)
    if array.size != 1:
        raise ValueError(f"expected one flag; got shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


def to_float_list(value: Any) -> list[float]:
    return [float(item) for item in to_numpy(value).astype(np.float64).reshape(-1)]


def to_json(value: Any) -> Any:
    """Tensors, arrays and numpy scalars to JSON values; NaN and infinities become None."""
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, np.ndarray | np.generic) or is_tensor(value):
        array = to_numpy(value)
        if array.size > MAX_INFO_ARRAY_ELEMENTS:
            raise EpisodeFormatError(
                f"an array of shape {list(array.shape)} is too large for a JSON info value "
                f"(at most {MAX_INFO_ARRAY_ELEMENTS} elements)"
            )
        return to_json(array.tolist())
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(item) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    return str(value)
