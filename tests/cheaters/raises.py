"""Bad input: the launcher raises."""


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    raise NotImplementedError(f"head dim {q.shape[-1]} is not supported")
