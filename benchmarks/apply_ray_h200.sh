#!/usr/bin/env bash
# `skel apply` judged locally and as Ray tasks (one GPU each) on the same target, shapes and skeletons:
# same verdicts?, and the wall time of both. Run from the repo root on the GPU machine with .whl carried
# (the wheels of benchmarks/gpu_env.sh plus ray's cp312 wheel and jsonschema's, see
# benchmarks/results/apply_ray_h200/README.md):
#   bash benchmarks/apply_ray_h200.sh "$OUT"
# SKEL_RAY_TARGET / SKEL_RAY_SHAPES / SKEL_RAY_ARGS override the target, its shapes and the apply options.
DEST=${1:-/tmp/out}
OUT=/tmp/skel-apply-ray
rm -rf "$OUT"; mkdir -p "$OUT" "$DEST"
. benchmarks/gpu_env.sh
TARGET=${SKEL_RAY_TARGET:-kernels/gdn_decode/kernel.py}
SHAPES=${SKEL_RAY_SHAPES:-N64-T1-H16-HV32-K128-V128,N64-T8-H16-HV32-K128-V128}
ARGS=${SKEL_RAY_ARGS:---skeleton SK001 --skeleton SK002 --max-candidates 3}
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,count --format=csv,noheader
  python3 -c "import torch, triton, ray; print('torch', torch.__version__, 'triton', triton.__version__, 'ray', ray.__version__, 'gpus', torch.cuda.device_count())"
} | tee "$OUT/machine.txt"
mkdir -p /tmp/work && cp "$TARGET" /tmp/work/target.py
job() {  # name, extra args...
  local name=$1; shift
  echo "=== $name: skel apply /tmp/work/target.py --unsafe --shapes $SHAPES $ARGS $*" | tee -a "$OUT/commands.txt"
  local t0=$(date +%s.%N)
  SKEL_CATALOG="$OUT/$name.sqlite" python3 -m skel apply /tmp/work/target.py --unsafe --shapes "$SHAPES" $ARGS \
    --report-dir "$OUT/$name" --json "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  local rc=$?
  local t1=$(date +%s.%N)
  echo "$name exit $rc wall_s $(python3 -c "print(round($t1 - $t0, 1))")" | tee -a "$OUT/wall.txt"
  tail -n 3 "$OUT/$name.log"
  tar czf "$DEST/apply_ray_h200.tgz" -C "$OUT" --exclude='*/candidates' .  # a run cut short still returns its results
}
job local
job ray --executor ray
python3 benchmarks/compare_apply.py "$OUT/local" "$OUT/ray" | tee "$OUT/compare.txt"
tar czf "$DEST/apply_ray_h200.tgz" -C "$OUT" --exclude='*/candidates' .
