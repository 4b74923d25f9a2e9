"""Detector fixtures for SK005 (launch-config-search). Profiled statically, never run."""
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(x, y, D: tl.constexpr, BD: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    o = j * BD + tl.arange(0, BD)
    tl.store(y + i * D + o, tl.load(x + i * D + o, mask=o < D) * 2, mask=o < D)


def launch_scale_rows(x):
    N, D = x.shape
    y = torch.empty_like(x)
    # skel: SK005 opportunity
    scale_rows[(N, triton.cdiv(D, 64))](x, y, D=D, BD=64, num_warps=4, num_stages=2)
    return y


# skel: SK005 instance
@triton.autotune(
    configs=[triton.Config({"BD": 64}, num_warps=2), triton.Config({"BD": 128}, num_warps=4)],
    key=["D"],
)
@triton.jit
def scale_rows_tuned(x, y, D: tl.constexpr, BD: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    o = j * BD + tl.arange(0, BD)
    tl.store(y + i * D + o, tl.load(x + i * D + o, mask=o < D) * 2, mask=o < D)


def launch_scale_rows_tuned(x):
    N, D = x.shape
    y = torch.empty_like(x)
    # skel-ok: SK005
    scale_rows_tuned[lambda meta: (N, triton.cdiv(D, meta["BD"]))](x, y, D=D)
    return y


@triton.jit
def copy_rows(x, y, D: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, D)
    tl.store(y + i * D + o, tl.load(x + i * D + o))


def launch_copy_rows(x):
    N, D = x.shape
    y = torch.empty_like(x)
    # near-miss: nothing tunable is passed at the launch
    # skel-ok: SK005
    copy_rows[(N,)](x, y, D=D)
    return y


@triton.jit
def chunk_states(k, h, T, K: tl.constexpr, BT: tl.constexpr):
    i_t, i_n = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_k = tl.arange(0, K)
    b_k = tl.load(k + (i_n * T + o_t[:, None]) * K + o_k[None, :], mask=o_t[:, None] < T, other=0)
    tl.store(h + ((i_n * tl.cdiv(T, BT) + i_t) * K) + o_k, tl.sum(b_k, 0))


def launch_chunk_states(k):
    N, T, K = k.shape
    BT = 64
    NT = triton.cdiv(T, BT)
    h = k.new_empty(N, NT, K)
    # near-miss: BT fixes the layout of h, which the caller allocates
    # skel-ok: SK005
    chunk_states[(NT, N)](k, h, T, K=K, BT=BT)
    return h
