"""Bad input: imports a module that does not exist."""
import fused_kda_extension_that_is_not_installed  # noqa: F401


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return fused_kda_extension_that_is_not_installed.run(q, k, v)
