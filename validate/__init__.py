"""The gate: numerics against two oracles, then (on a GPU) an interleaved microbenchmark.

    from skel.validate import validate
    result = validate("kda_decode", "my_kda.py", shapes="ci")
    result.accepted, result.reasons, result.shapes
"""
from skel.validate.gate import GateInputError, validate
from skel.validate.result import GateResult, NumericsResult, OutputNumerics, PerfResult, ShapeVerdict, Timing

__all__ = [
    "GateInputError", "GateResult", "NumericsResult", "OutputNumerics", "PerfResult", "ShapeVerdict",
    "Timing", "validate",
]
