"""Phase-B check on the GPU: the SK002 rewrite's own output, timed against the file it came from.

Two steps, because the rewriter needs libcst and the GPU machine has none:
  here (CPU):  python experiments/2026-11-29-sk002-merged-structure/merge_tiles_rewritten.py --generate .skel/merge_tiles_gen
               rewrites four targets with every plan below and writes one file per variant:
               fla-core 0.6.0 fla/ops/kda/fused_recurrent.py and
               fla/ops/gated_delta_rule/fused_recurrent.py (from the installed/unpacked wheel),
               and the project's kernels/kda_decode/kernel.py and kernels/gdn_decode/kernel.py;
  GPU:         python3 experiments/2026-11-29-sk002-merged-structure/merge_tiles_rewritten.py --run .skel/merge_tiles_gen --out $OUT
               checks every variant against the float64 reference (merge_tiles_probe.reference)
               and times it with the probe's method (CUDA-graph replay, rotated inputs, all
               variants interleaved, copy bandwidth measured in the same process).
Shapes: KDA H = HV = 32, GDN H = 16, HV = 32, K = V = 128, bf16 inputs, fp32 state; the fla KDA
wrapper and the kernels/ targets update the state in place, the fla GDN wrapper writes a new
final state (its only mode): the same bytes move.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # the repository
sys.path.insert(0, str(HERE))

# (P programs per head, NS sub-tiles, num_warps, prefetch)
PLANS = [(2, 1, 2, True), (1, 2, 4, True), (4, 1, 2, True), (1, 1, 4, True), (1, 2, 4, False),
         (2, 1, 2, False), (2, 2, 2, True), (4, 1, 1, True), (8, 1, 1, True)]
SHAPES = [(1, 32), (1, 64), (1, 256), (4, 64), (8, 32), (8, 64), (8, 256)]  # (T, N)
TARGETS = {  # name -> (family, how the file is found)
    "fla_kda": ("kda", "fla/ops/kda/fused_recurrent.py"),
    "fla_gdn": ("gdn", "fla/ops/gated_delta_rule/fused_recurrent.py"),
    "kda_decode": ("kda", "kernels/kda_decode/kernel.py"),
    "gdn_decode": ("gdn", "kernels/gdn_decode/kernel.py"),
}


def label(plan) -> str:
    p, ns, w, pf, *stages = plan
    return f"P{p}NS{ns}W{w}" + ("pf" if pf else "") + (f"S{stages[0]}" if stages and stages[0] is not None else "")


def parse_plans(text: str) -> list[tuple]:
    """"4,2,1,1;4,1,1,1,1" -> [(4, 2, 1, True), (4, 1, 1, True, 1)]: P, NS, warps, prefetch[, num_stages]."""
    out = []
    for item in filter(None, text.split(";")):
        p, ns, w, pf, *st = (int(v) for v in item.split(","))
        out.append((p, ns, w, bool(pf), *st))
    return out


def generate(out_dir: Path, fla_root: Path, plans=None, targets=None) -> int:
    from skel.rewriter.base import RewriteOptions
    from skel.rewriter.sk002_merge_tiles import merge_tiles

    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (_fam, rel) in TARGETS.items():
        if targets and name not in targets:
            continue
        src_path = (fla_root / rel) if rel.startswith("fla/") else (ROOT / rel)
        src = src_path.read_text()
        (out_dir / f"{name}__orig.py").write_text(src)
        for plan in plans or PLANS:
            [r] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [plan]),)))
            print(name, label(plan), r.status, r.reason[:100])
            if r.applied:
                (out_dir / f"{name}__{label(plan)}.py").write_text(r.source)
    return 0


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"mtr_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _caller(name: str, mod, scale: float):
    """(Inputs) -> None for one target module, writing x.o and the state the way the harness reads."""
    if name == "fla_kda":
        def call(x):
            mod.fused_recurrent_kda_fwd(
                q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, A_log=x.A_log, dt_bias=x.dt_bias,
                initial_state=x.h, scale=scale, inplace_final_state=True,
                use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                use_beta_sigmoid_in_kernel=True, out=x.o)
    elif name == "fla_gdn":
        def call(x):
            o, ht = mod.fused_recurrent_gated_delta_rule_fwd(
                q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, A_log=x.A_log, dt_bias=x.dt_bias,
                scale=scale, initial_state=x.h, output_final_state=True,
                use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
            x.o.copy_(o) if x.check else None  # the check reads x.o / x.h; timing leaves them
            x.h.copy_(ht) if x.check else None
    elif name == "kda_decode":
        def call(x):
            o = mod.kda_decode(x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias.view(x.v.shape[2], -1), x.h, scale)
            x.o.copy_(o) if x.check else None
    else:
        def call(x):
            o = mod.gdn_decode(x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias, x.h, scale)
            x.o.copy_(o) if x.check else None
    return call


def run(gen_dir: Path, out_dir: str, reps: int, smoke: bool = False, timed=None) -> int:
    """smoke: CPU interpreter, tiny shapes, two variants per target, numerics only."""
    import torch
    import triton

    import graph_timing as G
    import merge_tiles_probe as P

    os.makedirs(out_dir, exist_ok=True)
    H, HV, K, V = (4, 4, 32, 32) if smoke else (32, 32, 128, 128)
    dev = "cpu" if smoke else "cuda"
    scale = K ** -0.5
    rs = []
    for path in sorted(gen_dir.glob("*.py")):
        target, var = path.stem.split("__")
        if smoke and var not in ("orig", "P1NS2W4pf", "P2NS1W2pf"):
            continue
        fam = TARGETS[target][0]
        try:
            mod = _load(path)
        except Exception as e:  # reported; the others still run
            print(f"{path.name}: import failed: {type(e).__name__}: {e}", flush=True)
            continue
        rs.append(P.Runner(f"{target}:{var}", fam, False, False, False, "", _caller(target, mod, scale)))
    Inputs = P.Inputs

    class X(Inputs):  # inputs plus a flag: copy wrapper-allocated outputs back only when checking
        check = False

    plain_inputs = P.make_inputs  # time_shape calls P.make_inputs, patched to `make` below

    def make(*a, **kw):
        x = plain_inputs(*a, **kw)
        return X(**{f: getattr(x, f) for f in x.__dataclass_fields__})

    info = {"gpu": "cpu" if smoke else torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "reps": reps}
    print(json.dumps(info), flush=True)
    checks, good = {}, []
    for r in rs:
        res = []
        shapes = (((2, 1, H, HV, K, V), 1), ((1, 3, H, HV, K, V), 2)) if smoke else \
            (((4, 1, H, HV, K, V), 1), ((3, 5, H, HV, K, V), 2), ((33, 1, H, HV, K, V), 3))
        for shape, seed in shapes:
            N, T, h, hv, k, v = P.family_shape(r.family, shape)
            x = make(torch, N, T, h, hv, k, v, dev, seed, False, r.family)
            x.check = True
            before = [t.clone() for t in (x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias)]
            o_ref, h_ref = P.reference(torch, x, scale)
            try:
                r.call(x)
                if not smoke:
                    torch.cuda.synchronize()
                eo, eh = P.rel_rms(torch, x.o, o_ref), P.rel_rms(torch, x.h, h_ref)
                bad = "" if all(torch.equal(a, b) for a, b in zip(before, (x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias))) else "input modified"
                bad += "" if torch.isfinite(x.o.float()).all() else " NaN in o"
            except Exception as e:
                eo = eh = float("nan")
                bad = f"{type(e).__name__}: {str(e)[:200]}"
            res.append({"shape": shape[:2], "err_o": eo, "err_h": eh, "bad": bad,
                        "ok": not bad and eo < 6e-3 and eh < 1e-4})
        checks[r.name] = res
        print(r.name, "check", [(c["shape"], c["ok"], f"{c['err_o']:.1e}/{c['err_h']:.1e}", c["bad"]) for c in res], flush=True)
        if all(c["ok"] for c in res):
            good.append(r)
    if smoke:
        print("failed:", [r.name for r in rs if r not in good])
        return 0 if len(good) == len(rs) else 1
    bw = G.copy_bandwidth(torch)
    info["copy_bw_TBps"] = bw / 1e12
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    P.make_inputs = make  # timing sets are X instances (check False: no extra copies)
    results = []
    partial = open(os.path.join(out_dir, "merge_tiles_rewritten_partial.jsonl"), "w")
    for T, N in timed or SHAPES:
        if True:
            shape = (N, T, H, HV, K, V)
            t0 = time.time()
            for fam in ("kda", "gdn"):
                group = [r for r in good if r.family == fam]
                times, R = P.time_shape(torch, group, shape, reps)
                for name, t in times.items():
                    roof = P.roofline_bytes(fam, *P.family_shape(fam, shape)) / bw * 1e6
                    results.append({"T": T, "N": N, "variant": name, "rot": R, "roof_us": roof,
                                    "pct_roof": 100 * roof / t["p50"], **t})
                    partial.write(json.dumps(results[-1]) + "\n")
                    partial.flush()
            print(f"T={T} N={N} timed in {time.time() - t0:.1f}s", flush=True)
    with open(os.path.join(out_dir, "merge_tiles_rewritten.json"), "w") as f:
        json.dump({"info": info, "checks": checks, "results": results}, f, indent=1)
    cols = list(timed or SHAPES)
    print("\nvariant                 " + " ".join(f"T{T}N{N:<3d}        " for T, N in cols))
    for r in good:
        base = r.name.split(":")[0] + ":orig"
        cells = []
        for T, N in cols:
            m = {x["variant"]: x for x in results if x["T"] == T and x["N"] == N}
            c, b = m.get(r.name), m.get(base)
            cells.append(f"{c['p50']:7.1f}/{c['pct_roof']:3.0f}%/{b['p50'] / c['p50']:4.2f}" if c and b else " " * 17)
        print(f"{r.name:23s} " + " ".join(cells))
    print("failed:", [r.name for r in rs if r not in good], "| us/%roof/x-vs-its-original | copy", f"{bw / 1e12:.3f} TB/s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generate", type=Path)
    ap.add_argument("--fla-root", type=Path, default=Path.home() / ".cache/skel/corpus/fla_core-0.6.0")
    ap.add_argument("--run", type=Path)
    ap.add_argument("--out", default=os.environ.get("OUT", tempfile.mkdtemp(prefix="mtr_")))
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--smoke", action="store_true", help="with --run: CPU interpreter, tiny shapes, numerics only")
    ap.add_argument("--plans", default="", help='with --generate: "P,NS,W,prefetch[,stages];..." instead of PLANS')
    ap.add_argument("--targets", default="", help="with --generate: comma-separated names of TARGETS")
    ap.add_argument("--shapes", default="", help='with --run: "TxN,..." (e.g. 8x64,1x32) instead of SHAPES')
    a = ap.parse_args()
    if a.generate:
        return generate(a.generate, a.fla_root, parse_plans(a.plans) or None, set(filter(None, a.targets.split(","))))
    if a.run:
        shapes = [tuple(int(v) for v in item.split("x")) for item in filter(None, a.shapes.split(","))]
        return run(a.run, a.out, a.reps, a.smoke, shapes or None)
    ap.error("give --generate DIR (CPU, needs the skel package) or --run DIR (GPU)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
