"""Robustness sweep (CPU): `skel apply --dry-run` over every Triton file under some roots.

    python benchmarks/apply_sweep.py ROOT... [--out benchmarks/results/apply_sweep.md]

Every file with ``@triton.jit`` is bound (no harness needed for a dry run), profiled, matched and
rewritten by every applicable skeleton, in this process; nothing from the roots is executed. The
sweep reports how many files produced candidates, every exception with its traceback (a crash is a
bug: a rewrite must skip with a reason instead), and the slowest files. Exit 1 when anything crashed.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
import traceback
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    from skel.skeletons.library import load_library
    from skel.errors import UsageError
    from skel.pipeline.apply import ApplyOptions, apply

    files = sorted(p for root in a.roots for p in (root.rglob("*.py") if root.is_dir() else [root])
                   if "@triton.jit" in p.read_text(encoding="utf-8", errors="replace"))
    library = load_library()
    stats, crashes, times, per_skeleton = collections.Counter(), [], [], collections.Counter()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files, 1):
            t = time.monotonic()
            try:
                r = apply(ApplyOptions(target=path, allow_unsafe=True, dry_run=True, device="cpu",
                                       report_dir=Path(tmp) / str(i), record=False), library, progress=lambda m: None)
                stats["files"] += 1
                stats["candidates"] += len(r.candidates)
                stats["files with candidates"] += bool(r.candidates)
                per_skeleton.update({s for c in r.candidates for s in c.skeletons})
            except UsageError as exc:
                stats["usage errors"] += 1
                crashes.append((path, f"usage error: {exc}"))
            except Exception:  # noqa: BLE001 - every crash is reported, the sweep goes on
                crashes.append((path, traceback.format_exc()))
            times.append((time.monotonic() - t, path))
            print(f"[{i}/{len(files)}] {path}", file=sys.stderr, flush=True)
    wall = time.monotonic() - start
    times.sort(reverse=True)
    lines = [f"# `skel apply --dry-run` sweep ({time.strftime('%Y-%m-%d')}, {len(files)} Triton files, {wall:.0f} s)", "",
             f"- command: `python benchmarks/apply_sweep.py {' '.join(map(str, a.roots))}`",
             f"- files rewritten without a crash: {stats['files']} of {len(files)}; with candidates: "
             f"{stats['files with candidates']}; candidate diffs: {stats['candidates']}",
             f"- files per skeleton with a candidate: " + ", ".join(f"{k} {v}" for k, v in sorted(per_skeleton.items())),
             f"- slowest: " + ", ".join(f"{p.name} {dt:.1f} s" for dt, p in times[:5]),
             f"- crashes: {len(crashes)}", ""]
    for path, tb in crashes:
        lines += [f"## {path}", "", "```", tb.rstrip()[-3000:], "```", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
