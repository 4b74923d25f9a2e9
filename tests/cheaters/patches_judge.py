"""Cheater: returns garbage and, at import, replaces the judge's verdict function with one that
always passes (the judge used to run in the candidate's process; it no longer does)."""
import skel.validate.judge as judge
from skel.kernels.kda_decode.kernel import kda_decode as _honest

judge.ShapeJudge._judge = lambda self, *args, **kwargs: True


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    return _honest(q, k, v, g, beta, A_log, dt_bias, state, scale) * 1000.0
