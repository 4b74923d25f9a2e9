"""Preview candidates (``SKP...``, distilled by ``skel mine --history`` / ``--variants``) in `skel apply`,
and what the gate's verdicts make of them.

In ``skel apply --preview`` every catalog candidate whose refined pattern applies to the
target (``skel.rewriter.pattern``) joins the library's candidates: alone (never composed),
labelled with its code, always *unsafe* (history says an author made the edit, not that
it keeps the bits), then judged by the same gate, selection and report; ``_record`` in
``skel.pipeline.apply`` stores its per-shape verdicts under its code like any skeleton's.

Verdicts then rank the candidates (``standings``). Runs are grouped into *trials*: one
candidate alone on one target version (source hash) on one device. A trial
- *reproduces* its effect when numerics passed everywhere and it was measured faster at some
  shape: the candidate gains ``BONUS_HELD_OUT`` on a held-out kernel, ``BONUS_SOURCE`` on one
  it was distilled from;
- *fails* when numerics failed at some shape: the candidate loses ``PENALTY_NUMERICS``;
- is *slower* when performance was measured and the candidate was slower at some shape and
  faster at none: it loses ``PENALTY_SLOWER``;
- is *accepted* when numerics passed at every shape and, where performance was measured,
  the candidate was faster at some shape.

A candidate is *admitted* (eligible for stable) when the gate *reproduces its effect* on a
held-out kernel: a trial with numerics passed and measured faster (a GPU run; numerics alone on
a CPU do not reproduce a speed-up), whose target's source hash differs from every file version the candidate was distilled from
(the ``sources`` the miner records). A candidate mined before sources were recorded cannot
be admitted until it is re-mined (``skel mine --history --force``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skel.pipeline.candidates import Candidate, CandidateSet, Skip
from skel.rewriter.pattern import apply_pattern

PENALTY_NUMERICS = 4.0  # per trial whose numerics failed (a wrong rewrite is worse than a slow one)
PENALTY_SLOWER = 2.0  # per measured trial slower somewhere and faster nowhere
BONUS_SOURCE = 1.0  # per trial that reproduced its effect on a kernel it was distilled from
BONUS_HELD_OUT = 3.0  # per trial that reproduced its effect on a held-out kernel
ANY_PREVIEW = "SKP*"  # the Skip label for preview candidates as a group


@dataclass(frozen=True)
class Trial:
    """Every recorded run of one candidate alone on one target version (source hash) and device."""

    kernel: str
    source_hash: str
    gpu: str  # "" on CPU
    shapes: int
    numerics_failed: int  # shapes whose numerics failed
    perf_measured: bool
    faster: int  # shapes measured faster
    slower: int
    held_out: bool  # the target differs from every file version the candidate was distilled from

    @property
    def accepted(self) -> bool:
        return self.numerics_failed == 0 and (not self.perf_measured or self.faster > 0)

    @property
    def reproduces(self) -> bool:
        """Correct and measurably faster: the effect the candidate was distilled for, reproduced."""
        return self.numerics_failed == 0 and self.perf_measured and self.faster > 0

    @property
    def sinks(self) -> bool:
        return self.perf_measured and self.slower > 0 and self.faster == 0

    def describe(self) -> str:
        perf = (f"faster at {self.faster}, slower at {self.slower} of {self.shapes} shapes on {self.gpu or 'GPU'}"
                if self.perf_measured else "performance not measured")
        num = f"numerics failed at {self.numerics_failed} of {self.shapes} shapes" if self.numerics_failed \
            else f"numerics passed at {self.shapes} shapes"
        where = "held-out" if self.held_out else "a kernel it was distilled from"
        return f"{self.kernel} ({where}, source {self.source_hash[:12]}): {num}; {perf}"

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "source_hash": self.source_hash, "gpu": self.gpu, "shapes": self.shapes,
                "numerics_failed": self.numerics_failed, "perf_measured": self.perf_measured, "faster": self.faster,
                "slower": self.slower, "held_out": self.held_out, "accepted": self.accepted,
                "reproduces": self.reproduces}


@dataclass(frozen=True)
class Standing:
    """A candidate's rank after its verdicts, and whether it is admitted."""

    code: str
    score: float  # as mined (support, commit messages)
    rank_score: float  # score minus the verdict penalties
    trials: tuple[Trial, ...]
    admitted: bool
    why: str  # what admits it, or what is missing

    @property
    def failures(self) -> int:
        return sum(t.numerics_failed > 0 for t in self.trials)

    @property
    def slower(self) -> int:
        return sum(t.sinks for t in self.trials)

    def to_json(self) -> dict:
        return {"score": self.score, "rank_score": self.rank_score, "admitted": self.admitted,
                "admission": self.why, "numerics_failures": self.failures, "slower_trials": self.slower,
                "trials": [t.to_json() for t in self.trials]}


def trials(code: str, runs, sources: frozenset[str]) -> tuple[Trial, ...]:
    """Group ``runs`` (``ValidationRun``) of ``code`` alone into trials, oldest target first."""
    groups: dict[tuple[str, str, str], list] = {}
    for r in runs:
        if tuple(r.skeletons) == (code,):
            groups.setdefault((r.kernel, r.source_hash, r.gpu), []).append(r)
    out = []
    for (kernel, source_hash, gpu), rs in groups.items():
        shapes = {r.shape for r in rs}
        failed = {r.shape for r in rs if r.verdict == "numerics-fail"}
        perf = [r for r in rs if r.metric == "speedup"]
        out.append(Trial(kernel, source_hash, gpu, len(shapes), len(failed), bool(perf),
                         len({r.shape for r in perf if r.verdict == "faster"}),
                         len({r.shape for r in perf if r.verdict == "slower"}),
                         bool(sources) and bool(source_hash) and source_hash not in sources))
    return tuple(out)


def standing(cand, runs) -> Standing:
    """``cand`` is a ``CandidateSkeleton``; ``runs`` any validation runs (those of other codes are ignored)."""
    sources = frozenset(cand.pattern.get("sources", ()))
    ts = trials(cand.code, runs, sources)
    penalty = PENALTY_NUMERICS * sum(t.numerics_failed > 0 for t in ts) + PENALTY_SLOWER * sum(t.sinks for t in ts)
    penalty -= sum(BONUS_HELD_OUT if t.held_out else BONUS_SOURCE for t in ts if t.reproduces)
    admitting = next((t for t in ts if t.reproduces and t.held_out), None)
    if admitting is not None:
        why = "admitted: the gate reproduced its effect on " + admitting.describe()
    elif not sources:
        why = "not admitted: the file versions it was distilled from are unknown (re-mine with --force)"
    elif any(t.accepted and t.held_out for t in ts):
        why = ("not admitted: correct on a held-out kernel, but its speed-up was not measured there "
               "(run `skel apply --preview` on a GPU)")
    elif any(t.accepted for t in ts):
        why = "not admitted: accepted only on kernels it was distilled from (no held-out evidence)"
    elif ts:
        why = f"not admitted: the gate has not accepted it ({len(ts)} trial(s))"
    else:
        why = "not admitted: never judged by the gate (`skel apply --preview TARGET`)"
    return Standing(cand.code, cand.score, round(cand.score - penalty, 2), ts, admitting is not None, why)


def standings(cat, candidates=None) -> list[tuple[object, Standing]]:
    """Every candidate (or the given ones) with its standing, best rank first (ties by code)."""
    cands = cat.candidates() if candidates is None else list(candidates)
    runs = [r for r in cat.validation_runs() if any(c.startswith("SKP") for c in r.skeletons)]
    ranked = [(c, standing(c, runs)) for c in cands]
    ranked.sort(key=lambda cs: (-cs[1].rank_score, cs[0].code))
    return ranked


def ranked_from(catalog: Path | str | None) -> list[tuple[object, Standing]]:
    """``standings`` of the catalog at ``catalog`` (default path when None); none when it does not exist."""
    from skel.catalog import store

    path = store.resolve_catalog_path(catalog)
    if not Path(path).exists():
        return []
    with store.open_catalog(path) as cat:
        return standings(cat)


# ------------------------------------------------------------ skel apply --preview
def add_preview_candidates(cset: CandidateSet, source: str, catalog: Path | None, wanted: tuple[str, ...],
                           budget: int) -> None:
    """Append to ``cset`` each preview candidate (best rank first) whose pattern applies to ``source``.

    ``wanted``: the --skeleton codes (empty or ``SKP*``: every candidate; codes that are not SKP... leave
    the preview candidates out). ``budget``: at most this many preview candidates are judged
    (on top of the library's). Those that do not apply are summarised in one Skip, or listed
    one by one when asked for by code.
    """
    from skel.catalog import store

    want = {c.upper() for c in wanted}
    every = not want or ANY_PREVIEW in want  # --skeleton 'SKP*': every preview candidate, no library one
    want.discard(ANY_PREVIEW)
    ranked = [(c, s) for c, s in ranked_from(catalog) if every or c.code in want]
    if want and not ranked:
        if any(c.startswith("SKP") for c in want):
            cset.skipped.append(Skip(tuple(sorted(c for c in want if c.startswith("SKP"))),
                                     f"no such preview candidate in {store.resolve_catalog_path(catalog)}"))
        return
    if not ranked:
        cset.skipped.append(Skip((ANY_PREVIEW,), f"no preview candidates in {store.resolve_catalog_path(catalog)} "
                                                 "(run `skel mine --history REPO` or `skel mine --variants A B`)"))
        return
    seen = {source} | {c.source for c in cset.candidates}
    unmatched, added = 0, 0
    for cand, _ in ranked:
        r = apply_pattern(cand.code, source, cand.pattern["refined"], cand.pattern["conditions"])
        if not r.applied:
            if want and not every:
                cset.skipped.append(Skip((cand.code,), r.reason))
            else:
                unmatched += 1
            continue
        if r.source in seen:
            cset.skipped.append(Skip((cand.code,), "rewrites the target exactly as an earlier candidate does"))
            continue
        if added >= budget:
            cset.skipped.append(Skip((cand.code,), f"over the preview budget of {budget} candidates (--max-candidates)"))
            continue
        seen.add(r.source)
        added += 1
        cset.candidates.append(Candidate((cand.code,), r.source, (r,), True))
    if unmatched:
        cset.skipped.append(Skip((ANY_PREVIEW,), f"{unmatched} preview candidate(s) do not match the target"))


def unknown_codes(codes: list[str], known: set[str], catalog: Path | None) -> list[str]:
    """--skeleton codes that are neither library codes nor preview candidates in the catalog."""
    rest = [c for c in codes if c.upper() not in known and c.upper() != ANY_PREVIEW]
    if not rest:
        return []
    have = {c.code for c, _ in ranked_from(catalog)}
    return [c for c in rest if c.upper() not in have]
