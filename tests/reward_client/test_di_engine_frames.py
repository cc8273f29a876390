"""What DI-engine's collector hands the adapter: float32 channels-first frames, and per-env streams in which a
collect's extra transitions were dropped (`drop_extra`). No server: the calls the adapter makes are recorded."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from reward_client import DIEngineRewardModel
from reward_client.arrays import uint8_images


class RecordingService:
    deployment = "d"

    def __init__(self) -> None:
        self.episodes: dict[str, list[dict]] = {}

    def call(self, method: str, url: str, json: dict | None = None, **kwargs):
        if url == "/api/episodes":
            self.episodes[json["uuid"]] = []
        elif url.endswith("/steps"):
            self.episodes[url.split("/")[3]].extend(json["steps"])
        return {}


def frame(value: float) -> np.ndarray:
    return np.full((3, 4, 4), value, np.float32)


def test_float_frames_in_zero_one_and_channels_first_become_uint8_channels_last():
    chw = np.stack([frame(0.0), frame(0.5), frame(1.0)])
    assert uint8_images(chw).shape == (3, 4, 4, 3)
    assert uint8_images(chw)[:, 0, 0, 0].tolist() == [0, 128, 255]
    assert uint8_images(chw * 255)[:, 0, 0, 0].tolist() == [0, 128, 255]  # already 0..255
    assert uint8_images(chw, scale=100)[:, 0, 0, 0].tolist() == [0, 50, 100]
    with pytest.raises(ValueError, match="shape"):
        uint8_images(np.zeros((2, 4, 4, 5), np.float32))


def test_an_episode_the_collector_cut_is_uploaded_truncated_and_the_next_starts_fresh():
    service = RecordingService()
    model = DIEngineRewardModel({"project": 1, "uploads": "all", "check_access": False}, client=service)

    def step(obs: float, next_obs: float, done: bool = False) -> dict:
        return {"obs": frame(obs), "next_obs": frame(next_obs), "reward": np.array([0.0]), "done": done}

    model.collect_data([step(0.0, 0.1), step(0.1, 0.2)])  # the rest of this episode was dropped
    model.collect_data([step(0.5, 0.6), step(0.6, 0.7, done=True)])
    assert len(model.uploaded) == 2
    cut, whole = (service.episodes[uuid] for uuid in model.uploaded)
    assert [(s["truncated"], s["terminated"]) for s in cut] == [(False, False), (False, False), (True, False)]
    assert [(s["truncated"], s["terminated"]) for s in whole] == [(False, False), (False, False), (False, True)]
    pixels = [np.asarray(Image.open(io.BytesIO(base64.b64decode(s["images"]["main"]))))[0, 0, 0] for s in whole]
    assert pixels == [128, 153, 178]  # the reset frame, then each next_obs, scaled from [0, 1]
