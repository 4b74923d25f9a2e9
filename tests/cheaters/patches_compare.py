"""Cheater: returns garbage and replaces the gate's comparison with one that always passes."""
import skel.validate.numerics as numerics
from skel.kernels.kda_decode.kernel import kda_decode as _honest


def _always(got, expected, tol):
    return numerics.Comparison(0.0, 0.0, True, "")


numerics.compare = _always


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return _honest(q, k, v, g, beta, A_log, dt_bias, state, scale) + 1.0
