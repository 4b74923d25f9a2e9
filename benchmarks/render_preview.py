"""Render `skel apply --preview` reports (benchmarks/preview_h200.sh) and the catalog's standings as Markdown.

    python benchmarks/render_preview.py CATALOG.sqlite NAME=DIR/report.json ... > OUT.md

One table per report (every judged candidate, its pattern, per-shape speedup and verdict), then the
standings of every candidate that was judged: rank after verdicts, trials, admitted or why not.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from skel.catalog.store import open_catalog
from skel.pipeline.preview import standings


def _gate(c: dict) -> dict:
    return c.get("gate") or {}


def _pattern(cand) -> str:
    edits = cand.pattern.get("refined") or []
    text = " ; ".join(f"{e['kind']}: `{e['before']}` => `{e['after']}`" for e in edits)
    return text if len(text) < 140 else text[:137] + "..."


def main(argv: list[str]) -> int:
    catalog, reports = argv[0], argv[1:]
    with open_catalog(catalog) as cat:
        by_code = {c.code: c for c in cat.candidates()}
        ranked = standings(cat)
    judged: set[str] = set()
    out = []
    for arg in reports:
        name, path = arg.split("=", 1)
        rep = json.loads(Path(path).read_text())
        cands = [c for c in rep["candidates"] if c["label"].startswith("SKP")]
        out += [f"### {name}: `{Path(rep['target']).name}` ({rep['binding']['how']})", ""]
        if not cands:
            out += ["no preview candidate judged", ""]
            continue
        shapes = [s["shape"] for s in _gate(cands[0]).get("shapes", [])] or ["-"]
        out += ["| candidate | pattern | " + " | ".join(shapes) + " | verdict |", "| --- | --- |" + " --- |" * (len(shapes) + 1)]
        for c in cands:
            judged.add(c["label"])
            cells = []
            for s in _gate(c).get("shapes", []):
                p = s.get("perf") or {}
                cells.append(f"{p['speedup']:.3f}x [{p['speedup_low']:.3f}, {p['speedup_high']:.3f}] {p['verdict']}"
                             if p.get("speedup") else "-")
            cells += ["-"] * (len(shapes) - len(cells))
            pat = _pattern(by_code[c["label"]]) if c["label"] in by_code else ""
            verdict = ("**accepted** " if c["accepted"] else "") + c["reason"].split(" (candidate_")[0][:120]
            out.append(f"| {c['label']} | {pat} | " + " | ".join(cells) + f" | {verdict} |")
        out.append("")
    out += ["### Standings of the judged candidates (rank after verdicts)", "",
            "| code | score as mined | after verdicts | trials (accepted / numerics failed / slower-only) | admitted |",
            "| --- | --- | --- | --- | --- |"]
    admitted = 0
    for cand, st in ranked:
        if cand.code not in judged:
            continue
        admitted += st.admitted
        acc = sum(t.accepted for t in st.trials)
        out.append(f"| {cand.code} | {st.score} | {st.rank_score} | {len(st.trials)} ({acc} / {st.failures} / {st.slower}) "
                   f"| {'yes' if st.admitted else 'no'}: {st.why.split(': ', 1)[-1]} |")
    out += ["", f"{len(judged)} candidates judged, {admitted} admitted.", ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
