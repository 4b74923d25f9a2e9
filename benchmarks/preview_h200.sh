#!/usr/bin/env bash
# Issue 7 "closing the loop" on the H200: the gate judges the mined preview candidates (SKP...)
# on the kernels/ targets and on FLA's gated-delta-rule decode, and records every verdict.
# Needs a catalog with candidates (`skel mine --history` / `--variants`, see
# benchmarks/results/history_fla.md), carried to the GPU machine as .skel/preview.sqlite:
#   bash benchmarks/preview_h200.sh "$OUT"        # from the repo root, .whl and .skel carried
# Each target gets the best-ranked SKEL_PREVIEW_N applicable candidates (default 10), alone,
# at two shapes; the catalog with the verdicts comes back in the tarball ($SKEL_PREVIEW_TGZ,
# default preview_h200.tgz). Other knobs: SKEL_BENCH_JOBS (kda gdn fla_kda fla_gdn state_merge dsa),
# SKEL_PREVIEW_CODES="SKP..." (judge these instead of the best-ranked), SKEL_PREVIEW_FROM (start
# from another catalog, e.g. an earlier run's /tmp/skel-preview-results/catalog.sqlite).
DEST=${1:-/tmp/out}
OUT=/tmp/skel-preview-results
cp "${SKEL_PREVIEW_FROM:-.skel/preview.sqlite}" /tmp/preview-start.sqlite  # e.g. an earlier run's catalog
rm -rf "$OUT"; mkdir -p "$OUT" "$DEST"
mv /tmp/preview-start.sqlite "$OUT/catalog.sqlite"
TGZ=${SKEL_PREVIEW_TGZ:-preview_h200.tgz}
export SKEL_CATALOG="$OUT/catalog.sqlite"
. benchmarks/gpu_env.sh
set -f  # 'SKP*' is a code pattern for skel, not a file glob
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
mkdir -p /tmp/work
cp /tmp/site/fla/ops/gated_delta_rule/fused_recurrent.py /tmp/work/fla_gdn_decode.py
cp /tmp/site/fla/ops/kda/fused_recurrent.py /tmp/work/fla_kda_decode.py
for k in kda_decode gdn_decode state_merge dsa_indexer; do cp kernels/$k/kernel.py /tmp/work/$k.py; done
N=${SKEL_PREVIEW_N:-10}
# SKEL_PREVIEW_CODES="SKP... SKP...": judge these candidates instead of the best-ranked ones
SEL="--skeleton SKP*"
[ -n "$SKEL_PREVIEW_CODES" ] && SEL=$(printf -- "--skeleton %s " $SKEL_PREVIEW_CODES)
run() {  # name, target, shapes
  [ -n "$SKEL_PREVIEW_CODES" ] && set -- "$1-codes" "$2" "$3"
  echo "=== $1: skel apply $2 --preview $SEL"
  python3 -m skel apply "$2" --preview $SEL --unsafe --max-candidates "$N" --shapes "$3" \
    --report-dir "$OUT/$1" --json > "$OUT/$1.json" 2> "$OUT/$1.log"
  echo "exit $?"; tail -n 2 "$OUT/$1.log"
  tar czf "$DEST/$TGZ" -C "$OUT" .
}
for job in ${SKEL_BENCH_JOBS:-kda gdn fla_gdn state_merge dsa}; do
  case $job in
    kda) run kda /tmp/work/kda_decode.py N64-T1-H32-HV32-K128-V128,N64-T8-H32-HV32-K128-V128 ;;
    gdn) run gdn /tmp/work/gdn_decode.py N64-T1-H16-HV32-K128-V128,N64-T8-H16-HV32-K128-V128 ;;
    fla_kda) run fla_kda /tmp/work/fla_kda_decode.py N64-T1-H32-HV32-K128-V128,N64-T8-H32-HV32-K128-V128 ;;
    fla_gdn) run fla_gdn /tmp/work/fla_gdn_decode.py N64-T1-H16-HV32-K128-V128,N64-T8-H16-HV32-K128-V128 ;;
    state_merge) run state_merge /tmp/work/state_merge.py N32-HV32-C4-K128-V128,N64-HV32-C4-K128-V128 ;;
    dsa) run dsa /tmp/work/dsa_indexer.py B8-H64-D128-L8192-TOPK2048,B64-H64-D128-L8192-TOPK2048 ;;
  esac
done
tar czf "$DEST/$TGZ" -C "$OUT" .
