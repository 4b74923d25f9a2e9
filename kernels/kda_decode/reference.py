"""Plain-torch float64 reference for KDA decode (see kernel.py for the recurrence)."""
import torch
import torch.nn.functional as F


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dimension (the kernels' definition)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_decode_reference(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    """T decode steps of KDA in float64.

    Args:
        q, k: [N, T, H, K] unnormalised queries and keys.
        v: [N, T, HV, V] values; HV is a multiple of H (grouped value heads).
        g: [N, T, HV, K] raw gate input (the decay is computed from it).
        beta: [N, T, HV] beta logits (sigmoid applied here).
        A_log: [HV]; dt_bias: [HV, K] gate parameters.
        state: [N, HV, K, V] initial state (not modified).
        scale: query scale, default K ** -0.5.
    Returns:
        {"o": [N, T, HV, V], "state": [N, HV, K, V]} in float64 (state = the final state).
    """
    N, T, H, K = q.shape
    HV = v.shape[2]
    scale = K ** -0.5 if scale is None else scale
    f64 = torch.float64
    q = l2norm(q.to(f64)).repeat_interleave(HV // H, dim=2) * scale
    k = l2norm(k.to(f64)).repeat_interleave(HV // H, dim=2)
    v = v.to(f64)
    decay = torch.exp(-torch.exp(A_log.to(f64))[:, None] * F.softplus(g.to(f64) + dt_bias.to(f64)))
    b = torch.sigmoid(beta.to(f64))
    S = state.to(f64).clone()
    o = torch.empty(v.shape, dtype=f64, device=v.device)
    for t in range(T):
        S = S * decay[:, t, :, :, None]
        delta = (v[:, t] - torch.einsum("nhk,nhkv->nhv", k[:, t], S)) * b[:, t, :, None]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        o[:, t] = torch.einsum("nhk,nhkv->nhv", q[:, t], S)
    return {"o": o, "state": S}
