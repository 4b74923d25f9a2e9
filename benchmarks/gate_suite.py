"""The gate on a GPU, in one run: every kernels/ target validated at its decode shapes, each
baseline timed (us, % of the copy roofline), the gate's own noise (each kernel against itself
must come out "within noise" at every shape), and state_merge's error versus chain length for
tl.dot at default precision (TF32), tf32x3 and ieee.

    python3 benchmarks/gate_suite.py --out DIR      # writes DIR/gate_suite.json and DIR/gate_h200.md

Each part is written as soon as it is done, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("kda_decode", "gdn_decode", "dsa_indexer", "state_merge")
PRECISIONS = ("default", "tf32x3", "ieee")
DOT = "tl.dot(b_m, b_s)"


def environment() -> dict:
    import torch
    import triton

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = ""
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "nvidia_smi": smi, "torch": torch.__version__, "triton": triton.__version__,
        "python": sys.version.split()[0],
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python3 " + " ".join(sys.argv),
        # which kernel sources were measured (sha256 of kernels/<family>/kernel.py, 12 hex digits)
        "sources": {f: hashlib.sha256((ROOT / "kernels" / f / "kernel.py").read_bytes()).hexdigest()[:12]
                    for f in FAMILIES},
    }


def precision_variant(precision: str, folder: Path) -> Path:
    """The state_merge kernel with an explicit tl.dot input precision (as skel's SK007 writes it)."""
    source = (ROOT / "kernels" / "state_merge" / "kernel.py").read_text()
    assert source.count(DOT) == 1, f"kernels/state_merge/kernel.py no longer contains {DOT}"
    if precision != "default":
        source = source.replace(DOT, f'tl.dot(b_m, b_s, input_precision="{precision}")')
    path = folder / f"state_merge_{precision}.py"
    path.write_text(source)
    return path


def chain_study(folder: Path) -> list[dict]:
    """Relative RMS error of the merged states against float64, per chain length and precision."""
    import torch

    from skel.validate.load import load_module, load_spec
    from skel.validate.numerics import compare
    from skel.validate.spec import Tolerance

    spec = load_spec(ROOT / "kernels" / "state_merge" / "spec.py")
    fns = {p: getattr(load_module(precision_variant(p, folder), f"chain_{p}"), "state_merge") for p in PRECISIONS}
    loose = Tolerance(float("inf"), float("inf"))
    rows = []
    for shape in spec.shapes("chain"):
        inputs = spec.make_inputs(shape, "float32", 0, "cuda")
        ref = spec.reference(**inputs)["states"]
        row = {"shape": shape.label, "C": shape["C"]}
        for p, fn in fns.items():
            out = fn(**inputs)
            torch.cuda.synchronize()
            final = compare(out[:, :, -1], ref[:, :, -1], loose)
            whole = compare(out, ref, loose)
            row[p] = {"final_rel_rms": final.rel_rms, "final_max_abs": final.max_abs, "all_rel_rms": whole.rel_rms}
        rows.append(row)
        print(f"chain {shape.label}: " + ", ".join(f"{p} {row[p]['final_rel_rms']:.2e}" for p in PRECISIONS), flush=True)
        del inputs, ref
        torch.cuda.empty_cache()
    return rows


def gate(target, candidate, shapes, label: str) -> dict:
    from skel.validate import validate

    t0 = time.time()
    result = validate(target, candidate, shapes=shapes, seeds=(0, 1), device="cuda", fail_fast=False,
                      time_limit=240.0)
    out = result.to_dict()
    out["wall_s"] = round(time.time() - t0, 1)
    verdicts = [s["perf"]["verdict"] if s["perf"] else s["perf_note"] for s in out["shapes"]]
    print(f"{label}: accepted={result.accepted} in {out['wall_s']} s; verdicts {sorted(set(verdicts))};"
          f" reasons {list(result.reasons)[:3]}", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results", help="folder for gate_suite.json and gate_h200.md")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--render", metavar="JSON", help="only rebuild gate_h200.md in --out from a saved gate_suite.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.render:
        (out / "gate_h200.md").write_text(render(json.loads(Path(args.render).read_text())))
        return 0
    report = {"environment": environment(), "self": {}, "chain": None, "tf32x3_gate": None}
    folder = Path(tempfile.mkdtemp(prefix="gate-suite-"))

    def save():
        (out / "gate_suite.json").write_text(json.dumps(report, indent=1))
        (out / "gate_h200.md").write_text(render(report))

    print(json.dumps(report["environment"]), flush=True)
    for family in args.families.split(","):
        try:
            report["self"][family] = gate(family, ROOT / "kernels" / family / "kernel.py", "decode", family)
        except Exception as exc:  # keep the other parts
            report["self"][family] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{family}: {type(exc).__name__}: {exc}", flush=True)
        save()
        if family == "state_merge":
            try:
                report["chain"] = chain_study(folder)
            except Exception as exc:
                report["chain"] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"chain study: {type(exc).__name__}: {exc}", flush=True)
            save()
            try:
                report["tf32x3_gate"] = gate("state_merge", precision_variant("tf32x3", folder), "decode",
                                             "state_merge tf32x3 candidate")
            except Exception as exc:
                report["tf32x3_gate"] = {"error": f"{type(exc).__name__}: {exc}"}
            save()
    return 0


# -- Markdown ---------------------------------------------------------------------------------------
# Upstream figures from FACTS.md (fla-core 0.6.0 on the same H200 model), us per call, to place
# the suite's "before" kernels: (family, shape label) -> upstream median.
FACTS_UPSTREAM = {
    ("kda_decode", "N64-T1-H32-HV32-K128-V128"): 88.6,
    ("kda_decode", "N256-T1-H32-HV32-K128-V128"): 336.6,
    ("kda_decode", "N64-T4-H32-HV32-K128-V128"): 197.8,
    ("kda_decode", "N64-T8-H32-HV32-K128-V128"): 376.7,
    ("kda_decode", "N256-T8-H32-HV32-K128-V128"): 1541.0,
    ("gdn_decode", "N64-T1-H16-HV32-K128-V128"): 94.6,
    ("gdn_decode", "N256-T1-H16-HV32-K128-V128"): 368.7,
    ("gdn_decode", "N64-T8-H16-HV32-K128-V128"): 211.6,
}


def _facts_section(report: dict) -> list[str]:
    rows = []
    for (family, label), upstream in FACTS_UPSTREAM.items():
        res = report["self"].get(family) or {}
        shape = next((s for s in res.get("shapes", []) if s["shape"] == label and s.get("perf")), None)
        if shape:
            ours = shape["perf"]["baseline"]["median_us"]
            rows.append(f"| {family} | {label} | {upstream:.1f} | {ours:.1f} | {upstream / ours:.2f} |")
    if not rows:
        return []
    return ["## The suite's baselines next to FACTS.md's upstream figures", "",
            "| family | shape | upstream (FACTS.md) us | this kernel us | upstream / this |", "|---|---|---|---|---|",
            *rows, ""]

def _e(x) -> str:
    return "-" if x is None or isinstance(x, str) else f"{x:.1e}"


def _family_table(name: str, res: dict, ratio: str = "self/self ratio") -> list[str]:
    if "shapes" not in res:  # the part itself failed
        return [f"### {name}", "", f"error: {res.get('error')}", ""]
    lines = [f"### {name}: {'accepted' if res['accepted'] else 'REJECTED'} against itself "
             f"({res['dtype']}, seeds {', '.join(map(str, res['seeds']))}, {res['wall_s']} s)", ""]
    if res.get("error"):
        lines += [f"cannot judge: {res['error']}", ""]
    if res["reasons"]:
        lines += [f"- {r}" for r in res["reasons"]] + [""]
    outs = None
    rows = []
    for s in res["shapes"]:
        num = s["numerics"]
        if num is None:
            rows.append(f"| {s['shape']} | not run | | | | | |")
            continue
        outs = outs or [o["output"] for o in num["outputs"] if o["rel_rms"] is not None]
        errs = " / ".join(_e(o["rel_rms"]) for o in num["outputs"] if o["rel_rms"] is not None)
        p = s["perf"]
        if p:
            rows.append(
                f"| {s['shape']} | {errs} | {p['baseline']['median_us']:.1f} "
                f"[{p['baseline']['low_us']:.1f}, {p['baseline']['high_us']:.1f}] | {p['baseline_roofline_pct']:.0f} % "
                f"| {p['speedup']:.3f} [{p['speedup_low']:.3f}, {p['speedup_high']:.3f}] | {p['verdict']} "
                f"| {p['rotation_sets']} |")
        else:
            rows.append(f"| {s['shape']} | {errs} | {s['perf_note']} | | | | |")
    lines += [
        f"| shape | rel-RMS vs float64 ({' / '.join(outs or [])}) | time us, median [95 % CI] | % of roofline "
        f"| {ratio} [95 % CI] | verdict | input sets |",
        "|---|---|---|---|---|---|---|",
        *rows, "",
    ]
    return lines


def render(report: dict) -> str:
    env = report["environment"]
    lines = [
        "# The gate on an H200: targets at decode shapes, baseline timings, noise, TF32 chains", "",
        f"- GPU: {env['gpu']} ({env['nvidia_smi']})",
        f"- torch {env['torch']}, triton {env['triton']}, Python {env['python']}",
        f"- date: {env['date']}",
        *([f"- kernel sources measured (sha256/12 of kernels/<family>/kernel.py): "
           + ", ".join(f"{k} {v}" for k, v in env["sources"].items())] if env.get("sources") else []),
        f"- command: `{env['command']}` (from the repo root; generated by benchmarks/gate_suite.py)", "",
        "Method: `skel.validate.validate(family, kernels/<family>/kernel.py, shapes='decode', seeds=(0, 1))`:",
        "numerics against the float64 reference and the original, then the kernel timed against itself",
        "(CUDA-graph replay, input sets rotated past 2x the device's L2, A in the gate's oracle worker and",
        "B in the candidate worker, interleaved by the judge with B frozen during A's samples, 30 samples",
        "each of >= 2 ms, plus A alone before and after; B checked against the judge's clock, A alone vs",
        "interleaved, the timed calls' results and the roofline; time = median per call; roofline =",
        "max(bytes / copy bandwidth, FLOPs / TF32 matmul rate), both measured in the same run). The",
        "self/self ratio is the gate's noise: every verdict must read `within noise`.", "",
    ]
    first = next((s for r in report["self"].values() if isinstance(r, dict) and "shapes" in r
                  for s in r["shapes"] if s.get("perf")), None)
    if first:
        p = first["perf"]
        lines += [f"Measured: device copy {p['copy_gbps']:.0f} GB/s (read + write), TF32 matmul "
                  f"{p['matmul_tflops']:.0f} TFLOP/s.", ""]
    lines += _facts_section(report)
    for name, res in report["self"].items():
        lines += _family_table(name, res)
    noisy = [(n, s["shape"], s["perf"]["verdict"]) for n, r in report["self"].items() if "shapes" in r
             for s in r["shapes"] if s.get("perf") and s["perf"]["verdict"] != "within noise"]
    measured = sum(1 for r in report["self"].values() if "shapes" in r for s in r["shapes"] if s.get("perf"))
    lines += ["## The gate's own noise", "",
              f"{measured} shape(s) timed kernel-against-itself; not 'within noise': "
              + (", ".join(f"{n} {s} ({v})" for n, s, v in noisy) if noisy else "none") + ".", ""]
    chain = report.get("chain")
    lines += ["## state_merge: error of the final merged state versus chain length", ""]
    if isinstance(chain, list):
        lines += ["rel-RMS of the state after the last merge against float64 (N=2, HV=32, K=V=128):", "",
                  "| chain length C | " + " | ".join(PRECISIONS) + " |", "|---|" + "---|" * len(PRECISIONS)]
        lines += [f"| {r['C']} | " + " | ".join(_e(r[p]["final_rel_rms"]) for p in PRECISIONS) + " |" for r in chain]
        lines.append("")
    elif chain:
        lines += [f"error: {chain.get('error')}", ""]
    tg = report.get("tf32x3_gate")
    if tg:
        lines += _family_table("state_merge with tl.dot(..., input_precision=\"tf32x3\") as the candidate", tg,
                               "speedup default/tf32x3")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
