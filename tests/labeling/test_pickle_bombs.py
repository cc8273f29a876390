"""The restricted unpickler refuses resource bombs with its own clear error, in bounded memory and time.

Property-based fuzzing (hypothesis) feeds random bytes and mutated valid pickles: the only exception
ever raised is `PickleLoadError` (or a subclass), and whatever loads stays within small limits.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labeling.imports import safe_pickle
from labeling.imports.rlinf_episode import EpisodeFormatError, parse_episode
from tests.labeling import import_builders, pickle_bombs

SMALL = safe_pickle.PickleLimits(
    max_array_bytes=1 << 20,
    max_array_elements=1 << 20,
    max_total_bytes=4 << 20,
    max_nodes=20_000,
    max_depth=32,
    max_opcodes=200_000,
)


@pytest.mark.parametrize(
    ("bomb", "error", "message"),
    [
        (pickle_bombs.bytearray_bomb, safe_pickle.UnsafePickleError, "bytearray"),
        (pickle_bombs.stateless_arrays, safe_pickle.UnsafePickleError, "without its state"),
        (pickle_bombs.stateless_episode, safe_pickle.UnsafePickleError, "without its state"),
        (pickle_bombs.shared_nesting, safe_pickle.PickleTooLargeError, "shared references"),
        (pickle_bombs.shared_nesting_episode, safe_pickle.PickleTooLargeError, "shared references"),
        (pickle_bombs.zero_strides, safe_pickle.PickleTooLargeError, "1000000000 elements"),
        (lambda: pickle_bombs.zero_strides(10**6), safe_pickle.PickleTooLargeError, "repeats its 1 stored"),
        (pickle_bombs.cycle, safe_pickle.PickleTooLargeError, "contains itself"),
        (pickle_bombs.length_past_end, safe_pickle.PickleLoadError, "only 4 remain"),
        (pickle_bombs.huge_state_shape, safe_pickle.PickleTooLargeError, "1000000000 elements"),
        (pickle_bombs.storage_bomb, safe_pickle.PickleTooLargeError, "declares 2147483647 elements"),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_each_bomb_is_refused_with_a_clear_error(bomb, error, message):
    with pytest.raises(error, match=message):
        safe_pickle.loads(bomb())


def test_bombs_take_bounded_memory_and_time():
    """All bombs in a fresh process: peak RSS grows by less than 200 MiB and the whole run is quick."""
    script = """
import json, resource, sys, time
import torch  # noqa: F401  (import first so its footprint is in the baseline)
from labeling.imports import safe_pickle
from tests.labeling import pickle_bombs
blobs = {name: build() for name, build in pickle_bombs.ALL.items()}
blobs["stateless-episode"] = pickle_bombs.stateless_episode(40, 1024)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
refused = []
for name, blob in blobs.items():
    try:
        safe_pickle.loads(blob)
    except safe_pickle.PickleLoadError:
        refused.append(name)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "seconds": time.monotonic() - start, "refused": refused,
                  "total": len(blobs)}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["refused"]) == report["total"], report
    assert report["grew_kib"] < 200 * 1024, report
    assert report["seconds"] < 10, report


def test_limits_are_the_callers():
    data = pickle.dumps({"image": np.zeros((64, 64, 3), dtype=np.uint8)}, protocol=4)
    assert safe_pickle.loads(data)["image"].shape == (64, 64, 3)
    tight = safe_pickle.PickleLimits(max_array_bytes=1000)
    with pytest.raises(safe_pickle.PickleTooLargeError, match="12288 bytes; the limit is 1000"):
        safe_pickle.loads(data, tight)


def test_bytearray_from_bytes_still_loads():
    for protocol in (0, 2, 3, 4, 5):
        assert safe_pickle.loads(pickle.dumps(bytearray(b"abc"), protocol=protocol)) == bytearray(b"abc")


def _valid_pickles() -> list[bytes]:
    episode = import_builders.rlinf_episode(num_actions=2, extra_views=1)
    small = {"a": [1, 2.5, None, "x"], "t": torch.arange(6).reshape(2, 3)[:, 1:], "n": np.arange(4)}
    return [pickle.dumps(value, protocol=p) for value in (episode, small) for p in (0, 2, 4, 5)]


VALID = _valid_pickles()


def _load_checked(blob: bytes) -> None:
    try:
        value = safe_pickle.loads(blob, SMALL)
    except safe_pickle.PickleLoadError:
        return
    safe_pickle.check_graph(value, SMALL)  # whatever loads is within the limits
    with contextlib.suppress(EpisodeFormatError):
        parse_episode(value)


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_only_raise_the_modules_error(blob):
    _load_checked(blob)


@FUZZ
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.sampled_from("rid")), min_size=1, max_size=8),
)
def test_mutated_pickles_only_raise_the_modules_error(blob, edits):
    data = bytearray(blob)
    for where, byte, kind in edits:
        position = where % (len(data) + 1)
        if kind == "r" and position < len(data):
            data[position] = byte
        elif kind == "i":
            data[position:position] = bytes([byte])
        elif position < len(data):
            del data[position]
    _load_checked(bytes(data))


@FUZZ
@given(st.sampled_from(VALID), st.integers(0, 10**6))
def test_truncated_pickles_only_raise_the_modules_error(blob, cut):
    _load_checked(blob[: cut % len(blob)])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(json_values, st.sampled_from([0, 2, 4, 5]))
def test_plain_values_round_trip(value, protocol):
    assert safe_pickle.loads(pickle.dumps(value, protocol=protocol)) == value
