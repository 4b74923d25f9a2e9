"""Bad input: the launcher has another name."""


def kda_decode_fast(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return v
