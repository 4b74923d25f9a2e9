"""SK013 warp-level-reduction: finish a block reduction with warp shuffles, not shared memory.

A shared-memory tree reduction halves the stride each step with a ``__syncthreads()`` per
step; the last five steps (stride < 32) happen inside one warp, where ``__shfl_xor_sync`` /
``__shfl_down_sync`` exchange registers without shared memory or block barriers.
Opportunity: a halving-stride loop that updates a shared array, synchronises the block in its
body and runs down to a stride below 32. Instance: warp shuffles inside a loop (a butterfly or
tree reduction in registers). Triton's ``tl.sum`` already lowers to shuffles, so this skeleton
is CUDA only.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK013"
LANGUAGES = ("cuda",)
HALVING = re.compile(r">>=\s*1|/=\s*2|=\s*\w+\s*/\s*2\b|=\s*\w+\s*>>\s*1\b")
SHUFFLE = re.compile(r"__shfl_(?:xor|down|up)_sync\s*\(|__reduce_(?:add|min|max)_sync\s*\(|WarpReduce")
SHARED_UPDATE = re.compile(r"(\w+)\s*\[\s*(\w+)\s*\]\s*(\+=|=)\s*.*\b\1\s*\[\s*\2\s*\+\s*(\w+)\s*\]")


def _body(ctx: Ctx, lp) -> list[tuple[int, str]]:
    return [(ln, ctx.text(ln)) for ln in range(lp.line, lp.end_line + 1)]


def _tree_loops(ctx: Ctx):
    """(loop, shared update line, bound text) for halving-stride loops over a shared array."""
    out = []
    for lp in ctx.p.loops:
        head = lp.iter_text
        if not HALVING.search(head):
            continue
        body = _body(ctx, lp)
        upd = next(((ln, t) for ln, t in body if SHARED_UPDATE.search(t)), None)
        if upd:
            out.append((lp, upd, head))
    return out


def _down_to_warp(head: str, var: str) -> bool:
    """The loop runs to strides below 32: its condition is ``s > 0`` / ``s >= 1`` / ``s`` (not ``s > 32``)."""
    m = re.search(rf"\b{re.escape(var)}\s*(>=|>)\s*(\d+)", head)
    if m:
        bound = int(m.group(2)) + (1 if m.group(1) == ">" else 0)
        return bound < 32
    return bool(re.search(rf";\s*{re.escape(var)}\s*;", head))


def shared_memory_tree_reduction(ctx: Ctx) -> Check:
    rows = [(lp, upd) for lp, upd, _ in _tree_loops(ctx) if any("__syncthreads" in t for _, t in _body(ctx, lp))]
    if not rows:
        return no("no halving-stride loop over a shared array with __syncthreads() in its body")
    lp, (ln, t) = rows[0]
    return yes(f"line {lp.line}: {lp.iter_text}; line {ln}: {t}")


def reduces_below_warp(ctx: Ctx) -> Check:
    rows = [(lp, h) for lp, _, h in _tree_loops(ctx) if _down_to_warp(h, lp.var)]
    if not rows:
        return no("the tree loop stops at a stride of 32 or more (the last warp is already handled separately)")
    lp, h = rows[0]
    return yes(f"line {lp.line}: {h} runs to strides below 32, one block barrier per step")


CONDITIONS = {
    "shared-memory-tree-reduction": shared_memory_tree_reduction,
    "reduces-below-warp": reduces_below_warp,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(lp.line, lp.end_line, loop=h, shared_update=upd[1])
        for lp, upd, h in _tree_loops(ctx)
        if _down_to_warp(h, lp.var) and any("__syncthreads" in t for _, t in _body(ctx, lp))
    ]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for lp in ctx.p.loops:
        shfl = next(((ln, t) for ln, t in _body(ctx, lp) if SHUFFLE.search(t)), None)
        if shfl and ctx.loop_at(shfl[0]) is lp:
            out.append(Hit.at(lp.line, lp.end_line, shuffle=shfl[1], shuffle_line=shfl[0]))
    return out
