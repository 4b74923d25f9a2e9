"""Timing one shape from the judge's side: the original (A) in the oracle worker, the candidate (B)
in its own, interleaved by the judge, and nothing of B's taken on its word.

Both workers build a CUDA graph over the same input sets (made by the oracle, copied to B) and
replay it when the judge says, for the number of replays the judge says. The judge checks:
- **its own clock**: every sample's round trip is timed by the judge; B's report may not fall
  short of it by more than A's (same protocol, honest) does: a patched event timer shows here;
- **B does not run while A is timed**: B's process group is frozen (SIGSTOP) during each A
  sample; A is timed alone (B frozen, after A's time has settled, so that work B queued has
  drained) before and after the interleaved block, and A between B's samples must match it:
  work B leaves queued on the GPU to slow A down shows here;
- **the work was done**: after the last sample both hand over what their timed calls left (the
  first round's outputs and every set's in-place tensors, after the same number of calls); B's
  must match A's within the spec's tolerance: a graph replay B skipped shows here;
- **physics**: a candidate measured above the roofline (bytes / copy rate, FLOPs / matmul rate)
  is a rejection to explain, never a win.
A failed check makes the timing untrusted and rejects the candidate.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Mapping

from skel.device import device_profile
from skel.validate.bench import BenchConfig, Machine, finite, graph_sequence, median_interval, perf_result, rotation_sets
from skel.validate.numerics import compare
from skel.validate.result import PerfResult
from skel.validate.session import Worker
from skel.validate.spec import Shape, SpecInfo, Tolerance

SOLO = 5  # samples of each kernel alone, before and after the interleaved block
ROOFLINE_LIMIT = 105.0  # % of the roofline above which a time is not physical (measurement noise below it)


class Untrusted(Exception):
    """The candidate's timing failed a check: a rejection with this reason."""


class NotMeasured(Exception):
    """The timing cannot be taken at this shape (e.g. values diverge under replay): no verdict."""


@dataclass
class _Samples:
    reported: list[float]  # us per sample, as the worker reported (CUDA events)
    wall: list[float]  # us per sample, the judge's clock around the request

    def overhead(self) -> list[float]:
        return [w - r for w, r in zip(self.wall, self.reported)]


def time_shape(oracle: Worker, candidate: Worker, info: SpecInfo, shape: Shape, dtype: str, machine: Machine,
               config: BenchConfig, nbytes: int, nflops: int, time_limit: float, oracle_limit: float,
               calibrated: Mapping[str, Tolerance] | None = None) -> PerfResult:
    """PerfResult for one shape; raises Untrusted (reject) or NotMeasured (no verdict). ``calibrated``: the
    tolerances by dtype numerics measured at this shape (a spec without a reference has no others)."""
    sets = rotation_sets(nbytes, config.l2_bytes or machine.l2_bytes or device_profile().l2_bytes,
                         config.max_sets)
    per_graph = len(graph_sequence(sets, config.min_graph_calls))
    made = oracle.request({"op": "bench_inputs", "shape": shape.label, "dtype": dtype, "sets": sets,
                           "seed_base": config.seed_base}, oracle_limit, f"making the timing inputs at {shape.label}")
    tensors = oracle.fetch(made, oracle_limit, "handing over the timing inputs", device="cpu")
    descriptor, new, fds = candidate.upload(tensors)
    del tensors
    setup = {"op": "bench_setup", "inplace": list(info.inplace), "min_graph_calls": config.min_graph_calls}
    _check(oracle.request(setup, oracle_limit, f"capturing the original's graph at {shape.label}"), "original")
    _check(candidate.request({**setup, "tensors": descriptor, "set_values": made["set_values"], "new_blocks": new},
                             time_limit, f"capturing the candidate's graph at {shape.label}", fds), "candidate")

    def sample(worker: Worker, reps: int, freeze: Worker | None, limit: float) -> tuple[float, float]:
        if freeze is not None:
            freeze.freeze()
        start = time.perf_counter()
        try:
            reply = worker.request({"op": "replay", "reps": reps}, limit, f"timing at {shape.label}")
        finally:
            wall = (time.perf_counter() - start) * 1e6
            if freeze is not None:
                freeze.thaw()
        us = reply.get("us")
        if not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
            raise Untrusted(f"the candidate's worker reported a time of {us!r}")
        return float(us), wall

    for _ in range(config.warmup):
        sample(oracle, 1, candidate, oracle_limit)
        sample(candidate, 1, None, time_limit)
    a_one, a_wall = sample(oracle, 1, candidate, oracle_limit)
    _, b_wall = sample(candidate, 1, None, time_limit)
    b_one = max(b_wall - (a_wall - a_one), 1e-3)  # the judge's estimate of one replay of B
    reps = max(1, math.ceil(config.min_sample_us / max(a_one, b_one, 1e-3)))
    calls = reps * per_graph

    a_solo, b_solo, a_mixed, b_mixed = (_Samples([], []) for _ in range(4))
    drained = [0]  # replays A made while its time settled; B makes as many, so their results stay comparable

    def record(worker: Worker, into: _Samples, freeze: Worker | None, limit: float) -> None:
        us, wall = sample(worker, reps, freeze, limit)
        into.reported.append(us)
        into.wall.append(wall)

    def solo_block() -> None:
        candidate.freeze()  # for the whole block: B can queue no more work, and what it queued drains first
        try:
            drained[0] += reps * _drain(lambda: sample(oracle, reps, None, oracle_limit)[0])
            for _ in range(SOLO):
                record(oracle, a_solo, None, oracle_limit)
        finally:
            candidate.thaw()
        for _ in range(SOLO):  # B replays as often as A, so their in-place results stay comparable
            record(candidate, b_solo, None, time_limit)

    solo_block()
    ratios = []
    for i in range(config.samples):
        pair = ((oracle, a_mixed, candidate, oracle_limit), (candidate, b_mixed, None, time_limit))
        for worker, into, freeze, limit in (pair if i % 2 == 0 else pair[::-1]):
            record(worker, into, freeze, limit)
        ratios.append(a_mixed.reported[-1] / b_mixed.reported[-1])
    solo_block()

    if drained[0]:
        candidate.request({"op": "replay", "reps": drained[0]}, time_limit * max(1, drained[0] // reps),
                          f"replaying as often as the original at {shape.label}")
    _check_clock(a_mixed, b_mixed)
    _check_alone(a_solo, a_mixed, config)
    _check_work(oracle, candidate, info, shape, oracle_limit, time_limit, calibrated or {})
    result = perf_result([t / calls for t in a_mixed.reported], [t / calls for t in b_mixed.reported], ratios,
                         nbytes, nflops, machine, config, sets, calls)
    result = _with_floor(result, oracle, info, shape, nbytes, config, machine, oracle_limit)
    if result.baseline_roofline_pct > ROOFLINE_LIMIT:
        raise NotMeasured(f"the original measures {result.baseline_roofline_pct:.0f} % of the roofline: the spec's"
                          f" bytes/FLOPs understate its traffic, or its data stays in a cache")
    if result.candidate_roofline_pct > ROOFLINE_LIMIT:
        raise Untrusted(f"the candidate measures {result.candidate_roofline_pct:.0f} % of the roofline"
                        f" ({result.candidate.median_us:.2f} us for {nbytes} bytes at {machine.copy_bps / 1e12:.2f} TB/s):"
                        f" faster than the device allows, so the timing is not believed")
    return result


def _with_floor(result: PerfResult, oracle: Worker, info: SpecInfo, shape: Shape, nbytes: int, config: BenchConfig,
                machine: Machine, limit: float) -> PerfResult:
    """The result with the shape's measured floor (in the oracle's process) and the layout's ceiling beside the
    roofline; a floor that cannot be measured leaves those fields at 0 and the verdict as it was."""
    from skel.validate.floor import REGIME

    ceiling = {}
    if info.copy_ceiling > 0:
        ceiling = {"baseline_ceiling_pct": result.baseline_roofline_pct / info.copy_ceiling,
                   "candidate_ceiling_pct": result.candidate_roofline_pct / info.copy_ceiling}
    reply = oracle.request({"op": "floor", "bytes": nbytes, "max_sets": config.max_sets,
                            "l2_bytes": config.l2_bytes or machine.l2_bytes or device_profile().l2_bytes,
                            "min_calls": config.min_graph_calls}, limit, f"measuring the floor at {shape.label}")
    us = reply.get("us")  # a failed measurement ({"failed": ...}) leaves no floor
    if not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
        return dataclasses.replace(result, regime=REGIME, **ceiling)
    return dataclasses.replace(result, floor_us=float(us), floor_grid=str(reply.get("grid", "")),
                               baseline_floor_x=result.baseline.median_us / us,
                               candidate_floor_x=result.candidate.median_us / us, regime=REGIME, **ceiling)


def _drain(time_once, settle: float = 0.02, max_s: float = 5.0) -> int:
    """Time A until two samples in a row agree within ``settle`` (work another process left queued on
    the device has run out), for at most ``max_s`` seconds; returns the samples taken. Raises Untrusted
    if the device never settles."""
    last = time_once()
    taken = 1
    end = time.monotonic() + max_s
    while time.monotonic() < end:
        now = time_once()
        taken += 1
        if abs(now - last) <= settle * min(now, last):
            return taken
        last = now
    raise Untrusted(f"the device stayed busy for {max_s:g} s with the candidate frozen: it left work queued")


def _check(reply: dict, who: str) -> None:
    if "failed" in reply or "internal" in reply or "per_graph" not in reply:
        text = str(reply.get("failed") or reply.get("internal") or reply)[-300:]
        if who == "original":
            raise NotMeasured(f"the original's graph could not be captured: {text.strip().splitlines()[-1]}")
        raise Untrusted(f"the candidate's graph could not be captured: {text.strip().splitlines()[-1]}")


def _spread(values: list[float]) -> float:
    xs = sorted(values)
    if len(xs) < 4:
        return 0.0
    return xs[(3 * len(xs)) // 4] - xs[len(xs) // 4]


def _check_clock(a: _Samples, b: _Samples) -> None:
    """B's reports against the judge's clock, calibrated by A's (the same protocol, honest)."""
    da, db = a.overhead(), b.overhead()
    med_da, med_db = median_interval(da)[0], median_interval(db)[0]
    wall_b = median_interval(b.wall)[0]
    allowed = max(40.0, 0.02 * wall_b) + 2 * _spread(da)
    if med_db - med_da > allowed:
        raise Untrusted(
            f"the candidate's timer disagrees with the judge's clock: it reported {median_interval(b.reported)[0]:.0f} us"
            f" per sample where the judge saw {wall_b:.0f} us ({med_db:.0f} us unaccounted for; the original's"
            f" worker leaves {med_da:.0f} us)")


def _check_alone(solo: _Samples, mixed: _Samples, config: BenchConfig) -> None:
    """A between B's samples must run as fast as A with B idle (B frozen throughout)."""
    s, m = median_interval(solo.reported), median_interval(mixed.reported)
    if m[1] > s[2] * (1 + config.min_effect) and m[0] > s[0] * (1 + 2 * config.min_effect):
        raise Untrusted(
            f"the original ran {100 * (m[0] / s[0] - 1):.0f} % slower timed between the candidate's samples than"
            f" timed alone: the candidate left work running on the device")


def _check_work(oracle: Worker, candidate: Worker, info: SpecInfo, shape: Shape, oracle_limit: float,
                time_limit: float, calibrated: Mapping[str, Tolerance]) -> None:
    """What the timed calls left, B's against A's after the same calls."""
    a = oracle.fetch(oracle.request({"op": "timed_results"}, oracle_limit, "handing over the timed results"),
                     oracle_limit, "handing over the timed results")
    if not finite(list(a.values())):
        raise NotMeasured("values diverged (NaN/inf) under graph replay: timing not trusted")
    reply = candidate.request({"op": "timed_results"}, time_limit, "handing over the timed results")
    b = candidate.fetch(reply, time_limit, "handing over the timed results")
    for name, want in a.items():
        got = b.get(name)
        where = f"'{name}' after the timed calls at {shape.label}"
        if got is None or tuple(got.shape) != tuple(want.shape):
            raise Untrusted(f"the candidate's timed calls left {where} missing or of another shape")
        if not finite([got]):
            raise Untrusted(f"the candidate's timed calls left NaN/inf in {where}; the original's are finite")
        dtype = str(want.dtype).removeprefix("torch.")
        tol = calibrated[dtype] if dtype in calibrated else _tolerance(info, dtype)
        cmp = compare(got, want, tol)
        if not cmp.passed:
            raise Untrusted(f"the candidate's timed calls left {where} unlike the original's after the same calls"
                            f" ({cmp.detail}): it did not do the work it was timed on")


def _tolerance(info: SpecInfo, dtype: str) -> Tolerance:
    try:
        return info.tolerance(dtype)
    except KeyError:
        return Tolerance(0.0, 0.0)  # integer results (indices) must match exactly
