"""Numerics of one shape: both oracles, several seeds, and the cheats a person would name.

Per seed: fresh inputs, the float64 reference on a copy, the original kernel on a copy, then
the candidate on a copy with its allocations poisoned (NaN); every input the spec does not
declare in-place must come back bit-identical. After the seeds, the candidate's error against
the reference is compared with the original's (a precision downgrade is a rejection even
inside the tolerance).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from skel.validate.numerics import (
    CallFailed, CallResult, clone_inputs, compare, nonfinite, poison_allocator, poisoned_allocations, run_call,
)
from skel.validate.result import NumericsResult, OutputNumerics
from skel.validate.spec import Shape, TargetSpec, Tolerance, dtype_name

# A candidate may be less accurate than the original by this factor before it counts as a
# precision downgrade (measured against the float64 reference, worst seed of a shape) ...
PRECISION_RATIO = 4.0
# ... and errors below a few units of rounding of the output dtype never count.
_ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_FLOOR_ULPS = 8


def precision_floor(dtype: str) -> float:
    return _FLOOR_ULPS * _ROUNDING.get(dtype, 2.0**-24)


@dataclass
class _Worst:
    """Worst-case accumulator for one output over the seeds."""

    rel_rms: float | None = None
    max_abs: float | None = None
    original_rel_rms: float | None = None
    diff_rel_rms: float | None = None
    diff_max_abs: float | None = None
    passed: bool = True

    def update(self, attr: str, value: float) -> None:
        old = getattr(self, attr)
        setattr(self, attr, value if old is None else max(old, value))


class ShapeJudge:
    """Numerics for one shape across seeds. ``notify(kind, text)`` reports progress so the
    parent can time a single candidate call ("call" before, "done" after)."""

    def __init__(self, spec: TargetSpec, shape: Shape, dtype: str, device: str, original: Callable,
                 candidate: Callable, candidate_path: Path, notify: Callable[[str, str], None]):
        self.spec, self.shape, self.dtype, self.device = spec, shape, dtype, device
        self.original, self.candidate, self.candidate_path = original, candidate, candidate_path
        self.notify = notify
        self.failures: list[str] = []
        self.original_failure: str | None = None
        self.worst: dict[str, _Worst] = {}
        self.out_dtypes: dict[str, str] = {}
        self._previous: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def run(self, seeds: tuple[int, ...]) -> NumericsResult:
        for seed in seeds:
            if not self._seed(seed) or self.original_failure:
                break
        self._precision()
        outputs = tuple(self._summary(name) for name in self.worst)
        passed = not self.failures and self.original_failure is None
        return NumericsResult(passed, tuple(seeds), outputs, tuple(self.failures))

    # -- one seed -------------------------------------------------------------------------
    def _seed(self, seed: int) -> bool:
        spec = self.spec
        inputs = spec.make_inputs(self.shape, self.dtype, seed, self.device)
        ref = spec.reference(**clone_inputs(inputs))
        compared = spec.outputs + spec.inplace
        try:
            base = run_call(self.original, inputs, spec, self.device, None)
        except CallFailed as exc:
            self.original_failure = f"the original kernel {exc} at seed {seed}"
            return False
        for name in compared:
            if name in spec.checks:
                continue
            self.out_dtypes[name] = dtype_name(base.outputs[name].dtype)
            bad = nonfinite(name, base.outputs[name])
            cmp = None if bad else compare(base.outputs[name], ref[name], self._tol(name))
            if bad or not cmp.passed:
                self.original_failure = (
                    f"the original kernel fails the float64 reference at seed {seed}: "
                    + (bad or f"'{name}' {cmp.detail}")
                )
                return False
            self._worst(name).update("original_rel_rms", cmp.rel_rms)

        poison_allocator({n: base.outputs[n] for n in spec.outputs})
        self.notify("call", f"shape {self.shape.label} seed {seed}")
        try:
            with poisoned_allocations():
                cand = run_call(self.candidate, inputs, spec, self.device, self.candidate_path)
        except CallFailed as exc:
            self.notify("done", "")
            self.failures.append(f"seed {seed}: the candidate {exc}")
            return False
        self.notify("done", "")
        return self._judge(seed, inputs, ref, base, cand)

    def _judge(self, seed: int, inputs: dict, ref: dict, base: CallResult, cand: CallResult) -> bool:
        spec = self.spec
        before = len(self.failures)
        fail = lambda text: self.failures.append(f"seed {seed}: {text}")  # noqa: E731
        for line in cand.modified + cand.aliased:
            fail(f"the candidate {line}")
        for name in spec.outputs + spec.inplace:
            got = cand.outputs[name]
            w = self._worst(name)
            if name in spec.checks:
                problem = spec.checks[name](got, ref, inputs)
                if problem:
                    w.passed = False
                    fail(f"'{name}': {problem}")
                continue
            expected = ref[name]
            if tuple(got.shape) != tuple(expected.shape):
                w.passed = False
                fail(f"'{name}' has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
                continue
            bad = nonfinite(name, got)
            if bad:
                w.passed = False
                fail(bad)
                continue
            cheat = self._named_cheat(name, got, expected, inputs)
            cmp = compare(got, expected, self._tol(name))
            diff = compare(got, base.outputs[name], self._tol(name))
            w.update("rel_rms", cmp.rel_rms)
            w.update("max_abs", cmp.max_abs)
            w.update("diff_rel_rms", diff.rel_rms)
            w.update("diff_max_abs", diff.max_abs)
            if cheat:
                w.passed = False
                fail(cheat)
            elif not cmp.passed:
                w.passed = False
                fail(f"'{name}' against the float64 reference: {cmp.detail}")
            elif not diff.passed and cmp.rel_rms >= (w.original_rel_rms or 0.0):
                # Differing from the original is fine only when the candidate is the more accurate.
                w.passed = False
                fail(f"'{name}' differs from the original kernel and is no closer to the reference: {diff.detail}")
        for name in spec.outputs:
            self._previous[name] = (cand.outputs[name].detach().clone(), ref[name])
        return len(self.failures) == before

    def _named_cheat(self, name: str, got: torch.Tensor, expected: torch.Tensor, inputs: dict) -> str | None:
        """Diagnoses a person recognises at once, checked before the generic error message."""
        if name in self.spec.inplace:
            start = inputs[name]
            if torch.equal(got, start) and not torch.equal(expected, start.to(expected.dtype)):
                return f"'{name}' was not updated in place (it still equals its input) though the reference changes it"
        if name in self._previous:
            old, old_ref = self._previous[name]
            if old.shape == got.shape and torch.equal(old, got) and not torch.equal(old_ref, expected):
                return (f"'{name}' is bit-identical to the candidate's result for the previous seed though the"
                        f" inputs differ: a cached or stale result")
        if got.numel() > 1:
            flat = got.reshape(-1)
            if bool((flat == flat[0]).all()) and float(expected.max() - expected.min()) > 0:
                return f"'{name}' is constant (every element is {float(flat[0]):.6g}) but the reference is not"
        return None

    def _precision(self) -> None:
        """The candidate must be about as accurate as the original, not merely inside the tolerance."""
        for name, w in self.worst.items():
            if w.rel_rms is None or w.original_rel_rms is None or not w.passed:
                continue
            floor = precision_floor(self.out_dtypes.get(name, "float32"))
            limit = PRECISION_RATIO * max(w.original_rel_rms, floor)
            if w.rel_rms > limit:
                w.passed = False
                self.failures.append(
                    f"precision downgrade: '{name}' has rel-RMS error {w.rel_rms:.2e} against the float64"
                    f" reference, {w.rel_rms / max(w.original_rel_rms, 1e-300):.0f}x the original kernel's"
                    f" {w.original_rel_rms:.2e} (more than {PRECISION_RATIO:g}x is rejected even inside the"
                    f" tolerance {self._tol(name).rel_rms:.0e})"
                )

    # -- helpers ----------------------------------------------------------------------------
    def _tol(self, name: str) -> Tolerance:
        return self.spec.tolerance(self.out_dtypes.get(name, "float32"))

    def _worst(self, name: str) -> _Worst:
        return self.worst.setdefault(name, _Worst())

    def _summary(self, name: str) -> OutputNumerics:
        w = self.worst[name]
        custom = name in self.spec.checks
        tol = None if custom else self._tol(name)
        return OutputNumerics(
            output=name,
            dtype=self.out_dtypes.get(name, "custom check" if custom else "?"),
            rel_rms=w.rel_rms, max_abs=w.max_abs, original_rel_rms=w.original_rel_rms,
            diff_rel_rms=w.diff_rel_rms, diff_max_abs=w.diff_max_abs,
            tol_rel_rms=tol.rel_rms if tol else None, tol_max_abs=tol.max_abs if tol else None,
            passed=w.passed and not any(f"'{name}'" in line for line in self.failures),
        )
