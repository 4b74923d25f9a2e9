#!/usr/bin/env bash
# Issue 16's must-show on the H200: launch parameters the code decides by expressions (SK005's case
# kernels: a conditional, a nested conditional over a shape dim, a same-file helper, a module constant, a
# triton.heuristics lambda), zero-config, with the small-batch regime as buckets of their own; and the
# decode targets at N = 1, T = 1 against the gate's measured floor (x of floor), plus the regression shapes.
# Run from the repo root on the GPU machine with .whl carried (libcst, tree-sitter, fla-core wheels):
#   bash benchmarks/small_batch_h200.sh "$OUT" [JOB ...]
# Jobs: fx_conditional fx_nested fx_helper fx_constant fx_heuristics (the case kernels at N = 1, 8, 64, 256),
# kda_n1 gdn_n1 fla_kda_n1 fla_gdn_n1 (N = 1 and 8 at T = 1, every applicable skeleton),
# fla_kda_regress (T = 8 and T = 1 at N = 64; SKEL_REGRESS_SHAPES=N64-T8-... for one). One 10-minute device call does not hold them all: split them.
DEST=${1:-/tmp/out}; shift
OUT=/tmp/skel-small-batch
mkdir -p "$OUT" "$DEST"
export SKEL_CATALOG="$OUT/catalog.sqlite"
export XDG_CACHE_HOME="$OUT/cache"
. benchmarks/gpu_env.sh
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u +%FT%TZ; } | tee -a "$OUT/gpu.txt"
mkdir -p /tmp/work
EX=skeletons/SK005-launch-config-search/examples
for c in conditional_tile nested_conditional helper_tile module_constant heuristics_tile; do cp "$EX/$c.before.py" "/tmp/work/$c.py"; done
cp kernels/kda_decode/kernel.py /tmp/work/kda_decode.py
cp kernels/gdn_decode/kernel.py /tmp/work/gdn_decode.py
cp /tmp/site/fla/ops/kda/fused_recurrent.py /tmp/work/fla_kda_decode.py
cp /tmp/site/fla/ops/gated_delta_rule/fused_recurrent.py /tmp/work/fla_gdn_decode.py
list() {  # prefix, suffix, N...
  local p=$1 s=$2 out=""; shift 2; for n in "$@"; do out="$out,${p}N$n$s"; done; echo "${out#,}"
}
FX=$(list "" -H32-K128-V128 ${SKEL_FX_N:-1 8 64 256})  # SKEL_FX_N="1 64": fewer shapes per call
FXC=${SKEL_FX_CANDIDATES:-8}
N1=${SKEL_N1_ARGS:-}  # e.g. "--skeleton SK005 --max-candidates 6" to fit a device call
run() {  # name, shapes, target, extra args...
  local name=$1 shapes=$2 target=$3; shift 3
  echo "=== $name: skel apply $target --shapes $shapes $*"
  local t0=$(date +%s)
  timeout ${SKEL_JOB_TIMEOUT:-200} python3 -m skel apply "$target" --unsafe --shapes "$shapes" --report-dir "$OUT/$name" \
    --json --no-record "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "exit $? after $(( $(date +%s) - t0 )) s"; tail -n 3 "$OUT/$name.log"
  tar czf "$DEST/small_batch_h200.tgz" -C "$OUT" .  # after every job: a call cut short still returns its results
}
for job in ${@:-fx_conditional fx_nested fx_helper fx_constant fx_heuristics}; do
  case $job in
    fx_conditional) run fx_conditional "$FX" /tmp/work/conditional_tile.py --skeleton SK005 --max-candidates $FXC ;;
    fx_nested) run fx_nested "$FX" /tmp/work/nested_conditional.py --skeleton SK005 --max-candidates $FXC ;;
    fx_helper) run fx_helper "$FX" /tmp/work/helper_tile.py --skeleton SK005 --max-candidates $FXC ;;
    fx_constant) run fx_constant "$FX" /tmp/work/module_constant.py --skeleton SK005 --max-candidates $FXC ;;
    fx_heuristics) run fx_heuristics "$FX" /tmp/work/heuristics_tile.py --skeleton SK005 --max-candidates $FXC ;;
    kda_n1) run kda_n1 "$(list "" -T1-H32-HV32-K128-V128 1 8)" /tmp/work/kda_decode.py $N1 ;;
    gdn_n1) run gdn_n1 "$(list "" -T1-H16-HV32-K128-V128 1 8)" /tmp/work/gdn_decode.py $N1 ;;
    fla_kda_n1) run fla_kda_n1 "$(list "" -T1-H32-HV32-K128-V128 1 8)" /tmp/work/fla_kda_decode.py $N1 ;;
    fla_gdn_n1) run fla_gdn_n1 "$(list "" -T1-H16-HV32-K128-V128 1 8)" /tmp/work/fla_gdn_decode.py $N1 ;;
    fla_kda_regress) run fla_kda_regress "${SKEL_REGRESS_SHAPES:-N64-T1-H32-HV32-K128-V128,N64-T8-H32-HV32-K128-V128}" \
      /tmp/work/fla_kda_decode.py ;;
  esac
done
python3 benchmarks/render_small_batch.py "$OUT" | tee "$OUT/summary.md"
tar czf "$DEST/small_batch_h200.tgz" -C "$OUT" .
