"""Detector fixtures for SK009 (flat-grid-int64-offsets). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def state_update_int32(h, x, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_n, i_h = tl.program_id(0), tl.program_id(1)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    # skel: SK009 opportunity
    p_h = h + (i_n * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_h, tl.load(p_h) + tl.load(x + i_h * V + o_v)[None, :])


@triton.jit
def state_update_flat_int64(h, x, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    # skel: SK009 instance
    pid = tl.program_id(0).to(tl.int64)
    i_n, i_h = pid // H, pid % H
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    # skel-ok: SK009
    p_h = h + (i_n * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_h, tl.load(p_h) + tl.load(x + i_h * V + o_v)[None, :])


@triton.jit
def small_rows(x, y, D: tl.constexpr):
    # near-miss: one size factor per program and a 1-D grid: int32 is enough
    i = tl.program_id(0)
    o = tl.arange(0, D)
    # skel-ok: SK009
    p_x = x + i * D + o
    tl.store(y + o, tl.load(p_x))
