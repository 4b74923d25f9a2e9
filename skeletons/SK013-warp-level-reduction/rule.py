"""SK013-warp-level-reduction: finish a block reduction with warp shuffles, not shared memory.

Conditions (detector):
A shared-memory tree reduction halves the stride each step with a ``__syncthreads()`` per
step; the last five steps (stride < 32) happen inside one warp, where ``__shfl_xor_sync`` /
``__shfl_down_sync`` exchange registers without shared memory or block barriers.
Opportunity: a halving-stride loop that updates a shared array, synchronises the block in its
body and runs down to a stride below 32. Instance: warp shuffles inside a loop (a butterfly or
tree reduction in registers), or a butterfly unrolled by template recursion (``Allreduce<N>::run``). Triton's ``tl.sum`` already lowers to shuffles, so this skeleton
is CUDA only.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

HALVING = re.compile(r">>=\s*1|/=\s*2|=\s*\w+\s*/\s*2\b|=\s*\w+\s*>>\s*1\b")
SHUFFLE = re.compile(r"__shfl_(?:xor|down|up)_sync\s*\(|__reduce_(?:add|min|max)_sync\s*\(|WarpReduce")
WARP_OPS = ("warp-shuffle", "warp-reduce")  # Reduction.op values the CUDA frontend records for warp exchanges
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


def _warps(ctx: Ctx) -> int | None:
    ws = [s.num_warps for s in ctx.p.launches if isinstance(s.num_warps, int) and not isinstance(s.num_warps, bool)]
    ws += [dict(c).get("num_warps") for c in ctx.p.tune.autotune if isinstance(dict(c).get("num_warps"), int)]
    return min(ws) if ws else None


def _extent(ctx: Ctx) -> int | None:
    """The largest tile constexpr at the launch (K = V = 128 where the launch passes a shape)."""
    from skel.miner.pyexpr import Unresolved, evaluate_text

    env = {"K": 128, "V": 128, "D": 128}
    best = None
    for site in ctx.p.launches:
        for name, v in site.constexpr_values:
            if not re.match(r"^(B[A-Z]{1,2}|BLOCK\w*)$", name):
                continue
            try:
                val = v if isinstance(v, int) else evaluate_text(str(v), env)
            except Unresolved:
                continue
            if isinstance(val, int) and not isinstance(val, bool):
                best = max(best or 0, val)
    return best


def _triton_reductions(ctx: Ctx):
    return [r for r in ctx.p.reductions if r.axis is not None and r.op in ("sum", "max", "min")]


def reduction_crosses_warps(ctx: Ctx) -> Check:
    if ctx.p.language == "cuda":
        rows = [(lp, upd) for lp, upd, _ in _tree_loops(ctx) if any("__syncthreads" in t for _, t in _body(ctx, lp))]
        if not rows:
            return no("no halving-stride loop combining partial sums through shared memory with __syncthreads()")
        lp, (ln, t) = rows[0]
        return yes(f"line {lp.line}: {lp.iter_text}; line {ln}: {t}")
    reds, warps = _triton_reductions(ctx), _warps(ctx)
    if not reds:
        return no("no tl.sum / tl.max over an axis of a 2-D tile")
    if not warps or warps <= 1:
        return no(f"launched with num_warps = {warps}: the reduction stays within one warp" if warps else "num_warps is not known at any launch")
    return yes(f"line {reds[0].line}: {reds[0].text} reduced across {warps} warps")


def reduction_axis_fits_warp(ctx: Ctx) -> Check:
    if ctx.p.language == "cuda":
        rows = [(lp, h) for lp, _, h in _tree_loops(ctx) if _down_to_warp(h, lp.var)]
        if not rows:
            return no("the tree loop stops at a stride of 32 or more (the last warp is already handled separately)")
        lp, h = rows[0]
        return yes(f"line {lp.line}: {h} runs down to strides below 32, steps one warp can do with shuffles")
    ext = _extent(ctx)
    if ext is None:
        return no("the reduced tile extent is not resolved at any launch")
    if ext > 128:
        return no(f"the tile extent {ext} is more than one warp holds (32 lanes x 4 values)")
    return yes(f"tile extent {ext} fits one warp (32 lanes x {max(1, ext // 32)} values)")


def reduction_in_loop(ctx: Ctx) -> Check:
    if ctx.p.language == "cuda":
        rows = [lp for lp, _, _ in _tree_loops(ctx) if any(o.line < lp.line and lp.end_line <= o.end_line for o in ctx.p.loops)]
        if not rows:
            return no("the block reduction runs once per block, not inside a loop")
        return yes(f"line {rows[0].line}: the reduction repeats inside an outer loop")
    rows = [r for r in _triton_reductions(ctx) if r.loop_line is not None]
    if not rows:
        return no("no axis reduction inside a loop")
    return yes(f"line {rows[0].line}: {rows[0].text} inside the loop at line {rows[0].loop_line}")


CONDITIONS = {
    "reduction-axis-fits-warp": reduction_axis_fits_warp,
    "reduction-crosses-warps": reduction_crosses_warps,
    "reduction-in-loop": reduction_in_loop,
}


def candidates(ctx: Ctx) -> list[Hit]:
    if ctx.p.language == "cuda":
        return [
            Hit.at(lp.line, lp.end_line, loop=h, shared_update=upd[1])
            for lp, upd, h in _tree_loops(ctx)
            if _down_to_warp(h, lp.var) and any("__syncthreads" in t for _, t in _body(ctx, lp))
        ]
    return [Hit.at(r.line, r.line, reduction=r.text, num_warps=_warps(ctx), extent=_extent(ctx))
            for r in _triton_reductions(ctx) if r.loop_line is not None]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    if ctx.p.language != "cuda":
        if _warps(ctx) == 1:
            out = [Hit.at(r.line, r.line, reduction=r.text, num_warps=1) for r in _triton_reductions(ctx) if r.loop_line is not None]
        return out
    for lp in ctx.p.loops:
        shfl = next(((ln, t) for ln, t in _body(ctx, lp) if SHUFFLE.search(t)), None)
        if shfl is None:  # a shuffle through a wrapper (math::shfl_xor_sync, warp::reduce_sum): the profile's reductions
            red = next((r for r in ctx.p.reductions if r.op in WARP_OPS and lp.line <= r.line <= lp.end_line), None)
            shfl = (red.line, red.text) if red else None
        if shfl and ctx.loop_at(shfl[0]) is lp:
            out.append(Hit.at(lp.line, lp.end_line, shuffle=shfl[1], shuffle_line=shfl[0]))
    seen = {h.line for h in out}
    for r in ctx.p.reductions:  # an unrolled or single-call warp reduction (no loop of its own)
        if r.op == "warp-reduce" and r.loop_line is None and r.line not in seen:
            out.append(Hit.at(r.line, r.line, shuffle=r.text, shuffle_line=r.line))
    butterfly = _recursive_butterfly(ctx)
    if butterfly is not None and butterfly.line not in {h.line for h in out}:
        out.append(butterfly)
    return out


_CALLS = re.compile(r"^calls __device__ function (\w+) \(line (\d+)\)$")  # the CUDA frontend's note


def _recursive_butterfly(ctx: Ctx) -> Hit | None:
    """``Allreduce<N>::run(x) { x = op(x, shuffle_xor(x, N / 2)); return Allreduce<N / 2>::run(x); }``: a
    butterfly unrolled by template recursion rather than a loop. The helper calls itself (its own
    name, with other template arguments) and exchanges lanes, directly or through a same-file
    wrapper of a shuffle; its callers get the finding through the helper passes."""
    p = ctx.p
    if p.language != "cuda" or p.kind != "device-function":
        return None
    short = p.name.split("::")[-1]
    owner = p.name.split("::")[-2] if "::" in p.name else ""
    callee = {m.group(1): int(m.group(2)) for n in p.notes if (m := _CALLS.match(n))}
    self_call = re.compile((rf"\b{re.escape(owner)}\s*<[^;]*>\s*::\s*" if owner else r"\b")
                           + rf"{re.escape(short)}\s*{'' if owner else '<[^;()]*>'}\s*\(")
    body = [(ln, ctx.text(ln)) for ln in range(p.line + 1, p.end_line + 1)]
    recursion = next((ln for ln, t in body if self_call.search(t)), None)
    if short not in callee or recursion is None:
        return None
    exchange = next(((ln, t.strip()) for ln, t in body if SHUFFLE.search(t)), None)
    if exchange is None:
        exchange = next(((r.line, r.text) for r in p.reductions if r.op in WARP_OPS), None)
    if exchange is None:
        wrapper = next((name for name, line in callee.items() if name != short and _shuffles(ctx, line)), None)
        call = re.compile(rf"\b{re.escape(wrapper)}\s*(?:<[^;()]*>)?\s*\(") if wrapper else None
        exchange = next(((ln, t.strip()) for ln, t in body if call.search(t)), None) if call else None
    if exchange is None:
        return None
    return Hit.at(p.line, p.end_line, shuffle=exchange[1], shuffle_line=exchange[0], recursion_line=recursion)


def _shuffles(ctx: Ctx, line: int) -> bool:
    """The function defined at ``line`` of this file exchanges lanes in its own body."""
    depth, opened = 0, False
    for ln in range(line, line + 60):
        t = ctx.text(ln)
        depth += t.count("{") - t.count("}")
        opened = opened or "{" in t
        if opened and SHUFFLE.search(t):
            return True
        if opened and depth <= 0:
            return False
    return False


class WarpLevelReduction(Rule):
    """Keep reductions whose axis fits in one warp inside the warp (shuffles, no shared memory)."""

    SAFETY = "unsafe"  # of the method docs.md describes (no automatic rewrite)
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
