"""SK005 before: KDA-style decode launched with a hand-picked BV = 8, 1 warp."""
import torch
import triton
import triton.language as tl


@triton.jit
def softplus(x):
    return tl.where(x < 20.0, tl.log(1.0 + tl.exp(x)), x)


@triton.jit
def kda_decode_kernel(
    q, k, v, g, beta, A_log, dt_bias, h0, o, ht, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    p_h = i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    b_h = tl.load(h0 + p_h, mask=mask_h, other=0).to(tl.float32)
    for i_t in range(0, T):
        bos = i_n * T + i_t
        b_q = tl.load(q + (bos * H + i_h) * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_k = tl.load(k + (bos * H + i_h) * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(v + (bos * HV + i_hv) * V + o_v, mask=mask_v, other=0).to(tl.float32)
        b_g = tl.load(g + (bos * HV + i_hv) * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_beta = tl.load(beta + bos * HV + i_hv).to(tl.float32)
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k, mask=mask_k, other=0).to(tl.float32)
        b_gk = -tl.exp(b_A) * softplus(b_g + b_bias)
        b_beta = tl.sigmoid(b_beta)
        b_q = b_q * scale
        b_h *= tl.exp(b_gk[:, None])
        b_v = b_beta * (b_v - tl.sum(b_h * b_k[:, None], 0))
        b_h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(o + (bos * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)
    tl.store(ht + p_h, b_h, mask=mask_h)


def launch(q, k, v, g, beta, A_log, dt_bias, h0):
    """q, k: [N, T, H, K]; v: [N, T, HV, V]; g: [N, T, HV, K]; beta: [N, T, HV];
    A_log: [HV]; dt_bias: [HV * K]; h0: [N, HV, K, V] fp32. Returns (o [N, T, HV, V], ht)."""
    N, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    BK, BV = triton.next_power_of_2(K), 16
    o = torch.empty_like(v)
    ht = torch.empty_like(h0)
    grid = (triton.cdiv(V, BV), N * HV)
    # skel SK005: launch config BV=16,num_warps=1 (searched; 8 fp32 tile elements/thread)
    kda_decode_kernel[grid](
        q, k, v, g, beta, A_log, dt_bias, h0, o, ht, K ** -0.5, T,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, num_warps=1,
    )
    return o, ht


def example_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    N, T, H, HV, K, V = 2, 2, 1, 2, 16, 16
    q = torch.randn(N, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(N, T, H, K, generator=gen), dim=-1)
    v = torch.randn(N, T, HV, V, generator=gen)
    g = torch.randn(N, T, HV, K, generator=gen)
    beta = torch.randn(N, T, HV, generator=gen)
    A_log = torch.randn(HV, generator=gen) * 0.5
    dt_bias = torch.randn(HV * K, generator=gen) * 0.5
    h0 = torch.randn(N, HV, K, V, generator=gen)
    return q, k, v, g, beta, A_log, dt_bias, h0
