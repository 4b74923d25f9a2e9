"""Mining throughput on Ray: 1, 2, 4 local Ray workers against the local serial run and process pool.

    python benchmarks/ray_mine_scaling.py [--corpus DIR] [--repeats 2] [--out benchmarks/results/ray_mine_scaling.json]

The corpus defaults to fla-core 0.6.0 as the tests unpack it (~/.cache/skel/corpus/fla_core-0.6.0; run
`pytest tests/test_ray.py` once, or `pip download --no-deps fla-core==0.6.0` and unzip it). Every run re-parses
everything (--force) into a fresh catalog. Per configuration: wall time of `mine()` with the cluster already up
and its workers started (a warm-up batch of tasks), the cluster's own start, and the time the driver spent writing
the catalog (Catalog.record_file, timed here by wrapping it): the driver is the single writer, so its write rate is
the ceiling of any cluster. Writes JSON; benchmarks/results/ray_mine_scaling.md is written from it by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from pathlib import Path


def _timed_record_file(box: list[float]):
    from skel.catalog.store import Catalog

    original = Catalog.record_file

    def record_file(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            box[0] += time.perf_counter() - t

    Catalog.record_file = record_file
    return lambda: setattr(Catalog, "record_file", original)


def one_run(corpus: Path, executor=None, jobs: int | None = None) -> dict:
    from skel.miner.mine import mine

    work = Path(tempfile.mkdtemp(prefix="skel-bench-"))
    box = [0.0]
    restore = _timed_record_file(box)
    try:
        t = time.perf_counter()
        report = mine([str(corpus)], catalog=work / "catalog.sqlite", jobs=jobs, force=True, executor=executor)
        wall = time.perf_counter() - t
    finally:
        restore()
        shutil.rmtree(work, ignore_errors=True)
    return {"wall_s": round(wall, 3), "record_s": round(box[0], 3), "files": report.files,
            "kernel_files": report.kernel_files, "kernels": report.kernels,
            "findings": len(report.instances) + len(report.opportunities), "errors": len(report.errors)}


def ray_config(corpus: Path, workers: int, repeats: int) -> dict:
    import ray

    from skel.executor import RayExecutor

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ex = RayExecutor()

    @ray.remote
    def warm(_):  # start every worker process and import the miner there before timing
        import skel.miner.mine  # noqa: F401
        time.sleep(0.2)
        return os.getpid()

    ray.get([warm.remote(i) for i in range(workers)])
    start_s = time.perf_counter() - t
    runs = [one_run(corpus, executor=ex) for _ in range(repeats)]
    ray.shutdown()
    return {"config": f"ray, {workers} worker{'s' if workers > 1 else ''}", "workers": workers,
            "cluster_start_s": round(start_s, 2), "runs": runs}


class _Replay:
    """An executor that hands back analyses computed beforehand: what is left is the driver's own work."""

    def __init__(self, results: dict):
        self.results = results

    def map(self, fn, items, res=None, on_tally=None, window=None):
        for i, (path, _text, _lang) in enumerate(items):
            yield i, self.results[path]


def echo(job):
    return job[1]


def driver_ceiling(corpus: Path) -> dict:
    """Seconds of driver work per kernel file when the workers cost nothing: walking, reading, hashing and
    writing the catalog (analyses replayed), plus Ray's round trip of each file's text out and results back."""
    import ray

    from skel.executor import RayExecutor
    from skel.miner.mine import analyze, collect, prepare

    cands, _ = collect([str(corpus)])
    preps = [p for p in (prepare(c) for c in cands) if p.outcome is None]
    results = {p.cand.path: analyze(p.cand.path, p.text, p.cand.language) for p in preps}
    replay = one_run(corpus, executor=_Replay(results))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ex = RayExecutor()
    jobs = [(p.text, results[p.cand.path]) for p in preps]
    list(ex.map(echo, jobs[:8]))  # workers started
    t = time.perf_counter()
    list(ex.map(echo, jobs))
    round_trip = time.perf_counter() - t
    ray.shutdown()
    n = len(preps)
    return {"kernel_files": n, "driver_s": replay["wall_s"], "record_s": replay["record_s"],
            "ray_round_trip_s": round(round_trip, 3),
            "driver_ms_per_file": round(1000 * (replay["wall_s"] + round_trip) / n, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path.home() / ".cache/skel/corpus/fla_core-0.6.0")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--ceiling-only", action="store_true", help="only the driver's ceiling (merged into --out)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ray_mine_scaling.json"))
    args = ap.parse_args()
    if not args.corpus.is_dir():
        raise SystemExit(f"{args.corpus}: no such folder (see the docstring for how to get fla-core 0.6.0)")
    if args.ceiling_only:
        result = json.loads(args.out.read_text())
        result["driver_ceiling"] = driver_ceiling(args.corpus)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(result["driver_ceiling"])
        return
    configs = [{"config": "local serial (--jobs 1)", "workers": 1,
                "runs": [one_run(args.corpus, jobs=1) for _ in range(args.repeats)]},
               {"config": "local process pool (--jobs 2)", "workers": 2,
                "runs": [one_run(args.corpus, jobs=2) for _ in range(args.repeats)]}]
    for w in (int(x) for x in args.workers.split(",")):
        configs.append(ray_config(args.corpus, w, args.repeats))
        print(json.dumps(configs[-1]), flush=True)
    import ray

    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
              "cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
              "corpus": str(args.corpus), "command": "python benchmarks/ray_mine_scaling.py", "configs": configs,
              "driver_ceiling": driver_ceiling(args.corpus)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for c in configs:
        best = min(c["runs"], key=lambda r: r["wall_s"])
        print(f"{c['config']:32s} best {best['wall_s']:6.2f} s  {best['kernel_files'] / best['wall_s']:6.1f} kernel files/s"
              f"  driver writes {best['record_s']:.2f} s")


if __name__ == "__main__":
    main()
