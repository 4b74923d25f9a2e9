"""`skel apply --preview`: what the history candidates (preview skeletons) would change in a target.

Candidates come from the catalog (`skel mine --history`) and are applied by the generic
pattern engine (skel.rewriter.pattern). This is a dry run: the gate does not judge
candidates yet, so nothing is written and nothing is accepted (exit 1); a candidate is
admitted only when the gate reproduces its effect on a kernel it was not distilled from.
"""
from __future__ import annotations

from pathlib import Path

from skel.commands.common import emit_json
from skel.errors import EXIT_FINDINGS


def run_preview(args) -> int:
    from skel.catalog import store
    from skel.rewriter.apply import unified_diff
    from skel.rewriter.pattern import preview_rewrites

    source = args.target.read_text(encoding="utf-8")
    path = args.catalog or store.default_catalog_path()
    cands = []
    if Path(path).exists():
        with store.open_catalog(path) as cat:
            cands = cat.candidates()
    wanted = {c.upper() for c in args.skeleton}
    cands = [c for c in cands if not wanted or c.code in wanted]
    rewrites = preview_rewrites(source, cands)
    if args.json:
        emit_json({"target": str(args.target), "catalog": str(path), "gated": False,
                   "candidates": [{**r.to_json(), "diff": unified_diff(source, r.source, args.target.name) if r.applied else ""}
                                  for r in rewrites]})
        return EXIT_FINDINGS
    for c, r in zip(cands, rewrites):
        print(f"{r.status:<8} {c.code} {c.name}: {r.reason}")
        if r.applied:
            print(unified_diff(source, r.source, args.target.name))
    if not cands:
        print(f"no candidate skeletons in {path} (run `skel mine --history REPO` first)")
    print("note: preview candidates are shown, not validated: the gate does not judge them yet; nothing was written")
    return EXIT_FINDINGS
