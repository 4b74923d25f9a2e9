# Source this on the GPU machine (no registry there): installs the carried wheels and skel itself.
# Usage (from the repo root, with .whl carried):  . benchmarks/gpu_env.sh
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/skel-install.log 2>&1; then
  cat /tmp/skel-install.log
  # Fallback: lay the skel namespace over the repo's folders with symlinks.
  rm -rf /tmp/ns && mkdir -p /tmp/ns/skel && cp -r skel/* /tmp/ns/skel/
  for d in catalog miner rewriter pipeline validate harness kernels skeletons; do ln -s "$PWD/$d" /tmp/ns/skel/$d; done
  export PYTHONPATH=/tmp/ns:$PYTHONPATH
  skel() { python3 -m skel "$@"; }
fi
export PYTHONUNBUFFERED=1
set +e
