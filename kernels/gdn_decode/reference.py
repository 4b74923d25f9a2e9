"""Plain-torch float64 reference for gated-delta-rule decode (see kernel.py)."""
import torch
import torch.nn.functional as F


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_decode_reference(q, k, v, a, b, A_log, dt_bias, state, scale=None):
    """T decode steps of the gated delta rule in float64.

    Args:
        q, k: [N, T, H, K] unnormalised; v: [N, T, HV, V] with HV a multiple of H.
        a: [N, T, HV] decay input; b: [N, T, HV] beta logits.
        A_log, dt_bias: [HV]; state: [N, HV, K, V] initial state (not modified).
    Returns:
        {"o": [N, T, HV, V], "state": [N, HV, K, V]} in float64.
    """
    N, T, H, K = q.shape
    HV = v.shape[2]
    scale = K ** -0.5 if scale is None else scale
    f64 = torch.float64
    q = l2norm(q.to(f64)).repeat_interleave(HV // H, dim=2) * scale
    k = l2norm(k.to(f64)).repeat_interleave(HV // H, dim=2)
    v = v.to(f64)
    decay = torch.exp(-torch.exp(A_log.to(f64)) * F.softplus(a.to(f64) + dt_bias.to(f64)))  # [N, T, HV]
    beta = torch.sigmoid(b.to(f64))
    S = state.to(f64).clone()
    o = torch.empty(v.shape, dtype=f64, device=v.device)
    for t in range(T):
        S = S * decay[:, t, :, None, None]
        delta = (v[:, t] - torch.einsum("nhk,nhkv->nhv", k[:, t], S)) * beta[:, t, :, None]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        o[:, t] = torch.einsum("nhk,nhkv->nhv", q[:, t], S)
    return {"o": o, "state": S}
