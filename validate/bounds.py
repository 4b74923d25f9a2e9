"""Loads and stores outside every tensor a kernel was given, caught in Triton's CPU interpreter.

The interpreter reads and writes host memory at whatever address a kernel computes. A harness that
draws a tensor too small, or a launcher whose default path indexes past its own allocation, then
reads neighbouring memory (the original's outputs become garbage: an upcast run 1e+20 away) or writes
it (the worker dies of SIGSEGV, no line named). Compiled code on a GPU would fault or corrupt alike.

``bounds_checked()`` records, for each launch, the storage of every tensor argument (whole storages,
so a view may reach its base's other elements), and checks each masked load, store and atomic: an
element outside all of them raises ``OutOfBounds`` naming the access, the kernel line and the nearest
tensor below the address (pointers carry no provenance here: the tensor indexed may be another). In
compiled mode it is not used.
"""
from __future__ import annotations

import traceback
from pathlib import Path

_RANGES: list[tuple[str, int, int, str]] = []  # (argument, first byte, end byte, shape and dtype), this launch


class OutOfBounds(IndexError):
    """A kernel in the interpreter touched memory outside every tensor argument of its launch."""


def _tensors(name: str, value, out: list) -> None:
    if hasattr(value, "untyped_storage") and hasattr(value, "data_ptr"):
        storage = value.untyped_storage()
        start = storage.data_ptr()
        desc = f"{list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
        out.append((name, start, start + storage.nbytes(), desc))
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _tensors(f"{name}[{i}]", item, out)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):  # a TensorDescriptor
        _tensors(name, value.base, out)


def _kernel_line() -> str:
    """The deepest frame outside Triton and this module: the kernel's line."""
    import triton

    skip = (Path(__file__).resolve(), Path(triton.__file__).resolve().parent)
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if path != skip[0] and skip[1] not in path.parents:
            return f"{path.name}:{frame.lineno}"
    return "the kernel"


def _check(what: str, ptrs, mask, element: int) -> None:
    import numpy as np

    if not _RANGES:
        return
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
    addresses = addresses.reshape(-1)
    if not addresses.size:
        return
    inside = np.zeros(addresses.shape, dtype=bool)
    for _, start, end, _ in _RANGES:
        inside |= (addresses >= start) & (addresses + element <= end)
    if inside.all():
        return
    bad = int(addresses[~inside][0])
    below = [r for r in _RANGES if r[1] <= bad]
    if below:
        name, start, end, desc = max(below, key=lambda r: r[1])
        where = f"{bad - end + element} bytes past the end of '{name}' ({desc}, the nearest tensor below it)"
    else:
        name, start, _, desc = min(_RANGES, key=lambda r: r[1])
        where = f"{start - bad} bytes before '{name}' ({desc}), the lowest tensor passed"
    count = int((~inside).sum())
    raise OutOfBounds(f"{what} at {_kernel_line()} touches {count} element(s) outside every tensor passed, the"
                      f" first {where}")


def bounds_checked() -> bool:
    """Patch the interpreter's launches and memory ops (once). Returns whether it applied."""
    try:
        import triton.runtime.interpreter as interpreter
    except ImportError:
        return False
    builder, executor = getattr(interpreter, "InterpreterBuilder", None), getattr(interpreter, "GridExecutor", None)
    needed = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if builder is None or executor is None or not all(hasattr(builder, n) for n in needed) \
            or not hasattr(executor, "_init_args_hst"):
        return False
    if getattr(builder.create_masked_load, "_skel_bounds", False):
        return True
    init = executor._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        ranges: list = []
        for name, value in list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items()):
            _tensors(name, value, ranges)
        _RANGES[:] = ranges
        return args_hst, kwargs_hst

    def width(ptrs) -> int:
        return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)

    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def masked_load(self, ptrs, mask, other, *rest):
        _check("a load", ptrs, mask, width(ptrs))
        return load(self, ptrs, mask, other, *rest)

    def masked_store(self, ptrs, value, mask, *rest):
        _check("a store", ptrs, mask, width(ptrs))
        return store(self, ptrs, value, mask, *rest)

    def atomic_rmw(self, op, ptr, val, mask, *rest):
        _check("an atomic", ptr, mask, width(ptr))
        return rmw(self, op, ptr, val, mask, *rest)

    def atomic_cas(self, ptr, cmp, val, *rest):
        _check("an atomic", ptr, None, width(ptr))
        return cas(self, ptr, cmp, val, *rest)

    for fn in (masked_load, masked_store, atomic_rmw, atomic_cas):
        fn._skel_bounds = True
    executor._init_args_hst = init_args_hst
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    return True
