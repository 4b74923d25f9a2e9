"""Bad input: kills the interpreter (as a failed device assert or a C++ abort would)."""
import os


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    os.abort()
