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
def _helpers(source: str) -> dict[str, tuple[tuple[str, ...], tuple[tuple[str, str, int], ...]]]:
    """Jit function name -> (its positional parameters, (kind, parameter, line) for each memory access
    whose address starts from a parameter)."""
    out = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    names = set(_JIT_DEF.findall(source))
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name in names):
            continue
        params = tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)
        rows = []
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                op = node.func.attr
                kind = _ACCESS.get(op) or ("atomic" if op.startswith("atomic_") else None)
                root = _root(node.args[0])
                if kind and root in params:
                    rows.append((kind, root, node.lineno))
        out[fn.name] = (params, tuple(rows))
    return out


def _root(node: ast.AST) -> str | None:
    """The leftmost name of an address expression (``dX + cols`` -> ``dX``)."""
    while isinstance(node, ast.BinOp):
        node = node.left
    return node.id if isinstance(node, ast.Name) else None


def accesses_through(ctx: Ctx, param: str) -> list[tuple[str, int]]:
    """(kind, helper line) of the accesses the kernel's helpers make through ``param``."""
    if ctx.p.language != "triton":
        return []
    helpers = _helpers(ctx.source)
    if not helpers:
        return []
    call = re.compile(r"\b(" + "|".join(map(re.escape, helpers)) + r")\s*\(")
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
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers):
                continue
            params, rows = helpers[node.func.id]
            passed = {params[i] for i, a in enumerate(node.args[:len(params)]) if _root(a) == param}
            passed |= {k.arg for k in node.keywords if k.arg in params and _root(k.value) == param}
            out += [(kind, line) for kind, p, line in rows if p in passed]
    return out
