"""SK002 merge-v-tiles: one program per (sequence, head) - or P per head - instead of
NV = cdiv(V, BV) programs that each repeat the V-independent prologue.

DESCRIPTION: derived from the kernel's own code (``tilemerge_axis``): the tile index ``i_v``
behind ``i_v * BV + tl.arange(0, BV)``, decomposed from a flat program id (``pid % NV``) or a
grid axis of its own; the names that depend on it are the per-tile work, everything else is
the shared prologue. The rewrite
1. software-pipelines the token loop's input loads (``tilemerge_prefetch``; option
   ``prefetch``), which phase A on the H200 found to be the largest single lever;
2. folds NS tiles into each program as NS register sub-tiles, each per-tile statement emitted
   once per sub-tile with renamed variables and the tile index replaced by the sub-tile
   number (``tilemerge_replicate``); the prologue stays once per token;
3. with one program per head, removes the tile index, the tile count and the grid's V factor;
   with P programs per head, each owns NS consecutive tiles;
4. sets BV (now the sub-tile width) and ``num_warps`` at the launch (``tilemerge_launch``).
Variants (``Rewrite.variant`` / ``params``) differ in P, NS, num_warps and prefetch; the
defaults are the structures that won on the H200 (experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.md),
best first. The gate measures them per shape; ``options.extra`` ``sk002_variants`` (tuples
``(P, NS, num_warps, prefetch[, num_stages])``) replaces them. `skel apply`'s first round composes
other skeletons with the first plan only; its second round composes them with the plan that won
each shape bucket alone (pipeline.candidates.refine).

Skipped, with the reason, when: no tile offset on a program-id-derived index; the launch's
tile covers the dimension (``BV = next_power_of_2(V)``: NV = 1); the tiles communicate
(tile-independent store address with a per-tile value, atomics on per-tile data); control
flow depends on the tile in a way replication cannot express; nothing in the token loop is
repeated per tile; no launch in the file; the kernel already carries this rewrite's marker.

Unsafe: sub-tiles change the reduction layout (warps per reduction), which may change rounding.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import tilemerge_axis as A
from skel.rewriter import tilemerge_launch as L
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.rewriter.launch_decisions import pow2
from skel.rewriter.tilemerge_names import NameAllocator
from skel.rewriter.tilemerge_prefetch import prefetch
from skel.rewriter.tilemerge_replicate import Replicator, remove_tile_axis, widen_tile_count

CODE = "SK002"
SAFETY = "unsafe"
MARKER = "skel SK002"
MAX_STATE_PER_THREAD = 128  # fp32 state elements per thread; above it the state spills (phase A: r128/r168)


@dataclass(frozen=True)
class Plan:
    programs: int  # programs per (sequence, head) along V
    subtiles: int  # register sub-tiles per program
    warps: int | None  # None: left to the kernel's @triton.autotune configs
    prefetch: bool
    stages: int | None = None  # num_stages at the launch, where the launch sets it; None keeps it

    @property
    def label(self) -> str:
        warps = self.warps if self.warps is not None else "autotuned"
        return (f"P={self.programs},NS={self.subtiles},num_warps={warps}" + (",prefetch" if self.prefetch else "")
                + (f",num_stages={self.stages}" if self.stages is not None else ""))

    @property
    def params(self) -> tuple:
        return (("programs_per_head", self.programs), ("subtiles", self.subtiles),
                ("num_warps", self.warps), ("prefetch", self.prefetch), ("num_stages", self.stages))


# Measured on the H200 at HV = 32, K = V = 128 (experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.md),
# KDA T = 8, N = 64, speedup over fla-core 0.6.0: P=2/NS=1/2 warps 2.87x (91 % roofline at
# T = 1, N = 64); P=1/NS=2/4 warps 2.18x; P=1/NS=1/4 warps 2.00x; GDN best P=4/2 warps.
DEFAULT_PLANS = (
    # First: first-round compositions (SK001+SK002 without --exhaustive) take the first plan (the second
    # round composes on whichever plan won a bucket alone). On fla-core's KDA
    # file (its loop is tl.range(..., num_stages=2)) this one won: 2.33x at T = 8, N = 64 with SK001.
    Plan(2, 1, 2, True, 1),
    # Not P=2 with 4 warps: the T = 1 probe's best per-head tile (t1_ceiling_probe.md) was 1-3 % slower
    # than this plan at T = 1 and 1.3-1.5x slower at T = 8 once SK002 emitted it for fla-core's KDA, the
    # suite's KDA and GDN (benchmarks/results/apply_h200/README.md, session 3).
    Plan(2, 1, 2, True),
    Plan(1, 2, 4, True),
    Plan(4, 1, 2, True),
    Plan(1, 1, 4, True),
    Plan(1, 2, 4, False),
    # One warp per program, as the GDN decode launches (phase A's best GDN structure was P=4):
    Plan(4, 1, 1, True),
    Plan(8, 1, 1, True),
    # Hand prefetch and Triton's loop pipelining (tl.range(..., num_stages=2)) both hold the next
    # step's inputs in registers; with one of them only, P=2/2 warps may fit where it spilled.
    Plan(1, 2, 4, True, 1),
    Plan(4, 1, 1, True, 1),  # GDN's best structure without loop pipelining: 1.49-1.50x on GDN, 2.75x on FLA KDA (T=8)
)


def _plans(options: RewriteOptions, autotuned: bool = False) -> list[Plan]:
    """The plans to emit: given or default, pruned by the register budget at the target shape, at most
    ``max_variants``. ``autotuned``: every kernel's configs choose warps and stages, so plans differ in
    P, NS and prefetch only, and the budget (which depends on the warps) cannot prune them."""
    extra = dict(options.extra)
    given = extra.get("sk002_variants")
    plans = ([Plan(*map(int, p[:3]), bool(p[3]), int(p[4]) if len(p) > 4 and p[4] is not None else None)
              for p in given] if given else list(DEFAULT_PLANS))
    shape = dict(options.shape)
    k, v = shape.get("K"), shape.get("V")
    if autotuned:
        plans = list(dict.fromkeys(dataclasses.replace(p, warps=None, stages=None) for p in plans))
    elif k and v:  # prune by the register budget when the target shape is known
        plans = [p for p in plans if pow2(k) * pow2(-(-v // (p.programs * p.subtiles))) * p.subtiles
                 <= MAX_STATE_PER_THREAD * 32 * p.warps]
    return plans[: max(1, options.max_variants)]


def merge_tiles(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    if MARKER in source:
        return C.skip(CODE, SAFETY, source, f"already applied: tiles already merged (the file carries the '# {MARKER}' marker)")
    pos = src.line
    found, why = [], []
    for func in C.kernels(src.module, options):
        target = _target(src.module, func, pos)
        (found if not isinstance(target, str) else why).append(target if not isinstance(target, str) else f"{func.name.value}: {target}")
    if not found:
        return C.skip(CODE, SAFETY, source, "; ".join(why) or "no @triton.jit kernel in the file")
    plans = _plans(options, autotuned=all(C.is_autotuned(func) for func, _, _ in found))
    if not plans:
        shape = dict(options.shape)
        return C.skip(CODE, SAFETY, source, f"no plan keeps the state within {MAX_STATE_PER_THREAD} fp32 elements "
                                            f"per thread at K={shape.get('K')}, V={shape.get('V')}")
    out: list[Rewrite] = []
    for plan in plans:  # at most options.max_variants that apply (a rule's confirm asks for one: the first)
        out.append(_rewrite(src, found, plan, source))
        if sum(r.applied for r in out) >= options.max_variants:
            break
    return out


def _target(module: cst.Module, func: cst.FunctionDef, pos):
    """(kernel, axis, shared work lines) to merge, or the reason this kernel has none."""
    axes, why = A.find_axis(func, pos)
    if not axes:
        return "no V-tile axis (no X * B + tl.arange(0, B) on a program-id index)" + (f": {why[0]}" if why else "")
    reasons, usable = [], []
    for axis in axes:
        launch = L.plan(module, func, axis, 1, 1, None)
        if isinstance(launch, str):
            reasons.append(f"{axis.var}: {launch}")
            continue
        tiles = A.tile_dependent(func, axis.var)
        refusal = A.refusal(func, axis, tiles, pos)
        if refusal:
            reasons.append(f"{axis.var}: {refusal}")
            continue
        shared = A.shared_loop_work(func, tiles, pos)
        if not shared:
            reasons.append(f"{axis.var}: nothing computed in a loop is shared by the tiles (no repeated prologue to merge)")
            continue
        named = launch.dim if launch.dim.isidentifier() else None  # "V", not "v.shape[-1]"
        usable.append((func, axis if axis.dim else dataclasses.replace(axis, dim=named), shared))
    if not usable:
        return "; ".join(reasons)
    # Of several tile axes (V and K tiles, say), merge the one whose tiles repeat the most loop work.
    return max(usable, key=lambda u: len(u[2]))


def _tiles(axis) -> str:
    """"V tiles" (the tiles of V in BV-wide blocks), or "tiles of i_k (BK)" where the dimension has another name."""
    return f"{axis.dim} tiles" if axis.dim else f"tiles of {axis.var} ({axis.block})"


def _rewrite(src, found, plan: Plan, source: str) -> Rewrite:
    names = NameAllocator(src.module)
    edits, changes = {}, []
    for func, axis, shared in found:
        new = func
        if plan.prefetch:
            new, pf, _why = prefetch(new, names, src.line)
            changes += [Change(p.line, f"load of {p.target} issued one step ahead" if p.stepped
                               else f"load of {p.target} issued once before the token loop") for p in pf]
        tiles = A.tile_dependent(new, axis.var)
        if plan.programs == 1:
            new = remove_tile_axis(new, axis)
            if isinstance(new, str):  # this plan only: plans with P > 1 keep the tile index
                return Rewrite(CODE, "skipped", source, f"{func.name.value}: {new}", variant=plan.label,
                               params=plan.params, safety=SAFETY)
            changes.append(Change(axis.line, f"tile index {axis.var} removed: one program per (sequence, head)"))
        else:
            new = widen_tile_count(new, axis, plan.subtiles)
        if plan.programs == 1 or plan.subtiles > 1:
            rep = Replicator(axis, tiles, plan.subtiles, plan.programs == 1, names)
            new = new.with_changes(body=new.body.with_changes(body=rep.block(new.body.body)))
        note = C.comment_line(f"{MARKER}: {_tiles(axis)} merged ({plan.label}); the shared prologue runs once per token, "
                              f"lines {', '.join(map(str, shared[:6]))} of the original")
        first = new.body.body[0]
        new = new.with_changes(body=new.body.with_changes(body=[first.with_changes(leading_lines=[*first.leading_lines, note]), *new.body.body[1:]]))
        edits[func] = (lambda n: (lambda _u: n))(new)
        changes.append(Change(src.line(func), f"{func.name.value}: {plan.subtiles} register sub-tile(s) per program, "
                                              f"{plan.programs} program(s) per head"))
        auto = C.is_autotuned(func)  # its configs choose warps and stages, whatever the plan says
        if auto and plan.warps is not None:
            changes.append(Change(src.line(func), f"{func.name.value} is autotuned: num_warps/num_stages left to its configs"))
        launch = L.plan(src.module, func, axis, plan.programs, plan.subtiles,
                        None if auto else plan.warps, None if auto else plan.stages)
        if isinstance(launch, str):  # checked in _target with the same code path
            return C.failed(CODE, source, launch, SAFETY)[0]
        for key, fn in launch.edits.items():
            C.chain_edit(edits, key, fn)
        changes += [Change(src.line(n), d) for n, d in launch.lines]
    new_source = C.apply_edits(src.module, edits).code
    summary = (f"merged {', '.join(f'{_tiles(a)} of {f.name.value}' for f, a, _ in found)}: {plan.label} "
               f"(shared prologue once per program and token)")
    return C.applied_result(CODE, source, new_source, changes, summary, SAFETY, plan.label, plan.params)
