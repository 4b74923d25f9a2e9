#!/usr/bin/env bash
# Issue 15's must-show on the H200: kernels skel has no spec for, through zero-config `skel apply`
# (the harness inferred from each file's launcher, the original kernel as the oracle), against the
# hand-written harness where one exists (fla-core's delta rule). Run from the repo root on the GPU
# machine with .whl carried (libcst, tree-sitter, fla-core, einops, liger-kernel wheels):
#   bash benchmarks/zero_config_h200.sh "$OUT" [JOB ...]
# Jobs: delta_hand delta_zero simple_gla_zero kda_pool_zero rms_norm_zero swiglu_zero, and
# delta_varlen_zero (--variant cu_seqlens: packed variable-length batches), kda_ref_zero (fla's naive.py
# beside the kernel: its naive_recurrent_kda the second oracle), simple_gla_serving_zero (--variant g
# --variant initial_state), mamba_ssu_zero (mamba-ssm 2.3.2.post1's Mamba2 decode step, selective_state_update,
# judged where it lives in its package: carry its sdist, mamba_ssm-2.3.2.post1.tar.gz, in .whl too).
# Default: all; one 10-minute device call does not hold them all: split them.
DEST=${1:-/tmp/out}; shift
OUT=/tmp/skel-zero-config
mkdir -p "$OUT" "$DEST"
export SKEL_CATALOG="$OUT/catalog.sqlite"
export XDG_CACHE_HOME="$OUT/cache"  # the inferred specs come back with the results
. benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
date -u +%FT%TZ | tee -a "$OUT/gpu.txt"
mkdir -p /tmp/work
cp /tmp/site/fla/ops/delta_rule/fused_recurrent.py /tmp/work/fla_delta.py
cp /tmp/site/fla/ops/common/fused_recurrent.py /tmp/work/fla_common_recurrent.py  # simple_gla's kernel
cp /tmp/site/fla/ops/kda/fused_recurrent.py /tmp/work/fla_kda_pool.py
cp /tmp/site/liger_kernel/ops/rms_norm.py /tmp/work/liger_rms_norm.py
cp /tmp/site/liger_kernel/ops/swiglu.py /tmp/work/liger_swiglu.py
mkdir -p /tmp/work/kda && cp /tmp/site/fla/ops/kda/fused_recurrent.py /tmp/site/fla/ops/kda/naive.py /tmp/work/kda/
delta() { local s=""; for x in "$@"; do s="$s,$x"; done; echo "${s#,}"; }
run() {  # name, shapes, target, extra args...
  local name=$1 shapes=$2 target=$3; shift 3
  echo "=== $name: skel apply $target --shapes $shapes $*"
  local t0=$(date +%s)
  timeout ${SKEL_JOB_TIMEOUT:-190} python3 -m skel apply "$target" --unsafe --shapes "$shapes" --report-dir "$OUT/$name" --json "$@" \
    > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "exit $? after $(( $(date +%s) - t0 )) s"; tail -n 5 "$OUT/$name.log"
  tar czf "$DEST/zero_config_h200.tgz" -C "$OUT" .  # after every job: a call cut short still returns its results
}
for job in ${@:-delta_hand delta_zero simple_gla_zero kda_pool_zero rms_norm_zero swiglu_zero}; do
  case $job in
    delta_hand) run delta_hand "$(delta N32-T1-H32-K128-V128 N64-T1-H32-K128-V128 N64-T8-H32-K128-V128)" \
      /tmp/work/fla_delta.py --harness examples/fla_delta_rule/spec.py --skeleton SK002 --max-candidates ${SKEL_MAX_CANDIDATES:-6} --no-record ;;
    delta_zero) run delta_zero "$(delta B32-T1-H32-K128-V128 B64-T1-H32-K128-V128 B64-T8-H32-K128-V128)" \
      /tmp/work/fla_delta.py --skeleton SK002 --max-candidates ${SKEL_MAX_CANDIDATES:-6} --no-record ;;
    simple_gla_zero) run simple_gla_zero "$(delta B1-T1-H32-K128-V128 B64-T1-H32-K128-V128 B64-T8-H32-K128-V128)" \
      /tmp/work/fla_common_recurrent.py --max-candidates ${SKEL_MAX_CANDIDATES:-6} ;;
    kda_pool_zero)
      python3 -m skel harness /tmp/work/fla_kda_pool.py --variant ssm_state_indices -o "$OUT/kda_pool_spec.py" --force
      run kda_pool_zero "$(delta B1-T1-H32-K128-HV32-V128 B64-T1-H32-K128-HV32-V128 B256-T1-H32-K128-HV32-V128)" \
        /tmp/work/fla_kda_pool.py --harness "$OUT/kda_pool_spec.py" --max-candidates ${SKEL_MAX_CANDIDATES:-6} ;;
    rms_norm_zero) run rms_norm_zero "$(delta n_rows1-n_cols4096 n_rows64-n_cols4096 n_rows256-n_cols4096)" \
      /tmp/work/liger_rms_norm.py --max-candidates ${SKEL_MAX_CANDIDATES:-6} ;;
    swiglu_zero) run swiglu_zero "$(delta n_rows1-n_cols4096 n_rows64-n_cols4096 n_rows256-n_cols4096)" \
      /tmp/work/liger_swiglu.py --max-candidates ${SKEL_MAX_CANDIDATES:-6} ;;
    delta_varlen_zero) run delta_varlen_zero "$(delta B1-T1-H32-K128-V128 B32-T1-H32-K128-V128 B64-T8-H32-K128-V128)" \
      /tmp/work/fla_delta.py --variant cu_seqlens --skeleton SK002 --max-candidates ${SKEL_MAX_CANDIDATES:-6} --no-record ;;
    kda_ref_zero) run kda_ref_zero "$(delta B1-T1-H32-K128-HV32-V128 B64-T1-H32-K128-HV32-V128)" \
      /tmp/work/kda/fused_recurrent.py --entry fused_recurrent_kda_fwd --max-candidates ${SKEL_MAX_CANDIDATES:-4} --no-record ;;
    simple_gla_serving_zero) run simple_gla_serving_zero "$(delta B1-T1-H32-K128-V128 B64-T1-H32-K128-V128)" \
      /tmp/work/fla_common_recurrent.py --variant g --variant initial_state --max-candidates ${SKEL_MAX_CANDIDATES:-4} --no-record ;;
    mamba_ssu_zero)
      mkdir -p /tmp/work/mamba && tar xzf .whl/mamba_ssm-2.3.2.post1.tar.gz -C /tmp/work/mamba
      run mamba_ssu_zero "$(delta batch1-nheads128-dim64-dstate128-ngroups8 batch64-nheads128-dim64-dstate128-ngroups8 batch256-nheads128-dim64-dstate128-ngroups8)" \
        /tmp/work/mamba/mamba_ssm-2.3.2.post1/mamba_ssm/ops/triton/selective_state_update.py --max-candidates ${SKEL_MAX_CANDIDATES:-4} --no-record ;;
    *) echo "unknown job $job" ;;
  esac
done
