"""Harness for a kernel skel does not recognise: fla-core 0.6.0's delta-rule decode.

`skel apply fla/ops/delta_rule/fused_recurrent.py --harness examples/fla_delta_rule/spec.py` judges
rewrites of FLA's ``fused_recurrent_delta_rule_fwd`` (the file needs ``fla`` importable). The gate
calls the entry with ``make_inputs``'s keyword arguments and compares its three return values, in
order, with this float64 reference:

    u_t = v_t - S_{t-1}^T k_t          (what the kernel stores as ``u``)
    S_t = S_{t-1} + k_t (beta_t u_t)^T
    o_t = S_t^T (scale q_t)

per sequence and head, S of shape [K, V] in float32; the final state is returned as a new tensor.
"""
from __future__ import annotations

import torch

from skel.validate.spec import Shape, TargetSpec, Tolerance, decode_sweeps, generator, itemsize, torch_dtype


def make_inputs(shape: Shape, dtype: str, seed: int, device) -> dict:
    """q ~ N(0, 1); k unit-norm per token and head (the delta rule's stable regime); v ~ N(0, 1);
    beta = sigmoid(N(0, 1)); initial state ~ N(0, 0.5^2) in float32."""
    N, T, H, K, V = (shape[d] for d in ("N", "T", "H", "K", "V"))
    gen = generator(shape, seed, device)
    dt = torch_dtype(dtype)

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device)

    k = randn(N, T, H, K)
    return {
        "q": randn(N, T, H, K).to(dt),
        "k": (k / k.norm(dim=-1, keepdim=True)).to(dt),
        "v": randn(N, T, H, V).to(dt),
        "beta": torch.sigmoid(randn(N, T, H)).to(dt),
        "scale": K ** -0.5,
        "initial_state": randn(N, H, K, V) * 0.5,
        "output_final_state": True,
    }


def reference(q, k, v, beta, scale, initial_state, **_flags) -> dict:
    q, k, v, beta = (x.double() for x in (q, k, v, beta))
    S = initial_state.double().clone()
    T = q.shape[1]
    o, u = torch.empty_like(v), torch.empty_like(v)
    for t in range(T):
        u[:, t] = v[:, t] - torch.einsum("nhk,nhkv->nhv", k[:, t], S)
        S = S + torch.einsum("nhk,nhv->nhkv", k[:, t], beta[:, t, :, None] * u[:, t])
        o[:, t] = torch.einsum("nhk,nhkv->nhv", q[:, t] * scale, S)
    return {"o": o, "u": u, "final_state": S}


def roofline_bytes(shape: Shape, dtype: str) -> int:
    """The state read and written once (fp32), q, k, v, beta read, o and u written."""
    N, T, H, K, V = (shape[d] for d in ("N", "T", "H", "K", "V"))
    return 2 * N * H * K * V * 4 + N * T * H * (2 * K + 3 * V + 1) * itemsize(dtype)


def flops(shape: Shape, dtype: str) -> int:
    """Per token and head: k^T S, the rank-1 update and q^T S, 2 K V each."""
    N, T, H, K, V = (shape[d] for d in ("N", "T", "H", "K", "V"))
    return N * T * H * 6 * K * V


SPEC = TargetSpec(
    family="fla_delta_rule",
    entry="fused_recurrent_delta_rule_fwd",
    make_inputs=make_inputs,
    reference=reference,
    outputs=("o", "u", "final_state"),
    inplace=(),
    shape_sets={
        "ci": (Shape.of(N=2, T=1, H=2, K=32, V=32), Shape.of(N=1, T=3, H=2, K=16, V=24)),
        **decode_sweeps(H=32, K=128, V=128),
    },
    tolerances={
        "bfloat16": Tolerance(rel_rms=8e-3, max_abs=3e-2),
        "float32": Tolerance(rel_rms=1e-3, max_abs=1e-2),
    },
    bytes=roofline_bytes,
    flops=flops,
    dtypes=("bfloat16", "float32"),
    description="fla-core 0.6.0 fused_recurrent_delta_rule_fwd through a user harness",
)
