"""Issue 5, T = 1, N = 32: why fla-core's accepted KDA variant runs ~0.8 us behind the suite's (H200).

`skel apply` accepts SK002+SK014(+SK015) with P = 2 programs per head and 2 warps for both KDA targets at
T = 1, but fla-core's file lands at 36.4 us (87 % of the copy roofline) and the suite's at 35.6 us (89 %).
This times hand-edited diagnostic copies of fla-core's variant (not rewrites skel emits) beside the
suite's variant and a Triton in-place copy through the same grid, in one process, on the same inputs:

  fla        the accepted composition as `skel apply` writes it
  fla_i32    index math in int32: `N: tl.int64` / `T: tl.int64` and `program_id(0).to(tl.int64)` dropped
  fla_noevict  no eviction_policy hints on the loads and stores
  fla_both   both edits
  suite      the suite's kda_decode under the same composition
  suite_nomask  the suite's variant with its all-true masks (K = BK, V a multiple of BV) dropped
  *_pdl      the variant launched with programmatic dependent launch (launch_pdl=True; the kernel calls
             gdc_launch_dependents and gdc_wait before any memory access, under a constexpr flag)
  suite_f1   the suite's variant with o taken from the state before the update, o = S^T q + (q . k) delta,
             so the two contractions of the state are independent (one reduction less on the chain)

    python experiments/2026-11-29-t1-copy-ceiling/t1_fla_diag.py --gen .skel/t1_s5    # CPU, libcst (needs the fla-core corpus path)
    cd experiments/2026-11-29-t1-copy-ceiling && python3 t1_fla_diag.py --run ../../.skel/t1_s5   # GPU (carry .skel/t1_s5 and .whl)
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # t1_ceiling_probe
sys.path.insert(0, str(HERE.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing
PLAN = (2, 1, 2, True, 1)  # P = 2, one sub-tile, 2 warps, prefetch, num_stages = 1: the accepted T = 1 plan


def _compose(src: str, empty: bool) -> str:
    from skel.rewriter.base import RewriteOptions
    from skel.rewriter.sk002_merge_tiles import merge_tiles
    from skel.skeletons.library import load_library

    lib = load_library()
    lazy = lib.get("SK014").rule.rewrite.raw  # the codemods alone, as this probe calls them
    empty_output = lib.get("SK015").rule.rewrite.raw

    steps = [lambda s: merge_tiles(s, RewriteOptions(extra=(("sk002_variants", [PLAN]),))),
             lambda s: lazy(s, RewriteOptions())] + ([lambda s: empty_output(s, RewriteOptions())] if empty else [])
    for step in steps:
        [r] = step(src)
        assert r.applied, r.reason
        src = r.source
    return src


def _i32(src: str) -> str:
    out = src.replace("N: tl.int64,", "N,").replace("T: tl.int64,", "T,")
    out = out.replace("pid = tl.program_id(0).to(tl.int64)", "pid = tl.program_id(0)")
    assert out.count("tl.int64") < src.count("tl.int64"), "fla_i32: nothing replaced"
    return out


def _noevict(src: str) -> str:
    out = re.sub(r",\s*eviction_policy='evict_(first|last)'", "", src)
    assert out != src, "fla_noevict: nothing replaced"
    return out


def _nomask(src: str) -> str:
    out = re.sub(r"\(m_[kv]\) & ", "", src)
    out = out.replace(", mask=m_s, other=0.0)", ")").replace(", mask=m_s)", ")").replace(", mask=m_k, other=0.0)", ")")
    out = out.replace(", mask=m_v)", ")")
    assert "mask=m_" not in out and "(m_" not in out, "suite_nomask: a mask is left"
    return out


def _f1(src: str) -> str:
    upd = "        b_s = b_s + (b_k / b_s_rdecay)[:, None] * b_delta[None, :]\n"
    out_ = "        b_o = tl.sum(b_s * (b_q * b_s_rdecay)[:, None], 0)\n"
    assert upd + out_ in src, "suite_f1: the update and output lines moved"
    return src.replace(upd + out_, out_.replace("0)\n", "0) + tl.sum(b_q * b_k) * b_delta\n") + upd)


def _pdl(src: str, launch: str) -> str:
    """PDL by hand: a constexpr flag after the kernel's last parameter, the two GDC calls first in its body,
    and the flag and launch_pdl at the launch (``launch``: the launch's num_warps line, kept)."""
    head, sep, body = src.partition("\n):\n")
    assert sep, "pdl: kernel signature not found"
    body = ("    if SKEL_PDL:\n        tl.extra.cuda.gdc_launch_dependents()\n        tl.extra.cuda.gdc_wait()\n" + body)
    out = head + "\n    SKEL_PDL: tl.constexpr = False,\n):\n" + body
    assert launch in out, f"pdl: launch line {launch!r} not found"
    return out.replace(launch, launch + " launch_pdl=True, SKEL_PDL=True,", 1)


def gen(out: Path, fla_root: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    fla = _compose((fla_root / "fla/ops/kda/fused_recurrent.py").read_text(), True)
    variants = {"fla": fla, "fla_i32": _i32(fla), "fla_noevict": _noevict(fla), "fla_both": _noevict(_i32(fla)),
                "suite": _compose((HERE.parents[1] / "kernels/kda_decode/kernel.py").read_text(), False)}
    variants["suite_nomask"] = _nomask(variants["suite"])
    variants["suite_f1"] = _f1(variants["suite"])
    variants["suite_pdl"] = _pdl(variants["suite"], "num_warps=2, num_stages=1,")
    variants["fla_pdl"] = _pdl(fla, "num_stages=1,")
    for name, code in variants.items():
        (out / f"{name}.py").write_text(code)
    return 0


def run(d: Path) -> int:
    import torch

    import graph_timing as G
    import t1_ceiling_probe as P
    from skel.kernels.kda_decode import fla_upstream, spec
    from skel.validate.spec import Shape

    calls = {}
    for path in sorted(d.glob("*.py")):
        mod = f"t1_diag_{path.stem}"  # not the variant's stem: "fla" would shadow the fla package
        m = importlib.util.module_from_spec(importlib.util.spec_from_file_location(mod, path))
        sys.modules[mod] = m
        m.__spec__.loader.exec_module(m)
        if path.stem.startswith("fla"):  # the suite's inputs, called the way fla_upstream's harness calls the file
            entry = getattr(m, fla_upstream.SPEC.entry)
            calls[path.stem] = (lambda f: lambda x: f(**fla_upstream.as_fla_call(x)))(entry)
        else:
            calls[path.stem] = (lambda f: lambda x: f(**x))(getattr(m, spec.SPEC.entry))
    calls["copy_p2w2"] = lambda x: P.copy_call(2, 2)({"state": x["state"]})
    from skel.validate.bench import copy_bandwidth as gate_copy_bandwidth

    bw = G.copy_bandwidth(torch)
    best = gate_copy_bandwidth()  # the gate's roofline denominator: the best of 20 copies of 1 GiB
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s (median of 20 copies of 1 GiB); the gate's best of 20: "
          f"{best / 1e12:.3f} TB/s")
    for N, T in ((32, 1), (64, 1), (64, 8)):
        shape = Shape.of(N=N, T=T, H=32, HV=32, K=128, V=128)
        state = N * 32 * 128 * 128 * 4
        nbytes = spec.SPEC.bytes(shape, "bfloat16")  # the gate's roofline bytes: state read + written and the operands
        for name, call in calls.items():  # numerics against the family's float64 reference first
            if name == "copy_p2w2":
                continue
            x = spec.SPEC.make_inputs(shape, "bfloat16", 1, "cuda")
            ref = spec.SPEC.reference(**{k: (v.double() if hasattr(v, "double") else v) for k, v in x.items()})
            out = call(x)
            o = out[0] if isinstance(out, tuple) else out
            err = ((o.double() - ref["o"]).norm() / ref["o"].norm()).item()
            print(f"T={T} N={N} {name:12s} o rel. error {err:.1e}", flush=True)
        # graphs of >= 8 calls, as the gate's (session 5's runs had one call per set)
        med = G.median_us(torch, calls, lambda i: spec.SPEC.make_inputs(shape, "bfloat16", 100 + i, "cuda"),
                          G.rotation(state), 40, min_calls=8)
        for name, us in med.items():
            print(f"T={T} N={N} {name:12s} {us:6.1f} us {nbytes / (us * 1e-6) / bw * 100:5.1f} % "
                  f"({nbytes / (us * 1e-6) / best * 100:5.1f} % of the gate's denominator)", flush=True)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", type=Path)
    ap.add_argument("--fla", type=Path, default=Path("/work/corpus/fla_core"))
    ap.add_argument("--run", type=Path)
    a = ap.parse_args()
    sys.exit(gen(a.gen, a.fla) if a.gen else run(a.run))
