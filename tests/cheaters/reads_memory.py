"""Cheater: looks for the reference outputs outside its own process (other processes' memory, shared
memory, the gate's temporary folders) and, finding nothing, returns memory it never wrote (the
allocator's, unpoisoned) and leaves the state alone. It raises if it could read anything it should not."""
import glob
import os

import torch


def _probe() -> list[str]:
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"skel" not in cmd and b"pytest" not in cmd:
            continue
        try:
            with open(f"/proc/{entry}/mem", "rb") as f:
                f.read(1)
            found.append(f"/proc/{entry}/mem")
        except OSError:
            pass
    for pattern in ("/dev/shm/*", "/tmp/skel-gate-*/oracle/**/*.pt", "/tmp/skel-gate-*/oracle/**/*.safetensors"):
        found += [p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p) and "sem." not in p]
    return found


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    leaks = _probe()
    if leaks:
        raise RuntimeError(f"LEAK: read {leaks[:3]}")
    return torch._C._VariableFunctions.empty(tuple(v.shape), dtype=q.dtype, device=q.device)
