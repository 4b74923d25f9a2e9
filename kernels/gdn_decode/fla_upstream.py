"""Harness: FLA's gated-delta-rule decode (fla-core 0.6.0 `fla/ops/gated_delta_rule/fused_recurrent.py`).

Validated against the `gdn_decode` family: scalar gate per head computed in the kernel from
A_log and dt_bias, beta sigmoid and q/k L2 norm in the kernel. FLA's function returns the
final state as a new tensor (it does not update the initial state in place).
"""
from __future__ import annotations

import dataclasses

from skel.kernels.gdn_decode.reference import gdn_decode_reference
from skel.kernels.gdn_decode.spec import SPEC as FAMILY


def make_inputs(shape, dtype, seed, device) -> dict:
    inputs = FAMILY.make_inputs(shape, dtype, seed, device)
    return {
        "q": inputs["q"], "k": inputs["k"], "v": inputs["v"],
        "g": inputs["a"], "beta": inputs["b"],
        "A_log": inputs["A_log"], "dt_bias": inputs["dt_bias"],
        "initial_state": inputs["state"],
        "scale": shape["K"] ** -0.5,
        "output_final_state": True,
        "use_qk_l2norm_in_kernel": True,
        "use_beta_sigmoid_in_kernel": True,
    }


def reference(q, k, v, g, beta, A_log, dt_bias, initial_state, scale, **_flags) -> dict:
    out = gdn_decode_reference(q, k, v, g, beta, A_log, dt_bias, initial_state, scale)
    return {"o": out["o"], "final_state": out["state"]}


SPEC = dataclasses.replace(
    FAMILY,
    entry="fused_recurrent_gated_delta_rule_fwd",
    make_inputs=make_inputs,
    reference=reference,
    outputs=("o", "final_state"),
    inplace=(),
    description="FLA fused_recurrent_gated_delta_rule_fwd (fla-core 0.6.0) as a gdn_decode target",
)
