"""Triton frontend: ``KernelProfile`` for every ``@triton.jit`` function in a Python file.

Static only: the file is parsed with ``ast`` (fast; libcst is for the rewriter),
never imported. Recognised kernels: functions decorated with ``triton.jit`` or a
bare ``jit`` imported from triton (with or without call arguments such as
``do_not_specialize``); ``*autotune`` (``triton.autotune``, FLA's
``fla_cache_autotune``) and ``*heuristics`` decorators fill ``TuneConfigs``.

Rules worth knowing (details in the helpers):
- program-id roles: ``x = y % NV`` with ``NV = tl.cdiv(V, BV)`` -> "v-tile"
  (generally ``cdiv(X, BX)`` -> "x-tile"); ``x = tl.program_id(a)`` whose launch grid
  dimension ``a`` is ``triton.cdiv(V, BV)`` -> "v-tile"; ``y % H`` -> "head";
  otherwise the FLA naming convention (``i_hv`` head, ``i_n`` sequence, ...).
- the time loop: a loop whose bound is computed from a sequence-length name
  (``T``, ``seq_len``, ``N_CTX``, ``eos``/``bos``...), or whose body advances a
  pointer by a per-token stride (``p_q += H * K``, ``p += stride_t``).
- loop invariance of a load: its address node does not depend on the loop variable
  nor on any value carried around the loop (``miner.dataflow.loop_variant_nodes``).
"""
from __future__ import annotations

import ast
import re

from skel.miner import dataflow
from skel.catalog.records import (
    Dot, KernelProfile, LaunchSite, Loop, MathOp, MemOp, ProgramAxis, Reduction,
)
from skel.miner.pyexpr import Source, arg, call_name, dotted, kwarg, literal
from skel.miner.triton_body import BodyWalker, HEAD_COUNT
from skel.miner.triton_body_ops import RawItem
from skel.miner.triton_blocks import ModuleBlocks
from skel.miner.triton_scope import Scope
from skel.miner.triton_module import KernelDef, Outline, params_of, sweep
from skel.miner.triton_tune import tune_configs

# A sequence-length name: T itself, or a name containing one of these words (cur_batch_seq_len,
# N_CTX, kv_len_per_split, cu_seqlens), or the varlen bounds eos/bos.
TIME_NAME = re.compile(r"^(T|TT|eos|bos)$|seq_?len|n_ctx|kv_len|ctx_len|context_len|num_tokens|n_tokens", re.I)
# Fallback roles from the words in an index variable's (or a grid dimension's) name.
WORD_ROLES = ((re.compile(r"head", re.I), "head"), (re.compile(r"batch", re.I), "batch"),
              (re.compile(r"split", re.I), "split"), (re.compile(r"seq", re.I), "sequence"))
NAME_ROLES = {
    "i_v": "v-tile", "i_k": "k-tile", "i_h": "head", "i_hv": "head", "i_hq": "head", "i_hk": "head",
    "i_n": "sequence", "i_b": "batch", "i_bh": "batch-head", "i_nh": "sequence-head", "i_t": "t-tile",
    "i_c": "chunk", "pid_m": "m-tile", "pid_n": "n-tile", "pid_b": "batch", "pid_h": "head",
    "off_hz": "batch-head", "off_z": "batch", "off_h": "head", "start_m": "m-tile",
}
_TEXT_CAP = 400


def profile_source(text: str, path: str) -> list[KernelProfile]:
    """Profiles of the Triton kernels (and jit device functions) in ``text``, in source order.

    Raises ``SyntaxError`` for a file Python cannot parse (the caller reports it).
    """
    source = read_source(text, path)
    return source.profiles(source.kernels)


class TritonFile:
    """One module read once (pass 1, ``triton_module.Outline``): its jit kernels in source order.

    ``profiles(kernels)`` profiles any of them (pass 2); a profile depends on its kernel and the
    whole module only, so slices of ``kernels`` profiled apart and joined in order give the
    whole file's profiles.
    """

    def __init__(self, text: str, path: str):
        self.path = path
        self.blocks = ModuleBlocks(text, path)  # a large file is never one syntax tree: triton_blocks
        self.src = Source(text)
        self.outline = Outline(self.blocks, self.src)
        self.kernels: list[KernelDef] = self.outline.kernels
        self.jit_names = {k.name for k in self.kernels}
        self.helpers = dict(self.outline.imports)
        self.helpers.update({n: "this file" for n in self.jit_names})

    def profiles(self, kernels: list[KernelDef]) -> list[KernelProfile]:
        """Profiles of ``kernels`` (some of ``self.kernels``), in source order."""
        if not kernels:
            return []

        def profile(fn, sites):
            return _profile(fn, self.path, self.src, self.helpers, self.outline.base, sites)

        out = sweep(self.blocks, self.src, self.outline, list(kernels), self.jit_names, profile)
        return sorted(out, key=lambda p: p.line)


def read_source(text: str, path: str) -> TritonFile:
    """Parse ``text`` and find its kernels (no profile yet); raises as ``profile_source`` does."""
    return TritonFile(text, path)


def _profile(fn, path: str, src: Source, helpers, base: Scope, sites: tuple[LaunchSite, ...]) -> KernelProfile:
    params = params_of(fn, src)
    walker = BodyWalker(fn, src, [p.name for p in params], helpers).run()
    graph = dataflow.Graph(walker.edges)
    loops = tuple(_loop(l, graph) for l in sorted(walker.loops, key=lambda l: l.line))
    loop_by_line = {l.line: l for l in loops}
    items = sorted(walker.items, key=lambda i: (i.line, getattr(i.node, "col_offset", 0)))
    memops, reductions, dots, maths = [], [], [], []
    variant_cache: dict[int, set[str]] = {}
    for it in items:
        if it.kind in ("load", "store", "atomic"):
            memops.append(_memop(it, src, graph, loop_by_line, variant_cache))
        elif it.kind == "reduction":
            reductions.append(Reduction(it.data["op"], it.line, _t(src, it.node), it.data.get("axis"), it.loop_line,
                                        it.guards, it.data.get("dtype", "?")))
        elif it.kind == "dot":
            dots.append(_dot(it, src))
        elif it.kind == "math":
            maths.append(_math(it, src))
    axes = _program_axes(fn, walker, graph, sites)
    symbols = _symbols(fn, walker, src)
    has_pid = any(n.startswith("pid:") for n in graph.nodes)
    return KernelProfile(
        name=fn.name, path=path, language="triton", line=fn.lineno, end_line=fn.end_lineno,
        params=params, program_axes=axes, loops=loops, memops=tuple(memops), reductions=tuple(reductions),
        dots=tuple(dots), math=tuple(maths), dtypes=tuple(walker.dtypes_seen), launches=sites,
        tune=tune_configs(fn, base.env, base.nodes), dataflow=tuple(walker.edges), notes=(),
        kind="kernel" if has_pid or sites else "device-function", symbols=symbols,
    )


def _t(src: Source, node: ast.AST) -> str:
    text = src.text(node)
    return text if len(text) <= _TEXT_CAP else text[: _TEXT_CAP - 3] + "..."


def _loop(raw, graph: dataflow.Graph) -> Loop:
    names = {dataflow.node_var(n) for n in graph.ancestors(raw.bound_deps) | set(raw.bound_deps)}
    is_time = any(TIME_NAME.search(n) for n in names) or raw.token_advance
    return Loop(raw.line, raw.end_line, raw.var, raw.iter_text, raw.kind, is_time, raw.depth, raw.guards)


def _memop(it: RawItem, src: Source, graph, loop_by_line, cache) -> MemOp:
    invariant = True
    if it.loop_line is not None:
        lp = loop_by_line[it.loop_line]
        if lp.line not in cache:
            cache[lp.line] = dataflow.loop_variant_nodes(graph, lp.line, lp.end_line, lp.var)
        invariant = f"{it.data['node']}:addr" not in cache[lp.line]
    d = it.data
    return MemOp(it.kind, it.line, _t(src, d["pointer"]) if d["pointer"] is not None else "?", d.get("target"),
                 d["masked"], d["eviction_policy"], d["cache_modifier"], d["block_ptr"], it.loop_line, invariant,
                 it.guards, d["node"])


def _dot(it: RawItem, src: Source) -> Dot:
    c = it.node
    prec = kwarg(c, "input_precision")
    tf32 = kwarg(c, "allow_tf32")
    return Dot(it.line, _t(src, c), None if prec is None else (literal(prec) or src.text(prec)),
               None if tf32 is None else (literal(tf32) if isinstance(literal(tf32), bool) else None),
               tuple(it.data["operand_dtypes"]), it.loop_line, it.guards)


def _math(it: RawItem, src: Source) -> MathOp:
    keys = ("numerator", "denominator", "denominator_calls", "denominator_dtype", "argument", "via", "dtype")
    detail = tuple((k, str(it.data[k])) for k in keys if k in it.data and it.data[k] not in (None, ""))
    return MathOp(it.data["op"], it.line, _t(src, it.node), it.loop_line, detail, it.guards)


# ------------------------------------------------------------- program axes
def _program_axes(fn, walker: BodyWalker, graph, sites) -> tuple[ProgramAxis, ...]:
    pid_nodes = sorted(n for n in graph.nodes if n.startswith("pid:"))
    if not pid_nodes:
        return ()
    symbols = {v: val for v, _, val, _ in walker.assigns}
    index_vars = _index_vars(walker, set(pid_nodes))
    roles: dict[str, str] = {}
    direct: dict[int, tuple[str, int]] = {}
    for var, line, value, deps in walker.assigns:
        if var not in index_vars:
            continue
        inner = _strip_casts(value)
        pid_axis = _program_id_axis(inner)
        if pid_axis is not None:
            direct.setdefault(pid_axis, (var, line))
            dim = _grid_dim(sites, pid_axis)
            role = _tile_role(dim, symbols) if dim is not None else None
            if role is None and isinstance(dim, ast.Name) and var not in NAME_ROLES:
                role = "head" if HEAD_COUNT.match(dim.id) else _word_role(dim.id)
            if role:
                roles[var] = role
        elif isinstance(inner, ast.BinOp) and isinstance(inner.op, (ast.Mod, ast.FloorDiv)):
            role = _tile_role(inner.right, symbols) if isinstance(inner.op, ast.Mod) else None
            if role is None and isinstance(inner.right, ast.Name) and HEAD_COUNT.match(inner.right.id):
                role = "head" if isinstance(inner.op, ast.Mod) else None
            if role:
                roles[var] = role
    roles.update(_unflatten_roles(walker, symbols))
    for var in index_vars:
        if var not in roles:
            role = NAME_ROLES.get(var) or _word_role(var)
            if role:
                roles[var] = role
    out = []
    for node in pid_nodes:
        axis_text = node.split(":", 1)[1]
        axis = int(axis_text) if axis_text.isdigit() else -1
        reach = graph.descendants([node])
        derived = tuple(v for v in index_vars if any(f"{v}@{l}" in reach for _, l in _defs(walker, v)))
        var, line = direct.get(axis, ("", fn.lineno))
        out.append(ProgramAxis(axis, var, line, derived, tuple((v, roles[v]) for v in derived if v in roles)))
    return tuple(out)


def _word_role(name: str) -> str | None:
    return next((role for pattern, role in WORD_ROLES if pattern.search(name)), None)


def _defs(walker, var):
    return [(v, l) for v, l, _, _ in walker.assigns if v == var]


def _index_vars(walker: BodyWalker, pid_nodes: set[str]) -> dict[str, None]:
    """Variables that are integer arithmetic on program ids (``i_v``, ``i_nh``, ``bos``), in order.

    Operands may be program ids, parameters, earlier index variables, or names computed
    from parameters only (``NV = tl.cdiv(V, BV)``).
    """
    index_nodes = set(pid_nodes)
    const_nodes: set[str] = set()
    out: dict[str, None] = {}
    for var, line, value, deps in walker.assigns:
        node = f"{var}@{line}"
        if all("@" not in d and ":" not in d or d in const_nodes for d in deps):
            if _is_index_expr(value):
                const_nodes.add(node)
        elif any(d in index_nodes for d in deps) and all(d in index_nodes or d in const_nodes or "@" not in d
                                                         for d in deps) and _is_index_expr(value):
            index_nodes.add(node)
            out.setdefault(var)
    return out


def _is_index_expr(e) -> bool:
    """Integer arithmetic (+ - * // %), casts, ``cdiv`` and program-id calls only."""
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, ast.Attribute):
        return _is_index_expr(e.value)
    if isinstance(e, ast.BinOp):
        return isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)) \
            and _is_index_expr(e.left) and _is_index_expr(e.right)
    if isinstance(e, ast.UnaryOp):
        return _is_index_expr(e.operand)
    if isinstance(e, ast.Tuple):
        return all(_is_index_expr(x) for x in e.elts)
    if isinstance(e, ast.Call):
        f = e.func
        last = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if last == "to" and isinstance(f, ast.Attribute):
            return _is_index_expr(f.value)
        return (last.endswith("cdiv") or "program_id" in last) and all(_is_index_expr(a) for a in e.args)
    return False


def _strip_casts(e):
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "to":
        e = e.func.value
    return e


def _program_id_axis(e) -> int | None:
    if isinstance(e, ast.Call) and call_name(e) in ("tl.program_id", "triton.language.program_id"):
        axis = literal(arg(e, 0, "axis"))
        return axis if isinstance(axis, int) else None
    return None


def _grid_dim(sites, axis: int):
    for s in sites:
        if axis < len(s.grid_dims):
            try:
                return ast.parse(s.grid_dims[axis].strip(), mode="eval").body
            except SyntaxError:
                return None
    return None


def _tile_role(e, symbols: dict[str, ast.AST]) -> str | None:
    """``cdiv(V, BV)`` (directly or through a name such as ``NV``) -> "v-tile"."""
    for _ in range(3):
        if isinstance(e, ast.Name) and e.id in symbols:
            e = symbols[e.id]
        else:
            break
    if isinstance(e, ast.Call) and (call_name(e) or "").endswith("cdiv") and len(e.args) == 2:
        total = e.args[0]
        if isinstance(total, ast.Name):
            return f"{total.id.lower()}-tile"
    if isinstance(e, ast.Name) and re.fullmatch(r"N[A-Z]", e.id):  # NV, NK, NT passed as parameters
        return f"{e.id[1].lower()}-tile"
    return None


def _unflatten_roles(walker: BodyWalker, symbols) -> dict[str, str]:
    """``i_k, i_v, i_nh = unflatten_program_id(tl.cdiv(K, BK), tl.cdiv(V, BV))``."""
    out = {}
    for targets, call in walker.unflatten:
        for t, a in zip(targets.elts, call.args):
            role = _tile_role(a, symbols)
            if role and isinstance(t, ast.Name):
                out[t.id] = role
    return out


def _symbols(fn, walker: BodyWalker, src: Source) -> tuple[tuple[str, str], ...]:
    """Top-level names computed from parameters only (``NV = tl.cdiv(V, BV)``)."""
    top = {s.lineno for s in fn.body if isinstance(s, ast.Assign)}
    out: dict[str, str] = {}
    known: set[str] = set()
    for var, line, value, deps in walker.assigns:
        if line in top and deps and all("@" not in d and ":" not in d or d in known for d in deps) \
                and _is_symbol_expr(value):
            known.add(f"{var}@{line}")
            out[var] = src.text(value)
    return tuple(out.items())


def _is_symbol_expr(e) -> bool:
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, ast.BinOp):
        return _is_symbol_expr(e.left) and _is_symbol_expr(e.right)
    if isinstance(e, ast.UnaryOp):
        return _is_symbol_expr(e.operand)
    if isinstance(e, ast.Call):
        last = (call_name(e) or "").rsplit(".", 1)[-1]
        return last in ("cdiv", "next_power_of_2", "min", "max", "minimum", "maximum") \
            and all(_is_symbol_expr(a) for a in e.args)
    return False
