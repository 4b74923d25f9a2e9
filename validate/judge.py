"""Numerics of one shape, decided in the judge: both oracles, several seeds, and the cheats a person
would name.

Per seed the oracle worker makes fresh inputs and runs the float64 reference and the original
kernel; the candidate worker runs the candidate on a copy of the same inputs with its allocations
poisoned (NaN). Every tensor crosses to the judge as data, and every comparison happens here, in a
process that runs no kernel code: every input the spec does not declare in-place must come back
bit-identical, outputs are compared with both oracles, and after the seeds the candidate's error
against the reference is compared with the original's (a precision downgrade is a rejection even
inside the tolerance).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from skel.validate.calibrate import calibrated, rounding_floor, sensitivity
from skel.validate.numerics import compare, modified_inputs, nonfinite, rel_rms
from skel.validate.result import NumericsResult, OutputNumerics
from skel.validate.roles import CandidateCall, CandidateClient, Case, OracleClient
from skel.validate.spec import Shape, SpecInfo, Tolerance, dtype_name

# A candidate may be less accurate than the original by this factor before it counts as a
# precision downgrade (measured against the float64 reference, worst seed of a shape) ...
PRECISION_RATIO = 4.0
# ... and errors below a few units of rounding of the output dtype never count.
_ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_FLOOR_ULPS = 8


# A project's reference that differs from the original by more than this rel-RMS computes something
# else (another default, another layout): it is dropped as an oracle, with a note.
CROSS_AGREEMENT = 0.05


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
    sensitivity: float = 0.0  # without a reference: the original's spread under one-float32-ulp input perturbations
    cross_original: float | None = None  # rel-RMS against the project's float64 reference: the original's
    cross_candidate: float | None = None  # ... and the candidate's
    passed: bool = True

    def update(self, attr: str, value: float) -> None:
        old = getattr(self, attr)
        setattr(self, attr, value if old is None else max(old, value))


class ShapeJudge:
    """Numerics for one shape across seeds, the oracle's and the candidate's data compared here."""

    def __init__(self, spec: SpecInfo, shape: Shape, dtype: str, oracle: OracleClient, candidate: CandidateClient):
        self.spec, self.shape, self.dtype = spec, shape, dtype
        self.oracle, self.candidate = oracle, candidate
        self.failures: list[str] = []
        self.original_failure: str | None = None
        self.worst: dict[str, _Worst] = {}
        self.out_dtypes: dict[str, str] = {}
        self._previous: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._case_tol: dict[str, Tolerance] = {}  # without a reference: this seed's calibrated tolerances
        self.calibrated: dict[str, Tolerance] = {}  # ... and the loosest over the seeds, by output dtype
        self.notes: list[str] = []
        self.cross = bool(spec.cross_reference) and spec.oracle == "original"  # a second oracle still in use

    def run(self, seeds: tuple[int, ...]) -> NumericsResult:
        for seed in seeds:
            if not self._seed(seed) or self.original_failure:
                break
        self._precision()
        outputs = tuple(self._summary(name) for name in self.worst)
        passed = not self.failures and self.original_failure is None
        return NumericsResult(passed, tuple(seeds), outputs, tuple(self.failures))

    # -- one seed -------------------------------------------------------------------------------------
    def _seed(self, seed: int) -> bool:
        spec = self.spec
        case = self.oracle.case(self.shape, self.dtype, seed)
        if case.original_failure:
            self.original_failure = f"the original kernel {case.original_failure} at seed {seed}"
            return False
        if spec.oracle == "original":
            self._calibrate(case)
        for name in spec.compared_outputs + spec.inplace:
            if name in spec.checks:
                continue
            base, ref = case.base.get(name), case.ref.get(name)
            if base is None or ref is None:
                self.original_failure = f"the spec's reference or the original gives no '{name}' at seed {seed}"
                return False
            self.out_dtypes[name] = dtype_name(base.dtype)
            bad = nonfinite(name, base)
            cmp = None if bad else compare(base, ref, self._tol(name))
            if bad or not cmp.passed:
                self.original_failure = (
                    f"the original kernel fails {self._oracle} at seed {seed}: "
                    + (bad or f"'{name}' {cmp.detail}")
                )
                return False
            self._worst(name).update("original_rel_rms", cmp.rel_rms)
        if self.cross:
            self._cross_original(case, seed)

        call = self.candidate.call(case, spec.outputs, spec.inplace, f"calling the candidate at {self.shape.label}"
                                   f" seed {seed}")
        if isinstance(call, str):
            self.failures.append(f"seed {seed}: the candidate {call}")
            return False
        return self._judge(seed, case, call)

    def _judge(self, seed: int, case: Case, call: CandidateCall) -> bool:
        spec = self.spec
        before = len(self.failures)
        fail = lambda text: self.failures.append(f"seed {seed}: {text}")  # noqa: E731
        for line in modified_inputs(case.tensors, call.args, spec.inplace) + call.aliased:
            fail(f"the candidate {line}")
        for name in spec.compared_outputs + spec.inplace:
            got = call.outputs.get(name) if name in spec.outputs else call.args.get(name)
            w = self._worst(name)
            if got is None:
                w.passed = False
                fail(f"'{name}' was not handed over by the candidate's worker")
                continue
            if name in spec.checks:
                problem = self.oracle.check(name, got)
                if problem:
                    w.passed = False
                    fail(f"'{name}': {problem}")
                continue
            expected = case.ref[name]
            if tuple(got.shape) != tuple(expected.shape):
                w.passed = False
                fail(f"'{name}' has shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
                continue
            bad = nonfinite(name, got)
            if bad:
                w.passed = False
                fail(bad)
                continue
            cheat = self._named_cheat(name, got, expected, case.tensors)
            cmp = compare(got, expected, self._tol(name))
            diff = compare(got, case.base[name], self._tol(name))
            w.update("rel_rms", cmp.rel_rms)
            w.update("max_abs", cmp.max_abs)
            w.update("diff_rel_rms", diff.rel_rms)
            w.update("diff_max_abs", diff.max_abs)
            if cheat:
                w.passed = False
                fail(cheat)
            elif not cmp.passed:
                w.passed = False
                fail(f"'{name}' against {self._oracle}: {cmp.detail}")
            elif not diff.passed and cmp.rel_rms >= (w.original_rel_rms or 0.0):
                # Differing from the original is fine only when the candidate is the more accurate.
                w.passed = False
                fail(f"'{name}' differs from the original kernel and is no closer to the reference: {diff.detail}")
        for name in spec.compared_outputs:
            if name in call.outputs and name in case.ref:
                self._previous[name] = (call.outputs[name], case.ref[name])
            if self.cross and name in call.outputs and name in case.x64 \
                    and tuple(call.outputs[name].shape) == tuple(case.x64[name].shape):
                self._worst(name).update("cross_candidate", rel_rms(call.outputs[name], case.x64[name]))
        return len(self.failures) == before

    def _cross_original(self, case: Case, seed: int) -> None:
        """The project's reference (float64) against the original: a reference that gives nothing, or
        disagrees beyond what the original's own precision explains, is not the same function and is
        dropped as an oracle, with a note; else the original's distance to it is recorded per output."""
        label = self.spec.cross_reference
        errors = {}
        for name in self.spec.compared_outputs:
            base, ref = case.base.get(name), case.x64.get(name)
            if base is not None and ref is not None and tuple(base.shape) == tuple(ref.shape):
                errors[name] = rel_rms(base, ref)
        worst = max(errors, key=errors.get, default=None)
        if case.cross_note:
            why = case.cross_note
        elif worst is None:
            why = "it returns none of the compared outputs in their shapes"
        elif not errors[worst] <= CROSS_AGREEMENT:  # NaN too
            why = f"it differs from the original by rel-RMS {errors[worst]:.1e} on '{worst}'"
        else:
            why = ""
        if why:
            self.cross = False
            self.notes.append(f"the project's reference {label} is not used as an oracle at {self.shape.label}"
                              f" (seed {seed}): {why}")
            return
        for name, err in errors.items():
            self._worst(name).update("cross_original", err)
        note = f"second oracle: the project's reference {label} on float64 inputs"
        if note not in self.notes:
            self.notes.append(note)

    def _named_cheat(self, name: str, got: torch.Tensor, expected: torch.Tensor, inputs: dict) -> str | None:
        """Diagnoses a person recognises at once, checked before the generic error message."""
        if name in self.spec.inplace and name in inputs:
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
            # Rounding-level noise is no downgrade: a few ulps of the output's dtype, and, without a reference,
            # what a one-ulp change of the inputs moves the original by and the calibrated rounding floor (an
            # original that computes in float32 from bfloat16 inputs equals its upcast run bit for bit; any
            # reordering then differs a little: 3e-6 measured on an FLA recurrent state).
            dtype = self.out_dtypes.get(name, "float32")
            floor = max(precision_floor(dtype), w.sensitivity)
            if self.spec.oracle == "original":  # inside the calibrated rounding floor is no downgrade either
                floor = max(floor, rounding_floor(dtype) / PRECISION_RATIO)
            limit = PRECISION_RATIO * max(w.original_rel_rms, floor)
            if w.rel_rms > limit:
                w.passed = False
                self.failures.append(
                    f"precision downgrade: '{name}' has rel-RMS error {w.rel_rms:.2e} against"
                    f" {self._oracle}, {w.rel_rms / max(w.original_rel_rms, floor):.0f}x the original kernel's"
                    f" {w.original_rel_rms:.2e} or the rounding floor {floor:.1e} (more than {PRECISION_RATIO:g}x"
                    f" is rejected even inside the tolerance {self._tol(name).rel_rms:.0e})"
                )
        for name, w in self.worst.items():  # the same measure against the project's reference, if any
            if not self.cross or w.cross_candidate is None or w.cross_original is None or not w.passed:
                continue
            limit = PRECISION_RATIO * max(w.cross_original, precision_floor(self.out_dtypes.get(name, "float32")))
            if w.cross_candidate > limit:
                w.passed = False
                self.failures.append(
                    f"precision downgrade: '{name}' has rel-RMS error {w.cross_candidate:.2e} against the project's"
                    f" reference {self.spec.cross_reference} (float64), the original {w.cross_original:.2e}"
                    f" (more than {PRECISION_RATIO:g}x is rejected)")

    # -- helpers ----------------------------------------------------------------------------
    @property
    def _oracle(self) -> str:
        return "the float64 reference" if self.spec.oracle == "reference" else "the original kernel's upcast run"

    def _calibrate(self, case: Case) -> None:
        """Without a reference the original's own runs are the oracle (``calibrate``): its upcast run is the
        reference where there is one, and each output's accepted error is measured from this case."""
        if case.note and case.note not in self.notes:
            self.notes.append(case.note)
        for name, base in case.base.items():
            case.ref.setdefault(name, base)
            center = case.ref[name] if case.pert_of == "ref" else base  # what the perturbed run moved away from
            tol = calibrated(base, case.ref[name], case.pert.get(name), center)
            w = self._worst(name)
            w.sensitivity = max(w.sensitivity, sensitivity(center, case.pert.get(name)))
            self._case_tol[name] = tol
            key = dtype_name(base.dtype)
            old = self.calibrated.get(key)
            self.calibrated[key] = tol if old is None else Tolerance(max(old.rel_rms, tol.rel_rms),
                                                                    max(old.max_abs, tol.max_abs))

    def _tol(self, name: str) -> Tolerance:
        if self.spec.oracle == "original":
            return self._case_tol.get(name) or Tolerance(0.0, 0.0)
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
