"""Bad input: writes through a null pointer."""
import ctypes


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    ctypes.memset(0, 1, 16)
    return v
