"""CUDA-graph timing shared by the benchmark probes (t1_ceiling_probe, merge_tiles_probe and what imports
them); plain torch, so a bare GPU machine runs them without skel installed.

Each callable is captured once over R rotated input sets (one graph replay = R calls), and the graphs are
replayed in turn, replay by replay, so every variant sees the same machine state; the copy bandwidth is
the roofline's denominator, measured in the same process.
"""
from __future__ import annotations


def copy_bandwidth(torch) -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second (median of 20 copies)."""
    n = 1 << 28
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    times.sort()
    del src, dst
    return 2 * n * 4 / times[len(times) // 2]


def capture(torch, call, sets: list):
    """One CUDA graph calling ``call(x)`` for every input set (warmed up, so compiled, outside the
    capture); the caller keeps ``sets`` alive as long as the graph."""
    for x in sets:
        call(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x in sets:
            call(x)
    graph.replay()
    torch.cuda.synchronize()
    return graph


def interleaved_us(torch, graphs: dict, reps: int, per_replay: int) -> dict[str, list[float]]:
    """Microseconds per call of each graph's callable, sorted: ``reps`` rounds, each replaying every
    graph once, a replay's time divided by the ``per_replay`` calls it makes."""
    times = {name: [] for name in graphs}
    for _ in range(reps):
        for name, graph in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            times[name].append(a.elapsed_time(b) * 1e3 / per_replay)
    return {name: sorted(ts) for name, ts in times.items()}
