"""The `skel apply` report: report.md, report.json and (when timed) a time-versus-shape plot."""
from __future__ import annotations

import json
from pathlib import Path


def report_path(folder: Path) -> Path:
    """Where write_report puts the Markdown report (known before it is written, so the JSON can name it)."""
    return folder / "report.md"


def write_report(result, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    plot = _plot(data, folder / "time_vs_shape.png") if data["perf_measured"] else None
    (folder / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    md = report_path(folder)
    md.write_text(render_markdown(data, plot.name if plot else None), encoding="utf-8")
    return md


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
    isolation = next((g["isolation"] for g in gates if g.get("isolation")), None)
    if isolation:
        out.append(f"- candidates ran contained: {isolation.get('summary', '')} (README: Trust model)")
    out += [f"- note: {n}" for n in data["notes"]]
    if data["winners"]:
        out += ["", "## Accepted", "", "| shape bucket | variant |", "| --- | --- |"]
        out += [f"| {w['bucket']} | {w['candidate']} |" for w in data["winners"]]
    if plot:
        out += ["", f"![time versus shape]({plot})"]
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


def _plot(data: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series: dict[str, dict[str, float]] = {}
    roof: dict[str, float] = {}
    for c in data["candidates"]:
        if not c["gate"]:
            continue
        for s in c["gate"]["shapes"]:
            p = s.get("perf")
            if not p:
                continue
            series.setdefault("original", {})[s["shape"]] = p["baseline"]["median_us"]
            if c["accepted"]:
                series.setdefault(c["label"], {})[s["shape"]] = p["candidate"]["median_us"]
            if p.get("copy_gbps"):
                roof[s["shape"]] = p["bytes"] / (p["copy_gbps"] * 1e3)  # bytes / (GB/s) -> us
    if not series.get("original"):
        return None
    shapes = list(series["original"])
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(shapes)), 5))
    x = range(len(shapes))
    for name, values in series.items():
        ax.plot(x, [values.get(s, float("nan")) for s in shapes], marker="o", label=name)
    if roof:
        ax.plot(x, [roof.get(s, float("nan")) for s in shapes], "k--", label="copy roofline")
    ax.set_xticks(list(x), shapes, rotation=60, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (us, median)")
    ax.set_title(Path(data["target"]).name)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
