#!/usr/bin/env bash
# Issue 5's "must show" on the H200, in one device call:
#   upstream FLA KDA decode, the suite's kda_decode and gdn_decode through `skel apply`,
#   and the rsqrt skeleton alone on the upstream file.
# Run from the repo root on the GPU machine with .whl carried (fla-core and libcst wheels):
#   bash benchmarks/apply_h200.sh "$OUT"
OUT=${1:-/tmp/out}
mkdir -p "$OUT"
. benchmarks/gpu_env.sh
SHAPES=${SKEL_BENCH_SHAPES:-bench}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
mkdir -p /tmp/work
cp /tmp/site/fla/ops/kda/fused_recurrent.py /tmp/work/fla_kda_decode.py
cp /tmp/site/fla/ops/gated_delta_rule/fused_recurrent.py /tmp/work/fla_gdn_decode.py
cp kernels/kda_decode/kernel.py /tmp/work/kda_decode.py
cp kernels/gdn_decode/kernel.py /tmp/work/gdn_decode.py
run() {  # name, target, extra args...
  local name=$1 target=$2; shift 2
  echo "=== $name: skel apply $target $*"
  python3 -m skel apply "$target" --unsafe --shapes "$SHAPES" --report-dir "$OUT/$name" --json "$@" \
    > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "exit $?"; tail -n 4 "$OUT/$name.log"
}
run rsqrt_upstream /tmp/work/fla_kda_decode.py --skeleton SK001 --no-record
run kda_upstream /tmp/work/fla_kda_decode.py ${SKEL_APPLY_ARGS}
run kda_suite /tmp/work/kda_decode.py ${SKEL_APPLY_ARGS}
run gdn_suite /tmp/work/gdn_decode.py ${SKEL_APPLY_ARGS}
