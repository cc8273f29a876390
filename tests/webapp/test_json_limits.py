"""JSON is read within limits everywhere: nesting past JSON_MAX_DEPTH is a 400 before it is parsed (5,000
levels used to answer 500 through Python's recursion limit), a chunk header past CHUNK_HEADER_MAX_BYTES is a
413 before it is parsed, and a step's info or an episode's metadata past JSON_FIELD_MAX_BYTES is refused.
DRF views through Django's test client; the ingest fast path on the real ASGI server."""

from __future__ import annotations

import json
import struct
import uuid

import pytest

from common.json_limits import JSONTooDeep, json_depth, loads_bounded
from labeling.models import Episode, Step
from robot_agent.chunk_format import encode_chunk

from ..labeling.ingest_helpers import png_bytes
from ..labeling.test_ingest_binary import header_body, post

DEEP = "[" * 5000 + "]" * 5000


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_depth_counts_the_brackets_outside_strings():
    assert json_depth("1") == 0
    assert json_depth(b"[]") == 1
    assert json_depth('{"a": [1, {"b": []}]}') == 4
    assert json_depth(json.dumps({"s": "[[[{{{", "t": 'a\\"[[', "u": "\\\\"})) == 1
    assert json_depth(DEEP) == 5000
    assert json_depth(json.dumps(nested(64))) == 64
    assert loads_bounded(json.dumps(nested(64)), max_depth=64) == nested(64)
    with pytest.raises(JSONTooDeep, match="nests 65 levels deep; the limit is 64"):
        loads_bounded(json.dumps(nested(65)), max_depth=64)


@pytest.mark.django_db
def test_deep_json_gets_400_from_the_drf_views(agent_client, project):
    answer = agent_client.post("/api/episodes", data=DEEP, content_type="application/json")
    assert answer.status_code == 400
    assert "nests 5000 levels deep; the limit is 64 (JSON_MAX_DEPTH)" in answer.json()["detail"]
    body = {"project": project.name, "uuid": str(uuid.uuid4()), "metadata": nested(70)}
    answer = agent_client.post("/api/episodes", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 400 and "JSON_MAX_DEPTH" in answer.json()["detail"]
    body["metadata"] = nested(60)  # within the limit: accepted
    assert agent_client.post("/api/episodes", data=json.dumps(body), content_type="application/json").status_code == 201


@pytest.mark.django_db
def test_big_metadata_and_info_are_refused_naming_the_setting(agent_client, project):
    body = {"project": project.name, "uuid": str(uuid.uuid4()), "metadata": {"notes": "x" * 70_000}}
    answer = agent_client.post("/api/episodes", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 400 and "JSON_FIELD_MAX_BYTES" in answer.json()["detail"]
    assert not Episode.objects.exists()
    episode = str(uuid.uuid4())
    agent_client.post(
        "/api/episodes", data=json.dumps({"project": project.name, "uuid": episode}), content_type="application/json"
    )
    steps = {"steps": [{"index": 0, "info": {"notes": "x" * 70_000}}]}
    answer = agent_client.post(
        f"/api/episodes/{episode}/steps", data=json.dumps(steps), content_type="application/json"
    )
    assert answer.status_code == 400 and "JSON_FIELD_MAX_BYTES" in answer.json()["detail"]
    deep_steps = json.dumps([{"index": 0, "info": nested(80)}])
    answer = agent_client.post(f"/api/episodes/{episode}/steps", data={"steps": deep_steps})  # multipart
    assert answer.status_code == 400 and "JSON_MAX_DEPTH" in answer.json()["detail"]
    assert not Step.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_ingest_fast_path_refuses_deep_json_and_big_headers_before_parsing(live_server_url, agent_token, project):
    token = agent_token[1]
    status, answer = post(live_server_url, token, "/api/episodes", DEEP.encode(), {"Content-Type": "application/json"})
    assert status == 400 and "JSON_MAX_DEPTH" in answer["detail"], answer
    episode = str(uuid.uuid4())
    create = json.dumps({"project": project.name, "uuid": episode}).encode()
    assert post(live_server_url, token, "/api/episodes", create, {"Content-Type": "application/json"})[0] == 201
    path = f"/api/episodes/{episode}/steps"

    status, answer = post(live_server_url, token, path, header_body(DEEP.encode()))
    assert status == 400 and "chunk header nests 5000 levels deep" in answer["detail"], answer
    # a 3 MiB header is refused from its length prefix: 413 naming the setting
    big = b"RSC\x01" + struct.pack(">I", 3 * 1024 * 1024) + b" " * (3 * 1024 * 1024)
    status, answer = post(live_server_url, token, path, big)
    assert status == 413 and "CHUNK_HEADER_MAX_BYTES" in answer["detail"], answer
    body = encode_chunk([{"index": 0, "info": {"notes": "x" * 70_000}}], [{"main": png_bytes(0)}])
    status, answer = post(live_server_url, token, path, body)
    assert status == 413 and "info of 70012 bytes" in answer["detail"] and "JSON_FIELD_MAX_BYTES" in answer["detail"]
    body = encode_chunk([{"index": 0, "info": {"ok": [1, 2]}}], [{"main": png_bytes(0)}])
    assert post(live_server_url, token, path, body)[0] == 200  # the same chunk within the limits is stored
    assert list(Step.objects.values_list("index", "info")) == [(0, {"ok": [1, 2]})]
