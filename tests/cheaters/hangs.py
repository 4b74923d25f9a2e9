"""Bad input: the launcher never returns."""
import time


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    while True:
        time.sleep(0.05)
