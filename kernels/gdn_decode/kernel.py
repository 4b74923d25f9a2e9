"""Gated delta rule (GDN) decode: one scalar decay per head, state updated in place.

Per value head ``hv`` (key head ``h = hv // (HV // H)``) and token ``t``::

    q, k  = l2norm(q_t), l2norm(k_t)
    decay = exp(-exp(A_log[hv]) * softplus(a_t + dt_bias[hv]))   # one scalar per head
    S     = decay * S                                          # [K, V]
    S     = S + k[:, None] * (sigmoid(b_t) * (v_t - k @ S))[None, :]
    o_t   = (scale * q) @ S

Launched like the serving decode kernels: one program per (V tile of 8, sequence, head),
each recomputing the norms, the decay and beta for its head.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softplus(x):
    return tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)


@triton.jit(do_not_specialize=["T"])
def gdn_decode_fwd_kernel(
    q_ptr,  # [N, T, H, K]
    k_ptr,  # [N, T, H, K]
    v_ptr,  # [N, T, HV, V]
    a_ptr,  # [N, T, HV] raw decay input
    b_ptr,  # [N, T, HV] beta logits
    A_log_ptr,  # [HV]
    dt_bias_ptr,  # [HV]
    o_ptr,  # [N, T, HV, V]
    h_ptr,  # [N, HV, K, V] fp32 state, in place
    scale,
    T,
    H: tl.constexpr,
    HV: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)

    cols_k = tl.arange(0, BK)
    cols_v = i_v * BV + tl.arange(0, BV)
    mask_k = cols_k < K
    mask_v = cols_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]

    q_ptrs = q_ptr + (i_n * T * H + i_h) * K + cols_k
    k_ptrs = k_ptr + (i_n * T * H + i_h) * K + cols_k
    v_ptrs = v_ptr + (i_n * T * HV + i_hv) * V + cols_v
    o_ptrs = o_ptr + (i_n * T * HV + i_hv) * V + cols_v
    a_ptrs = a_ptr + i_n * T * HV + i_hv
    b_ptrs = b_ptr + i_n * T * HV + i_hv
    h_ptrs = h_ptr + i_nh * K * V + cols_k[:, None] * V + cols_v[None, :]

    h = tl.load(h_ptrs, mask=mask_h, other=0.0)
    for _ in range(0, T):
        q = tl.load(q_ptrs, mask=mask_k, other=0.0).to(tl.float32)
        k = tl.load(k_ptrs, mask=mask_k, other=0.0).to(tl.float32)
        v = tl.load(v_ptrs, mask=mask_v, other=0.0).to(tl.float32)
        q = q / tl.sqrt(tl.sum(q * q) + 1e-6) * scale
        k = k / tl.sqrt(tl.sum(k * k) + 1e-6)

        a = tl.load(a_ptrs).to(tl.float32)
        A = tl.load(A_log_ptr + i_hv).to(tl.float32)
        bias = tl.load(dt_bias_ptr + i_hv).to(tl.float32)
        g = -tl.exp(A) * softplus(a + bias)
        beta = tl.sigmoid(tl.load(b_ptrs).to(tl.float32))

        h *= tl.exp(g)
        v = beta * (v - tl.sum(h * k[:, None], 0))
        h += k[:, None] * v[None, :]
        o = tl.sum(h * q[:, None], 0)
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=mask_v)

        q_ptrs += H * K
        k_ptrs += H * K
        v_ptrs += HV * V
        o_ptrs += HV * V
        a_ptrs += HV
        b_ptrs += HV
    tl.store(h_ptrs, h, mask=mask_h)


def gdn_decode(q, k, v, a, b, A_log, dt_bias, state, scale=None):
    """T gated-delta-rule decode steps; returns o and updates ``state`` in place.

    q, k: [N, T, H, K]; v: [N, T, HV, V]; a: [N, T, HV] decay input; b: [N, T, HV] beta logits;
    A_log, dt_bias: [HV]; state: [N, HV, K, V] float32. Returns o: [N, T, HV, V] (v's dtype).
    """
    N, T, H, K = q.shape
    HV, V = v.shape[-2:]
    if scale is None:
        scale = K ** -0.5
    BK = triton.next_power_of_2(K)
    BV = 8
    o = torch.empty_like(v)
    gdn_decode_fwd_kernel[(triton.cdiv(V, BV), N * HV)](
        q, k, v, a, b, A_log, dt_bias, o, state, scale, T,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
        num_warps=1, num_stages=3,
    )
    return o
