"""Cheater: writes the output over v and returns v itself (no output allocation)."""
from skel.kernels.kda_decode.kernel import kda_decode as _honest


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    o = _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
    v.copy_(o)
    return v
