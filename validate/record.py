"""A gate verdict as catalog evidence: one ``ValidationRun`` per judged shape.

Shared by ``skel apply`` (every candidate) and ``skel validate`` (the candidate it was given): a timed
shape gives a speedup with its 95 % interval and both sides' microseconds and % of roofline; an
untimed one a numerics verdict with no number (nothing is guessed). ``env`` (``validate.environment``)
says where it ran; it rides in each run's ``extra`` beside the GPU and version columns.
"""
from __future__ import annotations

from skel.catalog.store import ValidationRun


def runs_from_gate(gate: dict, skeletons, label: str, kernel: str, source_hash: str, reason: str,
                   env: dict) -> list[ValidationRun]:
    env = dict(env)
    driver = ((gate or {}).get("machine") or {}).get("driver")  # as the worker that timed this gate read it
    if driver:
        env["driver"] = driver
    env_pairs = tuple((k, v) for k, v in env.items() if k not in ("gpu", "torch", "triton", "date") and v)
    runs = []
    for shape in (gate or {}).get("shapes", []):
        perf = shape.get("perf")
        numerics = shape.get("numerics")
        extra = [("label", label), *env_pairs]
        if perf:
            verdict, metric = perf["verdict"], "speedup"
            median, low, high, unit = perf["speedup"], perf["speedup_low"], perf["speedup_high"], "x"
            extra += [("baseline_roofline_pct", perf["baseline_roofline_pct"]),
                      ("candidate_roofline_pct", perf["candidate_roofline_pct"]),
                      ("baseline_us", perf["baseline"]["median_us"]),
                      ("candidate_us", perf["candidate"]["median_us"])]
            extra += [(k, perf[k]) for k in ("floor_us", "baseline_floor_x", "candidate_floor_x", "regime")
                      if perf.get(k)]
        else:
            verdict = "numerics-pass" if numerics and numerics.get("passed") else "numerics-fail"
            metric, median, low, high, unit = "numerics", None, None, None, ""
        runs.append(ValidationRun(
            skeletons=tuple(skeletons), kernel=kernel, shape=shape["shape"], dtype=gate.get("dtype", "") or "",
            metric=metric, verdict=verdict, median=median, ci_low=low, ci_high=high, unit=unit,
            gpu=env.get("gpu", ""), torch_version=env.get("torch", ""), triton_version=env.get("triton", ""),
            source_hash=source_hash, reason=reason, extra=tuple(extra)))
    return runs
