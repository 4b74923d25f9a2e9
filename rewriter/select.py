"""Choose the accepted candidate per shape bucket.

A bucket is the shapes that differ only in the batch dimension N (e.g. all T=1 decode
shapes). In a bucket, a candidate qualifies when its numerics passed at every shape, it is
measurably faster at one shape at least and measurably slower at none; the qualifier with the
best geometric-mean speedup wins. Different winners in different buckets make a dispatch.
Without performance measurements nothing qualifies.
"""
from __future__ import annotations

import dataclasses
import math

from skel.validate.spec import Shape

BATCH_DIM = "N"


def bucket_of(label: str) -> str:
    try:
        shape = Shape.parse(label)
    except ValueError:
        return label
    rest = [f"{k}{v}" for k, v in shape.dims if k != BATCH_DIM]
    return "-".join(rest) or "all"


ACCURACY_GAIN = 2.0  # a precision rewrite must cut the error against float64 at least this much


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


def choose_winners(outcomes: list, perf_measured: bool, precision_only: frozenset = frozenset()) -> tuple[list, list]:
    """Returns ([(bucket, winning outcome)], outcomes with accepted/reason updated).

    ``precision_only``: labels of candidates made only of precision skeletons; those are
    judged on accuracy (speed is reported, not required), and win every bucket they pass.
    """
    if not perf_measured:
        return [], outcomes
    accurate = {o.label: why for o in outcomes
                if o.label in precision_only and o.numerics_passed and o.gate and (why := more_accurate(o))}
    if accurate:
        best = next(o for o in outcomes if o.label in accurate)
        buckets = sorted({bucket_of(s["shape"]) for s in best.gate["shapes"]})
        updated = [dataclasses.replace(o, accepted=True, reason=f"{accurate[o.label]}; {o.reason}") if o is best else o
                   for o in outcomes]
        return [(b, best) for b in buckets], updated
    per_bucket: dict[str, list[tuple[float, object]]] = {}
    for o in outcomes:
        if not o.numerics_passed or not o.gate:
            continue
        buckets: dict[str, list[dict]] = {}
        for s in o.gate["shapes"]:
            buckets.setdefault(bucket_of(s["shape"]), []).append(s)
        for bucket, shapes in buckets.items():
            perfs = [s.get("perf") for s in shapes]
            if any(p is None for p in perfs):
                continue
            if any(p["verdict"] == "slower" for p in perfs) or not any(p["verdict"] == "faster" for p in perfs):
                continue
            geo = math.exp(sum(math.log(max(p["speedup"], 1e-9)) for p in perfs) / len(perfs))
            per_bucket.setdefault(bucket, []).append((geo, o))
    winners = []
    won: dict[str, list[str]] = {}
    for bucket in sorted(per_bucket):
        geo, best = max(per_bucket[bucket], key=lambda t: t[0])
        winners.append((bucket, best))
        won.setdefault(best.label, []).append(f"{bucket} ({geo:.2f}x)")
    updated = []
    for o in outcomes:
        if o.label in won:
            o = dataclasses.replace(o, accepted=True, reason=f"accepted for {', '.join(won[o.label])}; {o.reason}")
        updated.append(o)
    return winners, updated
