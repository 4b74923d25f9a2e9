"""Validation contract for the context-parallel state merge (kernel.py / reference.py)."""
from __future__ import annotations

import math

import torch

from skel.kernels.state_merge.reference import state_merge_reference
from skel.validate.spec import Shape, TargetSpec, Tolerance, generator

CHUNK = 16  # tokens summarised by one transition


def make_inputs(shape: Shape, dtype: str, seed: int, device) -> dict:
    """Chunk summaries built the way a delta-rule recurrence builds them, in float64.

    For each chunk of CHUNK tokens with unit keys k_t, betas sigmoid(N(0,1)) and per-channel
    decays alpha_t = exp(-d), d log-uniform in [1e-5, 1e-3] (long-memory heads):
    M = prod_t (I - beta_t k_t k_t^T) diag(alpha_t) and L = the state the chunk builds from
    zero with values ~ N(0, 1). M has eigenvalues close to 1 outside the span of the keys, so
    rounding errors persist along the chain instead of decaying. state ~ N(0, 0.5^2).
    All float32 (``dtype`` is accepted for the interface; the family is fp32 only).
    """
    N, HV, C, K, V = (shape[d] for d in ("N", "HV", "C", "K", "V"))
    gen = generator(shape, seed, device)
    f64 = torch.float64
    B = N * HV * C

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=f64)

    def rand(*size):
        return torch.rand(*size, generator=gen, device=device, dtype=f64)

    M = torch.eye(K, dtype=f64, device=device).expand(B, K, K).clone()
    L = torch.zeros(B, K, V, dtype=f64, device=device)
    for _ in range(CHUNK):
        k = randn(B, K)
        k = k / k.norm(dim=-1, keepdim=True)
        beta = torch.sigmoid(randn(B, 1, 1))
        decay = torch.exp(-torch.exp(rand(B, K) * (math.log(1e-3) - math.log(1e-5)) + math.log(1e-5)))
        M = decay[:, :, None] * M
        M = M - beta * k[:, :, None] * (k[:, None, :] @ M)
        L = decay[:, :, None] * L
        L = L + beta * k[:, :, None] * (randn(B, 1, V) - k[:, None, :] @ L)
    return {
        "state": (randn(N, HV, K, V) * 0.5).float(),
        "trans": M.reshape(N, HV, C, K, K).float(),
        "local": L.reshape(N, HV, C, K, V).float(),
    }


def _dims(shape: Shape):
    return (shape[d] for d in ("N", "HV", "C", "K", "V"))


def roofline_bytes(shape: Shape, dtype: str) -> int:
    """Initial state, transitions and local states read once, every merged state written."""
    N, HV, C, K, V = _dims(shape)
    return 4 * N * HV * (K * V + C * K * K + 2 * C * K * V)


def flops(shape: Shape, dtype: str) -> int:
    N, HV, C, K, V = _dims(shape)
    return N * HV * C * (2 * K * K * V + K * V)


SPEC = TargetSpec(
    family="state_merge",
    entry="state_merge",
    make_inputs=make_inputs,
    reference=state_merge_reference,
    outputs=("states",),
    inplace=(),
    shape_sets={
        "ci": (
            Shape.of(N=1, HV=2, C=3, K=32, V=48),
            Shape.of(N=2, HV=1, C=2, K=16, V=32),
        ),
        "decode": tuple(Shape.of(N=n, HV=32, C=4, K=128, V=128) for n in (1, 8, 32, 64)),
        # Error versus chain length (benchmarks/gate_suite.py).
        "chain": tuple(Shape.of(N=2, HV=32, C=c, K=128, V=128) for c in (1, 2, 4, 8, 16, 32, 64, 128)),
    },
    tolerances={
        # tl.dot at default precision is TF32 on NVIDIA GPUs (10-bit mantissa operands): the
        # contract admits that for short chains; a more accurate variant passes a fortiori.
        "float32": Tolerance(rel_rms=1e-2, max_abs=1e-1),
    },
    bytes=roofline_bytes,
    flops=flops,
    dtypes=("float32",),
    description="Chain of fp32 state-matrix merges S' = M @ S + L with tl.dot (context parallel)",
)
