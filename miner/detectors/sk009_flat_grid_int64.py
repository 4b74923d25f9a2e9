"""SK009 flat-grid-int64-offsets: one flat grid axis, decomposed in the kernel, in int64.

Grid axes 1 and 2 are limited to 65535 programs, and offsets like ``(i_n * HV + i_hv) * K * V``
overflow int32 at serving sizes. Opportunity: the kernel reads program-id axis 1 or 2 and
none of its program ids is widened to int64. Instance: axis 0 widened to int64
(``tl.program_id(0).to(tl.int64)``, ``(int64_t)blockIdx.x``) and split into several indices
with ``//`` and ``%``.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK009"
WIDE = re.compile(r"tl\.int64|int64_t|\bsize_t\b|long\s+long|uint64_t|\bint64\b")


def _widened(ctx: Ctx, ax) -> str | None:
    if WIDE.search(ctx.statement(ax.line)):
        return f"line {ax.line}: {ctx.text(ax.line)}"
    for a in ctx.assigns:
        if set(a.targets) & ({ax.var} | set(ax.derived)) and WIDE.search(a.rhs):
            return f"line {a.line}: {' '.join(a.targets)} = {a.rhs}"
    return None


def _decomposed(ctx: Ctx, ax) -> list[str]:
    """Index assignments that split the axis with // or % (following derived names forward)."""
    names = {ax.var} | set(ax.derived)
    rows = []
    for a in ctx.assigns:
        if a.line < ax.line or not names & set(re.findall(r"\w+", a.rhs)):
            continue
        if re.search(r"//|%|(?<![/])/(?![/])", a.rhs) and len(a.rhs) < 80:
            names |= set(a.targets)
            rows.append(f"line {a.line}: {', '.join(a.targets)} = {a.rhs}")
    return rows


def _high_axes(ctx: Ctx):
    return [ax for ax in ctx.p.program_axes if ax.axis in (1, 2)]


def multi_axis_grid(ctx: Ctx) -> Check:
    axes = _high_axes(ctx)
    if not axes:
        return no("the kernel reads only program-id axis 0 (already a flat grid)")
    return yes("; ".join(f"line {ax.line}: {ctx.text(ax.line)} (axis {ax.axis}, at most 65535 programs)" for ax in axes))


def int32_offsets(ctx: Ctx) -> Check:
    wide = [w for ax in ctx.p.program_axes if (w := _widened(ctx, ax))]
    if wide:
        return no(f"program ids are already widened to int64 ({wide[0]})")
    if not ctx.p.program_axes:
        return no("no program id in the kernel")
    return yes("no program id is widened to int64; offsets are computed in int32")


CONDITIONS = {
    "multi-axis-grid": multi_axis_grid,
    "int32-offsets": int32_offsets,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ax.line, ax.line, axis=ax.axis, var=ax.var) for ax in _high_axes(ctx)]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for ax in ctx.p.program_axes:
        if ax.axis != 0:
            continue
        wide = _widened(ctx, ax)
        parts = _decomposed(ctx, ax)
        if wide and len(parts) >= 2:
            out.append(Hit.at(ax.line, ax.line, widened=wide, decomposition=parts[:4]))
    return out
