"""Kimi Delta Attention (KDA) decode: one recurrent step per token, state updated in place.

Per value head ``hv`` (key head ``h = hv // (HV // H)``) and token ``t``::

    q, k   = l2norm(q_t), l2norm(k_t)                    # unnormalised inputs, normalised here
    gate   = -exp(A_log[hv]) * softplus(g_t + dt_bias[hv])  # per key channel, log-space decay
    S      = S * exp(gate)[:, None]                      # [K, V]
    delta  = sigmoid(beta_t) * (v_t - k @ S)             # [V]
    S      = S + k[:, None] * delta[None, :]
    o_t    = (scale * q) @ S                             # [V]

The launch is the one serving stacks use for decode: a flat grid with one program per
(V tile, sequence, value head); every V tile recomputes the norms, the gate and beta for
its head, and reads the gate parameters inside the token loop. Multi-token decode
(T > 1, e.g. speculative verification) keeps the state tile in registers across tokens.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _softplus(x):
    # log(1 + e^x), switching to the identity where e^x would overflow.
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


@triton.jit(do_not_specialize=["T"])
def kda_decode_kernel(
    q,  # [N, T, H, K]
    k,  # [N, T, H, K]
    v,  # [N, T, HV, V]
    g,  # [N, T, HV, K] raw gate input
    beta,  # [N, T, HV] beta logits
    A_log,  # [HV]
    dt_bias,  # [HV, K]
    o,  # [N, T, HV, V]
    state,  # [N, HV, K, V] fp32, read and written in place
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    NV = tl.cdiv(V, BV)
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_s = m_k[:, None] & m_v[None, :]

    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_k = k + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * HV + i_hv) * V + o_v
    p_g = g + (i_n * T * HV + i_hv) * K + o_k
    p_beta = beta + i_n * T * HV + i_hv
    p_o = o + (i_n * T * HV + i_hv) * V + o_v
    p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]

    b_s = tl.load(p_s, mask=m_s, other=0.0)
    # skel SK003: loop-invariant loads/values of the loop below (line 71) hoisted
    b_A = tl.load(A_log + i_hv).to(tl.float32)
    b_bias = tl.load(dt_bias + i_hv * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    neg_exp_b_A = -tl.exp(b_A)
    for _ in range(0, T):
        b_q = tl.load(p_q, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(p_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(p_v, mask=m_v, other=0.0).to(tl.float32)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_q = b_q * scale

        b_g = tl.load(p_g, mask=m_k, other=0.0).to(tl.float32)
        b_gate = neg_exp_b_A * _softplus(b_g + b_bias)
        b_beta = tl.sigmoid(tl.load(p_beta).to(tl.float32))

        b_s = b_s * tl.exp(b_gate)[:, None]
        b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
        b_s = b_s + b_k[:, None] * b_delta[None, :]
        b_o = tl.sum(b_s * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)

        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_g += HV * K
        p_beta += HV
        p_o += HV * V
    tl.store(p_s, b_s, mask=m_s)


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    """Run T decode steps of KDA for N sequences; returns o and updates ``state`` in place.

    q, k: [N, T, H, K]; v: [N, T, HV, V]; g: [N, T, HV, K]; beta: [N, T, HV];
    A_log: [HV]; dt_bias: [HV, K]; state: [N, HV, K, V] float32 (updated in place).
    Returns o: [N, T, HV, V] in v's dtype.
    """
    N, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    assert HV % H == 0, f"HV={HV} must be a multiple of H={H}"
    assert state.dtype == torch.float32 and state.is_contiguous()
    if scale is None:
        scale = K ** -0.5
    BK = triton.next_power_of_2(K)
    BV = 32
    o = torch.empty_like(v)
    grid = (triton.cdiv(V, BV) * N * HV,)
    kda_decode_kernel[grid](
        q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
        num_warps=4, num_stages=2,
    )
    return o
