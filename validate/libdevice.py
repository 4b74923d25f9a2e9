"""libdevice functions in Triton's CPU interpreter: what stands in for each one.

``triton.language.extra.libdevice`` holds stubs the compiler dispatches to CUDA's or ROCm's device
library; the interpreter implements none of them, so ``tanh(x)`` (Liger's GEGLU, DyT) returns None or
raises in the *original*. A function with a ``tl.math`` namesake is bound to it (interpret.py); one
without (tanh, pow, atan2, ...) to the numpy function that computes the same value elementwise, in the
argument's own dtype. Rounding modes and fast approximations (``fast_expf``) are not emulated: the
interpreter computes the exact function, as it does for every builtin.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

# libdevice name -> numpy function computing the same elementwise value
NUMPY_EQUIVALENT = {
    "tanh": "tanh", "sinh": "sinh", "cosh": "cosh", "tan": "tan", "asin": "arcsin", "acos": "arccos",
    "atan": "arctan", "atan2": "arctan2", "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh",
    "cbrt": "cbrt", "expm1": "expm1", "log1p": "log1p", "log10": "log10", "hypot": "hypot", "pow": "power",
    "fmod": "fmod", "copysign": "copysign", "trunc": "trunc", "fast_expf": "exp", "fast_logf": "log",
    "fast_sinf": "sin", "fast_cosf": "cos",
}


def is_libdevice_module(value: Any) -> bool:
    name = value.__name__ if isinstance(value, ModuleType) else ""
    return name.startswith("triton.language.extra") and name.endswith("libdevice")


def is_libdevice_function(value: Any) -> bool:
    module = getattr(value, "__module__", "") or ""
    return callable(value) and not isinstance(value, ModuleType) and module.startswith("triton.language.extra") \
        and module.endswith("libdevice")


def numpy_stand_in(name: str) -> Callable | None:
    """An interpreter implementation of libdevice's ``name`` through numpy, or None when there is none."""
    if name not in NUMPY_EQUIVALENT:
        return None

    def call(*args, **kwargs):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        tensors = [a for a in args if isinstance(a, tl.tensor)]
        if not tensors:
            raise TypeError(f"libdevice.{name} takes tensors in the interpreter, got {args!r}")
        like = max(tensors, key=lambda t: t.handle.data.size)
        data = getattr(np, NUMPY_EQUIVALENT[name])(*(a.handle.data if isinstance(a, tl.tensor) else a for a in args))
        data = np.asarray(data).astype(like.handle.data.dtype)
        ty = like.type if data.shape == like.handle.data.shape else tl.block_type(like.dtype, list(data.shape))
        return tl.tensor(TensorHandle(data, like.handle.dtype), ty)

    call.__name__ = call.__qualname__ = name
    call.__skel_late_bound__ = f"numpy.{NUMPY_EQUIVALENT[name]}"
    return call


class LibdeviceStandIn:
    """Takes the place of a libdevice module a kernel file holds (``from triton.language.extra import
    libdevice``; ``libdevice.tanh(x)``): each function ``resolve`` gives a stand-in for, else the module's.
    Resolved here, outside the interpreter, where tl.math still holds the builtins ``resolve`` looks for."""

    def __init__(self, module: ModuleType, resolve: Callable[[str], Callable | None]):
        self._module = module
        self._found = {name: found for name in dir(module) if not name.startswith("_")
                       and callable(getattr(module, name)) and (found := resolve(name)) is not None}
        self.__name__ = module.__name__

    def __getattr__(self, name: str):
        found = self.__dict__.get("_found", {}).get(name)
        return found if found is not None else getattr(self.__dict__["_module"], name)
