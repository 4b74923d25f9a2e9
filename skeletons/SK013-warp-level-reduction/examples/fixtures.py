"""Detector fixtures for SK013 (warp-level-reduction), Triton. Profiled statically, never run."""
import torch
import triton
import triton.language as tl


@triton.jit
def decode_state_4_warps(h, k, o, T, K: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_n = tl.program_id(0)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    b_h = tl.load(h + i_n * K * BV + o_k[:, None] * BV + o_v[None, :])
    for t in range(0, T):
        b_k = tl.load(k + (i_n * T + t) * K + o_k)
        # skel: SK013 opportunity
        b_o = tl.sum(b_h * b_k[:, None], 0)
        tl.store(o + (i_n * T + t) * BV + o_v, b_o)


def launch_decode_state_4_warps(h, k, T):
    N, K = k.shape[0], k.shape[-1]
    o = torch.empty(N, T, 16, device=k.device)
    decode_state_4_warps[(N,)](h, k, o, T, K=K, BK=triton.next_power_of_2(K), BV=16, num_warps=4)
    return o


@triton.jit
def decode_state_1_warp(h, k, o, T, K: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_n = tl.program_id(0)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    b_h = tl.load(h + i_n * K * BV + o_k[:, None] * BV + o_v[None, :])
    for t in range(0, T):
        b_k = tl.load(k + (i_n * T + t) * K + o_k)
        # skel: SK013 instance
        b_o = tl.sum(b_h * b_k[:, None], 0)
        tl.store(o + (i_n * T + t) * BV + o_v, b_o)


def launch_decode_state_1_warp(h, k, T):
    N, K = k.shape[0], k.shape[-1]
    o = torch.empty(N, T, 16, device=k.device)
    decode_state_1_warp[(N,)](h, k, o, T, K=K, BK=triton.next_power_of_2(K), BV=16, num_warps=1)
    return o


@triton.jit
def row_sum_once(x, y, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: one reduction per program, not in a loop
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o[:, None] * 4 + tl.arange(0, 4)[None, :])
    # skel-ok: SK013
    tl.store(y + i * 4 + tl.arange(0, 4), tl.sum(b_x, 0))


def launch_row_sum_once(x):
    N, D = x.shape
    y = torch.empty(N, 4, device=x.device)
    row_sum_once[(N,)](x, y, D=D, BD=64, num_warps=4)
    return y
