"""The gate's verdicts as frozen dataclasses; JSON is a rendering of them (``to_dict``)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class OutputNumerics:
    """One output at one shape, worst case over the seeds.

    rel_rms / max_abs: candidate against the float64 reference.
    original_rel_rms: the original kernel against the float64 reference (its precision).
    diff_rel_rms / diff_max_abs: candidate against the original kernel (differential oracle).
    None where the output is judged by a custom check (e.g. top-k indices) or never compared.
    """

    output: str
    dtype: str
    rel_rms: float | None
    max_abs: float | None
    original_rel_rms: float | None
    diff_rel_rms: float | None
    diff_max_abs: float | None
    tol_rel_rms: float | None
    tol_max_abs: float | None
    passed: bool


@dataclass(frozen=True)
class NumericsResult:
    passed: bool
    seeds: tuple[int, ...]
    outputs: tuple[OutputNumerics, ...]
    failures: tuple[str, ...]  # one line each, "seed S: what, where, values"


@dataclass(frozen=True)
class Timing:
    """Per-call time: median and a distribution-free 95 % interval of the median (us)."""

    median_us: float
    low_us: float
    high_us: float
    samples: int


@dataclass(frozen=True)
class PerfResult:
    """Baseline (the original kernel) and candidate timed interleaved: A in the oracle worker, B in the candidate worker, by the judge.

    speedup = baseline time / candidate time, median of the paired ratios with its 95 %
    interval; verdict "faster" / "slower" only when the interval clears both 1 and the
    minimum effect, else "within noise".
    """

    baseline: Timing
    candidate: Timing
    speedup: float
    speedup_low: float
    speedup_high: float
    verdict: str
    bytes: int
    flops: int
    copy_gbps: float  # device-to-device copy, read + write counted, measured in this run
    matmul_tflops: float  # fp32 (TF32-allowed) torch matmul, measured in this run
    baseline_roofline_pct: float
    candidate_roofline_pct: float
    rotation_sets: int  # input sets cycled so the working set exceeds the L2 cache
    calls_per_sample: int
    # the measured floor (skel.validate.floor): the best in-place copy of the same bytes, timed the same way
    floor_us: float = 0.0  # 0: not measured
    floor_grid: str = ""
    baseline_floor_x: float = 0.0  # original time / floor
    candidate_floor_x: float = 0.0
    # % of the data layout's copy ceiling (TargetSpec.copy_ceiling), where a probe defines one; 0: none
    baseline_ceiling_pct: float = 0.0
    candidate_ceiling_pct: float = 0.0
    regime: str = ""  # how the data met the kernel (skel.validate.floor.REGIME)


@dataclass(frozen=True)
class ShapeVerdict:
    shape: str  # label, e.g. "N64-T1-H32-HV32-K128-V128"
    numerics: NumericsResult | None  # None: never reached (the candidate failed earlier)
    perf: PerfResult | None
    perf_note: str  # why perf is None ("not measured: no GPU", ...) or ""


@dataclass(frozen=True)
class GateResult:
    """accepted: every shape passed numerics (and the ``require``d speed, if any).

    error: set when the gate could not judge at all (the original kernel fails its own
    spec, crashes, or the target is unusable): the input is bad, not the candidate.
    isolation: what contained the candidate's worker (``sandbox.Isolation.to_dict``).
    """

    accepted: bool
    reasons: tuple[str, ...]
    shapes: tuple[ShapeVerdict, ...]
    family: str
    target: str
    candidate: str
    dtype: str
    device: str
    shape_set: str
    seeds: tuple[int, ...]
    error: str | None = None
    machine: object | None = None  # bench.Machine the roofline used (None: nothing was timed)
    isolation: dict | None = None  # sandbox.Isolation of the candidate's worker, as a dict (summary: one line)
    oracle: str = "reference"  # "reference" (the spec's float64 reference) or "original" (calibrated self-oracle)
    notes: tuple[str, ...] = ()  # what the gate assumed or could not do (not reasons to reject)

    @property
    def faster_at(self) -> tuple[str, ...]:
        return tuple(s.shape for s in self.shapes if s.perf and s.perf.verdict == "faster")

    @property
    def slower_at(self) -> tuple[str, ...]:
        return tuple(s.shape for s in self.shapes if s.perf and s.perf.verdict == "slower")

    def to_dict(self) -> dict:
        out = _finite(asdict(self))
        out["faster_at"] = list(self.faster_at)
        out["slower_at"] = list(self.slower_at)
        return out


def _finite(value):
    """JSON has no NaN/inf: render them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
