"""Load pickles that should hold only data (numpy arrays, torch tensors, plain Python values).

A pickle is a program: every global it names is imported and may be called. `RestrictedUnpickler`
admits a short allow-list of globals, each either harmless (containers, dtypes) or replaced by a
checking wrapper, and refuses everything else before it is looked up, so a crafted file fails
with `UnsafePickleError` and its payload never runs.

Torch tensors pickled with plain `pickle` name `torch._utils._rebuild_tensor_v2` and
`torch.storage._load_from_bytes`; the latter calls `torch.load(weights_only=False)` on embedded
bytes, so it is replaced here by a loader that uses `torch.load(..., weights_only=True)`.
Resource bombs are refused too (`PickleLimits`): no allocation is sized by a number in the file
(`bytearray(2**32)`, a declared length past the end of the file, an embedded torch storage that
claims more elements than it carries), a numpy array is built only from its complete state (an
array left without state would hold uninitialised memory), arrays and tensors are checked for
elements and bytes (a zero stride cannot turn one element into a billion), and the loaded graph is
checked for cycles, depth and its size once shared references are expanded (what the JSON
conversion would produce). No Django imports: usable and testable alone.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import math
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from .pickle_errors import PickleLoadError, UnsafePickleError, weights_only_error


class PickleTooLargeError(PickleLoadError):
    """The pickle would take more memory or work than `PickleLimits` allow (a resource bomb)."""


@dataclass(frozen=True)
class PickleLimits:
    """Upper bounds on what one pickle may make us allocate or walk."""

    max_array_bytes: int = 512 * 1024 * 1024  # one numpy array or torch tensor
    max_array_elements: int = 256 * 1024 * 1024
    max_total_bytes: int = 2 * 1024 * 1024 * 1024  # arrays, tensors, str and bytes, shared refs expanded
    max_nodes: int = 2_000_000  # values once shared references are expanded (what JSON would hold)
    max_depth: int = 64
    max_opcodes: int = 50_000_000


DEFAULT_LIMITS = PickleLimits()


def load_path(path: str | Path, limits: PickleLimits = DEFAULT_LIMITS) -> Any:
    with open(path, "rb") as handle:
        return load(handle, limits)


def loads(data: bytes, limits: PickleLimits = DEFAULT_LIMITS) -> Any:
    return load(io.BytesIO(data), limits)


def load(handle: io.BufferedIOBase, limits: PickleLimits = DEFAULT_LIMITS) -> Any:
    start = handle.tell()
    head = handle.read(8)
    handle.seek(start)
    if not head:
        raise PickleLoadError("not a pickle file: the file is empty")
    try:
        result = RestrictedUnpickler(_BoundedReader(handle), limits).load()
    except (UnsafePickleError, PickleTooLargeError):
        raise
    except (MemoryError, RecursionError) as exc:
        raise PickleTooLargeError(f"pickle too large to load: {exc.__class__.__name__}") from None
    except Exception as exc:  # truncated files, bad opcodes, wrong argument types...
        if head[:1] != pickle.PROTO:  # pickles of protocols 0 and 1 (Python 2) are the only others
            raise PickleLoadError(
                f"not a pickle file: it starts with {head!r} (a pickle written by Python 3 starts with byte 0x80)"
            ) from None
        if isinstance(exc, PickleLoadError):
            raise
        raise PickleLoadError(f"unreadable pickle: {exc.__class__.__name__}: {exc}") from None
    check_graph(result, limits)
    return result


class _BoundedReader:
    """A file reader that refuses to read past the end instead of allocating what a length field claims."""

    def __init__(self, handle: io.BufferedIOBase):
        self._handle = handle
        start = handle.tell()
        handle.seek(0, os.SEEK_END)
        self._end = handle.tell()
        handle.seek(start)

    def _remaining(self) -> int:
        return self._end - self._handle.tell()

    def read(self, size: int = -1) -> bytes:
        if size is not None and size > self._remaining():
            raise PickleLoadError(
                f"unreadable pickle: a length field asks for {size} bytes but only {self._remaining()} remain"
            )
        return self._handle.read(size)

    def readinto(self, buffer: Any) -> int:
        if len(buffer) > self._remaining():
            raise PickleLoadError("unreadable pickle: truncated")
        return self._handle.readinto(buffer)

    def readline(self) -> bytes:
        return self._handle.readline(1024 * 1024)

    def peek(self, size: int = 1) -> bytes:  # pragma: no cover - only used by some Python versions
        return self._handle.peek(size) if hasattr(self._handle, "peek") else b""


def _counted(operation: Any) -> Any:
    def run(self: RestrictedUnpickler) -> None:
        self._opcodes += 1
        if self._opcodes > self._limits.max_opcodes:
            raise PickleTooLargeError(f"pickle has more than {self._limits.max_opcodes} operations")
        operation(self)

    return run


class RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, so that BUILD (which calls `__setstate__`) can be checked too."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)
    # set by the pure-Python unpickler while loading (typeshed leaves its private attributes out)
    stack: list[Any]
    proto: int

    def __init__(self, file: Any, limits: PickleLimits = DEFAULT_LIMITS):
        super().__init__(file)
        self._limits = limits
        self._opcodes = 0
        self._pending_arrays: dict[int, np.ndarray] = {}

    def load(self) -> Any:
        result = super().load()
        if self._pending_arrays:
            raise UnsafePickleError(
                "refusing a numpy array reconstructed without its state (it would hold uninitialised memory)"
            )
        return result

    def load_build(self) -> None:
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, np.dtype):
            target.__setstate__(state)  # type: ignore[attr-defined]  # numpy's stubs leave dtype.__setstate__ out
            _check_dtype_state(target)
        elif type(target) is np.ndarray:
            if self._pending_arrays.pop(id(target), None) is None:
                raise UnsafePickleError("refusing to set the state of a numpy array twice")
            _check_array_state(state, self._limits)
            target.__setstate__(state)
        else:
            raise UnsafePickleError(f"refusing to set the state of a {type(target).__name__}")

    dispatch[pickle.BUILD[0]] = load_build
    dispatch = {code: _counted(operation) for code, operation in dispatch.items()}

    def _reconstruct(self, subtype: Any, shape: Any, dtype_code: Any) -> np.ndarray:
        """numpy's `_reconstruct`: an empty array that only BUILD with a complete state fills."""
        if subtype is not _NDARRAY:
            raise UnsafePickleError("refusing a numpy array subclass")
        if not isinstance(dtype_code, bytes | str) or np.dtype(dtype_code).hasobject:  # type: ignore[arg-type]  # numpy takes bytes type codes
            raise UnsafePickleError("refusing a numpy array that is not plain data")
        array = np.empty((0,), dtype=np.uint8)
        self._pending_arrays[id(array)] = array
        return array

    def _frombuffer(self, buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
        return _numpy_frombuffer(buffer, dtype, shape, order, self._limits)

    def _rebuild_tensor(self, storage: Any, storage_offset: Any, size: Any, stride: Any, *rest: Any) -> torch.Tensor:
        return _torch_rebuild_tensor(storage, storage_offset, size, stride, *rest, limits=self._limits)

    def _storage_from_bytes(self, data: Any) -> Any:
        return _torch_storage_from_bytes(data, self._limits)

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:  # Python 3 writes protocol 0-2 globals under their Python 2 names
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = _ALLOWED.get((module, name))
        if found is _numpy_reconstruct:
            return self._reconstruct
        if found is _numpy_frombuffer:
            return self._frombuffer
        if found is _torch_rebuild_tensor:
            return self._rebuild_tensor
        if found is _torch_storage_from_bytes:
            return self._storage_from_bytes
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


def _check_array_state(state: Any, limits: PickleLimits) -> None:
    ok = (
        isinstance(state, tuple)
        and len(state) == 5
        and _int_tuple(state[1])
        and isinstance(state[2], np.dtype)
        and not state[2].hasobject
        and isinstance(state[4], bytes | bytearray)
    )
    if not ok:
        raise UnsafePickleError("refusing a numpy array whose state is not plain data")
    elements = _check_elements(state[1], state[2].itemsize, limits, "numpy array")
    if len(state[4]) != elements * state[2].itemsize:
        raise PickleLoadError(
            f"unreadable pickle: numpy array of shape {tuple(state[1])} comes with {len(state[4])} bytes of data"
        )


def _check_elements(shape: Any, itemsize: int, limits: PickleLimits, what: str) -> int:
    """Element count of `shape` after checking it (non-negative, within the limits); no allocation."""
    if any(side < 0 for side in shape):
        raise PickleLoadError(f"unreadable pickle: {what} with a negative size {tuple(shape)}")
    elements = math.prod(shape)
    if elements > limits.max_array_elements:
        raise PickleTooLargeError(
            f"{what} of shape {tuple(shape)} has {elements} elements; the limit is {limits.max_array_elements}"
        )
    if elements * itemsize > limits.max_array_bytes:
        raise PickleTooLargeError(
            f"{what} of shape {tuple(shape)} takes {elements * itemsize} bytes; the limit is {limits.max_array_bytes}"
        )
    return elements


def _bytearray(data: Any = b"", encoding: Any = None) -> bytearray:
    """`bytearray` from bytes or latin-1 text only: `bytearray(2**32)` would allocate what the file names."""
    if isinstance(data, bytes | bytearray) and encoding is None:
        return bytearray(data)
    if isinstance(data, str) and isinstance(encoding, str) and codecs.lookup(encoding).name == "iso8859-1":
        return bytearray(data, "latin-1")
    raise UnsafePickleError("refusing bytearray built from anything but bytes (a size would allocate memory)")


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
    if not isinstance(dtype_code, bytes | str) or np.dtype(dtype_code).hasobject:  # type: ignore[arg-type]  # numpy takes bytes type codes
        raise UnsafePickleError("refusing a numpy array that is not plain data")
    return np.ndarray.__new__(np.ndarray, shape, dtype_code)  # type: ignore[arg-type]  # as above


def _numpy_scalar(dtype: Any, data: Any = None) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind in "OV" or not isinstance(data, bytes):
        raise UnsafePickleError("refusing a numpy scalar that is not plain data")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _numpy_frombuffer(
    buffer: Any, dtype: Any, shape: Any, order: Any, limits: PickleLimits = DEFAULT_LIMITS
) -> np.ndarray:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind in "OV":
        raise UnsafePickleError("refusing a numpy buffer that is not plain data")
    if not isinstance(buffer, bytes | bytearray) or not _int_tuple(shape) or order not in ("C", "F"):
        raise UnsafePickleError("refusing a numpy buffer that is not plain bytes with a shape")
    _check_elements(shape, dtype.itemsize, limits, "numpy array")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _torch_storage_from_bytes(data: Any, limits: PickleLimits = DEFAULT_LIMITS) -> Any:
    """Stand-in for `torch.storage._load_from_bytes`, which would unpickle `data` without limits."""
    if not isinstance(data, bytes | bytearray):
        raise UnsafePickleError("refusing a torch storage that is not bytes")
    declared = _legacy_storage_elements(bytes(data))
    if declared > len(data) or declared * 16 > limits.max_array_bytes:
        raise PickleTooLargeError(
            f"embedded torch storage declares {declared} elements but carries only {len(data)} bytes"
        )
    try:
        storage = torch.load(io.BytesIO(bytes(data)), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise UnsafePickleError(f"refusing an embedded torch payload: {weights_only_error(exc)[1]}") from None
    if not isinstance(storage, torch.storage.TypedStorage | torch.UntypedStorage):
        raise UnsafePickleError(f"embedded torch payload is a {type(storage).__name__}, not a storage")
    return storage


class _StorageHeaderReader(pickle._Unpickler):
    """Reads the pickles of torch's legacy storage format only to learn the element counts they declare."""

    def __init__(self, file: Any):
        super().__init__(file)
        self.declared: list[Any] = []

    def find_class(self, module: str, name: str) -> Any:
        return (module, name)  # a harmless token: nothing is imported or called

    def persistent_load(self, pid: Any) -> Any:
        self.declared.append(pid)
        return None


_CALLING_OPCODES = {
    op[0] for op in (pickle.REDUCE, pickle.BUILD, pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.INST, pickle.OBJ)
}


def _refuse_call(reader: Any) -> None:
    raise UnsafePickleError("refusing an embedded torch payload: its header calls a function")


def _legacy_storage_elements(data: bytes) -> int:
    """Total elements the legacy torch storage pickles in `data` declare (torch allocates them up front)."""
    handle = io.BytesIO(data)
    declared: list[Any] = []
    try:
        for _ in range(4):  # magic number, protocol version, system info, the storage with its size
            reader = _StorageHeaderReader(_BoundedReader(handle))
            reader.dispatch = {  # type: ignore[misc]  # this reader's own table: it refuses every call
                code: (_refuse_call if code in _CALLING_OPCODES else operation)
                for code, operation in pickle._Unpickler.dispatch.items()
            }
            reader.load()
            declared.extend(reader.declared)
    except PickleLoadError:
        raise
    except Exception as exc:
        raise PickleLoadError(f"unreadable embedded torch storage: {exc.__class__.__name__}: {exc}") from None
    total = 0
    for pid in declared:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and isinstance(pid[4], int) and pid[4] >= 0):
            raise UnsafePickleError("refusing an embedded torch storage with a malformed header")
        total += pid[4]
    return total


def _torch_rebuild_tensor(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any = False,
    backward_hooks: Any = None,
    metadata: Any = None,
    *,
    limits: PickleLimits = DEFAULT_LIMITS,
) -> torch.Tensor:
    if not isinstance(storage, torch.storage.TypedStorage):
        raise UnsafePickleError("refusing a tensor whose storage is not a typed torch storage")
    if not _int_tuple(size) or not _int_tuple(stride) or not isinstance(storage_offset, int):
        raise UnsafePickleError("refusing a tensor with a malformed size, stride or offset")
    if backward_hooks:
        raise UnsafePickleError("refusing a tensor with backward hooks")
    _check_tensor_layout(storage, storage_offset, tuple(size), tuple(stride), limits)
    return torch._utils._rebuild_tensor_v2(storage, storage_offset, tuple(size), tuple(stride), False, None)


def _check_tensor_layout(
    storage: Any, offset: int, size: tuple[int, ...], stride: tuple[int, ...], limits: PickleLimits
) -> None:
    """Sizes within the limits, the view inside its storage, and no more elements than the storage holds."""
    if len(size) != len(stride) or offset < 0 or any(step < 0 for step in stride):
        raise PickleLoadError("unreadable pickle: tensor with mismatched or negative strides or offset")
    itemsize = storage.dtype.itemsize
    elements = _check_elements(size, itemsize, limits, "torch tensor")
    available = storage._untyped_storage.nbytes() // max(itemsize, 1)
    if elements > available:
        raise PickleTooLargeError(
            f"torch tensor of shape {size} repeats its {available} stored elements (zero or overlapping strides)"
        )
    if elements and offset + sum((side - 1) * step for side, step in zip(size, stride, strict=True)) >= available:
        raise PickleLoadError("unreadable pickle: tensor view reaches past the end of its storage")


def check_graph(value: Any, limits: PickleLimits = DEFAULT_LIMITS) -> None:
    """Refuse cycles, deep nesting, and graphs that grow past the limits once shared references are expanded.

    Each distinct object is visited once; its expanded size (nodes and bytes) is summed from its
    children's, so a chain of lists that each hold the previous one twice is measured, not walked.
    """
    sizes: dict[int, tuple[int, int]] = {}
    visiting: set[int] = set()

    def measure(node: Any, depth: int) -> tuple[int, int]:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if depth > limits.max_depth:
            raise PickleTooLargeError(f"pickle nests deeper than {limits.max_depth} levels")
        if isinstance(node, dict):
            children: Any = [item for pair in node.items() for item in pair]
        elif isinstance(node, list | tuple | set | frozenset):
            children = node
        else:
            children = ()
        if isinstance(node, np.ndarray):
            own = node.nbytes
        elif isinstance(node, torch.Tensor):
            own = node.numel() * node.element_size()
        elif isinstance(node, str | bytes | bytearray):
            own = len(node)
        else:
            own = 0
        nodes, total = 1, own
        if children:
            if key in visiting:
                raise PickleTooLargeError("pickle holds a container that contains itself")
            visiting.add(key)
            for child in children:
                child_nodes, child_bytes = measure(child, depth + 1)
                nodes += child_nodes
                total += child_bytes
                if nodes > limits.max_nodes:
                    raise PickleTooLargeError(
                        f"pickle expands to more than {limits.max_nodes} values (shared references counted each time)"
                    )
                if total > limits.max_total_bytes:
                    raise PickleTooLargeError(
                        f"pickle expands to more than {limits.max_total_bytes} bytes of data "
                        "(shared references counted each time)"
                    )
            visiting.discard(key)
        sizes[key] = (nodes, total)
        return nodes, total

    measure(value, 0)


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
    ("builtins", "bytearray"): _bytearray,
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
