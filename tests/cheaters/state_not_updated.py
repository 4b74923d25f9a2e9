"""Cheater: returns the right output but updates a private copy of the state, leaving the
caller's state as it was."""
from skel.kernels.kda_decode.kernel import kda_decode as _honest


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return _honest(q, k, v, g, beta, A_log, dt_bias, state.clone(), scale)
