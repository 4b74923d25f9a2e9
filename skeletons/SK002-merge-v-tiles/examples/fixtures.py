"""Detector fixtures for SK002 (merge-v-tiles). Profiled statically, never run."""
import torch
import triton
import triton.language as tl


@triton.jit
def decode_split_v(q, k, v, o, h, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr):
    # skel: SK002 opportunity
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_k = k + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * H + i_h) * V + o_v
    p_o = o + (i_n * T * H + i_h) * V + o_v
    b_h = tl.load(h + i_nh * K * V + o_k[:, None] * V + o_v[None, :]).to(tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q).to(tl.float32)
        b_k = tl.load(p_k).to(tl.float32)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_v = tl.load(p_v).to(tl.float32)
        b_h += b_k[:, None] * b_v[None, :]
        tl.store(p_o, tl.sum(b_h * b_q[:, None], 0))
        p_q += H * K
        p_k += H * K
        p_v += H * V
        p_o += H * V


def launch_split_v(q, k, v, h):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.empty_like(v)
    BV = 32
    decode_split_v[(triton.cdiv(V, BV), B * H)](q, k, v, o, h, T, H=H, K=K, V=V, BK=triton.next_power_of_2(K), BV=BV)
    return o


@triton.jit
def decode_one_v_tile(q, k, v, o, h, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                      BK: tl.constexpr, BV: tl.constexpr):
    # near-miss: BV = next_power_of_2(V), so there is one V tile per head
    # skel-ok: SK002
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * H + i_h) * V + o_v
    p_o = o + (i_n * T * H + i_h) * V + o_v
    b_h = tl.load(h + i_nh * K * V + o_k[:, None] * V + o_v[None, :]).to(tl.float32)
    for _ in range(0, T):
        b_q = tl.load(p_q).to(tl.float32)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_v = tl.load(p_v).to(tl.float32)
        b_h += b_q[:, None] * b_v[None, :]
        tl.store(p_o, tl.sum(b_h * b_q[:, None], 0))
        p_q += H * K
        p_v += H * V
        p_o += H * V


def launch_one_v_tile(q, k, v, h):
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = torch.empty_like(v)
    BV = triton.next_power_of_2(V)
    decode_one_v_tile[(triton.cdiv(V, BV), B * H)](q, k, v, o, h, T, H=H, K=K, V=V, BK=triton.next_power_of_2(K), BV=BV)
    return o


@triton.jit
def scale_v_tiles(v, o, s, V: tl.constexpr, BV: tl.constexpr):
    # near-miss: V tiles, but no token loop and nothing V-independent to repeat
    # skel-ok: SK002
    i_v, i_n = tl.program_id(0), tl.program_id(1)
    o_v = i_v * BV + tl.arange(0, BV)
    b_v = tl.load(v + i_n * V + o_v, mask=o_v < V, other=0)
    tl.store(o + i_n * V + o_v, b_v * 2, mask=o_v < V)


def launch_scale_v_tiles(v, s):
    N, V = v.shape
    o = torch.empty_like(v)
    scale_v_tiles[(triton.cdiv(V, 32), N)](v, o, s, V=V, BV=32)
    return o


@triton.jit
def chunk_merged_v(k, v, u, A, T, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr):
    i_t, i_n = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    b_A = tl.load(A + (i_n * T + o_t[:, None]) * BT + tl.arange(0, BT)[None, :]).to(tl.float32)
    b_A = b_A / tl.sum(b_A, 1)[:, None]
    # skel: SK002 instance
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        b_v = tl.load(v + (i_n * T + o_t[:, None]) * V + o_v[None, :]).to(tl.float32)
        tl.store(u + (i_n * T + o_t[:, None]) * V + o_v[None, :], tl.dot(b_A, b_v))


def launch_chunk_merged_v(k, v, A, T):
    N, _, K = k.shape
    V = v.shape[-1]
    u = torch.empty_like(v)
    chunk_merged_v[(triton.cdiv(T, 64), N)](k, v, u, A, T, K=K, V=V, BT=64, BK=64, BV=64)
    return u
