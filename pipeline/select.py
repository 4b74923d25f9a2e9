"""Choose the accepted candidate per shape bucket.

A bucket is the shapes that differ only in the batch dimension N (e.g. all T=1 decode
shapes), split into two regimes: small batch (N <= SMALL_BATCH, serving at low concurrency, where a
decode kernel is launch- and latency-bound and a finer split wins) and the rest. In the small regime
every batch size is a bucket of its own (``N1-T1-H32-...``): at N = 1 the grid leaves SMs idle, at N = 8
it may not, and a split that wins at one loses at the other. In a bucket, a candidate qualifies when its numerics passed at every shape, it is
measurably faster at one shape at least and measurably slower at none; the qualifier with the
best geometric-mean speedup wins. Different winners in different buckets make a dispatch.
Without performance measurements nothing qualifies.

Each candidate's speedup is measured against the original in a worker process of its own, and at
small shapes two processes can time the same kernel a few per cent apart (different buffers; on
the H200 the original's median moved by 3 % between workers of one run at T = 1, N = 32). So when
another qualifier's geometric mean comes within RUNOFF_WITHIN of the leader's, the two meet head to
head in one judgement (``runoff``: the leader as the baseline, the challenger as the candidate, on
the bucket's shapes): the challenger takes the bucket when it is measurably faster there and
slower nowhere, and when neither is measurably faster the one made of fewer skeletons is kept.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from skel.validate.spec import Shape

BATCH_DIM = "N"
SMALL_BATCH = 8  # N up to this is the small-batch regime (its own buckets)


def bucket_of(label: str, batch: str = BATCH_DIM) -> str:
    """The shape bucket of a shape label: every dim but the batch-like one (the spec's ``batch``)."""
    try:
        shape = Shape.parse(label)
    except ValueError:
        return label
    n = dict(shape.dims).get(batch)
    if n is not None and n <= SMALL_BATCH:  # small batch: each size its own bucket (N = 1 and N = 8 differ)
        return shape.label
    rest = [f"{k}{v}" for k, v in shape.dims if k != batch]
    return "-".join(rest) or "all"


ACCURACY_GAIN = 2.0  # a precision rewrite must cut the error against float64 at least this much
RUNOFF_WITHIN = 0.05  # a qualifier whose geometric mean is within 5 % of the leader's meets it head to head
MAX_CHALLENGERS = 2  # per bucket, the closest first


@dataclass(frozen=True)
class Runoff:
    """One head-to-head in a bucket: the challenger timed against the leader in one judgement."""
    bucket: str
    leader: str  # candidate labels
    challenger: str
    shapes: tuple[tuple[str, float, float, float, str], ...]  # (shape, speedup over the leader, low, high, verdict)
    winner: str
    why: str

    def to_json(self) -> dict:
        return {"bucket": self.bucket, "leader": self.leader, "challenger": self.challenger, "winner": self.winner,
                "why": self.why, "shapes": [{"shape": s, "speedup": x, "low": lo, "high": hi, "verdict": v}
                                            for s, x, lo, hi, v in self.shapes]}


def settle(bucket: str, leader, challenger, gate: dict | None, error: str | None = None) -> Runoff:
    """The head-to-head's decision from the gate's result (``gate``: GateResult.to_dict() with the leader
    as the original), or the leader kept when the run-off could not be judged (``error``)."""
    rows = tuple((s["shape"], p["speedup"], p["speedup_low"], p["speedup_high"], p["verdict"])
                 for s in (gate or {}).get("shapes", ()) if (p := s.get("perf")))
    if error or gate is None or not rows:
        why = f"run-off not judged ({error or 'no timing'}): the leader is kept"
        return Runoff(bucket, leader.label, challenger.label, rows, leader.label, why)
    faster = [r[0] for r in rows if r[4] == "faster"]
    slower = [r[0] for r in rows if r[4] == "slower"]
    if faster and not slower:
        winner, why = challenger, "the challenger is measurably faster head to head and slower nowhere"
    elif slower and not faster:
        winner, why = leader, "the leader is measurably faster head to head"
    elif faster:
        winner, why = leader, "mixed head to head (faster at some shapes, slower at others): the leader is kept"
    elif len(challenger.skeletons) < len(leader.skeletons):
        winner, why = challenger, "not measurably different head to head: the one made of fewer skeletons is kept"
    else:
        winner, why = leader, "not measurably different head to head: the leader is kept (no simpler than the challenger)"
    return Runoff(bucket, leader.label, challenger.label, rows, winner.label, why)


def more_accurate(outcome) -> str | None:
    """Why a precision-only candidate is accepted on accuracy (its error against the float64
    reference is ACCURACY_GAIN times lower than the original's at every shape), or None."""
    worst = None
    for s in outcome.gate["shapes"]:
        for o in (s.get("numerics") or {}).get("outputs", []):
            if o.get("rel_rms") is None or not o.get("original_rel_rms"):
                continue
            gain = o["original_rel_rms"] / max(o["rel_rms"], 1e-30)
            if gain < ACCURACY_GAIN:
                return None
            worst = gain if worst is None else min(worst, gain)
    return None if worst is None else f"accepted on accuracy: error against float64 at least {worst:.0f}x lower than the original's"


def _ranked(outcomes: list, batch: str) -> dict[str, list[tuple[float, object]]]:
    """bucket -> [(geometric-mean speedup, outcome)], fastest first, over the candidates faster at some
    shape of the bucket and slower at none."""
    per_bucket: dict[str, list[tuple[float, object]]] = {}
    for o in outcomes:
        if not o.numerics_passed or not o.gate:
            continue
        buckets: dict[str, list[dict]] = {}
        for s in o.gate["shapes"]:
            buckets.setdefault(bucket_of(s["shape"], batch), []).append(s)
        for bucket, shapes in buckets.items():
            perfs = [s.get("perf") for s in shapes]
            if any(p is None for p in perfs):
                continue
            if any(p["verdict"] == "slower" for p in perfs) or not any(p["verdict"] == "faster" for p in perfs):
                continue
            geo = math.exp(sum(math.log(max(p["speedup"], 1e-9)) for p in perfs) / len(perfs))
            per_bucket.setdefault(bucket, []).append((geo, o))
    return {b: sorted(r, key=lambda t: -t[0]) for b, r in per_bucket.items()}


def _close(ranked: list[tuple[float, object]]) -> list[tuple[float, object]]:
    """The challengers a bucket's leader meets in a run-off: within RUNOFF_WITHIN of it."""
    return [(g, o) for g, o in ranked[1:] if g >= ranked[0][0] / (1 + RUNOFF_WITHIN)][:MAX_CHALLENGERS]


def contenders(outcomes: list, perf_measured: bool, precision_only: frozenset = frozenset(),
               batch: str = BATCH_DIM) -> list[tuple[str, object]]:
    """[(bucket, outcome)]: each bucket's leader and the candidates the first round cannot yet tell from it
    (those a run-off would meet). The second round builds on each: the one a composition lifts may not be
    the leader by point estimate."""
    if not perf_measured:
        return []
    if any(o.label in precision_only for o in outcomes):
        return choose_winners(outcomes, perf_measured, precision_only, batch=batch)[0]
    return [(bucket, o) for bucket, ranked in sorted(_ranked(outcomes, batch).items())
            for _, o in ranked[:1] + _close(ranked)]


def choose_winners(outcomes: list, perf_measured: bool, precision_only: frozenset = frozenset(),
                   runoff: Callable[[str, object, object, list[str]], Runoff] | None = None,
                   runoffs: list | None = None, batch: str = BATCH_DIM) -> tuple[list, list]:
    """Returns ([(bucket, winning outcome)], outcomes with accepted/reason updated).

    ``precision_only``: labels of candidates made only of precision skeletons; those are
    judged on accuracy (speed is reported, not required), and win every bucket they pass.
    ``runoff(bucket, leader, challenger, shape labels)``: a head-to-head for qualifiers within
    RUNOFF_WITHIN of the leader (see the module docstring); each Runoff is appended to ``runoffs``.
    """
    if not perf_measured:
        return [], outcomes
    accurate = {o.label: why for o in outcomes
                if o.label in precision_only and o.numerics_passed and o.gate and (why := more_accurate(o))}
    if accurate:
        best = next(o for o in outcomes if o.label in accurate)
        buckets = sorted({bucket_of(s["shape"], batch) for s in best.gate["shapes"]})
        updated = [dataclasses.replace(o, accepted=True, reason=f"{accurate[o.label]}; {o.reason}") if o is best else o
                   for o in outcomes]
        return [(b, best) for b in buckets], updated
    per_bucket = _ranked(outcomes, batch)
    winners = []
    won: dict[str, list[str]] = {}
    for bucket in sorted(per_bucket):
        ranked = per_bucket[bucket]
        geo, best = ranked[0]
        how = ""
        close = _close(ranked)
        if runoff is not None and close:
            shapes = [s["shape"] for s in best.gate["shapes"] if bucket_of(s["shape"], batch) == bucket]
            for challenger_geo, challenger in close:
                r = runoff(bucket, best, challenger, shapes)
                if runoffs is not None:
                    runoffs.append(r)
                if r.winner == challenger.label:
                    best, geo = challenger, challenger_geo
                    how = f"; won a run-off against {r.leader}: {r.why}"
                else:
                    how = f"; kept after a run-off against {r.challenger}: {r.why}"
        note = f"{bucket} ({geo:.2f}x{how})"
        winners.append((bucket, best))
        won.setdefault(best.label, []).append(note)
    updated = []
    for o in outcomes:
        if o.label in won:
            o = dataclasses.replace(o, accepted=True, reason=f"accepted for {', '.join(won[o.label])}; {o.reason}")
        updated.append(o)
    return winners, updated
