"""SK014-lazy-decay: carry a recurrent state's per-step decay as a running factor, not a tile multiply.

Conditions (detector):
Opportunity: inside the token loop, a state tile assigned before the loop is multiplied by a gate
every step (``S *= exp(g)``, ``S = S * d[:, None]``), the gate runs unconditionally or under
constexpr flags, and every other read of the state in the loop is a contraction with a broadcast
vector (``tl.sum(S * u[:, None], 0)``), a rank-1 update (``S += a[:, None] * b[None, :]``) or a
store. Instance: a loop that multiplies a running factor (``f = f * ...``) and scales the tile by
it once after the loop (``S = S * f[:, None]``).

Rewrite:
SK014: keep a decayed recurrent state unscaled and carry the decay as a running factor.

DESCRIPTION: a token loop that multiplies its register state tile ``S`` by a gate every step
(``S *= exp(g)`` with a scalar gate, ``S = S * d[:, None]`` with one gate per row, or per
column ``d[None, :]``) pays one multiply per state element per step. When the loop reads
``S`` only through contractions (``tl.sum(S * u[:, None], 0)``), rank-1 updates
(``S += a[:, None] * b[None, :]``) and stores, the tile can hold ``H = S / (r s^T)`` instead,
with ``r`` (rows) and ``s`` (columns) the running products of the gates, kept in [K]/[V]
vectors (or one scalar): a contraction scales its small operand (``u * r``), an update divides
its small operand (``a / r``), a store writes ``H * r[:, None]``, and the tile is scaled once
after the loop. Per element and step that is three operations instead of four. A factor that
leaves [1e-20, 1e20] (10^+-(20/n) when n factors can share the tile) is flushed into the tile at once
(that step then decays the tile as written), so the tile and the factors stay within 1e+-20 of
what the original holds. An operand scaled by a factor can still reach the subnormal range where the
original's product did not (|u| below ~1e-18 against a factor near 1e-20): not for normalised q and
k, and the gate's numerics see it where it happens.

Unsafe: the products are formed in a different order (rounding differs in the last bits).
"""
from __future__ import annotations

from dataclasses import dataclass
import re

import libcst as cst

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "unsafe"


# ---------------------------------------------------------------- conditions

_DECAY = re.compile(r"^(\w+)\s*\*=\s*(.+)$|^(\w+)\s*=\s*(\w+)\s*\*\s*(.+)$")
_SCALE_AFTER = re.compile(r"^(\w+)\s*=\s*\1\s*\*\s*(\w+)\s*(\[[^\]]*\])?\s*$")


def _time_loops(ctx: Ctx):
    return [lp for lp in ctx.p.loops if lp.is_time_loop]


def _decays(ctx: Ctx, lp) -> list[tuple[int, str]]:
    """(line, state) for ``S *= g`` / ``S = S * g`` in the loop, S assigned before the loop and contracted in it."""
    cache = ctx.cache.setdefault(CODE, {})
    key = ("decays", lp.line)
    if key not in cache:
        out = []
        for ln in range(lp.line + 1, lp.end_line + 1):
            m = _DECAY.match(ctx.text(ln))
            if not m:
                continue
            name = m.group(1) or m.group(3)
            if m.group(3) and m.group(4) != name:
                continue
            if not [d for d in ctx.defs_of(name) if d.line < lp.line]:
                continue
            if not any(re.search(rf"tl\.sum\(\s*{name}\s*\*|tl\.sum\([^)]*\*\s*{name}\s*[,)]", ctx.text(x))
                       for x in range(lp.line + 1, lp.end_line + 1)):
                continue
            out.append((ln, name))
        cache[key] = out
    return cache[key]


def _reads_ok(ctx: Ctx, lp, state: str) -> str | None:
    """The first loop line that reads ``state`` other than as a decay, contraction, rank-1 update or store."""
    decay_lines = {ln for ln, s in _decays(ctx, lp) if s == state}
    name = re.compile(rf"\b{state}\b")
    vec = r"\w+(?:\s*[*/]\s*\w+)?\s*\[[^\]]*None[^\]]*\]|\([^()]*\)\s*\[[^\]]*None[^\]]*\]"
    allowed = [
        re.compile(rf"tl\.sum\(\s*{state}\s*\*\s*(?:{vec})\s*,"),
        re.compile(rf"tl\.sum\(\s*(?:{vec})\s*\*\s*{state}\s*,"),
        re.compile(rf"^{state}\s*\+=\s*(?:{vec})\s*\*\s*(?:{vec}|\w+)\s*$"),
        re.compile(rf"^{state}\s*=\s*{state}\s*\+\s*(?:{vec})\s*\*\s*(?:{vec}|\w+)\s*$"),
        re.compile(rf"tl\.store\([^,]+,\s*{state}\b"),
    ]
    for ln in range(lp.line + 1, lp.end_line + 1):
        if ln in decay_lines:
            continue
        text = ctx.statement(ln) if ctx.text(ln) else ""
        if not name.search(ctx.text(ln)):
            continue
        rest = text
        for pat in allowed:
            rest = pat.sub(" ", rest)
        if name.search(rest):
            return f"line {ln}: {ctx.text(ln)}"
    return None


def has_time_loop(ctx: Ctx) -> Check:
    loops = _time_loops(ctx)
    if not loops:
        return no("no loop over the time/sequence dimension")
    return yes(f"line {loops[0].line}: for {loops[0].var} in {loops[0].iter_text}")


def state_decayed_each_step(ctx: Ctx) -> Check:
    rows = [(ln, s, lp) for lp in _time_loops(ctx) for ln, s in _decays(ctx, lp)]
    if not rows:
        return no("no state tile assigned before the token loop is multiplied by a gate in it (S *= exp(g))")
    return yes("; ".join(f"line {ln}: {ctx.text(ln)}" for ln, _s, _lp in rows[:3]))


def state_read_linearly(ctx: Ctx) -> Check:
    bad, good = [], []
    for lp in _time_loops(ctx):
        for state in sorted({s for _ln, s in _decays(ctx, lp)}):
            why = _reads_ok(ctx, lp, state)
            (bad if why else good).append((state, why))
    if not good:
        return no("; ".join(f"{s} is also read at {why}" for s, why in bad[:2]) or "no decayed state")
    return yes("; ".join(f"{s}: read only by contractions, rank-1 updates and stores" for s, _ in good[:2]))


def gate_unconditional_or_constexpr(ctx: Ctx) -> Check:
    runtime = []
    for lp in _time_loops(ctx):
        for ln, _s in _decays(ctx, lp):
            runtime += [(ln, t) for t in ctx.enclosing_tests(ln, lp.line) if not ctx.constexpr_test(t)]
    if runtime:
        ln, t = runtime[0]
        return no(f"line {ln}: the gate runs under a runtime condition ({t})")
    return yes("every gate runs each step or under constexpr flags")


CONDITIONS = {
    "has-time-loop": has_time_loop,
    "state-decayed-each-step": state_decayed_each_step,
    "state-read-linearly": state_read_linearly,
    "gate-unconditional-or-constexpr": gate_unconditional_or_constexpr,
}


def candidates(ctx: Ctx) -> list[Hit]:
    out = []
    for lp in _time_loops(ctx):
        for ln, state in _decays(ctx, lp):
            if _reads_ok(ctx, lp, state) is None and all(ctx.constexpr_test(t) for t in ctx.enclosing_tests(ln, lp.line)):
                out.append(Hit.at(ln, ln, state=state, time_loop_line=lp.line))
    return out


def instances(ctx: Ctx) -> list[Hit]:
    """A tile scaled after the token loop by a factor the loop multiplies (f = f * ...)."""
    out = []
    for lp in _time_loops(ctx):
        for ln in range(lp.end_line + 1, min(lp.end_line + 8, ctx.p.end_line) + 1):
            m = _SCALE_AFTER.match(ctx.text(ln))
            if not m:
                continue
            state, fac = m.group(1), m.group(2)
            grows = any(re.match(rf"^{fac}\s*=\s*{fac}\s*\*", ctx.text(x)) for x in range(lp.line + 1, lp.end_line + 1))
            if grows:
                out.append(Hit.at(ln, ln, state=state, factor=fac, time_loop_line=lp.line))
    return out


# ---------------------------------------------------------------- rewrite

MARKER = "skel SK014"
ROW, COL, SCALAR = "row", "col", "scalar"


def _bcast_axis(node: cst.BaseExpression) -> str | None:
    """``x[:, None]`` -> ROW, ``x[None, :]`` -> COL, anything else None."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 2:
        return None
    a, b = (el.slice for el in node.slice)

    def is_full(s) -> bool:
        return isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None

    def is_none(s) -> bool:
        return isinstance(s, cst.Index) and isinstance(s.value, cst.Name) and s.value.value == "None"

    if is_full(a) and is_none(b):
        return ROW
    if is_none(a) and is_full(b):
        return COL
    return None


def _broadcasts(node: cst.CSTNode) -> list[cst.Subscript]:
    found: list[cst.Subscript] = []

    class V(cst.CSTVisitor):
        def visit_Subscript(self, n: cst.Subscript) -> None:
            if _bcast_axis(n):
                found.append(n)

    node.visit(V())
    return found


def _is_name(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


@dataclass
class Decay:
    stmt: cst.SimpleStatementLine
    axis: str  # ROW / COL / SCALAR
    factor: cst.BaseExpression  # the gate without its broadcast: exp(g) for S *= exp(g[:, None])
    chain: F.Chain  # the if-conditions around it inside the loop body
    extent: str | None = None  # the [K]/[V] extent of a vector gate


@dataclass
class Factor:
    """A running product of the gates of one axis under one set of (constexpr) conditions."""

    name: str
    axis: str
    guard: F.Chain
    extent: str | None

    def bc(self) -> str:
        return {ROW: "[:, None]", COL: "[None, :]", SCALAR: ""}[self.axis]

    def status(self, chain: F.Chain) -> str:
        """Does this factor exist where ``chain`` holds: "yes", "no" (contradicting branch) or "maybe"."""
        if F.contradicts(chain, self.guard):
            return "no"
        return "yes" if set(self.guard) <= set(chain) else "maybe"


def _scaled(expr: str, factors: list[Factor], chain: F.Chain, op: str, tile: bool = False) -> str:
    """``expr`` combined (``op``) with each factor that exists under ``chain``; a factor only some
    specializations have is applied under a conditional expression on its constexpr guard."""
    out = expr
    for f in factors:
        st = f.status(chain)
        if st == "no":
            continue
        term = f"{out} {op} {f.name}{f.bc() if tile else ''}"
        out = f"({term})" if st == "yes" else f"(({term}) if {F.chain_text(f.guard)} else {out})"
    return out


def _sum_axis(call: cst.Call) -> int | None:
    """The literal axis of ``tl.sum(x, 0)`` / ``tl.sum(x, axis=1)``; None for a full or computed reduction."""
    arg = C.kwarg(call, "axis") or (call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None)
    if arg is not None and isinstance(arg.value, cst.Integer):
        return int(arg.value.value)
    return None


def _other(axis: str) -> str:
    return COL if axis == ROW else ROW


class _Reads(cst.CSTVisitor):
    """The reads of the state in one statement of the loop, each given its edit."""

    def __init__(self, state: str, factors: list[Factor], chain: F.Chain, edits: dict, result_axis: str = COL,
                 extent_of=lambda node: set()) -> None:
        self.s, self.factors, self.chain, self.edits = state, factors, chain, edits
        self.extent_of = extent_of  # node -> the tl.arange extents its value depends on
        self.result_axis = result_axis  # the axis contractions of the state leave (COL for sums over rows)
        self.handled: set[int] = set()  # ids of Name nodes whose read is rewritten
        self.unhandled = False

    def on(self, axis: str) -> list[Factor]:
        return [f for f in self.factors if f.axis == axis]

    def scalars(self) -> list[Factor]:
        return [f for f in self.factors if f.axis == SCALAR]

    def visit_Call(self, node: cst.Call) -> None:
        name = C.last_part(C.call_name(node))
        if name == "sum" and node.args:
            prod = node.args[0].value
            if isinstance(prod, cst.BinaryOperation) and isinstance(prod.operator, cst.Multiply):
                for tile, vec in ((prod.left, prod.right), (prod.right, prod.left)):
                    axis = _bcast_axis(vec)
                    if _is_name(tile, self.s) and axis and self.s not in C.names_in(vec):
                        if _sum_axis(node) != (0 if axis == ROW else 1) and self.on(_other(axis)):
                            return  # the other axis' factor varies along the summed axis: not a scaling of the result
                        self.handled.add(id(tile))
                        # a scalar scales the vector operand, not the [BV] result: the operand is ready before
                        # the reduction, off the recurrence's chain (H200, GDN T=8 N=64 P=4/1 warp: 124.7 us
                        # against 128.9 us for SK002 alone; the result form had been within 1 % of it)
                        ops, res = self.on(axis) + self.scalars(), self.on(_other(axis))
                        C.chain_edit(self.edits, vec.value, lambda u, fs=ops: cst.parse_expression(
                            _scaled(C.code_of(u), fs, self.chain, "*")))
                        C.chain_edit(self.edits, node, lambda u, fs=res: cst.parse_expression(
                            _scaled(C.code_of(u), fs, self.chain, "*")))
                        return
        if name == "store" and len(node.args) >= 2:
            fs = self.on(ROW) + self.on(COL) + self.scalars()
            inside = {id(n) for c in C.calls_in(node.args[1].value) if C.last_part(C.call_name(c)) == "sum"
                      for n in _name_nodes(c, self.s)}  # a contraction in the stored value is its own read
            for n in _name_nodes(node.args[1].value, self.s):
                if id(n) in inside:
                    continue
                self.handled.add(id(n))
                C.chain_edit(self.edits, n, lambda u, fs=fs: cst.parse_expression(_scaled(self.s, fs, self.chain, "*", tile=True)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if _is_name(node.target, self.s):
            self.handled.add(id(node.target))
            if isinstance(node.operator, cst.AddAssign):
                self._rank1(node.value)
            else:
                self.unhandled = True

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and _is_name(node.targets[0].target, self.s):
            self.handled.add(id(node.targets[0].target))
            v = node.value
            if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Add):
                for tile, upd in ((v.left, v.right), (v.right, v.left)):
                    if _is_name(tile, self.s) and self.s not in C.names_in(upd):
                        self.handled.add(id(tile))
                        self._rank1(upd)
                        return
            self.unhandled = True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.s and id(node) not in self.handled:
            self.unhandled = True

    def _rank1(self, upd: cst.BaseExpression) -> None:
        """``a[:, None] * b[None, :]`` (or ``a[:, None] * b``): divide each operand by its axis' factors."""
        if not (isinstance(upd, cst.BinaryOperation) and isinstance(upd.operator, cst.Multiply)) or self.s in C.names_in(upd):
            self.unhandled = True
            return
        sides = [(x, _bcast_axis(x)) for x in (upd.left, upd.right)]
        axes = {a for _, a in sides if a}
        if len(axes) != len([a for _, a in sides if a]) or not axes:
            self.unhandled = True
            return
        if len(axes) == 1:  # a[:, None] * b: a bare [V] vector broadcasts as a row, b[None, :]
            (_bx, ba), (px, _pa) = sorted(sides, key=lambda sa: sa[1] is None)
            if ba != ROW or not self.extent_of(px):
                self.unhandled = True  # a[None, :] * b or a[:, None] * scalar: not an outer product
                return
            sides = [(x, a or COL) for x, a in sides]
        # a scalar divides one operand only: the one along the contractions' result axis (the [BV]
        # delta in a [K, V] tile), which is already in the layout the update broadcasts
        scalar_side = next((i for i, (_x, a) in enumerate(sides) if a == self.result_axis), 0)
        for i, (x, axis) in enumerate(sides):
            fs = self.on(axis) + (self.scalars() if i == scalar_side else [])
            if not fs:
                continue
            target = x.value if _bcast_axis(x) else x
            C.chain_edit(self.edits, target, lambda u, fs=fs: cst.parse_expression(_scaled(C.code_of(u), fs, self.chain, "/")))


def _decay_of(small: cst.BaseSmallStatement, name: str) -> cst.BaseExpression | None:
    """The multiplier when ``small`` is ``S *= X`` or ``S = S * X`` / ``S = X * S``."""
    if (isinstance(small, cst.AugAssign) and _is_name(small.target, name) and isinstance(small.operator, cst.MultiplyAssign)
            and name not in C.names_in(small.value)):
        return small.value
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and _is_name(small.targets[0].target, name):
        v = small.value
        if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Multiply):
            if _is_name(v.left, name) and name not in C.names_in(v.right):
                return v.right
            if _is_name(v.right, name) and name not in C.names_in(v.left):
                return v.left
    return None


def _strip(expr: cst.BaseExpression, sub: cst.Subscript) -> cst.BaseExpression:
    """``expr`` with the broadcast ``sub`` (``x[:, None]``) replaced by ``x``."""
    class T(cst.CSTTransformer):
        def leave_Subscript(self, original, updated):
            return updated.value if original is sub else updated

    return expr.visit(T())


def _arange_names(kernel: cst.FunctionDef) -> dict[str, str]:
    """name -> extent (``hi``, or ``hi - lo``) for names assigned from an expression holding
    ``arange(lo, hi)``; tuple assignments (``r, c = tl.arange(0, M), tl.arange(0, N)``) pair up."""
    out: dict[str, str] = {}

    def extent(value: cst.BaseExpression) -> str | None:
        for call in C.calls_in(value):
            if C.last_part(C.call_name(call)) == "arange" and len(call.args) == 2:
                lo, hi = (C.code_of(a.value) for a in call.args)
                return hi if lo == "0" else f"({hi}) - ({lo})"
        return None

    for small, _line, _chain, _loops in F.walk(kernel.body.body):
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
            if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements):
                pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
            else:
                pairs = [(target, value)]
            for t, v in pairs:
                if isinstance(t, cst.Name) and (e := extent(v)):
                    out[t.value] = e
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and (e := extent(small.value)):
            out[small.target.value] = e
    return out


_TENSOR_MAKERS = {"full", "zeros", "ones", "zeros_like", "full_like", "make_block_ptr", "broadcast_to", "reshape",
                  "view", "join", "cat", "trans", "permute", "expand_dims"}


def _tensor_made(names: set[str], defs: dict, seen: set | None = None) -> bool:
    """Does a value reading ``names`` depend on a tensor built without tl.arange (tl.full([D, D]), a block pointer)?"""
    seen = set() if seen is None else seen
    for n in names - seen:
        seen.add(n)
        for value in defs.get(n, ()):
            if any(C.last_part(C.call_name(c)) in _TENSOR_MAKERS for c in C.calls_in(value)):
                return True
            if _tensor_made(C.names_in(value), defs, seen):
                return True
    return False


def _extents(names: set[str], deps, aranges: dict[str, str]) -> set[str]:
    """The arange extents a value reading ``names`` depends on."""
    seen: set[str] = set()
    todo, found = list(names), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in aranges:
            found.add(aranges[n])
        for _chain, read in deps.get(n, ()):
            todo.extend(read)
    return found


def _name_nodes(node: cst.CSTNode, name: str) -> list[cst.Name]:
    found: list[cst.Name] = []

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            if n.value == name:
                found.append(n)

    node.visit(V())
    return found


def _loop_decays(loop: cst.For, kernel, deps, aranges) -> dict[str, list[Decay]]:
    """State name -> the decay statements of the loop (states the kernel also assigns outside it)."""
    out: dict[str, list[Decay]] = {}
    before = _assigned_before(kernel, loop)
    defs = F.assignments(kernel)
    for small, line, chain, loops in F.walk(loop.body.body):
        if loops or len(line.body) != 1:
            continue
        name = F.single_target(small)
        if not name or name not in before:
            continue
        mult = _decay_of(small, name)
        if mult is None:
            continue
        if not isinstance(line, cst.SimpleStatementLine) or C.has_reduction(mult):
            continue  # a one-line if/for body, or a gate computed by a reduction: left as a read (refused)
        subs = _broadcasts(mult)
        others = C.names_in(_strip(mult, subs[0]) if len(subs) == 1 else mult) - (C.names_in(subs[0].value) if subs else set())
        if _extents(others, deps, aranges) or _tensor_made(C.names_in(mult), defs, set()) or (
                not subs and any(C.last_part(C.call_name(c)) in _TENSOR_MAKERS for c in C.calls_in(mult))):
            continue  # another tensor operand: neither a pure row/column gate nor a scalar
        if len(subs) == 1:
            exts = _extents(C.names_in(subs[0].value), deps, aranges)
            out.setdefault(name, []).append(Decay(line, _bcast_axis(subs[0]), _strip(mult, subs[0]), chain,
                                                  exts.pop() if len(exts) == 1 else None))
        elif not subs:
            out.setdefault(name, []).append(Decay(line, SCALAR, mult, chain))
    return out


def _assigned_before(kernel: cst.FunctionDef, loop: cst.For) -> set[str]:
    """Names the kernel assigns outside ``loop`` (the loop's own carried values among them)."""
    out: set[str] = set()
    for small, _line, _chain, loops in F.walk(kernel.body.body):
        if loop not in loops:
            out |= C.assigned_names(small)
    return out


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    opened = C.open_kernels(CODE, SAFETY, source, options)
    if isinstance(opened, list):
        return opened
    src, ks = opened
    if MARKER in source:
        return C.skip(CODE, SAFETY, source, "already applied: the state decay is carried as a running factor (marker found)")
    tl = C.triton_language_alias(src.module)
    taken = C.names_in(src.module) | C.assigned_names(src.module)
    edits: dict = {}
    changes: list[Change] = []
    reasons: list[str] = []
    wraps: dict = {}  # loop -> [(state, factors)]: one edit per loop, whatever its number of states
    for kernel in ks:
        deps, aranges, consts = F.dependencies(kernel), _arange_names(kernel), C.constexpr_params(kernel)
        for loop in F.fors(kernel):
            for state, decays in _loop_decays(loop, kernel, deps, aranges).items():
                plan = _plan(state, loop, decays, consts, taken, tl, deps, aranges, dict(edits))
                where = f"{kernel.name.value} line {src.line(loop)}: state {state}"
                if isinstance(plan, str):
                    reasons.append(f"{where}: {plan}")
                    continue
                factors, edits, read_lines = plan  # the plan extended (chained) the edits of earlier states
                wraps.setdefault(loop, []).append((state, factors))
                names = ", ".join(f.name for f in factors)
                changes.append(Change(src.line(loop), f"{kernel.name.value}: {state} starts with running decay "
                                      f"factor(s) {names} = 1"))
                changes += [Change(src.line(d.stmt), f"{state}'s gate multiplies its factor, not the tile") for d in decays]
                changes += [Change(src.line(n), f"{state} read with its factor(s) applied to the small operand")
                            for n in read_lines]
                end = src.positions[loop].end.line
                changes.append(Change(end, f"{state} scaled by {names} once after the loop"))
    for loop, states in wraps.items():
        edits[loop] = _wrap(states, tl)
    if not edits:
        why = "; ".join(reasons) or ("no token loop multiplies a state tile assigned before it by a gate "
                                     "(S *= exp(g), S = S * d[:, None])")
        return C.skip(CODE, SAFETY, source, f"not applicable: {why}")
    new = C.apply_edits(src.module, edits).code
    n_states = sum(len(v) for v in wraps.values())
    summary = f"state decay carried as a running factor for {n_states} state tile(s) in {len(wraps)} loop(s)"
    if reasons:
        summary += f" (left: {'; '.join(reasons)})"
    return [C.applied_result(CODE, source, new, changes, summary, SAFETY)]


def _plan(state, loop, decays, consts, taken, tl, deps, aranges, edits):
    """(factors, edits) for one state of one loop, or the reason it cannot be carried lazily."""
    for d in decays:
        runtime = F.runtime_tests(d.chain, consts)
        if runtime:
            return f"the gate `{C.code_of(d.stmt).strip()}` runs under a runtime condition ({runtime[0]})"
        if d.axis != SCALAR and d.extent is None:
            return f"cannot tell the extent of the gate vector in `{C.code_of(d.stmt).strip()}` (no single tl.arange reaches it)"
    groups: dict = {}
    for d in decays:
        groups.setdefault((d.axis, d.chain, d.extent), []).append(d)
    factors, of = [], {}
    suffix = {ROW: "rdecay", COL: "cdecay", SCALAR: "decay"}
    for (axis, chain, extent), ds in groups.items():
        f = Factor(_fresh(f"{state}_{suffix[axis]}", taken), axis, chain, extent)
        factors.append(f)
        for d in ds:
            of[d.stmt] = f
    decay_lines = {d.stmt for d in decays}
    read_lines = []
    result_axis = _result_axis(loop, state)
    extent_of = lambda node: _extents(C.names_in(node), deps, aranges)  # noqa: E731
    for small, line, chain, _loops in F.walk(loop.body.body):
        if line in decay_lines:
            continue
        reads = _Reads(state, factors, chain, edits, result_axis, extent_of)
        small.visit(reads)
        if reads.handled:
            read_lines.append(small)
        if reads.unhandled:
            return ("the loop also reads it outside contractions, rank-1 updates and stores: "
                    f"`{C.code_of(small).strip()}`")
    for node in _headers(loop):
        if state in C.names_in(node):
            return f"a loop or if condition reads it: `{C.code_of(node).strip()}`"
    for d in decays:
        f = of[d.stmt]  # factors in contradicting constexpr branches never meet in one specialization
        coexisting = sum(1 for g in factors if not F.contradicts(f.guard, g.guard))
        edits[d.stmt] = _decay_edit(d, f, state, tl, 20 // coexisting)
    return factors, edits, read_lines


def _result_axis(loop: cst.For, state: str) -> str:
    """The axis the state's contractions leave: COL when they sum over rows (``tl.sum(S * u[:, None], 0)``)."""
    for call in C.calls_in(loop.body):
        if C.last_part(C.call_name(call)) == "sum" and call.args:
            prod = call.args[0].value
            if isinstance(prod, cst.BinaryOperation) and isinstance(prod.operator, cst.Multiply):
                for tile, vec in ((prod.left, prod.right), (prod.right, prod.left)):
                    if _is_name(tile, state) and _bcast_axis(vec):
                        return _other(_bcast_axis(vec))
    return COL


def _headers(loop: cst.For) -> list[cst.CSTNode]:
    """The tests of ifs and whiles and the iterables of fors inside the loop body."""
    found: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def visit_If(self, n: cst.If) -> None:
            found.append(n.test)

        def visit_While(self, n: cst.While) -> None:
            found.append(n.test)

        def visit_For(self, n: cst.For) -> None:
            found.append(n.iter)

    loop.body.visit(V())
    return found


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    return name


def _decay_edit(d: Decay, f: Factor, state: str, tl: str, digits: int):
    """``S *= g`` -> ``f = f * g`` and a flush of ``f`` into the tile when it leaves [1e-D, 1eD]; with n
    factors on one tile D = 20 // n, so their product (the tile holds S divided by it) stays within 1e+-20."""
    low, high = f"1e-{digits}", f"1e{digits}"
    if f.axis == SCALAR:  # two compares, no division: the check sits on the step's critical path
        out = f"({f.name} < {low}) | ({f.name} > {high})"
    else:
        out = f"({tl}.min({f.name}) < {low}) | ({tl}.max({f.name}) > {high})"
    code = C.code_of(d.factor)

    def edit(upd: cst.SimpleStatementLine):
        first = cst.parse_statement(f"{f.name} = {f.name} * ({code})\n").with_changes(leading_lines=upd.leading_lines)
        flush = cst.parse_statement(
            f"if {out}:  # {MARKER}: flush the factor into the tile (it left [{low}, {high}])\n"
            f"    {state} = {state} * {f.name}{f.bc()}\n"
            f"    {f.name} = {f.name} * 0.0 + 1.0\n")
        return cst.FlattenSentinel([first, flush])
    return edit


def _wrap(states: list, tl: str):
    """The factors' initial values before the loop; after it, each tile scaled by its factors (under their guards)."""
    def edit(upd: cst.For):
        head, tail = [], []
        for state, factors in states:
            lines = [cst.parse_statement(f"{f.name} = {tl}.full([{f.extent or ''}], 1.0, {tl}.float32)\n") for f in factors]
            lines[0] = lines[0].with_changes(leading_lines=[C.comment_line(
                f"{MARKER}: {state} holds the state divided by its running decay "
                f"({', '.join(f.name for f in factors)}); scaled once after the loop")])
            head += lines
            for f in factors:
                line = f"{state} = {state} * {f.name}{f.bc()}"
                tail.append(cst.parse_statement((f"if {F.chain_text(f.guard)}:\n    {line}\n") if f.guard else line + "\n"))
        head[0] = head[0].with_changes(leading_lines=[*upd.leading_lines, *head[0].leading_lines])
        return cst.FlattenSentinel([*head, upd.with_changes(leading_lines=[]), *tail])
    return edit


class LazyDecay(Rule):
    """Carry a recurrent state's per-step decay as a running factor instead of multiplying the tile."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
