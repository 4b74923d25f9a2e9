"""SK014 lazy-decay: carry a recurrent state's per-step decay as a running factor, not a tile multiply.

Opportunity: inside the token loop, a state tile assigned before the loop is multiplied by a gate
every step (``S *= exp(g)``, ``S = S * d[:, None]``), the gate runs unconditionally or under
constexpr flags, and every other read of the state in the loop is a contraction with a broadcast
vector (``tl.sum(S * u[:, None], 0)``), a rank-1 update (``S += a[:, None] * b[None, :]``) or a
store. Instance: a loop that multiplies a running factor (``f = f * ...``) and scales the tile by
it once after the loop (``S = S * f[:, None]``).
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK014"
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
