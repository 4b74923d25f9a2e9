"""CUDA-graph timing shared by the probes (merge_tiles_probe here, and through sys.path those of
../2026-11-29-t1-copy-ceiling/ and ../2026-11-30-sk014-lazy-at-t8/); plain torch, so a bare GPU machine runs them without skel installed.

Each callable is captured once over R rotated input sets (one graph replay = R calls), and the graphs are
replayed in turn, replay by replay, so every variant sees the same machine state; the copy bandwidth is
the roofline's denominator, measured in the same process.
"""
from __future__ import annotations


def copy_bandwidth(torch, best: bool = False) -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second: the median of 20 copies, or with
    ``best`` the fastest (the gate's denominator, skel.validate.bench.copy_bandwidth)."""
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
    return 2 * n * 4 / (times[0] if best else times[len(times) // 2])


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


def rotation(state_bytes: int) -> int:
    """Input sets per graph so that one replay moves >= 240 MB of state (the 60 MB L2 several times over)."""
    return max(2, -(-240_000_000 // state_bytes))


def graph_calls(sets: int, min_calls: int = 0) -> int:
    """Calls one graph makes: whole rounds over the ``sets`` input sets, at least ``min_calls``."""
    return sets * max(1, -(-min_calls // sets))


def median_us(torch, calls: dict, make_set, sets: int, reps: int, min_calls: int = 0) -> dict[str, float]:
    """Median microseconds per call of each callable: each gets its own ``sets`` input sets
    (``make_set(i)``), one graph cycling over them for ``graph_calls(sets, min_calls)`` calls (so the gap
    between two replays is shared by that many calls; the gate's graphs make at least 8), and all graphs
    are replayed interleaved."""
    graphs, alive = {}, []
    n = graph_calls(sets, min_calls)
    for name, call in calls.items():
        xs = [make_set(i) for i in range(sets)]
        graphs[name] = capture(torch, call, xs * (n // sets))
        alive.append(xs)
    times = interleaved_us(torch, graphs, reps, n)
    del graphs, alive
    torch.cuda.empty_cache()
    return {name: ts[len(ts) // 2] for name, ts in times.items()}


def header(torch, triton, bw: float, reps: int, extra: str = "") -> str:
    """The line every probe table starts with: GPU, versions, time, copy bandwidth (and ``extra``), reps."""
    import time

    return (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}, copy {bw / 1e12:.3f} TB/s, {extra}reps {reps}")


def table(title: str, head: str, rows: dict, cols: list[str], labels: list[str] | None = None) -> str:
    """Markdown: one row per variant, one column per shape key; rows[name][key] = (us, % of the roofline)."""
    lines = [f"# {title} ({head})", "", "| variant | " + " | ".join(labels or cols) + " |", "|---|" + "---|" * len(cols)]
    for name, cells in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{cells[c][0]:.1f} us / {cells[c][1]:.0f} %" if c in cells else "-"
                                                for c in cols) + " |")
    return "\n".join(lines) + "\n"


def save(out_dir: str, stem: str, head: str, rows: dict, text: str) -> None:
    """``stem``.md (the table) and ``stem``.json (head and rows) under ``out_dir``; nothing without one."""
    import json
    import os

    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
            f.write(text)
        with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
            json.dump({"head": head, "rows": rows}, f, indent=1)
