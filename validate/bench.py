"""GPU microbenchmark pieces: CUDA-graph timing in a worker, the statistics and the verdict.

Method (per shape): input sets rotated so the working set exceeds twice the L2 cache (a kernel
never finds its data in L2 left there by the previous call), each kernel captured in a CUDA
graph that calls it once per input set, cycling through the sets until the graph makes at least
``min_graph_calls`` calls (the gap between two graph replays is paid once per graph, not once per
call), graphs replayed enough times per sample to last ``min_sample_us``, samples interleaved
A/B, B/A, ... with CUDA events; the median per-call time with a distribution-free 95 % interval,
and the median of the paired ratios (robust to clock drift during the run) with its interval. A
verdict of faster/slower needs the ratio's interval to clear 1 +/- ``min_effect``.

In the gate the original (A) and the candidate (B) are timed in two worker processes, each with
its own ``GraphTimer``, and the judge interleaves them (``skel.validate.timing``); the judge
never takes B's numbers on trust. ``benchmark_shape`` times two trusted callables in one process
(tools and experiments).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from skel.device import read_device
from skel.validate.environment import nvidia_driver
from skel.validate.numerics import clone_inputs
from skel.validate.result import PerfResult, Timing
from skel.validate.spec import Shape, TargetSpec


@dataclass(frozen=True)
class BenchConfig:
    samples: int = 30  # timed samples per kernel and shape, interleaved with the other kernel
    warmup: int = 3  # graph replays before timing
    min_sample_us: float = 2000.0  # replays per sample so one sample lasts at least this long (the judge's
    # clock checks the worker's report per sample, so a sample must be long beside a message's round trip)
    min_graph_calls: int = 8  # calls captured per graph (the input sets cycled), whatever the sets
    l2_bytes: int | None = None  # None: the L2 size of the device in use
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


def capture_graph(fn: Callable, arg_sets: list[dict[str, Any]], min_calls: int = 1):
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


def replay_time_us(graph, reps: int) -> float:
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
    """The device the gate timed on: the roofline's rates (measured) and what it is (read)."""

    copy_bps: float
    matmul_flops: float
    name: str = ""
    l2_bytes: int = 0
    sm_count: int = 0
    driver: str = ""
    versions: str = ""  # "torch 2.11.0+cu130, triton 3.6.0, CUDA 13.0"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> "Machine":
        return cls(float(value["copy_bps"]), float(value["matmul_flops"]), str(value.get("name", "")),
                   int(value.get("l2_bytes", 0)), int(value.get("sm_count", 0)), str(value.get("driver", "")),
                   str(value.get("versions", "")))


def device_facts() -> dict:
    """Name, L2 size, SM count, driver and versions of the current CUDA device (nothing measured)."""
    import triton

    device = read_device()
    return {
        "name": device.name, "l2_bytes": device.l2_bytes, "sm_count": device.sm_count, "driver": nvidia_driver(),
        "versions": f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}",
    }


def measure_machine(known: Machine | None = None) -> Machine:
    """The current device's facts; the rates measured unless ``known`` (an earlier worker's) gives them."""
    facts = device_facts()
    if known is not None and known.copy_bps > 0:
        return Machine(known.copy_bps, known.matmul_flops, **facts)
    return Machine(copy_bandwidth(), matmul_rate(), **facts)


def rotation_sets(nbytes: int, l2_bytes: int, max_sets: int) -> int:
    """Input sets to cycle so that the working set is over twice the L2 cache."""
    return max(1, min(max_sets, math.ceil(2 * l2_bytes / max(nbytes, 1))))


class GraphTimer:
    """One kernel in a CUDA graph over its input sets (in a worker): ``replay`` times ``reps`` replays
    with CUDA events; ``results`` are what the timed calls left: the first round's outputs and every
    set's in-place tensors (the judge checks them against the other kernel's)."""

    def __init__(self, fn: Callable, arg_sets: list[dict[str, Any]], inplace: tuple[str, ...], min_calls: int):
        self.arg_sets, self.inplace = arg_sets, inplace
        self.graph, self.outs, self.per_graph = capture_graph(fn, arg_sets, min_calls)

    def replay(self, reps: int) -> float:
        return replay_time_us(self.graph, reps)

    def results(self) -> list[tuple[str, torch.Tensor]]:
        torch.cuda.synchronize()
        out = []
        for i, value in enumerate(self.outs):
            values = value if isinstance(value, (tuple, list)) else (value,)
            out += [(f"out{i}.{j}", v) for j, v in enumerate(values) if isinstance(v, torch.Tensor)]
        for i, args in enumerate(self.arg_sets):
            out += [(f"set{i}.{name}", args[name]) for name in self.inplace]
        return out


def finite(values) -> bool:
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
            return False
        if isinstance(v, (tuple, list)) and not finite(v):
            return False
    return True


def perf_result(times_a: list[float], times_b: list[float], ratios: list[float], nbytes: int, nflops: int,
                machine: Machine, config: BenchConfig, sets: int, calls: int) -> PerfResult:
    """The verdict and the roofline standing from per-call times (us) of A and B and their paired ratios."""
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


def benchmark_shape(spec: TargetSpec, shape: Shape, dtype: str, original: Callable, candidate: Callable,
                    machine: Machine, config: BenchConfig = BenchConfig()) -> PerfResult:
    """Time two trusted callables (A, B) at one shape in this process; raises RuntimeError when the
    timing cannot be trusted (values diverged under replay). The gate does not use this: it keeps
    the candidate in a worker of its own (``skel.validate.timing``)."""
    nbytes = spec.bytes(shape, dtype)
    sets = rotation_sets(nbytes, config.l2_bytes or machine.l2_bytes or device_facts()["l2_bytes"], config.max_sets)
    shared = [spec.make_inputs(shape, dtype, config.seed_base + i, "cuda") for i in range(sets)]
    # In-place inputs (the state) get one copy per kernel; read-only inputs are shared.
    arg_a = [clone_inputs(s) if spec.inplace else s for s in shared]
    arg_b = [clone_inputs(s) for s in shared] if spec.inplace else shared
    timer_a = GraphTimer(original, arg_a, spec.inplace, config.min_graph_calls)
    timer_b = GraphTimer(candidate, arg_b, spec.inplace, config.min_graph_calls)
    for _ in range(config.warmup):
        timer_a.replay(1)
        timer_b.replay(1)
    one = max(timer_a.replay(1), timer_b.replay(1), 1e-3)
    reps = max(1, math.ceil(config.min_sample_us / one))
    calls = reps * timer_a.per_graph
    times_a, times_b, ratios = [], [], []
    for i in range(config.samples):
        order = ((timer_a, times_a), (timer_b, times_b)) if i % 2 == 0 else ((timer_b, times_b), (timer_a, times_a))
        for timer, sink in order:
            sink.append(timer.replay(reps) / calls)
        ratios.append(times_a[-1] / times_b[-1])
    if not finite([t for _, t in timer_a.results() + timer_b.results()]):
        raise RuntimeError("values diverged (NaN/inf) under graph replay: timing not trusted")
    return perf_result(times_a, times_b, ratios, nbytes, spec.flops(shape, dtype), machine, config, sets, calls)
