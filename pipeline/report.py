"""The `skel apply` report: report.md, report.json and (when timed) a speedup-versus-N plot."""
from __future__ import annotations

import json
from pathlib import Path


def report_path(folder: Path) -> Path:
    """Where write_report puts the Markdown report (known before it is written, so the JSON can name it)."""
    return folder / "report.md"


def write_report(result, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    plot = _plot(data, folder / "speedup_vs_N.png") if data["perf_measured"] else None
    (folder / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    md = report_path(folder)
    md.write_text(render_markdown(data, plot.name if plot else None), encoding="utf-8")
    return md


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _rates(data: dict) -> list[tuple[float, float]]:
    """The distinct (copy GB/s, matmul TFLOP/s) the timed candidates' rooflines used, in order."""
    seen: dict[tuple[float, float], None] = {}
    for c in data["candidates"]:
        for s in (c["gate"] or {}).get("shapes", ()):
            p = s.get("perf")
            if p and p.get("copy_gbps"):
                seen[(p["copy_gbps"], p.get("matmul_tflops", 0.0))] = None
    return list(seen)


def render_markdown(data: dict, plot: str | None) -> str:
    b = data["binding"]
    out = [f"# skel apply: {Path(data['target']).name}", "",
           f"- target: `{data['target']}` ({b['how']})",
           f"- device: {data['device']}; performance {'measured' if data['perf_measured'] else 'not measured'}",
           f"- output: {('`' + data['output'] + '`') if data['output'] else 'none (nothing accepted)'}"]
    rates = _rates(data)
    if rates:
        out.append("- roofline: " + "; ".join(f"copy {c / 1e3:.3f} TB/s (best of 20 copies of 1 GiB), matmul {m:.0f} TFLOP/s"
                                              for c, m in rates) + (" (measured once for this run)" if len(rates) == 1 else ""))
    gates = [c["gate"] for c in data["candidates"] if c.get("gate")]
    machine = next((g["machine"] for g in gates if isinstance(g.get("machine"), dict) and g["machine"].get("name")), None)
    if machine:
        out.append(f"- GPU: {machine['name']}, driver {machine.get('driver') or '?'}; {machine.get('versions', '')}")
    env = data.get("environment") or {}
    if env:
        facts = [f"{k} {env[k]}" for k in ("gpu", "driver", "cuda", "torch", "triton", "python", "skel") if env.get(k)]
        out.append(f"- environment: {', '.join(facts)}; target commit {env.get('commit') or 'not in git'}; "
                   f"{env.get('date', '')}")
    isolation = next((g["isolation"] for g in gates if g.get("isolation")), None)
    if isolation:
        out.append(f"- candidates ran contained: {isolation.get('summary', '')} (README: Trust model)")
    out += [f"- note: {n}" for n in data["notes"]]
    if data["winners"]:
        out += ["", "## Accepted", "", "| shape bucket | variant |", "| --- | --- |"]
        out += [f"| {w['bucket']} | {w['candidate']} |" for w in data["winners"]]
    if plot:
        out += ["", f"![speedup and % of roofline against N]({plot})"]
    elif data["perf_measured"]:
        batch = data["binding"].get("batch", "N")
        out += ["", PLOT_MISSING if not _has_matplotlib() else f"plot skipped: no timed shape names the batch dim {batch}"]
    if data.get("runoffs"):
        out += ["", "## Run-offs (close qualifiers of a bucket timed head to head in one judgement)", "",
                "| bucket | leader | challenger | challenger over leader, per shape | kept | why |",
                "| --- | --- | --- | --- | --- | --- |"]
        for r in data["runoffs"]:
            per = "; ".join(f"{s['shape']}: {s['speedup']:.3f}x [{s['low']:.3f}, {s['high']:.3f}] {s['verdict']}"
                            for s in r["shapes"]) or "-"
            out.append(f"| {r['bucket']} | {r['leader']} | {r['challenger']} | {per} | {r['winner']} | {r['why']} |")
    out += ["", "## Candidates", "", "| # | skeletons | variant | numerics | verdict |", "| --- | --- | --- | --- | --- |"]
    for i, c in enumerate(data["candidates"], 1):
        num = {True: "pass", False: "FAIL", None: "-"}[c["numerics_passed"]]
        out.append(f"| {i} | {'+'.join(c['skeletons'])} | {c['label']} | {num} | {c['reason']} |")
    timed = [c for c in data["candidates"] if c["gate"] and any(s.get("perf") for s in c["gate"]["shapes"])]
    if timed:
        out += ["", "## Per-shape timing (median us, 95 % interval; speedup over the original)", ""]
        for c in timed:
            out += [f"### {c['label']}", "", "| shape | original us | candidate us | speedup | verdict | % roofline (orig → cand) "
                    "| x of floor (orig → cand; floor us) |", "| --- | --- | --- | --- | --- | --- | --- |"]
            for s in c["gate"]["shapes"]:
                p = s.get("perf")
                if not p:
                    out.append(f"| {s['shape']} | - | - | - | {s.get('perf_note') or 'not timed'} | - |")
                    continue
                out.append(
                    f"| {s['shape']} | {p['baseline']['median_us']:.1f} | {p['candidate']['median_us']:.1f} "
                    f"[{p['candidate']['low_us']:.1f}, {p['candidate']['high_us']:.1f}] | {p['speedup']:.3f}x "
                    f"[{p['speedup_low']:.3f}, {p['speedup_high']:.3f}] | {p['verdict']} | "
                    f"{p['baseline_roofline_pct']:.0f} % → {p['candidate_roofline_pct']:.0f} %"
                    + (f" (layout ceiling {p['baseline_ceiling_pct']:.0f} % → {p['candidate_ceiling_pct']:.0f} %)"
                       if p.get("baseline_ceiling_pct") else "")
                    + (f" | {p['baseline_floor_x']:.2f} → {p['candidate_floor_x']:.2f} ({p['floor_us']:.2f}) |"
                       if p.get("floor_us") else " | - |"))
            out.append("")
        regime = next((s["perf"].get("regime") for c in timed for s in c["gate"]["shapes"]
                       if s.get("perf") and s["perf"].get("regime")), "")
        if regime:
            out += [f"Regime: {regime}. Floor: the best in-place copy of the same bytes through a few grids, timed the "
                    "same way in the original's process; benchmarks that keep data in L2 are not comparable.", ""]
    if data["skipped"]:
        out += ["", "## Skeletons that produced no candidate", ""]
        out += [f"- {'+'.join(s['skeletons'])}: {s['reason']}" for s in data["skipped"]]
    out += ["", "## Applicability", ""]
    for k in data["applicability"]:
        out.append(f"### kernel `{k['kernel']}`")
        out += [f"- applies: **{a['skeleton']}** — " + "; ".join(a["conditions"]) for a in k["applicable"]]
        out += [f"- does not apply: {n['skeleton']} — {n['reason']}" for n in k["not_applicable"]]
        out.append("")
    diffs = [c for c in data["candidates"] if c["accepted"]] or data["candidates"][:3]
    if diffs:
        out += ["## Diffs", ""]
        for c in diffs:
            out += [f"### {c['label']}", "", "```diff", c["diff"].rstrip(), "```", ""]
    return "\n".join(out) + "\n"


PLOT_MISSING = "plot skipped: matplotlib is not installed (pip install 'skel[plot]')"


def _plot(data: dict, path: Path) -> Path | None:
    """The speedup plot as a PNG (None when nothing was timed or matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = plot_figure(data)
    if fig is None:
        return None
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timed_points(data: dict) -> dict[str, dict[str, list[dict]]]:
    """bucket (the shape less its batch dim, the spec's: N, or B, batch, ... of an inferred harness) ->
    candidate label -> points sorted by batch, each {"N", "speedup", "low", "high", "baseline_pct",
    "candidate_pct"} from the candidate's own judgement ("N" holds the batch dim's size)."""
    from skel.catalog.results import shape_dims

    batch = data.get("binding", {}).get("batch") or "N"
    out: dict[str, dict[str, list[dict]]] = {}
    for c in data["candidates"]:
        for s in (c.get("gate") or {}).get("shapes", ()):
            p = s.get("perf")
            dims = shape_dims(s["shape"])
            if not p or batch not in dims:
                continue
            bucket = "-".join(f"{k}{v}" for k, v in dims.items() if k != batch) or "all"
            out.setdefault(bucket, {}).setdefault(c["label"], []).append({
                "N": dims[batch], "speedup": p["speedup"], "low": p["speedup_low"], "high": p["speedup_high"],
                "baseline_pct": p.get("baseline_roofline_pct"), "candidate_pct": p.get("candidate_roofline_pct")})
    for per in out.values():
        for points in per.values():
            points.sort(key=lambda q: q["N"])
    return out


def plot_figure(data: dict):
    """Speedup over the original against batch N (top row) and % of the copy roofline (bottom row), one
    column per shape bucket (the other dims, e.g. T1), every timed candidate as its own line with its 95 %
    interval as error bars; the original's % of roofline is the median of its runs across the judgements.
    GPU and dtype in the title. None when no candidate was timed."""
    import statistics

    import matplotlib.pyplot as plt

    points = timed_points(data)
    if not points:
        return None
    buckets = sorted(points)
    fig, axes = plt.subplots(2, len(buckets), figsize=(4.5 * len(buckets) + 1.5, 7.5), squeeze=False, sharex="col")
    for j, bucket in enumerate(buckets):
        top, bottom = axes[0][j], axes[1][j]
        base: dict[int, list[float]] = {}
        for label, pts in sorted(points[bucket].items()):
            ns = [q["N"] for q in pts]
            ys = [q["speedup"] for q in pts]
            err = [[q["speedup"] - q["low"] for q in pts], [q["high"] - q["speedup"] for q in pts]]
            top.errorbar(ns, ys, yerr=err, marker="o", capsize=3, label=label)
            if all(q["candidate_pct"] is not None for q in pts):
                bottom.plot(ns, [q["candidate_pct"] for q in pts], marker="o", label=label)
            for q in pts:
                if q["baseline_pct"] is not None:
                    base.setdefault(q["N"], []).append(q["baseline_pct"])
        if base:
            ns = sorted(base)
            bottom.plot(ns, [statistics.median(base[n]) for n in ns], "k--", marker="s", label="original")
        top.axhline(1.0, color="grey", linewidth=0.8)
        top.set_title(bucket)
        top.set_ylabel("speedup over the original (x, 95 % CI)")
        bottom.set_ylabel("% of copy roofline")
        bottom.set_xlabel(f"batch dim {data.get('binding', {}).get('batch') or 'N'}")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
        top.legend(fontsize=7)
    env = data.get("environment") or {}
    gates = [c["gate"] for c in data["candidates"] if c.get("gate")]
    gpu = env.get("gpu") or next((g["machine"]["name"] for g in gates if isinstance(g.get("machine"), dict)
                                  and g["machine"].get("name")), "GPU ?")
    dtype = next((g.get("dtype") for g in gates if g.get("dtype")), "dtype ?")
    fig.suptitle(f"{Path(data['target']).name}: {gpu}, {dtype}")
    fig.tight_layout()
    return fig
