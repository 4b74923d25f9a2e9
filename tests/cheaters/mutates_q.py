"""Cheater: L2-normalises q in place before the kernel (saves a buffer, corrupts the caller's q)."""
import torch

from skel.kernels.kda_decode.kernel import kda_decode as _honest


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    norm = torch.sqrt((q.float() ** 2).sum(-1, keepdim=True) + 1e-6)
    q.copy_((q.float() / norm).to(q.dtype))
    return _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
