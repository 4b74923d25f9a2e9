"""Candidates for `skel apply`: single skeletons and their compositions.

The search walks the skeleton graph: a composition applies skeletons in an order
that respects ``enables`` (A enables B: A first) and never combines skeletons that
``conflict``. Each rewrite is applied to the output of the previous one, so a
composition only exists when every step still applies. Unsafe rewrites are
dropped (and reported) unless the caller allows them. Launch-config search
(several variants) is applied last, on top of the best structural candidates,
so the number of candidates stays bounded.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from skel.rewriter.base import Rewrite, RewriteFn, RewriteOptions
from skel.skeletons.library import Library


def registry(library=None) -> dict[str, RewriteFn]:
    """Every skeleton's rewrite, by code: the rules of ``library`` (default: the shipped one) that
    have one. Found by the library loader in the skeleton folders; there is no list to keep."""
    if library is None:
        from skel.skeletons.library import load_library

        library = load_library()
    return {sk.code: sk.rule.rewrite for sk in library if sk.rule.rewrite is not None}


def _search_last(code: str, library: Library) -> bool:
    """A launch-config search multiplies candidates: it is applied on top of the others, last (its rule says so)."""
    sk = library.get(code)
    return bool(sk and sk.rule.search_last())


@dataclass(frozen=True)
class Candidate:
    """A rewritten source and the chain of rewrites that produced it."""

    skeletons: tuple[str, ...]
    source: str
    steps: tuple[Rewrite, ...]
    unsafe: bool

    @property
    def label(self) -> str:
        variants = [s.variant for s in self.steps if s.variant]
        return "+".join(self.skeletons) + (f" [{'; '.join(variants)}]" if variants else "")

    @property
    def params(self) -> dict:
        out: dict = {}
        for step in self.steps:
            out.update(dict(step.params))
        return out


@dataclass(frozen=True)
class Skip:
    """A skeleton that matched but produced no candidate, and why."""

    skeletons: tuple[str, ...]
    reason: str


@dataclass
class CandidateSet:
    candidates: list[Candidate] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)


def order_by_graph(codes: list[str], library: Library) -> list[str]:
    """Topological order over ``enables`` edges (stable by code otherwise)."""
    from skel.catalog.skeleton_graph import topological

    ordered = topological(codes, library)
    tail = [c for c in ordered if _search_last(c, library)]
    return [c for c in ordered if not _search_last(c, library)] + tail


def _conflict(codes: tuple[str, ...], library: Library) -> bool:
    from skel.catalog.skeleton_graph import any_conflict

    return any_conflict(codes, library)


def enumerate_candidates(
    source: str,
    codes: list[str],
    library: Library,
    options: RewriteOptions,
    allow_unsafe: bool,
    max_combo: int = 4,
    max_candidates: int = 24,
    exhaustive: bool = False,
) -> CandidateSet:
    """Every single-skeleton rewrite, then compositions of the structural ones, then launch search on top."""
    rewrites = registry(library)
    out = CandidateSet()
    usable, out.skipped = _usable(codes, library, allow_unsafe, rewrites)
    structural = [c for c in usable if not _search_last(c, library)]
    search = [c for c in usable if _search_last(c, library)]
    seen_sources = {source}
    over: list[Candidate] = []  # produced but past the budget: said in one Skip, not dropped silently

    def add(candidate: Candidate) -> None:
        if candidate.source in seen_sources:
            return
        seen_sources.add(candidate.source)
        (out.candidates if len(out.candidates) < max_candidates else over).append(candidate)

    # Structural rewrites: each alone, then the greedy composition (every one that still
    # applies, in graph order) and, with exhaustive=True, every subset up to max_combo.
    chains: list[Candidate] = []
    combos: list[tuple[str, ...]] = [(c,) for c in structural]
    if exhaustive:
        combos += [combo for size in range(2, min(max_combo, len(structural)) + 1)
                   for combo in itertools.combinations(structural, size)]
    for combo in combos:
        if _conflict(combo, library):
            continue
        chain = _apply_chain(source, combo, rewrites, options, library)
        if isinstance(chain, Skip):
            if len(combo) == 1:
                out.skipped.append(chain)
            continue
        chains.extend(chain)
    if not exhaustive and len(structural) > 1:
        chains.extend(_greedy_chain(source, structural, rewrites, options, library))
    # Fullest compositions first: they are the likeliest winners and get the budget.
    chains.sort(key=lambda c: (-len(c.skeletons), c.skeletons))
    for c in chains:
        add(c)

    # Launch-config search on the original and on the fullest structural chain of each shape.
    fullest = max((len(c.skeletons) for c in chains), default=0)
    for code in search:
        bases = [Candidate((), source, (), False)] + [c for c in chains if len(c.skeletons) == fullest][:2]
        produced = False
        reason = "no variant"
        for base in bases:
            for variant in rewrites[code](base.source, options):
                if variant.applied:
                    produced = True
                    add(Candidate(base.skeletons + (code,), variant.source, base.steps + (variant,),
                                  base.unsafe or _unsafe(variant)))
                elif base.source == source:
                    reason = variant.reason  # why it does not apply to the target itself
        if not produced:
            out.skipped.append(Skip((code,), reason))
    if over:
        shown = ", ".join(c.label for c in over[:3]) + (", ..." if len(over) > 3 else "")
        out.skipped.append(Skip(tuple(sorted({s for c in over for s in c.skeletons})),
                                f"{len(over)} more candidate(s) not judged, over the budget of {max_candidates} "
                                f"(--max-candidates): {shown}"))
    return out


def _usable(codes: list[str], library: Library, allow_unsafe: bool, rewrites) -> tuple[list[str], list[Skip]]:
    """The codes with an automatic rewrite the caller may use, in graph order, and why the others are left."""
    usable: list[str] = []
    skipped: list[Skip] = []
    for code in order_by_graph(codes, library):
        sk = library.get(code)
        if code not in rewrites:
            skipped.append(Skip((code,), "no automatic rewrite for this skeleton (see its docs for the method)"))
        elif sk is not None and sk.safety == "unsafe" and not allow_unsafe:
            skipped.append(Skip((code,), f"unsafe rewrite ({sk.unsafe_because}): pass --unsafe"))
        else:
            usable.append(code)
    return usable, skipped


def refine(source: str, winner: Candidate, codes: list[str], library: Library, options: RewriteOptions,
           allow_unsafe: bool) -> Candidate | str:
    """The second round of the search, after the gate has measured the first: the structural skeletons
    that still apply, composed in graph order on top of a measured winner, each of the winner's own
    skeletons taking the variant the winner measured (SK002's plan, ...) and the others their first.

    The first round composes with each skeleton's first variant only (its budget goes to the variants
    alone), so a variant that wins alone in a shape bucket (SK002 with four programs and one warp at
    T = 8) was never composed. A skeleton that conflicts with one of the winner's is left out, and so is
    one after which a winner's skeleton no longer produces its measured variant (SK002's prefetch leaves
    SK003 nothing to hoist). Returns the composition, or why there is none: the winner holds a launch
    search or preview step (not composed further), already holds every structural skeleton that
    applies, or its own variants cannot be reproduced.
    """
    rewrites = registry(library)
    usable, _ = _usable(codes, library, allow_unsafe, rewrites)
    structural = [c for c in usable if not _search_last(c, library)]
    if any(c not in structural for c in winner.skeletons):
        return "it holds a launch-config search or preview step, which is not composed further"
    wanted = {step.skeleton: step.variant for step in winner.steps}
    extras = [c for c in structural if c not in wanted and not _conflict(winner.skeletons + (c,), library)]
    while True:
        chain, blocked = _chain(source, [c for c in structural if c in wanted or c in extras], rewrites, options,
                                library, wanted)
        if blocked is None:
            break
        if not blocked:
            return "its own variants do not reproduce on the original"
        extras.remove(blocked[-1])  # the latest skeleton before the one that stopped applying
    if set(chain.skeletons) == set(winner.skeletons):
        return "no other structural skeleton applies on top of it"
    return chain


def _chain(source, codes, rewrites, options, library, wanted=None) -> tuple[Candidate, list[str] | None]:
    """Apply every code that applies and does not conflict with the chain so far, in order, taking its first
    variant, or for a code in ``wanted`` that variant only. (chain, None); or (partial chain, the other codes
    applied before the first wanted one that no longer produced its variant)."""
    wanted = wanted or {}
    chain = Candidate((), source, (), False)
    others: list[str] = []
    for code in codes:
        if _conflict(chain.skeletons + (code,), library):
            continue
        applied = [v for v in rewrites[code](chain.source, options) if v.applied]
        if code in wanted:
            applied = [v for v in applied if v.variant == wanted[code]]
            if not applied:
                return chain, others
        if applied:
            v = applied[0]
            chain = Candidate(chain.skeletons + (code,), v.source, chain.steps + (v,),
                              chain.unsafe or _unsafe(v))
            if code not in wanted:
                others.append(code)
    return chain, None


def _unsafe(step: Rewrite) -> bool:
    """Each edit carries its own safety (ruff's safe/unsafe fix): the rewrite says, not a table."""
    return step.safety == "unsafe"


def _apply_chain(source, combo, rewrites, options, library) -> list[Candidate] | Skip:
    """Apply ``combo`` in order; a step with several variants forks the chain."""
    chains = [Candidate((), source, (), False)]
    for code in combo:
        nxt: list[Candidate] = []
        reason = ""
        for chain in chains:
            for variant in rewrites[code](chain.source, options):
                if variant.applied:
                    nxt.append(Candidate(chain.skeletons + (code,), variant.source, chain.steps + (variant,),
                                         chain.unsafe or _unsafe(variant)))
                else:
                    reason = variant.reason
        if not nxt:
            return Skip(combo, f"{code}: {reason or 'did not apply'}")
        chains = nxt
    return chains


def _greedy_chain(source, codes, rewrites, options, library) -> list[Candidate]:
    """Apply every code that still applies, in order, taking the first variant of each."""
    chain, _ = _chain(source, codes, rewrites, options, library)
    return [chain] if len(chain.skeletons) > 1 else []
