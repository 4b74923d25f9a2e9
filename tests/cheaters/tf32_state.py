"""Cheater: rounds the state it reads to TF32 (10-bit mantissa), as a tl.dot at default
precision would: the error stays inside the spec's float32 tolerance but is far above the
original kernel's, a quiet precision downgrade."""
import torch

from skel.kernels.kda_decode.kernel import kda_decode as _honest


def _round_tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    state.copy_(_round_tf32(state))
    return _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
