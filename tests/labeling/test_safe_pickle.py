"""The restricted unpickler loads data (numpy, torch, plain Python) and refuses anything that runs code."""

from __future__ import annotations

import collections
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from labeling.imports import safe_pickle
from tests.labeling.import_builders import RunsShell, TorchStorageAttack

PROTOCOLS = [0, 2, 4, 5]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_numpy_values_round_trip(protocol):
    data = {
        "image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
        "state": np.linspace(0, 1, 5, dtype=np.float32),
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "scalar": np.float64(2.5),
        "flag": np.bool_(True),
        "nested": collections.OrderedDict(a=[1, 2.5, "x", None, b"raw"], b={3, 4}, c=(1, 2)),
    }
    loaded = safe_pickle.loads(pickle.dumps(data, protocol=protocol))
    for key in ("image", "state", "fortran"):
        np.testing.assert_array_equal(loaded[key], data[key])
        assert loaded[key].dtype == data[key].dtype
    assert loaded["scalar"] == 2.5 and loaded["flag"]
    assert loaded["nested"] == data["nested"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_torch_tensors_round_trip(protocol):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    data = {
        "image": torch.randint(0, 256, (4, 5, 3), dtype=torch.uint8),
        "view": base[1:, ::2],  # storage offset and strides
        "flag": torch.tensor(True),
        "dtype": torch.float16,
        "size": torch.Size([2, 3]),
    }
    loaded = safe_pickle.loads(pickle.dumps(data, protocol=protocol))
    assert torch.equal(loaded["image"], data["image"])
    assert torch.equal(loaded["view"], data["view"])
    assert loaded["flag"].item() is True
    assert loaded["dtype"] is torch.float16 and loaded["size"] == torch.Size([2, 3])


def _marker_works_with_plain_pickle(blob: bytes, marker) -> None:
    """Control: the crafted bytes really do run code when loaded the unsafe way (in a child process)."""
    script = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", script], input=blob, check=False, capture_output=True, timeout=60)
    assert marker.exists(), "the attack pickle should run its payload under plain pickle"
    marker.unlink()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_pickle_that_runs_a_shell_command_is_refused_without_running(tmp_path, protocol):
    marker = tmp_path / "pwned"
    blob = pickle.dumps({"observations": [RunsShell(marker)]}, protocol=protocol)
    _marker_works_with_plain_pickle(blob, marker)

    with pytest.raises(safe_pickle.UnsafePickleError, match="refusing to load posix.system"):
        safe_pickle.loads(blob)
    assert not marker.exists()


def test_torch_storage_with_embedded_code_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned-torch"
    blob = pickle.dumps({"x": TorchStorageAttack(marker)}, protocol=4)
    _marker_works_with_plain_pickle(blob, marker)

    with pytest.raises(safe_pickle.UnsafePickleError, match="embedded torch payload"):
        safe_pickle.loads(blob)
    assert not marker.exists()


@pytest.mark.parametrize(
    "obj",
    [
        eval,  # builtins.eval
        subprocess.Popen,
        np.array([1, "a"], dtype=object),
        collections.Counter("ab"),
    ],
    ids=["eval", "popen", "object-array", "counter"],
)
def test_globals_outside_the_allow_list_are_refused(obj):
    with pytest.raises(safe_pickle.UnsafePickleError):
        safe_pickle.loads(pickle.dumps(obj, protocol=4))


def test_numpy_dtype_state_claiming_object_references_is_refused():
    # dtype('f8') whose BUILD state sets the "holds object pointers" flags: would make numpy treat
    # raw bytes as pointers. Hand-written: numpy never writes this.
    blob = (
        b"\x80\x04cnumpy\ndtype\n(X\x02\x00\x00\x00f8\x89\x88tR"
        b"(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK?tb."
    )
    with pytest.raises(safe_pickle.UnsafePickleError, match="dtype"):
        safe_pickle.loads(blob)


def test_numpy_array_constructed_with_object_dtype_is_refused():
    blob = b"\x80\x04cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\nK\x03\x85X\x01\x00\x00\x00OtR."
    with pytest.raises(safe_pickle.UnsafePickleError, match="not plain data"):
        safe_pickle.loads(blob)


def test_unreadable_bytes_give_a_clear_error():
    with pytest.raises(safe_pickle.PickleLoadError, match="not a pickle file"):
        safe_pickle.loads(b"this is not a pickle")
    with pytest.raises(safe_pickle.PickleLoadError, match="unreadable pickle"):
        safe_pickle.loads(pickle.dumps({"a": np.zeros(100)})[:-40])


@pytest.mark.parametrize(
    "content",
    [b"episode,step,success\n0,0,1\n" * 20, b"Memo: pick up the red cube\n", b'{"episodes": []}'],
)
def test_a_file_that_is_not_a_pickle_says_so_in_plain_words(content):
    with pytest.raises(safe_pickle.PickleLoadError, match="not a pickle file: it starts with"):
        safe_pickle.loads(content)


def test_an_empty_file_is_not_a_pickle():
    with pytest.raises(safe_pickle.PickleLoadError, match="the file is empty"):
        safe_pickle.loads(b"")
