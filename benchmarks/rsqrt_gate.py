"""The rsqrt rewrite of the suite's KDA decode (SK001 by hand: two L2-norm divisions as rsqrt
multiplies) through the gate at T = 1, N = 32 and 64: its known ~6-9 % gain must survive the gate's
two-worker timing. Prints one line per shape and the gate's isolation."""
from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from skel.validate import validate

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    source = (ROOT / "kernels" / "kda_decode" / "kernel.py").read_text()
    edited = re.sub(r"(b_[qk]) = \1 / tl\.sqrt\(tl\.sum\(\1 \* \1\) \+ 1e-6\)",
                    r"\1 = \1 * tl.rsqrt(tl.sum(\1 * \1) + 1e-6)", source)
    assert edited.count("tl.rsqrt") == 2
    candidate = Path(tempfile.mkdtemp()) / "kda_rsqrt.py"
    candidate.write_text(edited)
    t0 = time.time()
    result = validate("kda_decode", candidate, shapes=["N32-T1-H32-HV32-K128-V128", "N64-T1-H32-HV32-K128-V128"],
                      seeds=(0, 1), device="cuda", require="faster")
    print(f"accepted={result.accepted} in {time.time() - t0:.1f} s; reasons {list(result.reasons)}")
    print("isolation:", (result.isolation or {}).get("summary"))
    for s in result.shapes:
        p = s.perf
        if p is None:
            print(s.shape, s.perf_note)
            continue
        print(f"{s.shape}: {p.baseline.median_us:.1f} -> {p.candidate.median_us:.1f} us, speedup {p.speedup:.3f}"
              f" [{p.speedup_low:.3f}, {p.speedup_high:.3f}] {p.verdict}; roofline {p.baseline_roofline_pct:.0f} %"
              f" -> {p.candidate_roofline_pct:.0f} %")
    return 0 if result.accepted else 1


if __name__ == "__main__":
    sys.exit(main())
