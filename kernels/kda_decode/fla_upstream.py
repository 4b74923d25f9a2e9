"""Harness: FLA's own KDA decode (fla-core 0.6.0 `fla/ops/kda/fused_recurrent.py`) against this family.

`skel apply` recognises a copy of that file anywhere and validates it through this spec: the
same inputs, reference and tolerances as `kda_decode`, called the way serving stacks call it
(`fused_recurrent_kda_fwd` with the gate, beta sigmoid and q/k L2 norm in the kernel and the
state updated in place). The file itself imports `fla`, so fla-core must be importable.
"""
from __future__ import annotations

import dataclasses

from skel.kernels.kda_decode.reference import kda_decode_reference
from skel.kernels.kda_decode.spec import SPEC as FAMILY


def make_inputs(shape, dtype, seed, device) -> dict:
    return as_fla_call(FAMILY.make_inputs(shape, dtype, seed, device))


def as_fla_call(inputs: dict) -> dict:
    """The family's inputs as `fused_recurrent_kda_fwd`'s keyword arguments, called the way serving stacks
    call it (the state updated in place; gate, beta sigmoid and q/k L2 norm in the kernel)."""
    inputs = dict(inputs)
    inputs["initial_state"] = inputs.pop("state")
    inputs.update(
        scale=inputs["q"].shape[-1] ** -0.5,
        inplace_final_state=True,
        use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True,
    )
    return inputs


def reference(q, k, v, g, beta, A_log, dt_bias, initial_state, scale, **_flags) -> dict:
    out = kda_decode_reference(q, k, v, g, beta, A_log, dt_bias, initial_state, scale)
    return {"o": out["o"], "final_state": out["state"], "initial_state": out["state"]}


SPEC = dataclasses.replace(
    FAMILY,
    entry="fused_recurrent_kda_fwd",
    make_inputs=make_inputs,
    reference=reference,
    outputs=("o", "final_state"),
    inplace=("initial_state",),
    description="FLA fused_recurrent_kda_fwd (fla-core 0.6.0) as a kda_decode target",
)
