"""SK003-hoist-loop-invariant-loads: load once before the time loop what every step reloads.

Conditions (detector):
Opportunity: a load inside the time (sequence) loop whose address does not change across
iterations (no loop variable, no pointer advanced in the loop) from memory the loop does not
store to, and that runs every step (no runtime ``if`` inside the loop guards it; constexpr
conditions are resolved at compile time and may be crossed). Instance: a load before the time loop whose value the loop reads and never
reassigns. A loop-invariant load outside any loop, or inside a loop over K/V blocks (not the
time loop), is not this skeleton.

Rewrite:
SK003: hoist loop-invariant loads (and pure values computed from them) out of loops.

DESCRIPTION: in each outermost ``for`` loop of a ``@triton.jit`` function, a statement
``X = <... tl.load(addr) ...>`` whose address reads no name assigned in the loop (the loop
variable, pointers advanced with ``p += ...``, values computed per step) and whose buffer is
never stored to in the kernel is moved before the loop, under the same constexpr conditions
it had inside the loop. Then pure sub-expressions that read only hoisted and loop-invariant
values (``-tl.exp(b_A)``) are computed once before the loop and referenced by a new name.

Safe: the hoisted values are bitwise the same; only where they are computed changes. Only
constexpr ``if`` conditions are crossed (Triton resolves those at compile time, so a name
defined under one is visible after it); a runtime condition keeps the statement in place.
"""
from __future__ import annotations

import re

import libcst as cst

from skel.miner import dataflow
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import root_param
from skel.miner.detectors.text import names_in
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "safe"


# ---------------------------------------------------------------- conditions


def _time_loops(ctx: Ctx):
    return [lp for lp in ctx.p.loops if lp.is_time_loop]


def _changed_in(ctx: Ctx, lp) -> set[str]:
    """Names assigned inside the loop body (the loop variable included)."""
    names = {lp.var}
    for a in ctx.assigns:
        if lp.line < a.line <= lp.end_line:
            names |= set(a.targets)
    return names


def _invariant_loads(ctx: Ctx):
    """(load, time loop) for loads inside a time loop whose address the loop does not change."""
    cache = ctx.cache.setdefault(CODE, {})
    if "inv" not in cache:
        out = []
        for lp in _time_loops(ctx):
            for m in dataflow.loop_invariant_loads(ctx.p, lp):
                inner = ctx.loop_at(m.line)
                if inner is not None and inner.line != lp.line and not inner.is_time_loop:
                    continue  # invariant in an inner K/V-block loop is a different question
                if not (names_in(m.pointer) & _changed_in(ctx, lp)) and _runtime_guard(ctx, m.line, lp.line) is None:
                    out.append((m, lp))
        cache["inv"] = out
    return cache["inv"]


_BRANCH = re.compile(r"^(if|elif)\s+(.+?):\s*(?:#.*)?$|^else\s*:")


def _runtime_guard(ctx: Ctx, line: int, stop: int) -> str | None:
    """The first runtime (not constexpr) ``if``/``elif`` test ``line`` depends on inside the loop starting
    at ``stop``, the earlier tests of an ``if``/``elif``/``else`` chain included (an ``elif`` runs only
    when they fail), else None. A load under one cannot move before the loop: it may not run at all."""
    lines = ctx.file.lines

    def indent(ln: int) -> int:
        raw = lines[ln - 1] if 1 <= ln <= len(lines) else ""
        return len(raw) - len(raw.lstrip())

    level, chain = indent(line), False
    for ln in range(line - 1, stop, -1):
        text = ctx.text(ln).strip()
        if not text or text.startswith("#") or indent(ln) > level or (indent(ln) == level and not chain):
            continue
        m = _BRANCH.match(text)
        if m is None:
            chain = False
            level = indent(ln)
            continue
        if m.group(2) is not None and not ctx.constexpr_test(m.group(2)):
            return m.group(2)
        level = indent(ln)
        chain = m.group(1) != "if"  # an elif/else: the tests above it at this indent guard it too
    return None


def _aliased(ctx: Ctx, m) -> str | None:
    """A store anywhere in the kernel that may write the tensor ``m`` reads."""
    base = root_param(ctx, m.pointer, m.line)
    for s in ctx.p.memops:
        if s.kind in ("store", "atomic"):
            sb = root_param(ctx, s.pointer, s.line)
            if base is None or sb is None or sb == base:
                return f"line {s.line}: {s.kind} to {s.pointer} ({sb or 'unknown base'})"
    return None


def has_time_loop(ctx: Ctx) -> Check:
    loops = _time_loops(ctx)
    if not loops:
        return no("no loop over the time/sequence dimension")
    lp = loops[0]
    return yes(f"line {lp.line}: for {lp.var} in {lp.iter_text}")


def load_address_loop_invariant(ctx: Ctx) -> Check:
    rows = _invariant_loads(ctx)
    if not rows:
        return no("every load in the token loop depends on the loop variable or on a pointer advanced in the loop")
    return yes("; ".join(f"line {m.line}: tl.load({m.pointer}) is the same address every step" for m, _ in rows[:3]))


def no_store_aliases_load(ctx: Ctx) -> Check:
    rows = [(m, lp) for m, lp in _invariant_loads(ctx) if not _aliased(ctx, m)]
    if not rows:
        m = _invariant_loads(ctx)[0][0] if _invariant_loads(ctx) else None
        return no(f"a store may write what the invariant load reads ({_aliased(ctx, m)})" if m else "no invariant load")
    return yes("; ".join(f"line {m.line}: {root_param(ctx, m.pointer, m.line)} is never stored by the kernel" for m, _ in rows[:3]))


CONDITIONS = {
    "has-time-loop": has_time_loop,
    "load-address-loop-invariant": load_address_loop_invariant,
    "no-store-aliases-load": no_store_aliases_load,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(m.line, m.line, pointer=m.pointer, target=m.target, base=root_param(ctx, m.pointer, m.line), time_loop_line=lp.line)
        for m, lp in _invariant_loads(ctx)
        if not _aliased(ctx, m)
    ]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for lp in _time_loops(ctx):
        changed = _changed_in(ctx, lp)
        body = " ".join(ctx.text(ln) for ln in range(lp.line + 1, lp.end_line + 1))
        for m in ctx.p.memops:
            if m.kind != "load" or not m.target or m.line >= lp.line or ctx.loop_at(m.line) is not None:
                continue
            if m.target in changed or not re.search(rf"\b{re.escape(m.target)}\b", body):
                continue
            if ctx.last_def(m.target, lp.line) is None or ctx.last_def(m.target, lp.line).line != m.line:
                continue  # reassigned between the load and the loop: not the loaded value the loop reads
            out.append(Hit.at(m.line, m.line, target=m.target, pointer=m.pointer, time_loop_line=lp.line))
    return out


# ---------------------------------------------------------------- rewrite

MARKER = "skel SK003"


def _outer_loops(body) -> list[cst.For]:
    out: list[cst.For] = []
    for stmt in body:
        if isinstance(stmt, cst.For):
            out.append(stmt)
        elif isinstance(stmt, (cst.While, cst.For)):
            continue
        else:
            for child in _blocks(stmt):
                out.extend(_outer_loops(child))
    return out


def _blocks(stmt) -> list:
    out = []
    if isinstance(stmt, (cst.If, cst.With)):
        out.append(stmt.body.body)
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):
        out.extend(_blocks(orelse))
    elif isinstance(orelse, cst.Else):
        out.append(orelse.body.body)
    return out


WRITES = {"store", "atomic_add", "atomic_xchg", "atomic_cas"}  # calls whose pointer argument is written


class _LoopPlan:
    """What to move out of one loop."""

    def __init__(self, loop: cst.For, kernel, src: C.Source, taken: set[str]) -> None:
        self.loop, self.src, self.taken = loop, src, taken
        self.defs = F.assignments(kernel)
        self.constexprs = C.constexpr_params(kernel)
        self.params = {q.name.value for q in C.params(kernel)}
        stores = [c for c in C.calls_in(kernel) if C.last_part(C.call_name(c)) in WRITES and c.args]
        self.stored = F.memory_roots(kernel, self.defs, WRITES) | {
            n for c in stores for n in F.pointer_params(c.args[0].value, self.defs, self.params)}
        self.variant = C.assigned_names(loop)
        self.hoisted: set[str] = set()
        self.moves: list[tuple[int, F.Chain, cst.BaseSmallStatement]] = []  # (line, chain, statement)
        self.remove: set[cst.CSTNode] = set()
        self.replace: dict[cst.CSTNode, str] = {}  # sub-expression -> new name
        self.changes: list[Change] = []
        self.refused: list[str] = []

    def invariant(self, node: cst.CSTNode) -> bool:
        return not (C.names_in(node) & (self.variant - self.hoisted))

    def loads_ok(self, node: cst.CSTNode) -> bool:
        for call in C.calls_in(node):
            name = C.last_part(C.call_name(call))
            if name in ("store", "atomic_add", "program_id", "rand", "randn"):
                return False
            if name == "load" and (not call.args or (F.pointer_roots(call.args[0].value, self.defs) | F.pointer_params(
                    call.args[0].value, self.defs, self.params)) & self.stored):
                return False
        return True

    def statements(self) -> None:
        items = list(F.walk(self.loop.body.body))
        counts: dict[str, int] = {}
        for small, *_ in items:
            n = F.single_target(small)
            if n:
                counts[n] = counts.get(n, 0) + 1
        progress = True
        while progress:
            progress = False
            read_before: set[str] = set(C.names_in(self.loop.target))
            for small, line, chain, loops in items:
                x = F.single_target(small)
                if (x and not loops and line not in self.remove and isinstance(small, cst.Assign)
                        and isinstance(line, cst.SimpleStatementLine)  # a one-line if/for body stays put
                        and len(line.body) == 1 and counts.get(x) == 1 and x not in read_before
                        and C.calls_in(small.value) and self.invariant(small.value)
                        and (any(C.is_load(c) for c in C.calls_in(small.value)) or C.names_in(small.value) & self.hoisted)
                        and self.loads_ok(small.value)):
                    if F.runtime_tests(chain, self.constexprs):
                        self.refused.append(f"line {self.src.line(small)}: {x} is invariant but under a runtime "
                                            f"condition ({F.chain_text(chain)})")
                        read_before |= C.names_in(small)
                        continue
                    self.hoisted.add(x)
                    self.remove.add(line)
                    self.moves.append((self.src.line(small), chain, small))
                    self.changes.append(Change(self.src.line(small), f"{x} = {C.code_of(small.value)} hoisted out "
                                               f"of the loop at line {self.src.line(self.loop)}"))
                    progress = True
                read_before |= C.names_in(small) if line not in self.remove else set()

    def values(self) -> None:
        """Pure sub-expressions of the remaining statements that read only hoisted/invariant values."""
        for small, line, chain, loops in F.walk(self.loop.body.body):
            if line in self.remove or loops or F.runtime_tests(chain, self.constexprs):
                continue
            value = getattr(small, "value", None)
            if value is None:
                continue
            for sub in self._maximal(value):
                name = self._fresh(sub)
                self.replace[sub] = name
                self.moves.append((self.src.line(sub), chain, cst.Assign(
                    targets=[cst.AssignTarget(cst.Name(name))], value=sub.with_changes(lpar=[], rpar=[]))))
                self.changes.append(Change(self.src.line(sub), f"{C.code_of(sub)} computed once before the loop "
                                           f"as {name}"))

    def _maximal(self, node: cst.CSTNode) -> list[cst.BaseExpression]:
        if isinstance(node, (cst.Call, cst.UnaryOperation, cst.BinaryOperation, cst.IfExp)) and self._worth(node):
            return [node]
        if isinstance(node, cst.IfExp):
            return []  # a branch may only be valid when its test holds: do not evaluate it alone
        out: list[cst.BaseExpression] = []
        for child in node.children:
            if isinstance(child, (cst.BaseExpression, cst.Arg)):
                out.extend(self._maximal(child))
        return out

    def _worth(self, node) -> bool:
        calls = C.calls_in(node)
        return bool(calls) and self.invariant(node) and self.loads_ok(node) and (
            bool(C.names_in(node) & self.hoisted) or any(C.is_load(c) for c in calls))

    def _fresh(self, node) -> str:
        words = [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", C.code_of(node))
                 if w not in {"tl", "math", "to", "if", "else", "float32", "float16", "bfloat16", "not", "and", "or"}
                 and w not in self.constexprs]
        words = list(dict.fromkeys(words))[:4]
        neg = isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
        base = ("neg_" if neg else "") + "_".join(words or ["inv"])
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


def _nest(moves: list[tuple[int, F.Chain, cst.BaseSmallStatement]], depth: int = 0) -> list[cst.BaseStatement]:
    """Statements under their conditions, consecutive ones sharing a condition prefix grouped
    into one ``if`` (and a True group followed by its False group into ``if/else``)."""
    out: list[cst.BaseStatement] = []
    i = 0
    while i < len(moves):
        _, chain, small = moves[i]
        if len(chain) <= depth:
            out.append(cst.SimpleStatementLine(body=[small]))
            i += 1
            continue
        key = chain[depth]
        j = i
        while j < len(moves) and len(moves[j][1]) > depth and moves[j][1][depth] == key:
            j += 1
        test, polarity = key
        k = j
        while k < len(moves) and len(moves[k][1]) > depth and moves[k][1][depth] == (test, not polarity):
            k += 1
        body = cst.IndentedBlock(body=_nest(moves[i:j], depth + 1))
        if polarity and k > j:
            orelse = cst.Else(body=cst.IndentedBlock(body=_nest(moves[j:k], depth + 1)))
            out.append(cst.If(test=C.expr(test), body=body, orelse=orelse))
            i = k
            continue
        cond = C.expr(test) if polarity else C.expr(f"not ({test})" if " " in test else f"not {test}")
        out.append(cst.If(test=cond, body=body))
        i = j
    return out


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    opened = C.open_kernels(CODE, SAFETY, source, options)
    if isinstance(opened, list):
        return opened
    src, ks = opened
    edits: dict = {}
    changes: list[Change] = []
    refused: list[str] = []
    loops_seen = 0
    for kernel in ks:
        taken = C.names_in(src.module)
        for loop in _outer_loops(kernel.body.body):
            loops_seen += 1
            plan = _LoopPlan(loop, kernel, src, taken)
            plan.statements()
            plan.values()
            refused += plan.refused
            if not plan.moves:
                continue
            changes += plan.changes
            changes.append(Change(src.line(loop), f"{len(plan.moves)} hoisted statement(s) inserted before this loop"))
            for line in plan.remove:
                edits[line] = lambda upd: cst.RemovalSentinel.REMOVE
            for sub, name in plan.replace.items():
                edits[sub] = (lambda n: lambda upd: cst.Name(n))(name)
            edits[loop] = _loop_edit(sorted(plan.moves, key=lambda m: m[0]), src.line(loop))
    if not edits:
        if loops_seen == 0:
            return C.skip(CODE, SAFETY, source, "not applicable: no for-loop in any @triton.jit function")
        if MARKER in source:
            return C.skip(CODE, SAFETY, source, "already applied: invariant loads were hoisted (marker "
                           f"'# {MARKER}') and nothing loop-invariant is left in the loops")
        why = "; ".join(refused) if refused else "every load in the loops reads an address that changes per iteration"
        return C.skip(CODE, SAFETY, source, f"not applicable: no loop-invariant load to hoist ({why})")
    new = C.apply_edits(src.module, edits).code
    n_loads = sum(1 for c in changes if "hoisted out" in c.description)
    n_values = sum(1 for c in changes if "computed once" in c.description)
    summary = f"{n_loads} loop-invariant load statement(s) hoisted, {n_values} value(s) computed once"
    return [C.applied_result(CODE, source, new, changes, summary, SAFETY)]


def _loop_edit(moves, loop_line: int):
    def edit(upd: cst.For):
        hoisted = _nest(moves)
        note = C.comment_line(f"{MARKER}: loop-invariant loads/values of the loop below (line {loop_line}) hoisted")
        hoisted[0] = hoisted[0].with_changes(leading_lines=[*upd.leading_lines, note])
        return cst.FlattenSentinel([*hoisted, upd.with_changes(leading_lines=[])])

    return edit


class HoistLoopInvariantLoads(Rule):
    """Hoist loads whose address does not depend on the token loop out of the loop."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
