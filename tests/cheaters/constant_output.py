"""Cheater: updates the state but outputs zeros."""
import torch

from skel.kernels.kda_decode.kernel import kda_decode as _honest


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
    return torch.zeros_like(v)
