"""Plain-torch float64 reference for the context-parallel state merge (see kernel.py)."""
import torch


def state_merge_reference(state, trans, local):
    """Chain C affine state maps in float64.

    Args:
        state: [N, HV, K, V] initial state.
        trans: [N, HV, C, K, K] chunk transitions M_i.
        local: [N, HV, C, K, V] chunk-local states L_i.
    Returns:
        {"states": [N, HV, C, K, V]} with states[:, :, i] = M_i @ S_i + L_i, S_0 = state.
    """
    f64 = torch.float64
    S = state.to(f64)
    trans = trans.to(f64)
    local = local.to(f64)
    out = torch.empty(local.shape, dtype=f64, device=local.device)
    for i in range(trans.shape[2]):
        S = trans[:, :, i] @ S + local[:, :, i]
        out[:, :, i] = S
    return {"states": out}
