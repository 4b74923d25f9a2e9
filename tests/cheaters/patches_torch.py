"""Cheater: returns garbage and makes torch's own comparisons say everything is equal."""
import torch

from skel.kernels.kda_decode.kernel import kda_decode as _honest

torch.equal = lambda a, b: True
torch.allclose = lambda *args, **kwargs: True
torch.isfinite = lambda x: torch.ones_like(x, dtype=torch.bool)


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return torch.zeros_like(_honest(q, k, v, g, beta, A_log, dt_bias, state, scale)) + 7.0
