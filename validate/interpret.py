"""Kernels that call aliased Triton builtins, made to run in Triton's CPU interpreter.

FLA, SGLang and vLLM files write ``exp = tl.exp`` at module level (or import such a name from a
helper module) and call ``exp(x)`` inside ``@triton.jit`` code. The interpreter swaps the builtins of
``triton.language`` for its own only while a kernel runs, so an alias bound at import still holds the
compiled-mode builtin, and the *original* kernel fails ("Did you forget to add @triton.jit ?").

``late_bind_aliases(module)`` rebinds every such alias, in the module and in the globals of every
jitted function reachable from it, to a stand-in that looks the builtin up on its home module when
called, so inside the interpreter it finds the interpreter's version. It changes which object a name
holds, never what it computes; in compiled mode it is not used.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any


def _is_builtin(value: Any) -> bool:
    return callable(value) and getattr(value, "__triton_builtin__", False) is True


def _home(value: Any) -> tuple[ModuleType, str] | None:
    """The triton.language module (and name) that holds ``value``, if it is one of its builtins."""
    import triton.language as tl

    name = getattr(value, "__name__", "")
    candidates = [sys.modules.get(getattr(value, "__module__", "") or ""), tl, tl.math, tl.core]
    for module in candidates:
        if isinstance(module, ModuleType) and module.__name__.startswith("triton.language") \
                and getattr(module, name, None) is value:
            return module, name
    return None


def _late(module: ModuleType, name: str):
    def call(*args, **kwargs):
        return getattr(module, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__skel_late_bound__ = f"{module.__name__}.{name}"
    return call


def late_bind_aliases(module: ModuleType) -> list[str]:
    """Rebind aliased builtins reachable from ``module``; returns "namespace.alias -> home.name" per rebinding."""
    done: list[str] = []
    seen: set[int] = set()
    spaces = [(module.__name__, vars(module))]
    while spaces:
        label, space = spaces.pop()
        if id(space) in seen:
            continue
        seen.add(id(space))
        for alias, value in list(space.items()):
            fn_globals = getattr(getattr(value, "fn", None), "__globals__", None)  # a jitted (or interpreted) function
            if isinstance(fn_globals, dict):
                spaces.append((fn_globals.get("__name__", "?"), fn_globals))
            elif _is_builtin(value) and not alias.startswith("__"):
                home = _home(value)
                if home is not None and home[0] is not sys.modules.get(label):
                    space[alias] = _late(*home)
                    done.append(f"{label}.{alias} -> {home[0].__name__}.{home[1]}")
    return done
