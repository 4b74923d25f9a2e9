"""Validation contract for the DSA lightning indexer (kernel.py / reference.py beside this file)."""
from __future__ import annotations

import torch

from skel.kernels.dsa_indexer.reference import dsa_indexer_reference
from skel.validate.spec import Shape, TargetSpec, Tolerance, generator, itemsize, torch_dtype

# Scores go through tl.dot at default precision (TF32 on NVIDIA GPUs).
SCORE_TOLERANCE = Tolerance(rel_rms=5e-3, max_abs=5e-2)


def make_inputs(shape: Shape, dtype: str, seed: int, device) -> dict:
    """q, k_cache ~ N(0, 1) in ``dtype``; weights ~ N(0, 1) / sqrt(H) float32 (signed, as a
    learned projection gives them); topk from the shape."""
    B, H, D, L, TOPK = (shape[d] for d in ("B", "H", "D", "L", "TOPK"))
    gen = generator(shape, seed, device)
    dt = torch_dtype(dtype)

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device)

    return {
        "q": randn(B, H, D).to(dt),
        "k_cache": randn(B, L, D).to(dt),
        "weights": randn(B, H) * H ** -0.5,
        "topk": TOPK,
    }


def check_indices(got: torch.Tensor, ref: dict, inputs: dict) -> str | None:
    """Top-k by score, robust to ties: every selected token must be distinct, in range and
    score within the tie slack of the k-th best reference score."""
    scores = ref["scores"]
    B, L = scores.shape
    topk = inputs["topk"]
    if tuple(got.shape) != (B, topk) or got.dtype not in (torch.int32, torch.int64):
        return f"expected int64 indices of shape ({B}, {topk}), got {got.dtype} {tuple(got.shape)}"
    got = got.long()
    if bool(((got < 0) | (got >= L)).any()):
        row = int(((got < 0) | (got >= L)).any(1).nonzero()[0])
        return f"row {row} selects a token outside [0, {L})"
    ordered = got.sort(dim=1).values
    dup = ordered[:, 1:] == ordered[:, :-1]
    if bool(dup.any()):
        row, col = (int(x) for x in dup.nonzero()[0])
        return f"row {row} selects token {int(ordered[row, col])} twice"
    kth = scores.topk(topk, dim=1).values[:, -1:]
    picked = scores.gather(1, got)
    slack = 2 * SCORE_TOLERANCE.max_abs
    bad = picked < kth - slack
    if bool(bad.any()):
        row, col = (int(x) for x in bad.nonzero()[0])
        return (f"row {row} selects token {int(got[row, col])} with reference score "
                f"{float(picked[row, col]):.4g}, below the {topk}-th best {float(kth[row, 0]):.4g} "
                f"by more than the tie slack {slack:g}")
    return None


def _dims(shape: Shape):
    return (shape[d] for d in ("B", "H", "D", "L", "TOPK"))


def roofline_bytes(shape: Shape, dtype: str) -> int:
    """Key cache, queries and weights read; scores written and read back by the selection;
    top-k values and indices written."""
    B, H, D, L, TOPK = _dims(shape)
    e = itemsize(dtype)
    return B * (L * D * e + H * D * e + H * 4 + 2 * L * 4 + TOPK * 12)


def flops(shape: Shape, dtype: str) -> int:
    B, H, D, L, TOPK = _dims(shape)
    return B * L * H * (2 * D + 3)


SPEC = TargetSpec(
    family="dsa_indexer",
    entry="dsa_indexer",
    make_inputs=make_inputs,
    reference=dsa_indexer_reference,
    outputs=("scores", "indices"),
    inplace=(),
    shape_sets={
        "ci": (
            Shape.of(B=2, H=16, D=32, L=100, TOPK=16),
            Shape.of(B=1, H=20, D=48, L=70, TOPK=64),
        ),
        "decode": tuple(Shape.of(B=b, H=64, D=128, L=8192, TOPK=2048) for b in (1, 8, 32, 64, 128, 256)),
    },
    tolerances={"float32": SCORE_TOLERANCE},
    bytes=roofline_bytes,
    flops=flops,
    dtypes=("bfloat16", "float32"),
    checks={"indices": check_indices},
    description="DSA lightning indexer for decode: relu-weighted head scores, then top-k",
)
