"""Detector fixtures for SK003 (hoist-loop-invariant-loads). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def decay_reload_each_step(x, A_log, y, T, H: tl.constexpr, D: tl.constexpr):
    i_n, i_h = tl.program_id(0), tl.program_id(1)
    o_d = tl.arange(0, D)
    p_x = x + (i_n * T * H + i_h) * D + o_d
    p_y = y + (i_n * T * H + i_h) * D + o_d
    b_s = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        # skel: SK003 opportunity
        b_a = tl.load(A_log + i_h).to(tl.float32)
        # skel-ok: SK003
        b_x = tl.load(p_x).to(tl.float32)
        b_s = b_s * tl.exp(-tl.exp(b_a)) + b_x
        tl.store(p_y, b_s)
        p_x += H * D
        p_y += H * D


@triton.jit
def decay_hoisted(x, A_log, y, T, H: tl.constexpr, D: tl.constexpr):
    i_n, i_h = tl.program_id(0), tl.program_id(1)
    o_d = tl.arange(0, D)
    p_x = x + (i_n * T * H + i_h) * D + o_d
    p_y = y + (i_n * T * H + i_h) * D + o_d
    # skel: SK003 instance
    b_a = tl.load(A_log + i_h).to(tl.float32)
    b_s = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        b_x = tl.load(p_x).to(tl.float32)
        b_s = b_s * tl.exp(-tl.exp(b_a)) + b_x
        tl.store(p_y, b_s)
        p_x += H * D
        p_y += H * D


@triton.jit
def invariant_load_without_loop(x, w, y, D: tl.constexpr):
    # near-miss: a loop-invariant-looking load with no loop at all
    i = tl.program_id(0)
    o_d = tl.arange(0, D)
    # skel-ok: SK003
    b_w = tl.load(w + o_d)
    tl.store(y + i * D + o_d, tl.load(x + i * D + o_d) * b_w)


@triton.jit
def invariant_in_block_loop(x, w, y, K: tl.constexpr, BK: tl.constexpr):
    # near-miss: the loop walks K blocks, not tokens
    i = tl.program_id(0)
    b_acc = tl.zeros([BK], dtype=tl.float32)
    for i_k in range(0, K, BK):
        # skel-ok: SK003
        b_w = tl.load(w + i)
        b_acc += tl.load(x + i * K + i_k + tl.arange(0, BK)) * b_w
    tl.store(y + i * BK + tl.arange(0, BK), b_acc)


@triton.jit
def invariant_address_but_written(state, x, T, D: tl.constexpr):
    # near-miss: the loop stores to the tensor it reads at a fixed address
    i = tl.program_id(0)
    o_d = tl.arange(0, D)
    p_x = x + i * T * D + o_d
    for t in range(0, T):
        # skel-ok: SK003
        b_s = tl.load(state + i * D + o_d)
        tl.store(state + i * D + o_d, b_s + tl.load(p_x))
        p_x += D
