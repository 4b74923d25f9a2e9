"""Plain-torch float64 reference for the DSA lightning indexer (see kernel.py)."""
import torch


def dsa_indexer_reference(q, k_cache, weights, topk, scale=None):
    """Index scores in float64 and one valid top-k selection.

    Args:
        q: [B, H, D] indexer queries of the decode token; k_cache: [B, L, D] cached keys;
        weights: [B, H] per-head weights; topk: tokens to select.
    Returns:
        {"scores": [B, L] float64, "indices": [B, topk] int64}. With tied scores other
        selections are equally right: the gate checks indices by score, not by position.
    """
    f64 = torch.float64
    D = q.shape[-1]
    scale = D ** -0.5 if scale is None else scale
    dots = torch.einsum("bhd,bld->bhl", q.to(f64), k_cache.to(f64))
    scores = (dots.clamp_min(0) * weights.to(f64)[:, :, None]).sum(1) * scale
    return {"scores": scores, "indices": torch.topk(scores, topk, dim=-1).indices}
