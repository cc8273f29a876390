"""Load pickles that should hold only data (numpy arrays, torch tensors, plain Python values).

A pickle is a program: every global it names is imported and may be called. `RestrictedUnpickler`
admits a short allow-list of globals, each either harmless (containers, dtypes) or replaced by a
checking wrapper, and refuses everything else before it is looked up, so a crafted file fails
with `UnsafePickleError` and its payload never runs.

Torch tensors pickled with plain `pickle` name `torch._utils._rebuild_tensor_v2` and
`torch.storage._load_from_bytes`; the latter calls `torch.load(weights_only=False)` on embedded
bytes, so it is replaced here by a loader that uses `torch.load(..., weights_only=True)`.
No Django imports: usable and testable alone.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import pickle
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch


class PickleLoadError(ValueError):
    """The file is not a pickle we can read; the message says why."""


class UnsafePickleError(PickleLoadError):
    """The pickle names a global outside the allow-list (it may try to run code)."""


def load_path(path: str | Path) -> Any:
    with open(path, "rb") as handle:
        return load(handle)


def loads(data: bytes) -> Any:
    return load(io.BytesIO(data))


def load(handle: IO[bytes]) -> Any:
    try:
        return RestrictedUnpickler(handle).load()
    except PickleLoadError:
        raise
    except Exception as exc:  # truncated files, bad opcodes, wrong argument types...
        raise PickleLoadError(f"unreadable pickle: {exc.__class__.__name__}: {exc}") from None


class RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, so that BUILD (which calls `__setstate__`) can be checked too."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def load_build(self) -> None:
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, np.dtype):
            target.__setstate__(state)
            _check_dtype_state(target)
        elif type(target) is np.ndarray:
            _check_array_state(state)
            target.__setstate__(state)
        else:
            raise UnsafePickleError(f"refusing to set the state of a {type(target).__name__}")

    dispatch[pickle.BUILD[0]] = load_build

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:  # Python 3 writes protocol 0-2 globals under their Python 2 names
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        raise UnsafePickleError(
            f"refusing to load {module}.{name}: episode pickles may hold only numpy arrays, "
            "torch tensors and plain Python values"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing a pickle with persistent ids")


def _codecs_encode(text: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    # Protocol 2 pickles spell bytes as _codecs.encode(str, "latin1"); nothing else is needed.
    if not isinstance(text, str) or codecs.lookup(encoding).name != "iso8859-1":
        raise UnsafePickleError("refusing _codecs.encode other than latin1 text")
    return text.encode("latin1", errors="strict")


def _check_dtype_state(dtype: np.dtype) -> None:
    """A dtype after BUILD must equal the plain dtype of its type string, flags included."""
    plain = np.dtype(dtype.str)
    if dtype.kind in "OV" or dtype != plain or dtype.flags != plain.flags or dtype.names or dtype.subdtype:
        raise UnsafePickleError("refusing a numpy dtype whose state is not a plain numeric type")


def _check_array_state(state: Any) -> None:
    ok = (
        isinstance(state, tuple)
        and len(state) == 5
        and isinstance(state[2], np.dtype)
        and not state[2].hasobject
        and isinstance(state[4], bytes | bytearray)
    )
    if not ok:
        raise UnsafePickleError("refusing a numpy array whose state is not plain data")


def _numpy_dtype(spec: Any, align: bool = False, copy: bool = False) -> np.dtype:
    if not isinstance(spec, str):
        raise UnsafePickleError(f"refusing numpy dtype built from {type(spec).__name__}")
    dtype = np.dtype(spec, align=bool(align), copy=bool(copy))
    if dtype.kind in "OV":
        raise UnsafePickleError(f"refusing numpy dtype {spec!r}: object and structured arrays are not data")
    return dtype


def _numpy_reconstruct(subtype: Any, shape: Any, dtype_code: Any) -> np.ndarray:
    if subtype is not _NDARRAY:
        raise UnsafePickleError("refusing a numpy array subclass")
    if not isinstance(dtype_code, bytes | str) or np.dtype(dtype_code).hasobject:
        raise UnsafePickleError("refusing a numpy array that is not plain data")
    return np.ndarray.__new__(np.ndarray, shape, dtype_code)


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind in "OV" or not isinstance(data, bytes):
        raise UnsafePickleError("refusing a numpy scalar that is not plain data")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _numpy_frombuffer(buffer: Any, dtype: Any, shape: Any, order: str) -> np.ndarray:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind in "OV":
        raise UnsafePickleError("refusing a numpy buffer that is not plain data")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _torch_storage_from_bytes(data: Any) -> Any:
    """Stand-in for `torch.storage._load_from_bytes`, which would unpickle `data` without limits."""
    if not isinstance(data, bytes | bytearray):
        raise UnsafePickleError("refusing a torch storage that is not bytes")
    try:
        storage = torch.load(io.BytesIO(bytes(data)), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise UnsafePickleError(f"refusing an embedded torch payload: {weights_only_error(exc)[1]}") from None
    if not isinstance(storage, torch.storage.TypedStorage | torch.UntypedStorage):
        raise UnsafePickleError(f"embedded torch payload is a {type(storage).__name__}, not a storage")
    return storage


def _torch_rebuild_tensor(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
) -> torch.Tensor:
    if not isinstance(storage, torch.storage.TypedStorage | torch.UntypedStorage):
        raise UnsafePickleError("refusing a tensor whose storage is not a torch storage")
    if not _int_tuple(size) or not _int_tuple(stride) or not isinstance(storage_offset, int):
        raise UnsafePickleError("refusing a tensor with a malformed size, stride or offset")
    if backward_hooks:
        raise UnsafePickleError("refusing a tensor with backward hooks")
    return torch._utils._rebuild_tensor_v2(storage, storage_offset, tuple(size), tuple(stride), False, None)


def weights_only_error(exc: Exception) -> tuple[bool, str]:
    """(names a forbidden global, the useful sentence) from torch.load(weights_only=True)'s long error."""
    paragraphs = [part.strip() for part in str(exc).split("\n\n") if part.strip()]
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    useful = [part for part in paragraphs if not part.startswith(boilerplate)]
    detail = useful[0].splitlines()[0] if useful else "unreadable"
    return "global" in detail.lower(), detail


def _int_tuple(value: Any) -> bool:
    return isinstance(value, tuple | torch.Size) and all(isinstance(item, int) for item in value)


def _torch_device(spec: Any, index: Any = None) -> torch.device:
    if not isinstance(spec, str) or not (index is None or isinstance(index, int)):
        raise UnsafePickleError("refusing a malformed torch.device")
    return torch.device(spec) if index is None else torch.device(spec, index)


class _NdarrayToken:
    """Stands for numpy.ndarray as _reconstruct's first argument, so the class itself is never callable."""


_NDARRAY = _NdarrayToken()

_TORCH_DTYPE_NAMES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "half",
    "float",
    "double",
    "short",
    "int",
    "long",
]
_TORCH_DTYPES = {
    name: getattr(torch, name) for name in _TORCH_DTYPE_NAMES if isinstance(getattr(torch, name, None), torch.dtype)
}

_ALLOWED: dict[tuple[str, str], Any] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "slice"): slice,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _codecs_encode,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _numpy_dtype,
    ("torch", "Size"): torch.Size,
    ("torch", "device"): _torch_device,
    ("torch._utils", "_rebuild_tensor_v2"): _torch_rebuild_tensor,
    ("torch.storage", "_load_from_bytes"): _torch_storage_from_bytes,
}
# numpy 1.x writes numpy.core.*, numpy 2.x writes numpy._core.*; both name the same functions.
for _core in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_core}.multiarray", "_reconstruct")] = _numpy_reconstruct
    _ALLOWED[(f"{_core}.multiarray", "scalar")] = _numpy_scalar
    _ALLOWED[(f"{_core}.numeric", "_frombuffer")] = _numpy_frombuffer
