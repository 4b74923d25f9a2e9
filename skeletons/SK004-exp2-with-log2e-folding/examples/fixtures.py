"""Detector fixtures for SK004 (exp2-with-log2e-folding). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def softmax_scores(q, k, p, scale, K: tl.constexpr, BT: tl.constexpr):
    i = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    b_q = tl.load(q + (i * BT + o_t[:, None]) * K + o_k[None, :])
    b_k = tl.load(k + (i * BT + o_t[None, :]) * K + o_k[:, None])
    b_s = tl.dot(b_q, b_k) * scale
    b_m = tl.max(b_s, 1)
    # skel: SK004 opportunity
    b_p = tl.exp(b_s - b_m[:, None])
    tl.store(p + (i * BT + o_t[:, None]) * BT + o_t[None, :], b_p / tl.sum(b_p, 1)[:, None])


@triton.jit
def softmax_scores_exp2(q, k, p, scale, K: tl.constexpr, BT: tl.constexpr):
    RCP_LN2: tl.constexpr = 1.4426950216
    i = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    b_q = tl.load(q + (i * BT + o_t[:, None]) * K + o_k[None, :])
    b_k = tl.load(k + (i * BT + o_t[None, :]) * K + o_k[:, None])
    b_s = tl.dot(b_q, b_k) * scale * RCP_LN2
    b_m = tl.max(b_s, 1)
    # skel: SK004 instance
    b_p = tl.math.exp2(b_s - b_m[:, None])
    tl.store(p + (i * BT + o_t[:, None]) * BT + o_t[None, :], b_p / tl.sum(b_p, 1)[:, None])


@triton.jit
def softmax_with_natural_log_bias(q, k, bias, p, scale, K: tl.constexpr, BT: tl.constexpr):
    # near-miss: an unscaled bias in natural-log units is added to the scaled scores
    i = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    b_q = tl.load(q + (i * BT + o_t[:, None]) * K + o_k[None, :])
    b_k = tl.load(k + (i * BT + o_t[None, :]) * K + o_k[:, None])
    b_b = tl.load(bias + o_t[:, None] * BT + o_t[None, :])
    b_s = tl.dot(b_q, b_k) * scale + b_b
    # skel-ok: SK004
    b_p = tl.exp(b_s)
    tl.store(p + (i * BT + o_t[:, None]) * BT + o_t[None, :], b_p)


@triton.jit
def exp_of_loaded_gate(g, y, D: tl.constexpr):
    # near-miss: exp of a loaded value; no multiply to fold log2(e) into
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_g = tl.load(g + i * D + o).to(tl.float32)
    # skel-ok: SK004
    tl.store(y + i * D + o, tl.exp(b_g))


@triton.jit
def softmax_storing_lse(q, k, p, lse, scale, K: tl.constexpr, BT: tl.constexpr):
    # near-miss: the natural-log lse is stored for another kernel
    i = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    b_q = tl.load(q + (i * BT + o_t[:, None]) * K + o_k[None, :])
    b_k = tl.load(k + (i * BT + o_t[None, :]) * K + o_k[:, None])
    b_s = tl.dot(b_q, b_k) * scale
    b_m = tl.max(b_s, 1)
    # skel-ok: SK004
    b_p = tl.exp(b_s - b_m[:, None])
    b_l = tl.sum(b_p, 1)
    tl.store(lse + i * BT + o_t, b_m + tl.log(b_l))
    tl.store(p + (i * BT + o_t[:, None]) * BT + o_t[None, :], b_p / b_l[:, None])


@triton.jit
def base_two_decay(x, y, D: tl.constexpr):
    # near-miss: exp2 of a genuine base-2 exponent, no log2(e) anywhere
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_x = tl.load(x + i * D + o).to(tl.float32)
    # skel-ok: SK004
    tl.store(y + i * D + o, b_x * tl.exp2(-o.to(tl.float32)))
