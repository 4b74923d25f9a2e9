"""Bad input: does not parse."""


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None:
    return q
