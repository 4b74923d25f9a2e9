"""Cheater: keeps the recurrent state at bf16 precision (half the state traffic), below the
float32 accuracy the spec promises for it."""
from skel.kernels.kda_decode.kernel import kda_decode as _honest


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    o = _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
    state.copy_(state.bfloat16().float())
    return o
