"""Lightning indexer for DeepSeek sparse attention (DSA), decode: pick the top-k cached tokens.

For each sequence b (one decode token with H indexer heads) and cached token l::

    score[b, l] = scale * sum_h w[b, h] * relu(q[b, h] . k[b, l])

then the TOPK highest-scoring tokens are selected for the sparse attention that follows.
The scores come from a Triton kernel (one program per block of cached tokens, all heads at
once through ``tl.dot``); the selection is ``torch.topk``.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def indexer_scores_kernel(
    q,  # [B, H, D]
    kc,  # [B, L, D] key cache
    w,  # [B, H] per-head weights, fp32
    scores,  # [B, L] fp32
    L,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BH: tl.constexpr,
    BD: tl.constexpr,
    BL: tl.constexpr,
):
    i_l = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, BD)
    offs_l = i_l * BL + tl.arange(0, BL)
    m_h = offs_h < H
    m_d = offs_d < D
    m_l = offs_l < L

    # The interpreter multiplies bf16 dot operands as raw bits: upcast before tl.dot.
    b_q = tl.load(q + (i_b * H + offs_h[:, None]) * D + offs_d[None, :],
                  mask=m_h[:, None] & m_d[None, :], other=0.0).to(tl.float32)
    b_k = tl.load(kc + (i_b * L + offs_l[:, None]) * D + offs_d[None, :],
                  mask=m_l[:, None] & m_d[None, :], other=0.0).to(tl.float32)
    b_w = tl.load(w + i_b * H + offs_h, mask=m_h, other=0.0)

    b_s = tl.dot(b_k, tl.trans(b_q))  # [BL, BH]
    b_s = tl.maximum(b_s, 0.0) * b_w[None, :]
    b_score = tl.sum(b_s, 1) * scale
    tl.store(scores + i_b * L + offs_l, b_score, mask=m_l)


def dsa_indexer(q, k_cache, weights, topk, scale=None):
    """Index scores and the selected tokens for one decode step.

    q: [B, H, D]; k_cache: [B, L, D] (same dtype as q); weights: [B, H] float32; topk <= L.
    Returns (scores [B, L] float32, indices [B, topk] int64, best first).
    """
    B, H, D = q.shape
    L = k_cache.shape[1]
    if scale is None:
        scale = D ** -0.5
    BL = 64
    scores = torch.empty(B, L, dtype=torch.float32, device=q.device)
    indexer_scores_kernel[(triton.cdiv(L, BL), B)](
        q, k_cache, weights, scores, L, scale,
        H=H, D=D,
        BH=max(16, triton.next_power_of_2(H)),
        BD=max(16, triton.next_power_of_2(D)),
        BL=BL,
        num_warps=4, num_stages=2,
    )
    indices = torch.topk(scores, topk, dim=-1).indices
    return scores, indices
