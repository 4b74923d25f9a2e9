"""SK005: launch-config search -- tile sizes, num_warps, num_stages, pruned by resources.

DESCRIPTION: at each ``kernel[grid](...)`` launch of a ``@triton.jit`` kernel of the file
(not autotuned), enumerate variants of
- the tile constexprs the grid is built from (``BV`` when the grid is ``cdiv(V, BV) * N * HV``);
  tiles the grid does not depend on (``BK`` covering all of K) are left alone, since changing
  them would leave part of the problem uncovered;
- ``num_warps`` in {1, 2, 4, 8} and, when the launch sets it, ``num_stages`` in {1, 2, 3}.
Pruning: a tile stays a power of two no larger than next_pow2 of the dimension it tiles (from
``options.shape``); the fp32 tile a program holds in registers (product of the launch's tile
sizes) spread over ``32 * num_warps`` threads must stay within ``max_elems_per_thread``
(default 128, ``options.extra``) and give every thread at least 4 elements (a bound applied only
when every tile's value is known at ``options.shape``: ``BD = next_power_of_2(D)`` with D unknown
leaves the tile's size unknown, and a partial product would prune by a wrong size); the baseline
itself is not a variant. Variants are ranked by closeness of elements-per-thread to 32 (what the
measured winners use), then by how few knobs change; ``num_stages`` variants come after every
tile/warp variant (a decode loop's pipelining matters least); at most ``options.max_variants``.

A tile is changed where its value is set: the host assignment ``BV = 32`` (or the one
power-of-two literal in ``BV = min(8, next_power_of_2(V))``), so the grid follows it.
Each variant marks the launch with ``# skel SK005: ...``; a marked launch is skipped.

Unsafe: the tile split and warp count change reduction order.
"""
from __future__ import annotations

import itertools
import math
import re

import libcst as cst

from skel.miner.triton_launch import TILE_NAME
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions

CODE = "SK005"
SAFETY = "unsafe"
MARKER = "skel SK005"
TILES = (8, 16, 32, 64, 128)
WARPS = (1, 2, 4, 8)
STAGES = (1, 2, 3)


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _eval(node: cst.BaseExpression, env: dict[str, int]) -> int | None:
    """Integer value of a host expression, or None; an ``a if c else b`` takes ``a``."""
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.Name):
        return env.get(node.value)
    if isinstance(node, cst.IfExp):
        return _eval(node.body, env)
    if isinstance(node, cst.BinaryOperation):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if a is None or b is None:
            return None
        ops = {cst.Add: a + b, cst.Subtract: a - b, cst.Multiply: a * b}
        if isinstance(node.operator, cst.FloorDivide) and b:
            return a // b
        return ops.get(type(node.operator))
    if isinstance(node, cst.Call):
        fn = C.last_part(C.call_name(node))
        vals = [_eval(a.value, env) for a in node.args]
        if None in vals:
            return None
        if fn == "next_power_of_2" and len(vals) == 1:
            return _pow2(vals[0])
        if fn == "cdiv" and len(vals) == 2 and vals[1]:
            return -(-vals[0] // vals[1])
        if fn in ("min", "max") and vals:
            return (min if fn == "min" else max)(vals)
    return None


def _unpacked(assign: cst.Assign) -> dict[str, cst.BaseExpression]:
    """``NK, NV = cdiv(K, BK), cdiv(V, BV)``: each target name -> its element (the whole value when the
    two sides do not pair up: ``B, T, H = k.shape``)."""
    out: dict[str, cst.BaseExpression] = {}
    for target in assign.targets:
        tgt = target.target
        if not isinstance(tgt, (cst.Tuple, cst.List)):
            continue
        names = [e.value for e in tgt.elements]
        value = assign.value
        pairs = (isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names)
                 and not any(isinstance(e, cst.StarredElement) for e in [*tgt.elements, *value.elements]))
        for i, n in enumerate(names):
            if isinstance(n, cst.Name):
                out[n.value] = value.elements[i].value if pairs else value
    return out


class Launch:
    """One ``kernel[grid](...)`` launch and what the search may change there."""

    def __init__(self, call: cst.Call, kernel: cst.FunctionDef, host: cst.FunctionDef, shape: dict[str, int]):
        self.call, self.kernel, self.host = call, kernel, host
        self.assigns: dict[str, cst.Assign] = {}
        self.sources: dict[str, cst.BaseExpression] = {}  # name -> what it is computed from (tuple targets too)
        env = dict(shape)
        for small, *_ in F.walk(host.body.body):
            name = F.single_target(small)
            if name and isinstance(small, cst.Assign):
                self.assigns[name] = small  # the last one wins, as at the launch
                self.sources[name] = small.value
                value = _eval(small.value, env)
                if name not in shape and value is not None:
                    env[name] = value
            elif isinstance(small, cst.Assign):
                self.sources.update(_unpacked(small))
        self.env = env
        grid = call.func.slice[0].slice.value if isinstance(call.func, cst.Subscript) else None
        self.grid_names = self._closure(C.names_in(grid) if grid is not None else set())
        self.dims = {}  # tile name -> the dimension it tiles (from cdiv(D, TILE) calls)
        for node in [grid, *self.sources.values()]:
            for c in C.calls_in(node) if node is not None else ():
                if C.last_part(C.call_name(c)) == "cdiv" and len(c.args) == 2:
                    d, t = c.args[0].value, c.args[1].value
                    if isinstance(d, cst.Name) and isinstance(t, cst.Name):
                        self.dims[t.value] = d.value

    def _closure(self, names: set[str]) -> set[str]:
        out, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                if n in self.sources:
                    todo.extend(C.names_in(self.sources[n]))
        return out

    def grid_tiles(self) -> set[str]:
        """Tile constexprs the grid is built from (passed at the launch, by keyword or position, as a
        name the grid is computed from): programs differing only in that tile are siblings. The same
        definition as the miner's ``LaunchSite.grid_tiles``."""
        constexprs = C.constexpr_params(self.kernel)
        params = [p.name.value for p in self.kernel.params.params]
        out = set()
        for i, a in enumerate(self.call.args):
            if a.star:
                break
            name = a.keyword.value if a.keyword else (params[i] if i < len(params) else None)
            if (name in constexprs and TILE_NAME.match(name) and isinstance(a.value, cst.Name)
                    and a.value.value in self.grid_names):
                out.add(name)
        return out

    def tiles(self) -> tuple[dict[str, int | None], dict[str, cst.Assign], list[str]]:
        """(every tile constexpr at the launch -> value, varied tiles -> their host assignment, notes)."""
        constexprs = C.constexpr_params(self.kernel)
        values: dict[str, int | None] = {}
        varied: dict[str, cst.Assign] = {}
        notes: list[str] = []
        for arg in self.call.args:
            name = arg.keyword.value if arg.keyword else None
            if name not in constexprs or not TILE_NAME.match(name):
                continue
            values[name] = _eval(arg.value, self.env)
            src = arg.value.value if isinstance(arg.value, cst.Name) else None
            if src is None or src not in self.grid_names:
                notes.append(f"{name} kept: the grid does not depend on it")
            elif src not in self.assigns or _literal_site(self.assigns[src].value) == "ambiguous":
                notes.append(f"{name} kept: no single host assignment with one power-of-two literal sets it")
            else:
                varied[name] = self.assigns[src]
        return values, varied, notes


def _literal_site(value: cst.BaseExpression):
    lits = [n for n in _ints(value) if n.value.isdigit() and int(n.value) >= 2 and _pow2(int(n.value)) == int(n.value)]
    if isinstance(value, cst.Integer):
        return value
    if len(lits) == 1:
        return lits[0]
    return "whole" if not lits else "ambiguous"


def _ints(node: cst.CSTNode) -> list[cst.Integer]:
    found: list[cst.Integer] = []

    class V(cst.CSTVisitor):
        def visit_Integer(self, n: cst.Integer) -> None:
            found.append(n)

    node.visit(V())
    return found


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = {k.name.value: k for k in C.kernels(src.module, options)}
    launches = C.launches(src.module, ks)
    if not launches:
        return C.skip(CODE, SAFETY, source, "not applicable: no kernel[grid](...) launch of a @triton.jit kernel in this file")
    if MARKER in source:
        line = next(ln for ln in source.splitlines() if MARKER in ln).strip()
        return C.skip(CODE, SAFETY, source, f"already applied: the launch config was chosen by a search ({line})")
    extra = dict(options.extra)
    budget = int(extra.get("max_elems_per_thread", 128))
    shape = dict(options.shape)
    out: list[Rewrite] = []
    reasons: list[str] = []
    statements = _statements(src.module)
    for call, kernel, host in launches:
        if len(out) >= options.max_variants:
            break  # the variant budget is spent on the earlier launches
        if C.is_autotuned(kernel):
            reasons.append(f"line {src.line(call)}: {kernel.name.value} is autotuned; its configs choose the launch")
            continue
        stmt = statements.get(call)
        if stmt is None:  # e.g. ``if x: kernel[grid](...)`` on one line: no statement line of its own to mark
            reasons.append(f"line {src.line(call)}: the launch shares a compound statement's line; not varied")
            continue
        out.extend(_variants(src, Launch(call, kernel, host, shape), stmt, budget,
                             options.max_variants - len(out), reasons))
    if not out:
        return C.skip(CODE, SAFETY, source, "not applicable: " + "; ".join(reasons or ["no launch variant within the resource bounds"]))
    return out


def _variants(src: C.Source, launch: Launch, stmt: cst.CSTNode, budget: int, cap: int,
              reasons: list[str]) -> list[Rewrite]:
    values, varied, notes = launch.tiles()
    unknown = sorted(n for n, v in values.items() if v is None)
    if unknown:
        notes = [*notes, f"{', '.join(unknown)} unknown at this shape: the per-thread bound is not applied"]
    warps0 = _eval(C.kwarg(launch.call, "num_warps").value, launch.env) if C.kwarg(launch.call, "num_warps") else 4
    stages_arg = C.kwarg(launch.call, "num_stages")
    stages0 = _eval(stages_arg.value, launch.env) if stages_arg else None
    axes: list[tuple[str, tuple]] = []
    for name in varied:
        dim = launch.dims.get(C.code_of(next(a.value for a in launch.call.args if a.keyword and a.keyword.value == name)))
        top = _pow2(launch.env[dim]) if dim in launch.env else max(TILES)
        axes.append((name, tuple(t for t in TILES if t <= top)))
    axes.append(("num_warps", WARPS))
    if stages_arg is not None:
        axes.append(("num_stages", STAGES))
    base = {**{n: values.get(n) for n in varied}, "num_warps": warps0, "num_stages": stages0}
    scored = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        cfg = dict(zip((n for n, _ in axes), combo))
        if all(cfg[k] == base.get(k) for k in cfg):
            continue
        tile = {**values, **{k: v for k, v in cfg.items() if k in varied}}
        # a tile whose value is unknown at this shape leaves the per-thread size unknown: no bound prunes
        per_thread = (math.prod(tile.values()) / (32 * cfg["num_warps"])
                      if tile and None not in tile.values() else None)
        if per_thread is not None and not (4 <= per_thread <= budget):
            continue
        moved = sum(cfg[k] != base.get(k) for k in cfg)
        dist = abs(math.log2(per_thread / 32)) if per_thread else 0.0
        stages_moved = cfg.get("num_stages") != base.get("num_stages") if "num_stages" in cfg else False
        scored.append((stages_moved, round(dist), moved, dist, combo, cfg, per_thread))
    scored.sort(key=lambda s: s[:4])
    if not scored:
        reasons.append(f"line {src.line(launch.call)}: no variant within {budget} fp32 tile elements per thread")
        return []
    return [_apply(src, launch, stmt, cfg, varied, per_thread, budget, notes)
            for *_, cfg, per_thread in scored[:max(cap, 0)]]


def _apply(src: C.Source, launch: Launch, stmt: cst.CSTNode, cfg: dict, varied: dict, per_thread, budget: int,
           notes: list[str]) -> Rewrite:
    label = ",".join(f"{k}={v}" for k, v in cfg.items())
    edits: dict = {}
    changes: list[Change] = []
    for name, assign in varied.items():
        site = _literal_site(assign.value)
        new = cst.Integer(str(cfg[name]))
        if site == "whole":
            edits[assign] = (lambda n: lambda upd: upd.with_changes(value=n))(new)
        else:
            edits[site] = (lambda n: lambda upd: n)(new)
        changes.append(Change(src.line(assign), f"{name}: {C.code_of(assign.value)} -> tile {cfg[name]}"))
    for knob in ("num_warps", "num_stages"):
        if knob in cfg:
            arg = C.kwarg(launch.call, knob)
            value = cst.Integer(str(cfg[knob]))
            if arg is not None:
                edits[arg] = (lambda v: lambda upd: upd.with_changes(value=v))(value)
            changes.append(Change(src.line(arg or launch.call), f"{knob} -> {cfg[knob]}"))
    add = [] if C.kwarg(launch.call, "num_warps") else [cst.Arg(cst.Integer(str(cfg["num_warps"])), keyword=cst.Name("num_warps"))]
    note = C.comment_line(f"{MARKER}: launch config {label} (searched; {per_thread:g} fp32 tile elements/thread)"
                          if per_thread else f"{MARKER}: launch config {label} (searched)")
    changes.append(Change(src.line(stmt), f"launch marked '# {MARKER}: launch config {label}'"))
    if add:
        edits[launch.call] = lambda upd: upd.with_changes(args=[*upd.args, *add])
    edits[stmt] = lambda upd: upd.with_changes(leading_lines=[*upd.leading_lines, note])
    new = C.apply_edits(src.module, edits).code
    summary = f"launch at line {src.line(launch.call)}: {label}" + (f" ({'; '.join(notes)})" if notes else "")
    params = tuple(cfg.items()) + (("elems_per_thread", per_thread), ("max_elems_per_thread", budget))
    return C.applied_result(CODE, src.text, new, changes, summary, SAFETY, variant=label, params=params)


def _statements(module: cst.Module) -> dict[cst.Call, cst.SimpleStatementLine]:
    """Every call of the module mapped to the statement line that holds it (one pass)."""
    out: dict[cst.Call, cst.SimpleStatementLine] = {}
    current: list[cst.SimpleStatementLine] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            current.append(node)

        def leave_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            current.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if current:
                out[node] = current[-1]

    module.visit(V())
    return out
