"""SK006 eviction-hints: tell the cache which streams are read once and which are shared.

Opportunity: a load or store inside a loop whose address moves every iteration (a stream:
each element touched once by this program) and that carries no eviction policy or cache
modifier. Instance: a memory op with an explicit eviction policy (``evict_first`` /
``evict_last``) or a streaming cache modifier (``.cs``, ``__ldcs``, ``__stcs``...).
A load outside any loop, or one that reads the same address every step, is not a stream.
"""
from __future__ import annotations

from skel.miner import dataflow
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK006"
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
