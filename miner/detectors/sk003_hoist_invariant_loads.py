"""SK003 hoist-loop-invariant-loads: load once before the time loop what every step reloads.

Opportunity: a load inside the time (sequence) loop whose address does not change across
iterations (no loop variable, no pointer advanced in the loop) from memory the loop does not
store to. Instance: a load before the time loop whose value the loop reads and never
reassigns. A loop-invariant load outside any loop, or inside a loop over K/V blocks (not the
time loop), is not this skeleton.
"""
from __future__ import annotations

import re

from skel.miner import dataflow
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.text import names_in

CODE = "SK003"


def _time_loops(ctx: Ctx):
    return [lp for lp in ctx.p.loops if lp.is_time_loop]


def _changed_in(ctx: Ctx, lp) -> set[str]:
    """Names assigned inside the loop body (the loop variable included)."""
    names = {lp.var}
    for a in ctx.assigns:
        if lp.line < a.line <= lp.end_line:
            names |= set(a.targets)
    return names


def root_param(ctx: Ctx, pointer: str, line: int, depth: int = 6) -> str | None:
    """The kernel parameter a pointer expression starts from (``p_o`` -> ``o``), following defs."""
    params = {p.name for p in ctx.p.params}
    expr = pointer
    for _ in range(depth):
        m = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", expr)
        if not m:
            return None
        name = m.group(1)
        if name in params:
            return name
        if name == "tl" and "make_block_ptr" in expr:
            inner = re.search(r"make_block_ptr\(\s*(?:base\s*=\s*)?([A-Za-z_]\w*)", expr)
            name = inner.group(1) if inner else name
            if name in params:
                return name
        d = ctx.last_def(name, line - 1) or next(iter(ctx.defs_of(name)), None)
        if d is None:
            return None
        expr, line = d.rhs, d.line
    return None


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
                if not (names_in(m.pointer) & _changed_in(ctx, lp)):
                    out.append((m, lp))
        cache["inv"] = out
    return cache["inv"]


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
