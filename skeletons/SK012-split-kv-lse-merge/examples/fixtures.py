"""Detector fixtures for SK012 (split-kv-lse-merge). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def decode_attention(q, k, v, o, S, scale, H: tl.constexpr, D: tl.constexpr, BS: tl.constexpr):
    i_b, i_h = tl.program_id(0), tl.program_id(1)
    o_d = tl.arange(0, D)
    b_q = tl.load(q + (i_b * H + i_h) * D + o_d).to(tl.float32)
    b_m = tl.full([1], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([1], dtype=tl.float32)
    b_o = tl.zeros([D], dtype=tl.float32)
    # skel: SK012 opportunity
    for i_s in range(0, S, BS):
        o_s = i_s + tl.arange(0, BS)
        b_k = tl.load(k + ((i_b * S + o_s[:, None]) * H + i_h) * D + o_d[None, :], mask=o_s[:, None] < S, other=0)
        b_v = tl.load(v + ((i_b * S + o_s[:, None]) * H + i_h) * D + o_d[None, :], mask=o_s[:, None] < S, other=0)
        b_s = tl.sum(b_k * b_q[None, :], 1) * scale
        b_s = tl.where(o_s < S, b_s, float("-inf"))
        b_mn = tl.maximum(b_m, tl.max(b_s, 0))
        b_p = tl.exp(b_s - b_mn)
        b_r = tl.exp(b_m - b_mn)
        b_l = b_l * b_r + tl.sum(b_p, 0)
        b_o = b_o * b_r + tl.sum(b_p[:, None] * b_v, 0)
        b_m = b_mn
    tl.store(o + (i_b * H + i_h) * D + o_d, b_o / b_l)


@triton.jit
def decode_attention_split(q, k, v, o_part, lse_part, S, scale, H: tl.constexpr, D: tl.constexpr,
                           BS: tl.constexpr, NUM_SPLITS: tl.constexpr):
    i_b, i_h, i_split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_d = tl.arange(0, D)
    b_q = tl.load(q + (i_b * H + i_h) * D + o_d).to(tl.float32)
    b_m = tl.full([1], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([1], dtype=tl.float32)
    b_o = tl.zeros([D], dtype=tl.float32)
    L = tl.cdiv(S, NUM_SPLITS)
    for i_s in range(i_split * L, tl.minimum((i_split + 1) * L, S), BS):
        o_s = i_s + tl.arange(0, BS)
        b_k = tl.load(k + ((i_b * S + o_s[:, None]) * H + i_h) * D + o_d[None, :], mask=o_s[:, None] < S, other=0)
        b_v = tl.load(v + ((i_b * S + o_s[:, None]) * H + i_h) * D + o_d[None, :], mask=o_s[:, None] < S, other=0)
        b_s = tl.sum(b_k * b_q[None, :], 1) * scale
        b_mn = tl.maximum(b_m, tl.max(b_s, 0))
        b_p = tl.exp(b_s - b_mn)
        b_r = tl.exp(b_m - b_mn)
        b_l = b_l * b_r + tl.sum(b_p, 0)
        b_o = b_o * b_r + tl.sum(b_p[:, None] * b_v, 0)
        b_m = b_mn
    p_part = ((i_b * H + i_h) * NUM_SPLITS + i_split)
    tl.store(o_part + p_part * D + o_d, b_o / b_l)
    # skel: SK012 instance
    tl.store(lse_part + p_part + tl.arange(0, 1), b_m + tl.log(b_l))


@triton.jit
def merge_partials(o_part, lse_part, o, H: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr):
    i_b, i_h = tl.program_id(0), tl.program_id(1)
    o_d = tl.arange(0, D)
    o_p = tl.arange(0, NUM_SPLITS)
    b_lse = tl.load(lse_part + (i_b * H + i_h) * NUM_SPLITS + o_p)
    b_max = tl.max(b_lse, 0)
    # skel: SK012 instance
    b_w = tl.exp(b_lse - b_max)
    b_o = tl.load(o_part + ((i_b * H + i_h) * NUM_SPLITS + o_p[:, None]) * D + o_d[None, :])
    tl.store(o + (i_b * H + i_h) * D + o_d, tl.sum(b_o * b_w[:, None], 0) / tl.sum(b_w, 0))


@triton.jit
def prefill_attention(q, k, v, o, T, scale, D: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr):
    # near-miss: query blocks already spread over programs (prefill)
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = tl.arange(0, D)
    b_q = tl.load(q + (i_bh * T + o_t[:, None]) * D + o_d[None, :], mask=o_t[:, None] < T, other=0)
    b_m = tl.full([BT], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([BT], dtype=tl.float32)
    b_o = tl.zeros([BT, D], dtype=tl.float32)
    # skel-ok: SK012
    for i_s in range(0, T, BS):
        o_s = i_s + tl.arange(0, BS)
        b_k = tl.load(k + (i_bh * T + o_s[None, :]) * D + o_d[:, None], mask=o_s[None, :] < T, other=0)
        b_v = tl.load(v + (i_bh * T + o_s[:, None]) * D + o_d[None, :], mask=o_s[:, None] < T, other=0)
        b_s = tl.dot(b_q, b_k) * scale
        b_mn = tl.maximum(b_m, tl.max(b_s, 1))
        b_p = tl.exp(b_s - b_mn[:, None])
        b_r = tl.exp(b_m - b_mn)
        b_l = b_l * b_r + tl.sum(b_p, 1)
        b_o = b_o * b_r[:, None] + tl.dot(b_p.to(b_v.dtype), b_v)
        b_m = b_mn
    tl.store(o + (i_bh * T + o_t[:, None]) * D + o_d[None, :], b_o / b_l[:, None], mask=o_t[:, None] < T)
