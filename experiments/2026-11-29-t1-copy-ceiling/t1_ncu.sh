#!/usr/bin/env bash
# Nsight Compute over single launches of t1_ceiling_probe.py variants (N = 32, T = 1, the 5th launch of each).
# usage: bash experiments/2026-11-29-t1-copy-ceiling/t1_ncu.sh OUT_DIR VARIANT...     (on the GPU machine; leaves the clocks alone)
set -u
out=$1; shift
mkdir -p "$out"
for v in "$@"; do
  ncu --clock-control none -k regex:'kda_abl|state_copy|kda_t1|state_copy_held' -s 4 -c 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats \
      python "$(dirname "$0")/t1_ceiling_probe.py" --once "$v" --n 32 > "$out/ncu_$v.txt" 2>&1
  echo "== $v"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Registers|Waves Per SM|Stall Long|Warp Cycles Per Issued|No Eligible" "$out/ncu_$v.txt" | head -14
done
