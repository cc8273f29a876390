"""Parsing RLinf episode dicts and file names (plain module, no database).

The episodes here are our own builder's (tests/labeling/import_builders.py `rlinf_episode`), for the cases a
recording does not give on demand: numpy and torch values, `gae`, both success spellings, broken files. Pickles
written by RLinf 0.3.0's own `CollectEpisode` are imported in tests/interop/test_rlinf_recordings.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labeling.imports.rlinf_episode import EpisodeFormatError, parse_episode, parse_file_name, step_success
from tests.labeling.import_builders import expected_step_success, image, rlinf_episode


@pytest.mark.parametrize(
    "name, expected",
    [
        ("rank_0_env_3_episode_7_step_1200_success.pkl", (0, 3, 7, 1200, True)),
        ("rank_1_env_12_episode_40_fail.pkl", (1, 12, 40, None, False)),  # older files: no step part
    ],
)
def test_file_names_with_and_without_the_step_part(name, expected):
    parsed = parse_file_name(name)
    assert parsed is not None
    assert (parsed.rank, parsed.env_idx, parsed.episode_id, parsed.global_step, parsed.success) == expected


def test_other_file_names_are_not_parsed():
    assert parse_file_name("episode.pkl") is None


@pytest.mark.parametrize(
    "info, expected",
    [
        ({}, False),
        ({"success": torch.tensor(True)}, True),
        ({"episode": {"success_once": np.array([True])}}, True),
        ({"success": False, "episode": {"success_once": True}}, False),  # success wins when present
        ({"episode": None}, False),
    ],
)
def test_step_success_rule(info, expected):
    assert step_success(info) is expected


@pytest.mark.parametrize("use_torch", [False, True], ids=["numpy", "torch"])
def test_episode_maps_observation_i_to_step_i(use_torch):
    parsed = parse_episode(rlinf_episode(num_actions=4, use_torch=use_torch, gae=True), file_name="x.pkl")
    assert len(parsed.steps) == 5
    assert [s.reward for s in parsed.steps] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [s.success for s in parsed.steps] == expected_step_success(4)
    assert [s.terminated for s in parsed.steps] == [False, False, False, False, True]
    assert parsed.steps[0].action == []
    assert parsed.steps[3].action == pytest.approx([0.2] * 7)  # actions[2] led to observation 3
    assert [s.score for s in parsed.steps] == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6])
    np.testing.assert_array_equal(parsed.steps[2].images["main"], image(102))
    np.testing.assert_array_equal(parsed.steps[2].images["extra"], image(220))
    assert parsed.steps[1].info["elapsed_steps"] == 1 and parsed.steps[1].info["_states"] == [1.0, 2.0, 3.0]
    assert (parsed.rank, parsed.env_idx, parsed.episode_id, parsed.global_step) == (0, 3, 7, 1200)
    assert parsed.task_description == "pick up the red cube" and parsed.score_source == "gae"


def test_more_extra_views_get_numbered_cameras():
    parsed = parse_episode(rlinf_episode(num_actions=2, extra_views=3))
    assert parsed.cameras() == ["extra", "extra_1", "extra_2", "main"]


def test_third_view_leads_the_extra_views_and_wrist_views_are_named():
    data = rlinf_episode(num_actions=1, extra_views=2)
    for i, obs in enumerate(data["observations"]):
        obs["third_view_images"] = image(600 + i)
        obs["wrist_images"] = np.stack([image(700 + i), image(800 + i)])
    parsed = parse_episode(data)
    assert parsed.cameras() == ["extra", "extra_1", "extra_2", "main", "wrist", "wrist_1"]
    step = parsed.steps[1]
    for camera, seed in [("extra", 601), ("extra_1", 210), ("extra_2", 211), ("wrist", 701), ("wrist_1", 801)]:
        np.testing.assert_array_equal(step.images[camera], image(seed))


def test_ids_fall_back_to_the_file_name():
    data = rlinf_episode(num_actions=2)
    for key in ("rank", "env_idx", "episode_id", "step"):
        del data[key]
    parsed = parse_episode(data, file_name="rank_2_env_5_episode_9_fail.pkl")
    assert (parsed.rank, parsed.env_idx, parsed.episode_id, parsed.global_step) == (2, 5, 9, None)


def _broken(change):
    data = rlinf_episode(num_actions=3)
    change(data)
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        ([1, 2], "expected a dict"),
        (_broken(lambda d: d.pop("infos")), "missing key.*infos"),
        (_broken(lambda d: d["actions"].pop()), "actions has 2 entries; expected 3"),
        (_broken(lambda d: d["rewards"].pop()), "rewards has 3 entries; expected 4"),
        (_broken(lambda d: d.update(gae=[0.0] * 3)), "gae has 3 entries; expected 4"),
        (_broken(lambda d: d["observations"][2].update(main_images=np.zeros((4, 4), np.uint8))), "step 2: main_images"),
        (_broken(lambda d: d["observations"][1].update(main_images=np.zeros((4, 4, 3)))), "step 1: .*uint8"),
        (_broken(lambda d: d.update(observations=[])), "observations is empty"),
        (
            _broken(lambda d: d["observations"][3].update(third_view_images=np.zeros((4, 4), np.uint8))),
            r"step 3: third_view_images must be \[H,W,3\] or \[V,H,W,3\]; got shape \[4, 4\]",
        ),
        (
            _broken(lambda d: d["observations"][0].update(wrist_images=np.zeros((1, 4, 4, 3)))),
            r"wrist_images\[0\].*uint8",
        ),
    ],
)
def test_malformed_episodes_name_what_is_wrong(data, message):
    with pytest.raises(EpisodeFormatError, match=message):
        parse_episode(data)
