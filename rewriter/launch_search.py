"""SK005: launch-config search -- tile sizes, num_warps, num_stages, pruned by resources, ranked for the device.

DESCRIPTION: at each ``kernel[grid](...)`` launch of a ``@triton.jit`` kernel of the file
(not autotuned), enumerate variants of
- the tile constexprs the grid is built from (``BV`` when the grid is ``cdiv(V, BV) * N * HV``, or reads
  ``META["BV"]``), wherever the code decides them (``launch_decisions``: a literal, a conditional or nested
  conditional over a shape dim, a same-file helper, a module constant, the launch argument, a
  ``triton.heuristics`` lambda); tiles the grid does not depend on (``BK`` covering all of K) are left
  alone, since changing them would leave part of the problem uncovered;
- ``num_warps`` in {1, 2, 4, 8} and, when the launch sets it, ``num_stages`` in {1, 2, 3}.
Pruning: a tile stays a power of two no larger than next_pow2 of the dimension it tiles (from
``options.shape``); the fp32 tile a program holds in registers (product of the launch's tile
sizes) spread over ``32 * num_warps`` threads must stay within ``max_elems_per_thread``
(default 128, ``options.extra``) and give every thread at least 4 elements (a bound applied only
when every tile's value is known at ``options.shape``: with ``BD = next_power_of_2(D)`` and D unknown
a partial product would prune by a wrong size); the baseline itself is not a variant. Ranking, two lists taken in turn:
- for the largest shape (``options.shape``): closeness of elements-per-thread to 32 (what the measured
  winners use), then how few knobs change;
- for the smallest shape (``options.small_shape``, batch 1), when the original's grid there has fewer
  programs than the device has SMs (``options.device``): how close the variant's program count comes to
  one to eight waves of the SMs (a finer split gives a launch-bound decode more programs), then as above.
``num_stages`` variants come after every tile/warp variant (a decode loop's pipelining matters least);
at most ``options.max_variants``. Each variant is a constant config; where different shapes prefer
different ones, apply's dispatch keeps each winner for its shapes and the original where it wins.

Each variant marks the launch with ``# skel SK005: ...``; a marked launch is skipped.

Unsafe: the tile split and warp count change reduction order.
"""
from __future__ import annotations

import itertools
import math

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import launch_decisions as D
from skel.rewriter.base import Change, Rewrite, RewriteOptions

CODE = "SK005"
SAFETY = "unsafe"
MARKER = "skel SK005"
TILES = (8, 16, 32, 64, 128)
WARPS = (1, 2, 4, 8)
STAGES = (1, 2, 3)
_TIGHT = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
WAVES = 8  # up to this many waves of programs over the SMs counts as filling the device


class Launch:
    """One ``kernel[grid](...)`` launch and what the search may change there."""

    def __init__(self, src: C.Source, call: cst.Call, kernel: cst.FunctionDef, host: cst.FunctionDef,
                 evaluator: D.Evaluator, shape: dict[str, int]):
        self.src, self.call, self.kernel, self.host, self.evaluator = src, call, kernel, host, evaluator
        self.assigns = D.host_assignments(host)
        self.grid = D.grid_of(call, host, self.assigns)
        self.env = evaluator.host_env(host, shape, until=call)
        self.dims: dict[str, str] = {}  # tile name -> the dimension it tiles (from cdiv(D, TILE) calls)
        for node in [self.grid.expr, *(v for vals in self.assigns.values() for v in vals)]:
            for c in C.calls_in(node) if node is not None else ():
                if C.last_part(C.call_name(c)) == "cdiv" and len(c.args) == 2:
                    d, t = c.args[0].value, c.args[1].value
                    tile = t.value if isinstance(t, cst.Name) else D.meta_key(t)  # BV, or META["BV"]
                    if isinstance(d, cst.Name) and tile is not None:
                        self.dims[tile] = d.value

    def tiles(self) -> tuple[dict[str, int | None], dict[str, D.Decision], list[str]]:
        """(every tile constexpr at the launch -> value, varied tiles -> where they are decided, notes)."""
        constexprs = C.constexpr_params(self.kernel)
        passed = D.launch_args(self.call, self.kernel)
        tuned = D.heuristics(self.kernel)
        order = [*passed, *(n for n in tuned if n not in passed)]  # the launch's order, then the heuristics'
        names = [n for n in order if n in constexprs and D.is_tile(n, passed.get(n), self.grid, self.kernel)]
        values: dict[str, int | None] = {}
        varied: dict[str, D.Decision] = {}
        notes: list[str] = []
        for name in names:
            arg = passed.get(name)
            values[name] = self.value_of(name)
            decision = D.decide(name, arg, self.kernel, self.host, self.call, self.grid, self.assigns, self.src.line)
            if isinstance(decision, str):
                notes.append(decision)
            else:
                varied[name] = decision
        return values, varied, notes

    def value_of(self, name: str) -> int | None:
        arg = D.launch_args(self.call, self.kernel).get(name)
        if arg is not None:
            v = self.evaluator.value(arg.value, self.env)
        else:
            lam = D.heuristics(self.kernel).get(name)
            v = None if lam is None else self.evaluator.value(lam.body, self.env)  # args["K"] lambdas stay unknown
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def programs(self, shape: dict[str, int], cfg: dict[str, int], varied: dict[str, D.Decision]) -> int | None:
        """Programs the grid launches at ``shape`` with the tiles of ``cfg`` (None: not evaluable)."""
        if self.grid.expr is None:
            return None
        overrides = {d.var: cfg[name] for name, d in varied.items() if name in cfg and d.var and cfg[name] is not None}
        env = self.evaluator.host_env(self.host, shape, until=self.call, overrides=overrides)
        if self.grid.meta:  # the grid reads META["BV"]: the launch's keyword values, the searched tiles over them
            meta = {a.keyword.value: self.evaluator.value(a.value, env) for a in self.call.args if a.keyword}
            meta.update({k: v for k, v in cfg.items() if k in varied})
            env = {**env, self.grid.meta: meta}
        value = self.evaluator.value(self.grid.expr, env)
        items = value if isinstance(value, tuple) else (value,)
        if not items or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in items):
            return None
        return math.prod(items)


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
    evaluator = D.Evaluator(src.module)
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
        launch = Launch(src, call, kernel, host, evaluator, shape)
        out.extend(_variants(launch, stmt, budget, options, options.max_variants - len(out), reasons))
    if not out:
        return C.skip(CODE, SAFETY, source, "not applicable: " + "; ".join(reasons or ["no launch variant within the resource bounds"]))
    return out


def _variants(launch: Launch, stmt: cst.CSTNode, budget: int, options: RewriteOptions, cap: int,
              reasons: list[str]) -> list[Rewrite]:
    src = launch.src
    values, varied, notes = launch.tiles()
    unknown = sorted(n for n, v in values.items() if v is None)
    if unknown:
        notes = [*notes, f"{', '.join(unknown)} unknown at this shape: the per-thread bound is not applied"]
    warps_arg = C.kwarg(launch.call, "num_warps")
    warps0 = launch.evaluator.value(warps_arg.value, launch.env) if warps_arg else 4
    stages_arg = C.kwarg(launch.call, "num_stages")
    stages0 = launch.evaluator.value(stages_arg.value, launch.env) if stages_arg else None
    axes: list[tuple[str, tuple]] = []
    for name in varied:
        dim = launch.dims.get(varied[name].var) or launch.dims.get(name)
        top = D.pow2(launch.env[dim]) if isinstance(launch.env.get(dim), int) else max(TILES)
        axes.append((name, tuple(t for t in TILES if t <= top)))
    axes.append(("num_warps", WARPS))
    if stages_arg is not None:
        axes.append(("num_stages", STAGES))
    base = {**{n: values.get(n) for n in varied}, "num_warps": warps0, "num_stages": stages0}
    small = dict(options.small_shape)
    device = options.device
    if device is None:
        from skel.device import device_profile

        device = device_profile()
    base_small = launch.programs(small, {}, varied) if small else None  # the original's own choice there
    starved = base_small is not None and base_small < device.sm_count  # batch 1 leaves SMs idle
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
        fill = _fill(launch.programs(small, cfg, varied), device.sm_count) if starved else 0.0
        scored.append(((stages_moved, round(dist), moved, dist), (stages_moved, fill, round(dist), moved, dist),
                       cfg, per_thread))
    if not scored:
        reasons.append(f"line {src.line(launch.call)}: no variant within {budget} fp32 tile elements per thread"
                       + (f" ({'; '.join(notes)})" if notes else ""))
        return []
    large = sorted(scored, key=lambda s: s[0])
    ranked = large
    if starved:  # half the budget for the batch-1 regime, taken in turn with the large-batch ranking
        by_fill = sorted(scored, key=lambda s: s[1])
        ranked, seen = [], set()
        for pair in itertools.zip_longest(large, by_fill):
            for s in pair:
                if s is not None and id(s) not in seen:
                    seen.add(id(s))
                    ranked.append(s)
        notes = notes + [f"at {_label(small)} the original launches {base_small} programs on {device.sm_count} SMs "
                         f"({device.name}); variants filling the SMs are ranked in turn with the rest"]
    return [_apply(launch, stmt, cfg, varied, per_thread, budget, notes)
            for *_, cfg, per_thread in ranked[:max(cap, 0)]]


def _fill(programs: int | None, sms: int) -> float:
    """0 when ``programs`` gives one to WAVES waves over ``sms``; else how many doublings away (unknown: last)."""
    if programs is None or programs <= 0:
        return 99.0
    if programs < sms:
        return math.log2(sms / programs)
    return max(0.0, math.log2(programs / (WAVES * sms)))


def _label(shape: dict[str, int]) -> str:
    return "-".join(f"{k}{v}" for k, v in shape.items())


def _apply(launch: Launch, stmt: cst.CSTNode, cfg: dict, varied: dict[str, D.Decision], per_thread, budget: int,
           notes: list[str]) -> Rewrite:
    src = launch.src
    label = ",".join(f"{k}={v}" for k, v in cfg.items())
    edits: dict = {}
    changes: list[Change] = []
    overrides: dict[cst.CSTNode, list[cst.SimpleStatementLine]] = {}
    for name, d in varied.items():
        new = cst.Integer(str(cfg[name]))
        if d.how == "literal":
            C.chain_edit(edits, d.node, (lambda n: lambda upd: n)(new))
        elif d.how == "argument":
            C.chain_edit(edits, d.node, (lambda n: lambda upd: upd.with_changes(value=n))(new))
        elif d.how == "heuristic":
            C.chain_edit(edits, d.node, (lambda n: lambda upd: upd.with_changes(body=n))(new))
        else:  # override right after the statement that decides it (or at the top: a module-level name)
            line = cst.parse_statement(f"{d.var} = {cfg[name]}  # {MARKER}: searched; the code chose {_clip(d.decided_by)}\n")
            overrides.setdefault(d.node, []).append(line)
        changes.append(Change(d.line, f"{name}: {_clip(d.decided_by)} -> tile {cfg[name]} ({d.how})"))
    for node, lines in overrides.items():
        if isinstance(node, cst.FunctionDef):
            C.chain_edit(edits, node, (lambda ls: lambda upd: upd.with_changes(body=upd.body.with_changes(
                body=_after_docstring(list(upd.body.body), ls))))(lines))
        else:
            C.chain_edit(edits, node, (lambda ls: lambda upd: cst.FlattenSentinel([upd, *ls]))(lines))
    for knob in ("num_warps", "num_stages"):
        if knob in cfg:
            arg = C.kwarg(launch.call, knob)
            value = cst.Integer(str(cfg[knob]))
            if arg is not None:
                C.chain_edit(edits, arg, (lambda v: lambda upd: upd.with_changes(value=v))(value))
            changes.append(Change(src.line(arg or launch.call), f"{knob} -> {cfg[knob]}"))
    add = [] if C.kwarg(launch.call, "num_warps") else [cst.Arg(cst.Integer(str(cfg["num_warps"])), keyword=cst.Name("num_warps"),
                                                                  equal=_TIGHT)]
    note = C.comment_line(f"{MARKER}: launch config {label} (searched; {per_thread:g} fp32 tile elements/thread)"
                          if per_thread else f"{MARKER}: launch config {label} (searched)")
    changes.append(Change(src.line(stmt), f"launch marked '# {MARKER}: launch config {label}'"))
    if add:
        C.chain_edit(edits, launch.call, lambda upd: upd.with_changes(args=[*upd.args, *add]))
    C.chain_edit(edits, stmt, lambda upd: upd.with_changes(leading_lines=[*upd.leading_lines, note]))
    new = C.apply_edits(src.module, edits).code
    summary = f"launch at line {src.line(launch.call)}: {label}" + (f" ({'; '.join(notes)})" if notes else "")
    params = tuple(cfg.items()) + (("elems_per_thread", per_thread), ("max_elems_per_thread", budget))
    return C.applied_result(CODE, src.text, new, changes, summary, SAFETY, variant=label, params=params)


def _after_docstring(body: list, lines: list) -> list:
    at = 1 if body and D._is_docstring(body[0]) else 0
    return [*body[:at], *lines, *body[at:]]


def _clip(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


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
