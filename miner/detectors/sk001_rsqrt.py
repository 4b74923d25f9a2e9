"""SK001 rsqrt-for-norm-division: ``x / sqrt(sum(x*x) + eps)`` -> ``x * rsqrt(sum(x*x) + eps)``.

Opportunity: a division whose denominator is a square root (directly, or through a variable
holding one) of a sum reduction computed in float32. Instance: an rsqrt of a reduction.
A division by the square root of anything that is not a reduction (a scalar parameter, a
loaded value) is a near-miss: there is no per-row scalar to hoist into one rsqrt.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.text import divisions, find_calls

CODE = "SK001"

SQRT = ("tl.sqrt", "tl.math.sqrt", "tl.sqrt_rn", "libdevice.sqrt", "tldevice.sqrt", "sqrt", "sqrtf", "__fsqrt_rn", "__fsqrt_rz", "hsqrt")
RSQRT = ("tl.rsqrt", "tl.math.rsqrt", "libdevice.rsqrt", "tldevice.rsqrt", "rsqrt", "rsqrtf", "__frsqrt_rn", "hrsqrt")
REDUCE_CALL = re.compile(r"(?<![\w\.])(?:tl\.sum|tl\.reduce|tl\.cumsum|torch\.sum|\w*[Rr]educe\w*|\w*[Ww]arp[Ss]um\w*|\w*[Bb]lock[Ss]um\w*)\s*\(")
HALF = re.compile(r"tl\.(?:bfloat16|float16)|__half|__nv_bfloat16|\bhalf\b|\.half\(\)|\.bfloat16\(\)")
F32 = re.compile(r"tl\.float32|\bfloat\b|\.float\(\)|\bfloat32\b|tl\.float64|\bdouble\b")


def _sqrt_in(ctx: Ctx, denom: str, line: int) -> tuple[str, str] | None:
    """(sqrt call text, its argument) when ``denom`` is a square root, or a variable holding one."""
    calls = find_calls(denom, SQRT)
    if calls and denom.lstrip("(").startswith(tuple(c[0] for c in calls)):
        name, arg = calls[0]
        return f"{name}({arg})", arg
    if re.fullmatch(r"\(?\s*[A-Za-z_]\w*(\[[^\]]*\])?\s*\)?", denom):
        var = re.sub(r"[\[\(].*|\)", "", denom.strip("( ")).strip()
        d = ctx.last_def(var, line - 1)
        if d and d.op == "=":
            calls = find_calls(d.rhs, SQRT)
            if calls and d.rhs.strip().startswith(tuple(c[0] for c in calls)):
                name, arg = calls[0]
                return f"{name}({arg}) (line {d.line}: {var})", arg
    return None


def _is_reduction(ctx: Ctx, arg: str, line: int) -> str | None:
    """Where the sqrt argument comes from a sum reduction: the evidence, else None."""
    cache = ctx.cache.setdefault(f"{CODE}:reduction", {})  # three conditions and the candidates ask
    key = (arg, line)
    if key not in cache:
        cache[key] = _reduction_evidence(ctx, arg, line)
    return cache[key]


def _reduction_evidence(ctx: Ctx, arg: str, line: int) -> str | None:
    if REDUCE_CALL.search(arg):
        return arg
    red_lines = {r.line for r in ctx.p.reductions}
    for a in ctx.closure(arg, line, depth=3):
        if a.line in red_lines or REDUCE_CALL.search(a.rhs):
            return f"line {a.line}: {a.rhs}"
        # an accumulator (CUDA: sum += x * x in a loop) is a reduction too
        if a.op == "+=" and "*" in a.rhs and ctx.loop_at(a.line):
            return f"line {a.line}: {' '.join(a.targets)} += {a.rhs}"
    return None


def _sites(ctx: Ctx):
    """(line, statement, denominator text, sqrt argument) for every division by a square root."""
    if "sites" in ctx.cache.setdefault(CODE, {}):
        return ctx.cache[CODE]["sites"]
    out = []
    for line in sorted({m.line for m in ctx.p.math if m.op == "div"}):
        stmt = ctx.statement(line)
        denoms = [dict(m.detail).get("denominator") for m in ctx.p.math if m.line == line and m.op == "div"]
        denoms = [d for d in denoms if d] or [d for _, d in divisions(stmt)]
        for denom in denoms:
            s = _sqrt_in(ctx, denom, line)
            if s:
                out.append((line, stmt, s[0], s[1]))
                break
    ctx.cache[CODE]["sites"] = out
    return out


def divides_by_sqrt(ctx: Ctx) -> Check:
    sites = _sites(ctx)
    if not sites:
        return no("no division whose denominator is a square root")
    return yes("; ".join(f"line {ln}: {stmt}" for ln, stmt, _, _ in sites[:3]))


def sqrt_of_reduction(ctx: Ctx) -> Check:
    found, missed = [], []
    for ln, stmt, sq, arg in _sites(ctx):
        ev = _is_reduction(ctx, arg, ln)
        (found if ev else missed).append((ln, sq, ev))
    if not found:
        if missed:
            ln, sq, _ = missed[0]
            return no(f"line {ln}: {sq} is not the square root of a reduction")
        return no("no division by a square root")
    return yes("; ".join(f"line {ln}: {sq} of a reduction ({ev})" for ln, sq, ev in found[:3]))


def _fp32(ctx: Ctx, arg: str, line: int) -> bool:
    dts = {dict(m.detail).get("dtype") for m in ctx.p.math if m.line == line and m.op in ("sqrt", "rsqrt")}
    dts |= {dict(m.detail).get("denominator_dtype") for m in ctx.p.math if m.line == line and m.op == "div"}
    dts |= {r.dtype for r in ctx.p.reductions if r.line == line}
    dts.discard(None)
    dts.discard("?")
    if dts:
        return dts <= {"fp32", "fp64"}
    texts = [arg] + [f"{a.decl} {a.rhs}" for a in ctx.closure(arg, line, depth=4)]
    if any(HALF.search(t) and not F32.search(t) for t in texts):
        return False
    return any(F32.search(t) for t in texts)


def denominator_is_float32(ctx: Ctx) -> Check:
    good = [(ln, sq) for ln, _, sq, arg in _sites(ctx) if _is_reduction(ctx, arg, ln) and _fp32(ctx, arg, ln)]
    if not good:
        return no("the norm's operand is not shown to be float32 (no .to(tl.float32) or fp32 accumulator)")
    return yes("; ".join(f"line {ln}: {sq} computed in float32" for ln, sq in good[:3]))


CONDITIONS = {
    "divides-by-sqrt": divides_by_sqrt,
    "sqrt-of-reduction": sqrt_of_reduction,
    "denominator-is-float32": denominator_is_float32,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(ln, ln, division=stmt, denominator=sq, reduction=_is_reduction(ctx, arg, ln))
        for ln, stmt, sq, arg in _sites(ctx)
        if _is_reduction(ctx, arg, ln) and _fp32(ctx, arg, ln)
    ]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for line in sorted({m.line for m in ctx.p.math if m.op == "rsqrt"}):
        stmt = ctx.statement(line)
        for name, arg in find_calls(stmt, RSQRT):
            ev = _is_reduction(ctx, arg, line)
            if ev:
                out.append(Hit.at(line, line, rsqrt=f"{name}({arg})", reduction=ev))
                break
    return out
