#!/usr/bin/env bash
# Issue 21 on a GPU: the gate's timing cheats (tests/test_cheaters_gpu.py, each caught by the judge's
# own checks with the worker's in-process check blinded), the gate's noise with A and B in two
# workers (benchmarks/gate_suite.py: every target against itself at its decode shapes), and the
# positive controls (benchmarks/gate_controls.py). Run from the repo root on the GPU machine:
#   bash benchmarks/gate_isolation_h200.sh "$OUT" [cheats|noise|all]   (one device call holds one part)
DEST=${1:-/tmp/out}
PART=${2:-all}
mkdir -p "$DEST"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/skel-install.log 2>&1 || cat /tmp/skel-install.log
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, platform; print('torch', torch.__version__, 'triton', triton.__version__, 'kernel', platform.release())"
  python3 -c "from skel.validate.sandbox import landlock_abi; print('landlock ABI', landlock_abi())"
  date -u
} | tee "$DEST/env.txt"
if [ "$PART" != noise ]; then
  timeout 400 python3 -m pytest -q -rA tests/test_cheaters_gpu.py -p no:cacheprovider 2>&1 | tail -40 | tee "$DEST/cheaters_gpu.txt"
  timeout 150 python3 benchmarks/gate_controls.py 2>&1 | tee "$DEST/gate_controls.txt"
fi
if [ "$PART" = noise ]; then
  timeout 150 python3 benchmarks/gate_controls.py 2>&1 | tee "$DEST/gate_controls.txt"
fi
if [ "$PART" != cheats ]; then
  timeout 520 python3 benchmarks/gate_suite.py --out "$DEST" 2>&1 | tail -20
fi
