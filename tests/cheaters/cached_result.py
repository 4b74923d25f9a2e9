"""Cheater: computes the output once and returns that same tensor on every later call
(the state is still updated honestly, so only the output gives it away)."""
from skel.kernels.kda_decode.kernel import kda_decode as _honest

_cache = {}


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    o = _honest(q, k, v, g, beta, A_log, dt_bias, state, scale)
    return _cache.setdefault(tuple(v.shape), o)
