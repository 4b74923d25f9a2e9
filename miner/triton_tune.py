"""Tuning metadata of a Triton kernel, read from its decorators (``TuneConfigs``).

``@triton.autotune`` (and wrappers named ``*autotune`` such as FLA's
``fla_cache_autotune``): one entry per ``triton.Config``, with list comprehensions over
literal lists (or module constants) expanded, up to 512 configs; a module-level name
(``configs=_DECODE_CONFIGS``) is read through its definition, ``[...] + [...]`` concatenated; a
list built at run time (``configs=get_configs()``, a comprehension over unknown values) is kept as
one entry ``(("text", source), ("built_at_run_time", True))``: autotuned, count unknown. ``@triton.heuristics``: the names it
sets. ``@triton.jit(do_not_specialize=[...])``: those names (a module-level list named there is
followed to its definition).
"""
from __future__ import annotations

import ast
from collections import ChainMap
from typing import Any

from skel.catalog.records import TuneConfigs
from skel.miner.pyexpr import Unresolved, arg, call_name, dotted, evaluate, kwarg, literal

_TEXT_CAP = 400


def tune_configs(fn, env: dict[str, Any], nodes=None) -> TuneConfigs:
    """Autotune configs and keys, heuristics-set names and do_not_specialize from the decorators."""
    autotune, keys, heur, dns = [], (), [], ()
    for d in fn.decorator_list:
        if not isinstance(d, ast.Call):
            continue
        name = (dotted(d.func) or "").rsplit(".", 1)[-1]
        if name.endswith("autotune"):
            configs = arg(d, 0, "configs")
            autotune = _configs(configs, env, nodes=nodes) if configs is not None else []
            key = kwarg(d, "key") if kwarg(d, "key") is not None else (d.args[1] if len(d.args) > 1 else None)
            keys = tuple(str(literal(e)) for e in getattr(key, "elts", []) if literal(e) is not None)
        elif name.endswith("heuristics"):
            table = arg(d, 0, "values")
            if isinstance(table, ast.Dict):
                heur += [str(literal(k)) for k in table.keys if literal(k) is not None]
        elif name == "jit":
            dns = tuple(_strings(kwarg(d, "do_not_specialize"), nodes))
    return TuneConfigs(tuple(autotune), keys, tuple(heur), dns)


def _configs(node: ast.AST, env: dict[str, Any], limit: int = 512, nodes=None, depth: int = 0) -> list[tuple]:
    """One entry per ``triton.Config``; comprehensions over literal lists are expanded, module
    names followed to their definition (``nodes``: name -> defining expression)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            out += _configs(e, env, limit, nodes, depth)
        return out[:limit]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_configs(node.left, env, limit, nodes, depth) + _configs(node.right, env, limit, nodes, depth))[:limit]
    if isinstance(node, ast.Name):
        target = nodes.get(node.id) if nodes is not None and depth < 4 else None
        if isinstance(target, ast.AST) and target is not node:
            return _configs(target, env, limit, nodes, depth + 1)
        return [_run_time(node)]
    if isinstance(node, ast.ListComp):
        return _expand(node.elt, list(node.generators), ChainMap({}, env), limit)
    if isinstance(node, ast.Call) and not (call_name(node) or "").endswith("Config"):
        return [_run_time(node)]  # configs=get_configs(...): a list made when the module runs
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


def _strings(node, nodes, depth: int = 0) -> list[str]:
    """The names in a ``do_not_specialize`` list: a literal list, a module-level name for one, or
    a ``+`` of those (``_SIZES + ["sxb"]``)."""
    if node is None or depth > 4:
        return []
    if isinstance(node, ast.Name) and nodes is not None and isinstance(nodes.get(node.id), ast.AST):
        return _strings(nodes.get(node.id), nodes, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _strings(node.left, nodes, depth + 1) + _strings(node.right, nodes, depth + 1)
    return [str(literal(e)) for e in getattr(node, "elts", []) if literal(e) is not None]


def _run_time(node: ast.AST) -> tuple:
    return (("text", ast.unparse(node)[:_TEXT_CAP]), ("built_at_run_time", True))


def _expand(elt, gens, env, limit) -> list[tuple]:
    if not gens:
        return _configs(elt, env, limit)
    g = gens[0]
    try:
        values = list(evaluate(g.iter, env))
    except (Unresolved, TypeError):
        return [_run_time(elt)]  # a comprehension over values known only at run time
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
