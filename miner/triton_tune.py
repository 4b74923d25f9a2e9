"""Tuning metadata of a Triton kernel, read from its decorators (``TuneConfigs``).

``@triton.autotune`` (and wrappers named ``*autotune`` such as FLA's
``fla_cache_autotune``): one entry per ``triton.Config``, with list comprehensions over
literal lists (or module constants) expanded, up to 512 configs; anything not
statically known is kept as ``(("text", source),)``. ``@triton.heuristics``: the names it
sets. ``@triton.jit(do_not_specialize=[...])``: those names.
"""
from __future__ import annotations

import ast
from collections import ChainMap
from typing import Any

from skel.catalog.records import TuneConfigs
from skel.miner.pyexpr import Unresolved, arg, call_name, dotted, evaluate, kwarg, literal

_TEXT_CAP = 400


def tune_configs(fn, env: dict[str, Any]) -> TuneConfigs:
    """Autotune configs and keys, heuristics-set names and do_not_specialize from the decorators."""
    autotune, keys, heur, dns = [], (), [], ()
    for d in fn.decorator_list:
        if not isinstance(d, ast.Call):
            continue
        name = (dotted(d.func) or "").rsplit(".", 1)[-1]
        if name.endswith("autotune"):
            configs = arg(d, 0, "configs")
            autotune = _configs(configs, env) if configs is not None else []
            key = kwarg(d, "key") if kwarg(d, "key") is not None else (d.args[1] if len(d.args) > 1 else None)
            keys = tuple(str(literal(e)) for e in getattr(key, "elts", []) if literal(e) is not None)
        elif name.endswith("heuristics"):
            table = arg(d, 0, "values")
            if isinstance(table, ast.Dict):
                heur += [str(literal(k)) for k in table.keys if literal(k) is not None]
        elif name == "jit":
            spec = kwarg(d, "do_not_specialize")
            dns = tuple(str(literal(e)) for e in getattr(spec, "elts", []) if literal(e) is not None)
    return TuneConfigs(tuple(autotune), keys, tuple(heur), dns)


def _configs(node: ast.AST, env: dict[str, Any], limit: int = 512) -> list[tuple]:
    """One entry per ``triton.Config``; comprehensions over literal lists are expanded."""
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            out += _configs(e, env, limit)
        return out[:limit]
    if isinstance(node, ast.ListComp):
        return _expand(node.elt, list(node.generators), ChainMap({}, env), limit)
    if isinstance(node, ast.Call) and (call_name(node) or "").endswith("Config"):
        row = []
        table = arg(node, 0, "kwargs")
        for k, v in zip(getattr(table, "keys", []), getattr(table, "values", [])):
            row.append((str(literal(k)), _val(v, env)))
        for kw in node.keywords:
            if kw.arg in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
                row.append((kw.arg, _val(kw.value, env)))
        return [tuple(row)]
    return [(("text", ast.unparse(node)[:_TEXT_CAP]),)]


def _expand(elt, gens, env, limit) -> list[tuple]:
    if not gens:
        return _configs(elt, env, limit)
    g = gens[0]
    try:
        values = list(evaluate(g.iter, env))
    except (Unresolved, TypeError):
        return [(("text", ast.unparse(elt)[:_TEXT_CAP]),)]
    out = []
    for v in values:
        local = env.new_child()  # a layer, not a copy of the module's names per value
        try:
            _assign(g.target, v, local)
            if not all(evaluate(c, local) for c in g.ifs):
                continue
        except (Unresolved, TypeError, ValueError):
            pass
        out += _expand(elt, gens[1:], local, limit)
        if len(out) >= limit:
            break
    return out[:limit]


def _assign(target, value, env) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t, v in zip(target.elts, value):
            _assign(t, v, env)


def _val(node, env):
    try:
        return evaluate(node, env)
    except Unresolved:
        return ast.unparse(node)
