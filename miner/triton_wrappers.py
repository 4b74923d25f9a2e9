"""Launches through a same-file wrapper that takes the kernel as an argument.

Packages route launches through a helper (unsloth's ``_launch(kernel, grid, args, n, constexprs,
device, **options)`` whose body ends in ``kernel[grid](*args, **constexprs, **options)``). A call
of such a helper with a kernel as its argument is a launch of that kernel: ``launch_call`` rebuilds
it as the ``kernel[grid](...)`` call the helper makes (arguments, constexpr keywords and passed-on
options in place), at the helper call's line, so ``triton_launch.launch_site`` reads it like any
other launch. Only what the call site spells out is used: a tuple of arguments, a ``dict(...)`` or
``{...}`` of keywords (a name is kept as ``**name`` for the launch scope to follow).
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

# ``kernel[grid](*args`` or ``kernel[grid](**kw``: the only texts a wrapper body can hold
_WRAPPED_LAUNCH = re.compile(r"\b\w+\s*\[\s*\w+\s*\]\s*\(\s*\*")


@dataclass(frozen=True)
class Wrapper:
    """A function that launches its kernel parameter: which of its arguments is what."""

    name: str
    kernel: int  # positional index of the kernel parameter
    grid: int  # of the grid parameter
    params: tuple[str, ...]  # its positional parameters, in order
    star_args: tuple[int, ...]  # parameters spread as positional arguments (``*args``)
    star_kwargs: tuple[int, ...]  # parameters spread as keywords (``**constexprs``)
    passes_options: bool  # its own ``**options`` are spread into the launch


_SPREAD_CALL = re.compile(r"\]\s*\(\s*\*")  # ``](*`` / ``](**``: what every wrapper body has, found fast


def may_hold_wrappers(text: str) -> bool:
    # the full pattern backtracks over every word of the file; most files have no ``](*`` at all
    return _SPREAD_CALL.search(text) is not None and _WRAPPED_LAUNCH.search(text) is not None


def wrapper_of(fn: ast.AST) -> Wrapper | None:
    """``fn`` as a launch wrapper, or None when no call in its body launches a parameter."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)
    options = fn.args.kwarg.arg if fn.args.kwarg else None
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        kernel, grid = node.func.value, node.func.slice
        if not (isinstance(kernel, ast.Name) and isinstance(grid, ast.Name)
                and kernel.id in params and grid.id in params):
            continue
        spread = [a.value.id for a in node.args if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name)]
        kw = [k.value.id for k in node.keywords if k.arg is None and isinstance(k.value, ast.Name)]
        return Wrapper(fn.name, params.index(kernel.id), params.index(grid.id), params,
                       tuple(params.index(n) for n in spread if n in params),
                       tuple(params.index(n) for n in kw if n in params),
                       options is not None and options in kw)
    return None


def call_lines(text: str, wrappers: dict[str, Wrapper], kernels: set[str]) -> dict[str, list[int]]:
    """Kernel name -> lines where a wrapper call names it (the kernel argument as the text shows
    it when it is the first; any kernel otherwise, so that none is finished too early)."""
    out: dict[str, list[int]] = {}
    if not wrappers:
        return out
    pat = re.compile(r"\b(" + "|".join(map(re.escape, wrappers)) + r")\s*\(\s*(\w*)")
    for m in pat.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        w = wrappers[m.group(1)]
        names = [m.group(2)] if w.kernel == 0 and m.group(2) in kernels else (kernels if w.kernel else [])
        for n in names:
            out.setdefault(n, []).append(line)
    return out


def launch_call(call: ast.Call, w: Wrapper, kernels: set[str]) -> tuple[str, ast.Call] | None:
    """(kernel, the ``kernel[grid](...)`` call) that ``call`` of wrapper ``w`` makes, or None when the
    kernel argument is not one of ``kernels`` or the call spreads its own arguments."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    given = dict(zip(w.params, call.args))
    given.update({k.arg: k.value for k in call.keywords if k.arg in w.params})
    kernel, grid = given.get(w.params[w.kernel]), given.get(w.params[w.grid])
    if not (isinstance(kernel, ast.Name) and kernel.id in kernels and grid is not None):
        return None
    args: list[ast.expr] = []
    for i in w.star_args:
        value = given.get(w.params[i])
        if isinstance(value, (ast.Tuple, ast.List)):
            args += value.elts
        elif value is not None:
            args.append(ast.Starred(value=value, ctx=ast.Load()))
    keywords: list[ast.keyword] = []
    for i in w.star_kwargs:
        value = given.get(w.params[i])
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" and not value.args:
            keywords += value.keywords
        elif value is not None:
            keywords.append(ast.keyword(arg=None, value=value))
    if w.passes_options:
        keywords += [k for k in call.keywords if k.arg not in w.params]
    launch = ast.Call(func=ast.Subscript(value=ast.Name(id=kernel.id, ctx=ast.Load()), slice=grid, ctx=ast.Load()),
                      args=args, keywords=keywords)
    return kernel.id, ast.copy_location(launch, call)


def wrapper_calls(statements, lines: list[int], wrappers: dict[str, Wrapper],
                  kernels: set[str]) -> list[tuple[str, ast.Call, ast.AST | None, str]]:
    """(kernel, rebuilt launch, enclosing function, wrapper name) for the wrapper calls in the statements that span
    one of ``lines`` (ascending), in line order: what ``triton_launch.launch_calls`` gives for direct
    launches."""
    out = []
    if not wrappers:
        return out
    for stmt, fn in statements:
        i = bisect.bisect_left(lines, stmt.lineno)
        if i == len(lines) or lines[i] > stmt.end_lineno:
            continue
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in wrappers:
                made = launch_call(n, wrappers[n.func.id], kernels)
                if made:
                    out.append((made[0], made[1], fn, n.func.id))
    out.sort(key=lambda t: (t[1].lineno, t[1].col_offset))
    return out
