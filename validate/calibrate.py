"""The original kernel as its own oracle: what a spec without a reference is judged against.

When no reference exists (an inferred or captured harness), the oracle worker runs the original
three times per case: on the inputs (``base``), on the inputs with every low-precision float tensor
upcast to float32 (``ref``, the same algorithm with less rounding; skipped when the inputs are
float32 already or the launcher refuses the upcast), and on those float32 inputs moved by one unit in
the last place, element by element in a random direction (``pert``: the original's conditioning at the
precision it computes in; where the launcher refuses float32, the inputs' own dtype is moved instead).
The accepted error of each output is then measured, not guessed: ``CALIBRATION`` times the larger of
the original's spread under the perturbation and its distance to its own upcast run, never below the
rounding floor of the output's dtype. A rewrite that only reorders or refolds floating-point work stays
inside that spread; a flipped sign, a dropped term, a shifted mask or an epsilon that matters does not.

Why float32's ulp and not the storage dtype's: a candidate runs on the very inputs the original ran
on, so the rounding of those inputs is no error source a rewrite adds; one bfloat16 ulp of every input
(0.4 %) moved an in-place float32 state by about 1 %, four times which accepted a dropped term of a
Mamba state update. The floor of a float32 output (2**-16 rel-RMS, ~500 ulps) leaves room for what
compiled code reorders on a GPU (FMA contraction, reduction trees: measured up to 3e-6 on an FLA
recurrent state) and is still far below any term that matters.
"""
from __future__ import annotations

from typing import Any

import torch

from skel.validate.spec import Tolerance, dtype_name

CALIBRATION = 4.0
_FLOOR_ULPS = 2
_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7, "float64": 2.0**-52}
# the rounding floor of an output's accepted rel-RMS error (and of its max error, relative to its largest value)
_FLOOR = {**{k: _FLOOR_ULPS * v for k, v in _EPS.items()}, "float32": 2.0**-16}
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
         torch.float64: torch.int64}
LOW_PRECISION = (torch.float16, torch.bfloat16)


def perturbed(inputs: dict[str, Any], seed: int) -> dict[str, Any]:
    """A copy of ``inputs`` with each finite, non-zero float element one ulp up or down (never across zero)."""
    gen = torch.Generator().manual_seed(0x5EED ^ seed)
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dtype in _BITS and value.numel():
            x = value.detach().clone()
            bits = x.view(_BITS[x.dtype])
            step = (torch.randint(0, 2, x.shape, generator=gen) * 2 - 1).to(bits.dtype).to(x.device)
            movable = torch.isfinite(x) & (x != 0)
            bits.add_(torch.where(movable, step, torch.zeros_like(step)))
            out[name] = x
        else:
            out[name] = value.clone() if isinstance(value, torch.Tensor) else value
    return out


def upcast(inputs: dict[str, Any]) -> dict[str, Any] | None:
    """A copy with float16/bfloat16 tensors in float32, or None when there is none to upcast."""
    if not any(isinstance(v, torch.Tensor) and v.dtype in LOW_PRECISION for v in inputs.values()):
        return None
    return {k: (v.float() if v.dtype in LOW_PRECISION else v.clone()) if isinstance(v, torch.Tensor) else v
            for k, v in inputs.items()}


def _spread(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    x = a.detach().to(torch.float64).reshape(-1)
    y = b.detach().to(torch.float64).reshape(-1).to(x.device)
    if x.shape != y.shape or not x.numel():
        return 0.0, 0.0
    diff = (x - y).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    denom = float(x.norm())
    return (float(diff.norm()) / denom if denom > 0 else 0.0), float(diff.max())


def rounding_floor(dtype: str) -> float:
    """The rel-RMS error below which an output of ``dtype`` is never judged wrong against the original."""
    return _FLOOR.get(dtype_name(dtype), 0.0)


def sensitivity(center: torch.Tensor, pert: torch.Tensor | None) -> float:
    """The original's rel-RMS spread under the one-ulp perturbation of its inputs: rounding-level noise."""
    return _spread(center, pert)[0] if pert is not None else 0.0


def calibrated(base: torch.Tensor, ref: torch.Tensor, pert: torch.Tensor | None,
               center: torch.Tensor | None = None) -> Tolerance:
    """The accepted error of one output of one case (see the module docstring); ``center`` is the run
    ``pert`` perturbed (``ref`` when the upcast inputs were moved, else ``base``)."""
    floor = rounding_floor(base.dtype) if base.is_floating_point() else 0.0
    rel, worst = _spread(base, ref)
    if pert is not None:
        p_rel, p_worst = _spread(base if center is None else center, pert)
        rel, worst = max(rel, p_rel), max(worst, p_worst)
    scale = float(ref.detach().abs().max()) if ref.numel() and ref.is_floating_point() else 0.0
    return Tolerance(rel_rms=max(CALIBRATION * rel, floor), max_abs=max(CALIBRATION * worst, floor * scale))
