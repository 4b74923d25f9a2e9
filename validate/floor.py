"""The measured floor of a shape: the best in-place copy of the same bytes, timed the way the kernels are.

At small batch a decode kernel is launch- and latency-bound, and "% of the copy roofline" (bytes over the
device's bulk copy rate) says little: 2 MiB of state cannot reach bulk copy speed in one launch. The honest
yardstick there is what the device does with the same bytes the same way: an in-place copy of half the
kernel's bytes (read + written, so the same traffic), through a few grids (programs of 1K, 4K and 16K fp32
elements), each in a CUDA graph over input sets rotated past the L2 cache, in the process that times the
original. The best of those grids is the floor; the gate reports each kernel's time as "x of floor".
A naive copy kernel sets it, so a kernel may beat the floor slightly (it is a yardstick, not a bound).

Regime: every figure here and in the gate is measured with inputs rotated past L2 (data from HBM, as a
decode step over a large model's state meets it); published batch-1 figures that replay one buffer
(data resident in L2) are not comparable, and the report says which regime it measured.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from skel.validate.bench import capture_graph, replay_time_us, rotation_sets

GRIDS = ((1024, 4), (4096, 8), (16384, 8))  # (fp32 elements per program, warps)
REGIME = "inputs rotated past L2 (HBM-resident, CUDA graph replay)"


@triton.jit
def _touch(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask), mask=mask)


def copy_floor_us(nbytes: int, l2_bytes: int, max_sets: int = 64, min_calls: int = 20, samples: int = 15,
                  min_sample_us: float = 200.0) -> tuple[float, str]:
    """(floor in us per call, the grid that set it) for a kernel moving ``nbytes`` (reads + writes)."""
    n = max(1, nbytes // 8)  # fp32 elements: half the bytes, read and written in place
    sets = rotation_sets(4 * n, l2_bytes, max_sets)
    arg_sets = [{"x": torch.zeros(n, dtype=torch.float32, device="cuda")} for _ in range(sets)]
    best, where = math.inf, ""
    for block, warps in GRIDS:
        grid = (triton.cdiv(n, block),)

        def copy(x, grid=grid, block=block, warps=warps):
            _touch[grid](x, n, BLOCK=block, num_warps=warps)

        graph, _, calls = capture_graph(copy, arg_sets, min_calls)
        graph.replay()
        torch.cuda.synchronize()
        one = replay_time_us(graph, 1)
        reps = max(1, math.ceil(min_sample_us / max(one, 1e-3)))
        per_call = min(replay_time_us(graph, reps) for _ in range(samples)) / (reps * calls)
        if per_call < best:
            best, where = per_call, f"{grid[0]} programs of {block} fp32, {warps} warps"
        del graph
    del arg_sets
    return best, where

