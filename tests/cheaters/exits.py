"""Bad input: ends the process from inside the launcher."""
import os


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    os._exit(3)
