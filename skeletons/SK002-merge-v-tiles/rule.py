"""SK002-merge-v-tiles: one program per head instead of NV = cdiv(V, BV) programs that each

Conditions (detector):
repeat the V-independent prologue (q/k loads and norms, the gate, beta).

Opportunity: a program-id variable selects a V tile, the launch makes more than one tile
per head (BV and V resolved at the launch site; V defaults to a head dimension of 128 when
the launch passes a runtime shape, and the finding says so), and the program does work whose
values do not depend on the V tile. Instance: the merged form, a loop over the V tiles inside
one program with V-independent work before the loop that the loop reuses.
"""
from __future__ import annotations

import ast
import re

from skel.miner import dataflow
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.pyexpr import Unresolved, evaluate
from skel.rewriter.sk002_merge_tiles import MARKER, merge_tiles
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton",)
ASSUMED_HEAD_DIM = 128  # when the launch passes V = v.shape[-1]; the finding records the assumption
V_TILE_NAMES = re.compile(r"^(i_v|iv|i_bv|v_tile|pid_v|v_block|i_dv)$")
ALLOWED_WARPS = (1, 2, 4, 8)
WORK_OPS = {"sqrt", "rsqrt", "div", "exp", "exp2", "log", "log2", "sigmoid", "softplus", "sum", "logsigmoid"}


def _v_tile_var(ctx: Ctx) -> tuple[str, int] | None:
    """(variable, line) of the program-id variable that selects the V tile."""
    for ax in ctx.p.program_axes:
        for var, role in ax.roles:
            if role in ("v-tile", "v_tile", "vtile"):
                return var, _def_line(ctx, var, ax.line)
        for var in (ax.var, *ax.derived):
            if V_TILE_NAMES.match(var):
                return var, _def_line(ctx, var, ax.line)
    return None


def _def_line(ctx: Ctx, var: str, fallback: int) -> int:
    rows = ctx.defs_of(var)
    return rows[0].line if rows else fallback


def _resolve(ctx: Ctx, name: str, env: dict) -> int | None:
    vals = _alternatives(ctx, name, env)
    return min(vals) if vals else None


def _alternatives(ctx: Ctx, name: str, env: dict) -> list[int]:
    """Every value a launch passes for ``name``; both branches of ``a if cond else b`` when the
    condition is a runtime value (``min(8, next_power_of_2(V)) if gv is None else ...``)."""
    v = ctx.launch_value(name)
    if isinstance(v, bool):
        return []
    if isinstance(v, int):
        return [v]
    if not isinstance(v, str):
        return []
    try:
        tree = ast.parse(v.strip(), mode="eval").body
    except SyntaxError:
        return []
    branches = [tree.body, tree.orelse] if isinstance(tree, ast.IfExp) else [tree]
    out = []
    for b in branches:
        try:
            r = evaluate(b, env)
        except Unresolved:
            continue
        if isinstance(r, (int, float)) and not isinstance(r, bool):
            out.append(int(r))
    return out


def _tiles(ctx: Ctx) -> dict | None:
    """BV, V, NV at the launch (or the smallest NV over autotune configs)."""
    if "tiles" in ctx.cache.setdefault(CODE, {}):
        return ctx.cache[CODE]["tiles"]
    env = {"K": ASSUMED_HEAD_DIM, "V": ASSUMED_HEAD_DIM}
    lv = ctx.launch_value("V")
    v = lv if isinstance(lv, int) and not isinstance(lv, bool) else None
    out = None
    v_assumed = v is None
    v = v or ASSUMED_HEAD_DIM
    env["V"] = v
    bvs = [dict(c).get("BV") for c in ctx.p.tune.autotune if isinstance(dict(c).get("BV"), int)]
    bv = _resolve(ctx, "BV", env)
    if bv is None and bvs:
        bv = max(bvs)  # the config with the fewest tiles decides whether tiles are always > 1
    if bv:
        out = {"BV": bv, "V": v, "NV": -(-v // bv), "V_assumed": v_assumed}
        alts = _alternatives(ctx, "BV", env)
        if len(alts) > 1:
            out["BV_alternatives"] = alts
        if ctx.p.launches:
            out["launch_line"] = ctx.p.launches[0].line
    ctx.cache[CODE]["tiles"] = out
    return out


def _work(ctx: Ctx) -> list[tuple[int, str]]:
    """Loads, reductions and math inside the time loop whose values do not depend on the V tile."""
    cache = ctx.cache.setdefault(CODE, {})
    if "work" in cache:
        return cache["work"]
    tv = _v_tile_var(ctx)
    out: list[tuple[int, str]] = []
    loops = [lp for lp in ctx.p.loops if lp.is_time_loop]
    if tv and loops:
        free = {ln for _, ln in dataflow.independent_of_axis(ctx.p, tv[0])}
        ops = {m.line for m in ctx.p.memops if m.kind == "load"}
        ops |= {r.line for r in ctx.p.reductions} | {m.line for m in ctx.p.math if m.op in WORK_OPS}
        for ln in sorted(ops & free):
            if any(lp.line < ln <= lp.end_line for lp in loops):
                out.append((ln, ctx.text(ln)))
    cache["work"] = out
    return out


def _fit(ctx: Ctx) -> tuple[int, int, int] | None:
    """(BK, V, smallest warp count) at which one head's BK x V fp32 state fits 128 registers/thread."""
    env = {"K": ASSUMED_HEAD_DIM, "V": ASSUMED_HEAD_DIM}
    t = _tiles(ctx) or {}
    v = t.get("V", ASSUMED_HEAD_DIM)
    env["V"] = v
    bk = _resolve(ctx, "BK", env) or ASSUMED_HEAD_DIM
    for warps in ALLOWED_WARPS:
        if bk * v / (32 * warps) <= 128:
            return bk, v, warps
    return None


def grid_splits_value_dim(ctx: Ctx) -> Check:
    tv = _v_tile_var(ctx)
    if not tv:
        return no("no program-id variable selects a V tile")
    t = _tiles(ctx)
    if not t:
        return no(f"line {tv[1]}: {tv[0]} selects a V tile, but BV is not resolved at any launch site or autotune config")
    v_txt = f"V = {t['V']}" + (" (assumed head dim: the launch passes a runtime shape)" if t["V_assumed"] else "")
    if t["NV"] <= 1:
        return no(f"BV = {t['BV']} covers {v_txt} in one tile (NV = 1)")
    return yes(f"line {tv[1]}: {ctx.text(tv[1])}; BV = {t['BV']}, {v_txt} -> NV = cdiv(V, BV) = {t['NV']} programs per head")


def repeats_tile_independent_work(ctx: Ctx) -> Check:
    work = _work(ctx)
    if not work:
        # name the reason that actually holds: no V tile, no token loop, or truly no shared work
        if not _v_tile_var(ctx):
            return no("no program id selects a V tile, so no work is repeated across V tiles")
        if not any(lp.is_time_loop for lp in ctx.p.loops):
            return no("the kernel has no token loop: there is no per-step work for the V tiles to repeat")
        return no("every load, reduction and transcendental in the token loop depends on the V-tile id")
    shown = "; ".join(f"line {ln}: {t}" for ln, t in work[:4])
    return yes(f"{len(work)} lines in the token loop repeated by every V tile: {shown}")


def state_tile_fits_registers(ctx: Ctx) -> Check:
    f = _fit(ctx)
    if not f:
        return no("the BK x V fp32 state of one head needs more than 128 registers per thread even at 8 warps")
    bk, v, warps = f
    return yes(f"BK x V = {bk} x {v} fp32 state -> {bk * v // (32 * warps)} registers/thread at {warps} warps")


def has_time_loop(ctx: Ctx) -> Check:
    loops = [lp for lp in ctx.p.loops if lp.is_time_loop]
    if not loops:
        return no("no loop over tokens")
    return yes(f"line {loops[0].line}: for {loops[0].var} in {loops[0].iter_text}")


CONDITIONS = {
    "grid-splits-value-dim": grid_splits_value_dim,
    "repeats-tile-independent-work": repeats_tile_independent_work,
    "state-tile-fits-registers": state_tile_fits_registers,
    "has-time-loop": has_time_loop,
}


def candidates(ctx: Ctx) -> list[Hit]:
    tv = _v_tile_var(ctx)
    t = _tiles(ctx) or {}
    return [Hit.at(tv[1], ctx.p.end_line, tile_var=tv[0], repeated_lines=[ln for ln, _ in _work(ctx)], **t)]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for lp in ctx.p.loops:
        it = lp.iter_text.replace(" ", "")
        if not re.search(r"cdiv\(V,BV\)|\(0,V,BV\)|range\(V//BV\)|\(NV\)", it):
            continue
        ops = {m.line for m in ctx.p.memops if m.kind == "load"}
        ops |= {r.line for r in ctx.p.reductions} | {m.line for m in ctx.p.math if m.op in WORK_OPS}
        used = [ln for ln in sorted(ops) if ln < lp.line and ctx.loop_at(ln) is None and _used_inside(ctx, ln, lp)]
        if used:
            out.append(Hit.at(lp.line, lp.end_line, tile_loop=lp.iter_text, shared_lines=used))
    return out


def _used_inside(ctx: Ctx, line: int, lp) -> bool:
    a = next((a for a in ctx.assigns if a.line == line), None)
    if not a:
        return False
    pat = re.compile(r"\b(" + "|".join(map(re.escape, a.targets)) + r")\b")
    return any(pat.search(ctx.text(ln)) for ln in range(lp.line + 1, lp.end_line + 1))


class MergeVTiles(Rule):
    """Merge the V-tile programs of a recurrent decode into one program per (sequence, head)."""

    SAFETY = 'unsafe'
    LANGUAGES = LANGUAGES
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        if MARKER in ctx.source:  # already merged by this rule's rewrite: its kernel keeps a (narrower) grid split
            return []
        return candidates(ctx)

    rewrite = staticmethod(merge_tiles)
