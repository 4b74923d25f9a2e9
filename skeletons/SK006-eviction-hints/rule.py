"""SK006-eviction-hints: tell the cache which streams are read once and which are shared.

Conditions (detector):
Opportunity: a load or store inside a loop whose address moves every iteration (a stream:
each element touched once by this program) and that carries no eviction policy or cache
modifier, in a Triton kernel launched in the file with a grid built from a tile size (which
programs are siblings is known only from the launch; the rewrite needs it). Instance: a
memory op with an explicit eviction policy (``evict_first`` /
``evict_last``) or a streaming cache modifier (``.cs``, ``__ldcs``, ``__stcs``...).
A load outside any loop, or one that reads the same address every step, is not a stream.

Rewrite:
SK006: eviction hints on the streaming loads and stores of a loop.

DESCRIPTION: sibling programs are the programs that differ only in a tile the launch grid
is built from (``grid = cdiv(V, BV) * N * HV`` makes the ``BV`` tiles of one head siblings).
Inside the loops of the kernel, a ``tl.load`` with no ``eviction_policy`` whose address does
not depend on that tile's offsets (``o_v = i_v * BV + tl.arange(0, BV)``) is read again by
every sibling -- ``evict_last`` keeps it in L2 for them (q, k, a per-head gate); one whose
address does depend on it is read by this program only -- ``evict_first`` (v, a per-column
beta). A store whose address depends on the tile (the output) gets ``evict_first``. Hints
already present are kept; loads outside loops (the state, read once) are left alone.

Needs the launch in the same file (to know which tiles have siblings). Safe: a cache hint
never changes a value.
"""
from __future__ import annotations

import libcst as cst

from skel.miner import dataflow
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.rewriter.launch_decisions import grid_tiles
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "safe"


# ---------------------------------------------------------------- conditions

STREAMING_MODIFIERS = (".cs", ".lu", ".cg", "__ldcs", "__ldlu", "__stcs", "__stwt", "__ldcg", "L1::no_allocate", "evict_first", "evict_last")


def _hinted(m) -> bool:
    if m.eviction_policy:
        return True
    return bool(m.cache_modifier) and any(s in m.cache_modifier for s in STREAMING_MODIFIERS)


def _components(ctx: Ctx) -> list[str]:
    """The program-id components that split work: one variable per role (tiles that resolve to a
    single tile, like NK = cdiv(K, BK) with BK = next_power_of_2(K), do not split anything)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "comp" in cache:
        return cache["comp"]
    out, seen = [], set()
    for ax in ctx.p.program_axes:
        if not ax.roles:
            out.append(ax.var)
            continue
        for var, role in ax.roles:
            if role in seen or role == "sequence-head":
                continue
            if role == "k-tile" and _single_tile(ctx, "K", "BK"):
                continue
            seen.add(role)
            out.append(var)
    cache["comp"] = out
    return out


def _single_tile(ctx: Ctx, dim: str, tile: str) -> bool:
    v = ctx.launch_value(tile)
    return isinstance(v, str) and v.replace(" ", "") in (f"triton.next_power_of_2({dim})", f"next_power_of_2({dim})", dim)


def _addr(m) -> str:
    return f"{m.node}:addr" if m.node else ""


def _dependents(ctx: Ctx, var: str) -> set[str]:
    """Dataflow nodes computed from ``var`` (one graph traversal per component, cached)."""
    cache = ctx.cache.setdefault(CODE, {}).setdefault("dep", {})
    if var not in cache:
        g = ctx.dataflow_graph
        sources = dataflow.resolve_nodes(ctx.p, var, g)
        cache[var] = g.descendants(sources) | sources
    return cache[var]


def _depends(ctx: Ctx, m, var: str) -> bool:
    return bool(m.node) and _addr(m) in _dependents(ctx, var)


def _shared(ctx: Ctx, m) -> list[str]:
    """Program-id components the address does not depend on (other programs read the same bytes)."""
    return [c for c in _components(ctx) if not _depends(ctx, m, c)]


def _streamed(ctx: Ctx, m) -> bool:
    if m.loop_line is None or m.loop_invariant or not m.node:
        return False
    return bool(_components(ctx)) and not _shared(ctx, m)


def _unhinted(ctx: Ctx):
    return [m for m in ctx.p.memops if m.kind in ("load", "store") and not _hinted(m) and m.space == "global"]


def load_without_eviction_policy(ctx: Ctx) -> Check:
    rows = _unhinted(ctx)
    if not rows:
        return no("every load and store already carries an eviction policy or cache modifier")
    return yes("; ".join(f"line {m.line}: {m.kind} {m.pointer}" for m in rows[:3]))


def grid_built_from_a_tile(ctx: Ctx) -> Check:
    """Which programs are siblings (differ only in a tile, so they re-read each other's shared rows) is
    known from the launch: a grid built from a tile constexpr the launch passes (``LaunchSite.grid_tiles``).
    A CUDA kernel's hints need no grid analysis here (no rewrite emits them): the condition holds."""
    if ctx.p.language != "triton":
        return yes("CUDA: the hints are placed by hand (no rewrite needs the grid)")
    if not ctx.p.launches:
        return no("launched outside this file, so which tiles have sibling programs is unknown")
    # as the rewrite's launch_decisions.grid_tiles: a tile passed at the launch, or one the heuristics set
    tiles = sorted({t for launch in ctx.p.launches for t in launch.grid_tiles
                    if t in dict(launch.args) or t in ctx.p.tune.heuristics})
    if not tiles:
        grids = "; ".join(f"line {launch.line}: {launch.grid}" for launch in ctx.p.launches[:2])
        return no(f"its grid is not built from a tile size the launch passes ({grids}), so no program "
                  "re-reads another's data")
    return yes(f"the grid is built from {', '.join(tiles)}: programs differing only in that tile are siblings")


def has_shared_read_data(ctx: Ctx) -> Check:
    rows = [(m, sh) for m in ctx.p.memops if m.kind == "load" and (sh := _shared(ctx, m))]
    if not rows:
        return no("every load's address depends on all program-id components (" + ", ".join(_components(ctx)) + ")")
    m, sh = rows[0]
    return yes(f"line {m.line}: {m.pointer} does not depend on {', '.join(sh)}: other programs read the same bytes")


def has_streamed_once_data(ctx: Ctx) -> Check:
    rows = [m for m in ctx.p.memops if m.kind in ("load", "store") and _streamed(ctx, m)]
    if not rows:
        return no("no access depends on every program-id component and on the loop variable")
    m = rows[0]
    return yes(f"line {m.line}: {m.kind} {m.pointer} depends on {', '.join(_components(ctx))} and the loop: used once")


CONDITIONS = {
    "load-without-eviction-policy": load_without_eviction_policy,
    "grid-built-from-a-tile": grid_built_from_a_tile,
    "has-shared-read-data": has_shared_read_data,
    "has-streamed-once-data": has_streamed_once_data,
}


def candidates(ctx: Ctx) -> list[Hit]:
    out, seen = [], set()
    for m in _unhinted(ctx):
        if m.line in seen:
            continue
        if m.kind == "load" and m.loop_line is not None and _shared(ctx, m):
            out.append(Hit.at(m.line, m.line, op=m.kind, pointer=m.pointer, suggest="evict_last", shared_across=_shared(ctx, m)))
        elif _streamed(ctx, m):
            out.append(Hit.at(m.line, m.line, op=m.kind, pointer=m.pointer, suggest="evict_first"))
        else:
            continue
        seen.add(m.line)
    return out


def instances(ctx: Ctx) -> list[Hit]:
    seen, out = set(), []
    for m in ctx.p.memops:
        if _hinted(m) and m.line not in seen:
            seen.add(m.line)
            out.append(Hit.at(m.line, m.line, op=m.kind, pointer=m.pointer, policy=m.eviction_policy or m.cache_modifier))
    return out


# ---------------------------------------------------------------- rewrite



def _tile_offsets(kernel: cst.FunctionDef, tiles: set[str]) -> set[str]:
    """Names holding a sibling tile's index or offsets: ``o_v = i_v * BV + tl.arange(0, BV)`` -> {o_v, i_v}."""
    out: set[str] = set()
    for small, *_ in F.walk(kernel.body.body):
        name = F.single_target(small)
        if not name or not isinstance(small, cst.Assign):
            continue
        for call in C.calls_in(small.value):
            if C.last_part(C.call_name(call)) == "arange" and C.names_in(call) & tiles:
                out.add(name)
                out |= _multiplied_by(small.value, tiles)
    return out


def _multiplied_by(node: cst.CSTNode, tiles: set[str]) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            if isinstance(n.operator, cst.Multiply):
                for a, b in ((n.left, n.right), (n.right, n.left)):
                    if isinstance(b, cst.Name) and b.value in tiles and isinstance(a, cst.Name):
                        found.add(a.value)

    node.visit(V())
    return found


def _policy(call: cst.Call) -> bool:
    return C.kwarg(call, "eviction_policy") is not None


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = {k.name.value: k for k in C.kernels(src.module, options)}
    if not ks:
        return C.no_kernel(CODE, SAFETY, source, options)
    sites = C.launches(src.module, ks)
    edits: dict = {}
    changes: list[Change] = []
    hinted = 0
    reasons: list[str] = []
    for name, kernel in ks.items():
        mine = [(c, h) for c, k, h in sites if k is kernel]
        if not mine:
            reasons.append(f"{name}: launched outside this file, so which tiles have sibling programs is unknown")
            continue
        tiles = set().union(*(grid_tiles(c, kernel, h) for c, h in mine))
        if not tiles:
            reasons.append(f"{name}: its grid is not built from a tile size, so no program re-reads another's data")
            continue
        offsets = _tile_offsets(kernel, tiles)
        deps = F.dependencies(kernel)
        tile_text = "/".join(sorted(tiles))
        for small, _line, chain, loops in F.walk(kernel.body.body):
            if not loops:
                continue
            for call in C.calls_in(small):
                kind = C.last_part(C.call_name(call))
                if kind not in ("load", "store") or not call.args:
                    continue
                if _policy(call):
                    hinted += 1
                    continue
                per_tile = F.depends_on(C.names_in(call.args[0].value), offsets, deps, chain)
                if kind == "store" and not per_tile:
                    continue
                policy = "evict_first" if per_tile else "evict_last"
                why = (f"read by this {tile_text} tile only" if per_tile and kind == "load" else
                       f"written once per {tile_text} tile" if per_tile else
                       f"re-read by the sibling {tile_text} programs")
                edits[call] = (lambda p: lambda upd: upd.with_changes(args=[
                    *upd.args, cst.Arg(cst.SimpleString(f"'{p}'"), keyword=cst.Name("eviction_policy"),
                                       equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]))(policy)
                changes.append(Change(src.line(call), f"tl.{kind}({C.code_of(call.args[0].value)}, ...): "
                                      f"eviction_policy='{policy}' ({why})"))
    if not edits:
        if hinted:
            return C.skip(CODE, SAFETY, source, f"already applied: all {hinted} loads/stores in the loops carry an eviction policy"
                           + (f" ({'; '.join(reasons)})" if reasons else ""))
        return C.skip(CODE, SAFETY, source, "not applicable: " + ("; ".join(reasons) or "no load or store inside a loop"))
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"{len(edits)} eviction hint(s) added", SAFETY)]


class EvictionHints(Rule):
    """Mark streamed-once data evict_first and data re-read by other programs evict_last."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
