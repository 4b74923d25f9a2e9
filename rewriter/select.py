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


def choose_winners(outcomes: list, perf_measured: bool) -> tuple[list, list]:
    """Returns ([(bucket, winning outcome)], outcomes with accepted/reason updated)."""
    if not perf_measured:
        return [], outcomes
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
