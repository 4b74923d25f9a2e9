"""SK014 at T = 8 on GDN: the hand-written probe step and SK002/SK014's rewritten kernels, side by side (H200).

The probe's lazy GDN step (persist_probe.py, `lazy_p4w1`) ran 4 % faster than its eager twin at T = 8,
N = 64, but SK014 applied to SK002's P = 4 / 1-warp output gained nothing in `skel apply`. This times the
four in one process with the probes' method (CUDA graphs over rotated inputs, interleaved, median) on the
same inputs (merge_tiles_probe.make_inputs, GDN: H = 16, HV = 32, K = V = 128).

    python experiments/2026-11-30-sk014-lazy-at-t8/lazy_ab.py --gen .skel/ab_s4   # CPU, libcst: SK002 (P=4/1 warp, +-num_stages=1; and on SK001) and +SK014
    python experiments/2026-11-30-sk014-lazy-at-t8/lazy_ab.py --run .skel/ab_s4   # GPU (carry .skel/ab_s4)
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing, merge_tiles_probe
sys.path.insert(0, str(HERE.parent / "2026-11-29-t1-copy-ceiling"))  # persist_probe


def gen(out: Path) -> int:
    from skel.rewriter.base import RewriteOptions
    from skel.rewriter.sk002_merge_tiles import merge_tiles
    from skel.skeletons.library import load_library

    lib = load_library()
    lazy = lib.get("SK014").rule.rewrite.raw  # the codemods alone, as this probe calls them

    out.mkdir(parents=True, exist_ok=True)
    src = (HERE.parents[1] / "kernels/gdn_decode/kernel.py").read_text()
    rsqrt = lib.get("SK001").rule.rewrite.raw

    [r1] = rsqrt(src, RewriteOptions())  # the norm divisions as rsqrt multiplies, as in the probe's step
    assert r1.applied, r1.reason
    for tag, base, plan in (("P4W1", src, (4, 1, 1, True)), ("P4W1S1", src, (4, 1, 1, True, 1)),
                            ("SK001_P4W1", r1.source, (4, 1, 1, True))):
        [r] = merge_tiles(base, RewriteOptions(extra=(("sk002_variants", [plan]),)))
        [l] = lazy(r.source, RewriteOptions())
        (out / f"gdn_{tag}.py").write_text(r.source)
        (out / f"gdn_{tag}_lazy.py").write_text(l.source)
    return 0


def run(d: Path) -> int:
    import torch

    import graph_timing as G
    import merge_tiles_probe as M
    import persist_probe as P

    scale = 128 ** -0.5
    calls = {"probe tile_p4w1": lambda x: P.VARIANTS["tile_p4w1"](x, True),
             "probe lazy_p4w1": lambda x: P.VARIANTS["lazy_p4w1"](x, True)}
    for path in sorted(d.glob("gdn_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod
        spec.loader.exec_module(mod)
        calls[f"skel {path.stem}"] = (lambda m: lambda x: m.gdn_decode(x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias, x.h, scale))(mod)
    for name, fn in calls.items():  # numerics against float64 first
        x = M.make_inputs(torch, 3, 5, 16, 32, 128, 128, "cuda", 7, False, "gdn")
        ro, rh = M.reference(torch, x, scale)
        o = fn(x)
        o = x.o if o is None else o
        print(f"{name}: o {M.rel_rms(torch, o, ro):.1e} state {M.rel_rms(torch, x.h, rh):.1e}", flush=True)
    for N in (64, 256):
        med = G.median_us(torch, calls, lambda i: M.make_inputs(torch, N, 8, 16, 32, 128, 128, "cuda", 100 + i, False, "gdn"),
                          G.rotation(N * 32 * 128 * 128 * 4), 40)
        for name, us in med.items():
            print(f"T=8 N={N} {name:28s} {us:7.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", type=Path)
    ap.add_argument("--run", type=Path)
    a = ap.parse_args()
    sys.exit(gen(a.gen) if a.gen else run(a.run))
