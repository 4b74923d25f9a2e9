"""SK007 before: a chain of fp32 affine state merges h <- M_c @ h + u_c using tl.dot's default (TF32) precision."""
import torch
import triton
import triton.language as tl


@triton.jit
def chain_merge_kernel(m, u, h0, ht, NC, BK: tl.constexpr, BV: tl.constexpr):
    i_b = tl.program_id(0)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    b_h = tl.load(h0 + i_b * BK * BV + o_k[:, None] * BV + o_v[None, :]).to(tl.float32)
    for i_c in range(0, NC):
        b_m = tl.load(m + ((i_b * NC + i_c) * BK + o_k[:, None]) * BK + o_k[None, :]).to(tl.float32)
        b_u = tl.load(u + ((i_b * NC + i_c) * BK + o_k[:, None]) * BV + o_v[None, :]).to(tl.float32)
        b_h = tl.dot(b_m, b_h, input_precision="tf32x3") + b_u
    tl.store(ht + i_b * BK * BV + o_k[:, None] * BV + o_v[None, :], b_h)


def launch(m, u, h0):
    """m: [B, NC, K, K], u: [B, NC, K, V], h0: [B, K, V], all fp32 (K, V powers of two >= 16).
    Returns ht = M_{NC-1} @ (... (M_0 @ h0 + u_0) ...) + u_{NC-1}: [B, K, V]."""
    B, NC, K, _ = m.shape
    V = u.shape[-1]
    ht = torch.empty_like(h0)
    chain_merge_kernel[(B,)](m, u, h0, ht, NC, BK=K, BV=V)
    return ht


def example_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    B, NC, K, V = 2, 8, 16, 16
    m = 0.9 * torch.eye(K).expand(B, NC, K, K) + 0.05 * torch.randn(B, NC, K, K, generator=gen)
    u = 0.1 * torch.randn(B, NC, K, V, generator=gen)
    h0 = torch.randn(B, K, V, generator=gen)
    return m.contiguous(), u, h0
