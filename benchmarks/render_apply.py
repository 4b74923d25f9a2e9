"""Render `skel apply` reports (report.json from benchmarks/apply_h200.sh) as one Markdown table set.

    python benchmarks/render_apply.py OUT.md NAME=DIR/report.json ...

Also writes NAME.json beside OUT.md: every candidate's per-shape timing and numerics, without diffs.
NAME=NAME.json (such a file, from an earlier render) renders it again as it is.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def compact(report: dict) -> dict:
    out = {k: report[k] for k in ("target", "binding", "device", "winners", "output", "notes")}
    out["candidates"] = []
    for c in report["candidates"]:
        shapes = []
        for s in (c["gate"] or {}).get("shapes", []):
            p = s.get("perf") or {}
            n = s.get("numerics") or {}
            shapes.append({
                "shape": s["shape"], "numerics_passed": n.get("passed"),
                "outputs": [{k: o.get(k) for k in ("output", "rel_rms", "original_rel_rms", "diff_rel_rms")}
                            for o in n.get("outputs", [])],
                "baseline_us": p.get("baseline", {}).get("median_us"),
                "candidate_us": p.get("candidate", {}).get("median_us"),
                "candidate_ci_us": [p.get("candidate", {}).get("low_us"), p.get("candidate", {}).get("high_us")],
                "speedup": p.get("speedup"), "speedup_ci": [p.get("speedup_low"), p.get("speedup_high")],
                "verdict": p.get("verdict"), "baseline_roofline_pct": p.get("baseline_roofline_pct"),
                "candidate_roofline_pct": p.get("candidate_roofline_pct"), "copy_gbps": p.get("copy_gbps"),
            })
        out["candidates"].append({"label": c["label"], "accepted": c["accepted"], "reason": c["reason"], "shapes": shapes})
    out["runoffs"] = report.get("runoffs", [])
    return out


def table(name: str, data: dict) -> list[str]:
    lines = [f"## {name}: `{Path(data['target']).name}` ({data['binding']['how']})", ""]
    lines += [f"- accepted: " + "; ".join(f"{w['bucket']} → {w['candidate']}" for w in data["winners"]) or "- accepted: none"]
    lines += [f"- {n}" for n in data["notes"]]
    cands = data["candidates"]
    if not cands or not cands[0]["shapes"]:
        return lines + [""]
    shapes = [s["shape"] for s in cands[0]["shapes"]]
    lines += ["", "| candidate | " + " | ".join(shapes) + " |", "| --- |" + " --- |" * len(shapes)]
    base = cands[0]["shapes"]
    lines.append("| original (us, % roofline) | " + " | ".join(
        f"{s['baseline_us']:.1f} ({s['baseline_roofline_pct']:.0f} %)" for s in base) + " |")
    for c in cands:
        cells = [f"{s['candidate_us']:.1f} ({s['candidate_roofline_pct']:.0f} %) {s['speedup']:.2f}x {s['verdict'][:6]}"
                 if s["candidate_us"] else "-" for s in c["shapes"]]
        mark = "**ACCEPTED** " if c["accepted"] else ""
        lines.append(f"| {mark}{c['label']} | " + " | ".join(cells) + " |")
    for r in data.get("runoffs", []):  # head-to-heads in one process (skel apply since session 6)
        per = ", ".join(f"{s['shape'].split('-')[0]} {s['speedup']:.3f}x [{s['low']:.3f}, {s['high']:.3f}]" for s in r["shapes"])
        lines += ["", f"- run-off in {r['bucket']}: {r['challenger']} over {r['leader']}: {per or '-'}; kept "
                      f"{r['winner']} ({r['why']})"]
    return lines + [""]


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    md = [out.read_text().split("<!-- tables -->")[0].rstrip() + "\n\n<!-- tables -->", ""] if out.exists() else []
    for arg in argv[1:]:
        name, path = arg.split("=", 1)
        report = json.loads(Path(path).read_text())
        rendered = all("shapes" in c for c in report["candidates"])  # already compact: an earlier render
        data = report if rendered else compact(report)
        (out.parent / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        md += table(name, data)
    out.write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
