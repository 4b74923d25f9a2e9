"""What a kernel's ``@triton.jit`` helpers do through a pointer the kernel passes them.

``_row(dY + row * stride, dX + row * stride, ...)`` hands the helper a pointer built from the
kernel's parameter ``dX``; the helper's ``tl.store(dX + cols, ...)`` is then a store through the
kernel's ``dX``. ``accesses_through(ctx, param)`` gives, for every call of a same-file jit helper
in the kernel's body that passes an address rooted at ``param``, each load / store / atomic the
helper makes through the matching parameter (one level deep: a helper's own helpers are not
followed). Triton only; read from the file's text, nothing is run.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache

from skel.miner.detectors.base import Ctx

_JIT_DEF = re.compile(r"^@(?:triton\.)?jit\b[^\n]*\n(?:@[^\n]*\n)*def\s+(\w+)\s*\(", re.M)
_ACCESS = {"load": "load", "store": "store"}


@lru_cache(maxsize=16)
def _jit_defs(source: str) -> dict[str, int]:
    """Jit function name -> the 1-based line of its ``def`` (module level only)."""
    out, line, at = {}, 1, 0
    for m in _JIT_DEF.finditer(source):
        line += source.count("\n", at, m.end())
        at = m.end()
        out[m.group(1)] = line
    return out


@lru_cache(maxsize=16)
def _calls(source: str) -> re.Pattern | None:
    """A call of one of the file's jit functions (None when it has none)."""
    names = _jit_defs(source)
    return re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\s*\(") if names else None


@lru_cache(maxsize=256)
def _helper(source: str, name: str) -> tuple[tuple[str, ...], tuple[tuple[str, str, int], ...]] | None:
    """(positional parameters, (kind, parameter, line) for each memory access whose address starts
    from a parameter) of the module-level jit function ``name``; only its own lines are parsed."""
    first = _jit_defs(source).get(name)
    if first is None:
        return None
    lines = source.splitlines()
    # the body ends at the next line that starts at column 0, or at a later one where that line was inside
    # a string (a docstring's text); never past the decorators of the next jit function
    limit = min((ln for ln in _jit_defs(source).values() if ln > first), default=len(lines) + 1) - 1
    while limit > first and lines[limit - 1].startswith("@"):
        limit -= 1
    end, tree = first, None
    while tree is None and end <= limit:
        while end < limit and (not lines[end].strip() or lines[end][:1] in " \t#)"):
            end += 1
        try:
            tree = ast.parse("\n".join(lines[first - 1:end]))
        except SyntaxError:
            end += 1
    fn = tree.body[0] if tree and tree.body else None
    if not isinstance(fn, ast.FunctionDef) or fn.name != name:
        return None
    params = tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)
    rows = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            op = node.func.attr
            kind = _ACCESS.get(op) or ("atomic" if op.startswith("atomic_") else None)
            root = _root(node.args[0])
            if kind and root in params:
                rows.append((kind, root, node.lineno + first - 1))
    return params, tuple(rows)


def _root(node: ast.AST) -> str | None:
    """The leftmost name of an address expression (``dX + cols`` -> ``dX``)."""
    while isinstance(node, ast.BinOp):
        node = node.left
    return node.id if isinstance(node, ast.Name) else None


def accesses_through(ctx: Ctx, param: str) -> list[tuple[str, int]]:
    """(kind, helper line) of the accesses the kernel's helpers make through ``param``."""
    if ctx.p.language != "triton":
        return []
    call = _calls(ctx.source)
    if call is None:
        return []
    defs = _jit_defs(ctx.source)
    out, seen = [], set()
    for ln in ctx.body:
        if ln in seen or not call.search(ctx.text(ln)):
            continue
        try:
            tree = ast.parse(ctx.statement(ln).strip())
        except SyntaxError:
            continue
        seen.add(ln)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defs):
                continue
            helper = _helper(ctx.source, node.func.id)
            if helper is None:
                continue
            params, rows = helper
            passed = {params[i] for i, a in enumerate(node.args[:len(params)]) if _root(a) == param}
            passed |= {k.arg for k in node.keywords if k.arg in params and _root(k.value) == param}
            out += [(kind, line) for kind, p, line in rows if p in passed]
    return out
