"""A small gated delta-rule decode kernel written for the rewrite tests.

Shapes: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV] (one gate and one beta per
head and step); A_log, dt_bias [HV]; state [B, HV, K, V] fp32, updated in place; o like v.
It has, on purpose, what the codemods look for: L2 norms by division followed by a scale
multiply (SK001), loop-invariant gate parameters loaded inside the time loop (SK003), natural
exponentials (SK004), a grid built from the V tile (SK005, SK006) and loads without hints.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def mini_decode_kernel(
    q,
    k,
    v,
    g,
    beta,
    A_log,
    dt_bias,
    o,
    h0,
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_GATE: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]

    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_k = k + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * HV + i_hv) * V + o_v
    p_g = g + i_n * T * HV + i_hv
    p_beta = beta + i_n * T * HV + i_hv
    p_o = o + (i_n * T * HV + i_hv) * V + o_v
    p_h = h0 + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    b_h = tl.load(p_h, mask=mask_h, other=0).to(tl.float32)

    for i_t in range(0, T):
        b_q = tl.load(p_q, mask=mask_k, other=0).to(tl.float32)
        b_k = tl.load(p_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(p_v, mask=mask_v, other=0).to(tl.float32)
        # unit-norm q and k (this comment must survive every rewrite)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        b_q = b_q * scale
        b_g = tl.load(p_g).to(tl.float32)
        if USE_GATE:
            b_A = tl.load(A_log + i_hv).to(tl.float32)
            b_bias = tl.load(dt_bias + i_hv).to(tl.float32)
            b_g = -tl.exp(b_A) * tl.log(1 + tl.exp(b_g + b_bias))
        b_h *= tl.exp(b_g)
        b_beta = tl.load(p_beta).to(tl.float32)
        b_v = b_beta * (b_v - tl.sum(b_h * b_k[:, None], 0))
        b_h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v)

        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_g += HV
        p_beta += HV
        p_o += HV * V
    tl.store(p_h, b_h.to(p_h.dtype.element_ty), mask=mask_h)


def mini_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None, use_gate=True):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if scale is None:
        scale = K ** -0.5
    BK = triton.next_power_of_2(K)
    BV = 8
    o = torch.empty_like(v)
    grid = (triton.cdiv(V, BV), B * HV)
    mini_decode_kernel[grid](
        q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, USE_GATE=use_gate,
        num_warps=1,
    )
    return o


def reference(q, k, v, g, beta, A_log, dt_bias, state, scale=None, use_gate=True):
    """Plain torch, float64; returns (o, final state)."""
    B, T, H, K = q.shape
    HV = v.shape[2]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, g, beta, h = (x.double() for x in (q, k, v, g, beta, state.clone()))
    q = q.repeat_interleave(HV // H, dim=2)
    k = k.repeat_interleave(HV // H, dim=2)
    q = q / (q.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() * scale
    k = k / (k.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    if use_gate:
        g = -A_log.double().exp() * torch.nn.functional.softplus(g + dt_bias.double(), beta=1, threshold=1e9)
    o = torch.empty_like(v)
    for t in range(T):
        h = h * g[:, t, :, None, None].exp()
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], h))
        h = h + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        o[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t], h)
    return o, h
