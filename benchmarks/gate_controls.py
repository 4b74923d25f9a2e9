"""Positive controls for the gate's two-worker timing on a GPU: rewrites whose effect is known must
come out as before. gdn_decode with a 16-wide V tile (FACTS.md: 1.22x at T = 1 on FLA's GDN decode,
BV = 8 -> 16 at 1 warp) must be measurably faster; the suite KDA kernel with its two L2-norm divisions as
rsqrt multiplies (SK001 by hand) is printed as measured. One line per shape, then the gate's isolation.

    python3 benchmarks/gate_controls.py
"""
from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from skel.validate import validate

ROOT = Path(__file__).resolve().parent.parent


def _variant(family: str, old: str, new: str, count: int, name: str) -> Path:
    source = (ROOT / "kernels" / family / "kernel.py").read_text()
    edited, n = re.subn(old, new, source)
    assert n == count, f"{family}: {old!r} matched {n} times, expected {count}"
    path = Path(tempfile.mkdtemp()) / name
    path.write_text(edited)
    return path


def _judge(family: str, candidate: Path, shapes: list[str]) -> bool:
    t0 = time.time()
    result = validate(family, candidate, shapes=shapes, seeds=(0, 1), device="cuda", require="faster")
    print(f"{family} {candidate.name}: accepted={result.accepted} in {time.time() - t0:.1f} s;"
          f" reasons {list(result.reasons)}")
    for s in result.shapes:
        p = s.perf
        if p is None:
            print(f"  {s.shape}: {s.perf_note}")
            continue
        print(f"  {s.shape}: {p.baseline.median_us:.1f} -> {p.candidate.median_us:.1f} us, speedup {p.speedup:.3f}"
              f" [{p.speedup_low:.3f}, {p.speedup_high:.3f}] {p.verdict}; roofline {p.baseline_roofline_pct:.0f} %"
              f" -> {p.candidate_roofline_pct:.0f} %")
    print("  isolation:", (result.isolation or {}).get("summary"))
    return result.accepted


def main() -> int:
    gdn = _variant("gdn_decode", r"BV = 8\b", "BV = 16", 1, "gdn_bv16.py")
    ok = _judge("gdn_decode", gdn, ["N32-T1-H16-HV32-K128-V128", "N64-T1-H16-HV32-K128-V128",
                                    "N64-T8-H16-HV32-K128-V128"])
    rsqrt = _variant("kda_decode", r"(b_[qk]) = \1 / tl\.sqrt\(tl\.sum\(\1 \* \1\) \+ 1e-6\)",
                     r"\1 = \1 * tl.rsqrt(tl.sum(\1 * \1) + 1e-6)", 2, "kda_rsqrt.py")
    _judge("kda_decode", rsqrt, ["N32-T1-H32-HV32-K128-V128", "N64-T1-H32-HV32-K128-V128"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
