"""GPU microbenchmark: the original and the candidate timed interleaved in one process.

Method (per shape): input sets rotated so the working set exceeds twice the L2 cache (a kernel
never finds its data in L2 left there by the previous call), each kernel captured in a CUDA
graph that calls it once per input set, cycling through the sets until the graph makes at least
``min_graph_calls`` calls (the gap between two graph replays is paid once per graph, not once per
call), graphs replayed enough times per sample to last
``min_sample_us``, samples interleaved A/B, B/A, ... with CUDA events; the median per-call
time with a distribution-free 95 % interval, and the median of the paired ratios (robust to
clock drift during the run) with its interval. A verdict of faster/slower needs the ratio's
interval to clear 1 +/- ``min_effect``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from skel.validate.numerics import clone_inputs
from skel.validate.result import PerfResult, Timing
from skel.validate.spec import Shape, TargetSpec


@dataclass(frozen=True)
class BenchConfig:
    samples: int = 30  # timed samples per kernel and shape, interleaved with the other kernel
    warmup: int = 3  # graph replays before timing
    min_sample_us: float = 300.0  # replays per sample so one sample lasts at least this long
    min_graph_calls: int = 8  # calls captured per graph (the input sets cycled), whatever the sets
    l2_bytes: int = 60 * 2**20  # H200: 60 MB
    max_sets: int = 64
    min_effect: float = 0.02  # differences under 2 % are noise whatever the interval says
    seed_base: int = 10_000  # inputs for timing are not the numerics inputs


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and the order-statistic interval that holds it with ``confidence`` (binomial)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    z = 1.959963984540054 if confidence == 0.95 else _z(confidence)
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return med, xs[lo], xs[hi]


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def graph_sequence(n_sets: int, min_calls: int) -> list[int]:
    """The input-set index of each call a graph captures: every set once, then around again until
    there are at least ``min_calls`` calls (whole rounds, so every set is called equally often)."""
    rounds = max(1, math.ceil(min_calls / max(n_sets, 1)))
    return [i % n_sets for i in range(rounds * n_sets)]


def _graph(fn: Callable, arg_sets: list[dict[str, Any]], min_calls: int = 1):
    """Capture one CUDA graph calling ``fn`` once per input set, the sets cycled until it makes
    at least ``min_calls`` calls; returns (graph, outputs of the first round)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for args in arg_sets:  # compile and settle allocations outside the capture
            fn(**args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    outs = []
    order = graph_sequence(len(arg_sets), min_calls)
    with torch.cuda.graph(graph):
        for n, i in enumerate(order):
            out = fn(**arg_sets[i])
            if n < len(arg_sets):
                outs.append(out)
    torch.cuda.synchronize()
    return graph, outs, len(order)


def _replay_time_us(graph, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def copy_bandwidth(nbytes: int = 1 << 30, samples: int = 20, warmup: int = 3) -> float:
    """Device-to-device copy rate in bytes/s, read + written, the best of ``samples`` copies after
    ``warmup``: the roofline's denominator is what the memory system can do, and the best sample is
    stable across processes where the median moved by ~5 % (3.96-4.20 TB/s on one H200 in one run,
    one worker per candidate), which moved every candidate's "% of roofline" with it."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    return 2 * nbytes / min(times)


def matmul_rate(n: int = 8192, samples: int = 10) -> float:
    """fp32 matmul with TF32 allowed, flop/s (the rate fp32 tl.dot at default precision gets)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        a @ b
        times = []
        for _ in range(samples):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / median_interval(times)[0]


@dataclass(frozen=True)
class Machine:
    copy_bps: float
    matmul_flops: float


def measure_machine() -> Machine:
    return Machine(copy_bandwidth(), matmul_rate())


def _finite(values) -> bool:
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
            return False
        if isinstance(v, (tuple, list)) and not _finite(v):
            return False
    return True


def benchmark_shape(spec: TargetSpec, shape: Shape, dtype: str, original: Callable, candidate: Callable,
                    machine: Machine, config: BenchConfig = BenchConfig()) -> PerfResult:
    """Time the original (A) and the candidate (B) at one shape; raises RuntimeError when the
    timing cannot be trusted (values diverged under replay)."""
    nbytes = spec.bytes(shape, dtype)
    nflops = spec.flops(shape, dtype)
    sets = max(1, min(config.max_sets, math.ceil(2 * config.l2_bytes / max(nbytes, 1))))
    shared = [spec.make_inputs(shape, dtype, config.seed_base + i, "cuda") for i in range(sets)]
    # In-place inputs (the state) get one copy per kernel; read-only inputs are shared. Decaying
    # gates keep the state bounded however often a graph replays.
    arg_a = [clone_inputs(s) if spec.inplace else s for s in shared]
    arg_b = [clone_inputs(s) for s in shared] if spec.inplace else shared
    graph_a, outs_a, per_graph = _graph(original, arg_a, config.min_graph_calls)
    graph_b, outs_b, _ = _graph(candidate, arg_b, config.min_graph_calls)
    for _ in range(config.warmup):
        graph_a.replay()
        graph_b.replay()
    one = max(_replay_time_us(graph_a, 1), _replay_time_us(graph_b, 1), 1e-3)
    reps = max(1, math.ceil(config.min_sample_us / one))
    calls = reps * per_graph
    times_a, times_b, ratios = [], [], []
    for i in range(config.samples):
        order = ((graph_a, times_a), (graph_b, times_b)) if i % 2 == 0 else ((graph_b, times_b), (graph_a, times_a))
        for graph, sink in order:
            sink.append(_replay_time_us(graph, reps) / calls)
        ratios.append(times_a[-1] / times_b[-1])
    torch.cuda.synchronize()
    live = [a[n] for a in arg_a + arg_b for n in spec.inplace] + outs_a + outs_b
    if not _finite(live):
        raise RuntimeError("values diverged (NaN/inf) under graph replay: timing not trusted")
    ta, tb = median_interval(times_a), median_interval(times_b)
    sp = median_interval(ratios)
    if sp[1] > 1 + config.min_effect:
        verdict = "faster"
    elif sp[2] < 1 - config.min_effect:
        verdict = "slower"
    else:
        verdict = "within noise"
    roof_s = max(nbytes / machine.copy_bps, nflops / machine.matmul_flops)
    return PerfResult(
        baseline=Timing(ta[0], ta[1], ta[2], len(times_a)),
        candidate=Timing(tb[0], tb[1], tb[2], len(times_b)),
        speedup=sp[0], speedup_low=sp[1], speedup_high=sp[2], verdict=verdict,
        bytes=nbytes, flops=nflops,
        copy_gbps=machine.copy_bps / 1e9, matmul_tflops=machine.matmul_flops / 1e12,
        baseline_roofline_pct=100.0 * roof_s / (ta[0] * 1e-6),
        candidate_roofline_pct=100.0 * roof_s / (tb[0] * 1e-6),
        rotation_sets=sets, calls_per_sample=calls,
    )
