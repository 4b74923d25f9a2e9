#!/usr/bin/env bash
# Issue 19 on the H200: what a real timed run puts in the linter-grade outputs. skel apply on the suite's
# gdn_decode (SK005 launch variants: measured to win 1.22x at T = 1 and lose at some shapes), timed through the
# gate (validate/bench.py), then: report.json's environment (GPU, driver, CUDA, versions, commit, date), the
# speedup-vs-N plot (one column per T bucket, 95 % intervals), `skel results export` as CSV and JSON, and the
# same verdicts recorded by `skel validate --skeleton` on the accepted file. Run from the repo root on the GPU
# machine with .whl carried (libcst, tree-sitter wheels; rich and matplotlib if present, else plain output and a
# report that says the plot was skipped):
#   bash benchmarks/cli_h200.sh "$OUT"
DEST=${1:-/tmp/out}
OUT=/tmp/skel-cli-results
rm -rf "$OUT"; mkdir -p "$OUT" "$DEST"
export SKEL_CATALOG="$OUT/catalog.sqlite"
. benchmarks/gpu_env.sh
SHAPES=${SKEL_BENCH_SHAPES:-N1-T1-H16-HV32-K128-V128,N64-T1-H16-HV32-K128-V128,N256-T1-H16-HV32-K128-V128,N64-T8-H16-HV32-K128-V128,N256-T8-H16-HV32-K128-V128}
mkdir -p /tmp/work && cp kernels/gdn_decode/kernel.py /tmp/work/gdn_decode.py
skel apply /tmp/work/gdn_decode.py --unsafe --skeleton SK005 --shapes "$SHAPES" --max-candidates 6 \
  --report-dir "$OUT/report" -o "$OUT/gdn_decode.skel.py" --json > "$OUT/apply.json" 2> "$OUT/apply.log"
echo "apply exit $?"
skel results export --format csv -o "$OUT/results.csv" --force
skel results export --format json -o "$OUT/results.json" --force
if [ -f "$OUT/gdn_decode.skel.py" ]; then
  skel validate gdn_decode "$OUT/gdn_decode.skel.py" --shapes "$SHAPES" --skeleton SK005 --json > "$OUT/validate.json" 2>> "$OUT/apply.log"
  echo "validate exit $?"
  skel results export --format csv -o "$OUT/results_after_validate.csv" --force
fi
python3 - "$OUT" <<'PY'
import csv, json, sys
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "report" / "report.json").read_text())
env = report.get("environment") or {}
print("environment:", env)
rows = list(csv.DictReader(open(out / "results.csv")))
timed = [r for r in rows if r["metric"] == "speedup"]
print(f"{len(rows)} rows, {len(timed)} timed; columns filled on timed rows:",
      {k: sum(bool(r[k]) for r in timed) for k in ("gpu", "driver", "cuda", "torch", "triton", "commit", "date", "ci_low", "dim_N")})
print("plot:", [p.name for p in (out / "report").glob("*.png")] or "none (see report.md)")
PY
tar -C "$OUT" -czf "$DEST/cli_h200.tgz" .
