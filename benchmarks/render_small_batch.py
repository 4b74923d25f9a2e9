"""Tables from `benchmarks/small_batch_h200.sh`: per job, the original's and the best candidate's time at each
shape against the gate's measured floor, the winners per bucket and what the output dispatches on.

    python benchmarks/render_small_batch.py OUT_DIR     # OUT_DIR holds <job>/report.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def render(out: Path) -> str:
    lines: list[str] = []
    for report in sorted(out.glob("*/report.json")):
        data = json.loads(report.read_text())
        job = report.parent.name
        lines += [f"## {job}: {Path(data['target']).name}", ""]
        machine = next((c["gate"].get("machine") for c in data["candidates"] if c.get("gate") and c["gate"].get("machine")), None)
        if machine:
            lines.append(f"{machine.get('name')} (driver {machine.get('driver')}; {machine.get('versions')})")
        best: dict[str, tuple[float, str, dict]] = {}
        orig: dict[str, dict] = {}
        for c in data["candidates"]:
            for s in (c.get("gate") or {}).get("shapes", []):
                p = s.get("perf")
                if not p:
                    continue
                orig.setdefault(s["shape"], p)
                if p["verdict"] == "faster" and p["speedup"] > best.get(s["shape"], (0.0,))[0]:
                    best[s["shape"]] = (p["speedup"], c["label"], p)
        lines += ["", "| shape | original us | x of floor | % roofline | best faster candidate | its us | x of floor | speedup |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for shape, p in orig.items():
            floor = p.get("floor_us") or 0.0
            ox = f"{p['baseline']['median_us'] / floor:.2f} ({floor:.2f} us)" if floor else "-"
            row = f"| {shape} | {p['baseline']['median_us']:.2f} | {ox} | {p['baseline_roofline_pct']:.0f} % |"
            if shape in best:
                sp, label, bp = best[shape]
                bx = f"{bp['candidate']['median_us'] / floor:.2f}" if floor else "-"
                row += f" {label} | {bp['candidate']['median_us']:.2f} | {bx} | {sp:.3f}x |"
            else:
                row += " none | - | - | - |"
            lines.append(row)
        lines += ["", f"winners: {data.get('winners')}", f"output: {data.get('output')}"]
        lines += [f"note: {n}" for n in data.get("notes", []) if "dispatch" in n or "planning" in n]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(Path(sys.argv[1])))
