"""One reader of a reward request's fields (`reward_serving.reward_request`) for the ASGI fast path and the
DRF view: the query string beats the header, lists and comma-separated strings read alike, and a wrong
field is named."""

from __future__ import annotations

import pytest

from inference.reward_serving import NPY_FIELDS, npy_fields, reward_request
from inference.wire.payloads import PayloadError


def test_each_field_comes_from_the_query_else_its_header():
    headers = {"x-env-rewards": "1,2", "x-dones": "0,1", "x-stream": "rank-3", "x-episode-ids": "a,b"}
    fields = npy_fields({"dones": "1,1", "env_success": "true,false"}, headers)
    assert set(fields) == set(NPY_FIELDS)
    request = reward_request(b"npy", 2, fields, client="a7")
    assert request.env_rewards == [1.0, 2.0] and request.dones == [True, True]  # the query's dones
    assert request.env_success == [True, False] and request.episode_ids == ["a", "b"]
    assert request.stream == "rank-3" and request.client == "a7" and request.payload == b"npy"


def test_json_lists_read_as_the_npy_strings_do():
    fields = {"env_rewards": [1, 2], "dones": [False, True], "stream": "s" * 150, "env_success": None}
    request = reward_request(b"npy", 2, fields)
    assert request.env_rewards == [1.0, 2.0] and request.dones == [False, True]
    assert request.stream == "s" * 100 and request.env_success is None and request.episode_ids is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"env_rewards": "1"}, "env_rewards has 1 values for 2 images"),
        ({"dones": "1,maybe"}, "dones must hold booleans"),
        ({"episode_ids": ["x" * 101, "y"]}, "episode_ids values must be at most 100 characters"),
    ],
)
def test_a_wrong_field_is_named(fields, message):
    with pytest.raises(PayloadError, match=message):
        reward_request(b"npy", 2, fields)
