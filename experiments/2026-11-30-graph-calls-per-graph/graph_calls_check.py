"""The gate's timing with one call per CUDA graph against at least eight, in one process (H200).

Session 4 changed the gate (validate/bench.py) to capture at least ``min_graph_calls`` = 8 calls per
graph; before, a call whose inputs fill the L2 alone was captured once per graph, and the gap between
two graph replays was charged to that call. This script times the same pair (the suite's gdn_decode
and its SK002 P=2/2-warp merge, and kda_decode with the same plan) both ways, interleaved as the
gate does, so the difference is attributed in one run rather than across sessions.

    python experiments/2026-11-30-graph-calls-per-graph/graph_calls_check.py            # GPU; needs libcst (the rewrite runs here)
"""
from __future__ import annotations

import importlib.util
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from skel.rewriter.base import RewriteOptions
from skel.rewriter.sk002_merge_tiles import merge_tiles
from skel.validate.bench import BenchConfig, benchmark_shape, measure_machine
from skel.validate.spec import Shape

ROOT = Path(__file__).resolve().parents[2]


def _load(text: str, stem: str):
    path = Path(tempfile.mkdtemp()) / f"{stem}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[stem] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    machine = measure_machine()
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, copy {machine.copy_bps / 1e12:.3f} TB/s", flush=True)
    for family, h in (("gdn_decode", 16), ("kda_decode", 32)):
        spec = importlib.import_module(f"skel.kernels.{family}.spec").SPEC
        src = (ROOT / "kernels" / family / "kernel.py").read_text()
        [r] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [(2, 1, 2, True)]),)))
        base = getattr(_load(src, f"{family}_orig"), spec.entry)
        cand = getattr(_load(r.source, f"{family}_p2w2"), spec.entry)
        for n in (32, 64):
            shape = Shape.parse(f"N{n}-T1-H{h}-HV32-K128-V128")
            for calls in (1, 8, 1, 8):
                p = benchmark_shape(spec, shape, "bfloat16", base, cand, machine, replace(BenchConfig(), min_graph_calls=calls))
                print(f"{family} N={n} graph calls >= {calls}: original {p.baseline.median_us:.1f} us, "
                      f"SK002 P=2/2 warps {p.candidate.median_us:.1f} us ({p.candidate_roofline_pct:.0f} %), "
                      f"speedup {p.speedup:.3f}x, {p.calls_per_sample} calls per sample", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
