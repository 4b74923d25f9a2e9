"""Do two `skel apply` runs agree? Compare their report.json (candidates, per-shape verdicts, winners).

    python benchmarks/compare_apply.py REPORT_DIR_A REPORT_DIR_B

Prints one line per candidate and shape (numerics, timing verdict, speedup in each run) and the winners, then
"same verdicts" or what differs. Exit status 0 when the verdicts and winners agree, 1 otherwise.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def verdicts(report: dict) -> dict[tuple[str, str], tuple]:
    out = {}
    for c in report["candidates"]:
        for s in (c.get("gate") or {}).get("shapes", []):
            perf = s.get("perf") or {}
            numerics = (s.get("numerics") or {}).get("passed")
            out[(c["label"], s["shape"])] = (numerics, perf.get("verdict"), perf.get("speedup"))
        if not (c.get("gate") or {}).get("shapes"):
            out[(c["label"], "-")] = (c.get("numerics_passed"), None, None)
    return out


def main(a: str, b: str) -> int:
    ra, rb = (json.loads((Path(d) / "report.json").read_text()) for d in (a, b))
    va, vb = verdicts(ra), verdicts(rb)
    differ = []
    for key in sorted(set(va) | set(vb)):
        x, y = va.get(key), vb.get(key)
        same = x is not None and y is not None and x[:2] == y[:2]
        fmt = lambda v: "absent" if v is None else f"{v[0]}, {v[1]}, {v[2] and round(v[2], 3)}x"  # noqa: E731
        print(f"{'same ' if same else 'DIFF '} {key[0]} @ {key[1]}: {fmt(x)} | {fmt(y)}")
        if not same:
            differ.append(key)
    wa = sorted((w["bucket"], w["candidate"]) for w in ra["winners"])
    wb = sorted((w["bucket"], w["candidate"]) for w in rb["winners"])
    print("winners:", wa, "|", wb)
    if wa != wb:
        differ.append(("winners", ""))
    print("same verdicts" if not differ else f"{len(differ)} difference(s)")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
