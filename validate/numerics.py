"""Numerics of one shape: both oracles, several seeds, and the cheats a person would name.

Runs inside the worker process (it calls untrusted candidate code). Per seed: fresh inputs,
the float64 reference on a copy, the original kernel on a copy, then the candidate on a copy
after the allocator has been poisoned with NaN at the outputs' sizes; every input the spec does
not declare in-place must come back bit-identical.
"""
from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from skel.validate.result import NumericsResult, OutputNumerics
from skel.validate.spec import Shape, TargetSpec, Tolerance, dtype_name

# A candidate may be less accurate than the original by this factor before it counts as a
# precision downgrade (measured against the float64 reference, worst seed of a shape) ...
PRECISION_RATIO = 4.0
# ... and errors below a few units of rounding of the output dtype never count.
_ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_FLOOR_ULPS = 8


@dataclass(frozen=True)
class Comparison:
    rel_rms: float
    max_abs: float
    passed: bool
    detail: str  # "rel-RMS 1.2e-01 (limit 8e-03), max error 0.5 (limit 0.03) at [0, 1]: got .., expected .."


class CallFailed(Exception):
    """The launcher raised, returned the wrong things, or timed out inside; message is one line."""


@dataclass
class CallResult:
    outputs: dict[str, torch.Tensor]
    modified: list[str] = field(default_factory=list)  # one line per input changed in place
    aliased: list[str] = field(default_factory=list)


def index_str(flat: int, shape: tuple[int, ...]) -> str:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size if size else 0)
        flat //= size if size else 1
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _first(mask: torch.Tensor) -> int:
    return int(mask.reshape(-1).nonzero()[0, 0])


def compare(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> Comparison:
    """Relative RMS and max error of ``got`` against ``expected`` (both finite, same shape)."""
    g = got.detach().to(torch.float64).reshape(-1)
    e = expected.detach().to(torch.float64).reshape(-1).to(g.device)
    diff = (g - e).abs()
    denom = float(e.norm())
    num = float(diff.norm())
    rel = num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))
    worst = float(diff.max()) if diff.numel() else 0.0
    passed = rel <= tol.rel_rms and worst <= tol.max_abs
    if diff.numel() == 0:
        return Comparison(rel, worst, passed, "empty")
    over = diff > tol.max_abs
    flat = _first(over) if bool(over.any()) else int(diff.argmax())
    detail = (
        f"rel-RMS error {rel:.2e} (limit {tol.rel_rms:.0e}), max error {worst:.3g} (limit {tol.max_abs:g});"
        f" {'first element over the limit' if bool(over.any()) else 'largest error'} at"
        f" {index_str(flat, tuple(got.shape))}: got {float(g[flat]):.6g}, expected {float(e[flat]):.6g}"
    )
    return Comparison(rel, worst, passed, detail)


def nonfinite(name: str, got: torch.Tensor) -> str | None:
    if not got.is_floating_point():
        return None
    bad = ~torch.isfinite(got)
    count = int(bad.sum())
    if not count:
        return None
    flat = _first(bad)
    value = float(got.reshape(-1)[flat])
    return (
        f"'{name}' has {count} NaN/inf of {got.numel()} elements (first at"
        f" {index_str(flat, tuple(got.shape))}: {value}): elements left unwritten or computed invalid"
    )


def describe_exception(exc: BaseException, source: Path | None) -> str:
    """One line: the exception and the deepest line of ``source`` it passed through."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if source is not None:
        mine = [f for f in frames if Path(f.filename).resolve() == source.resolve()]
        if mine:
            where = f" ({source.name}:{mine[-1].lineno})"
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 200:
        first = first[:197] + "..."
    return f"{type(exc).__name__}: {first}{where}"


def clone_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def run_call(fn: Callable, inputs: dict[str, Any], spec: TargetSpec, device: str, source: Path | None) -> CallResult:
    """Call ``fn(**copy of inputs)``; collect outputs (returned + in-place), check the inputs."""
    args = clone_inputs(inputs)
    try:
        ret = fn(**args)
        synchronize(device)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a launcher is the candidate's failure too
        raise CallFailed(f"raised {describe_exception(exc, source)}") from None
    values = (ret,) if len(spec.outputs) == 1 and isinstance(ret, torch.Tensor) else ret
    if not isinstance(values, (tuple, list)) or len(values) != len(spec.outputs) or not all(
        isinstance(v, torch.Tensor) for v in values
    ):
        raise CallFailed(
            f"returned {_kind(ret)}; expected {len(spec.outputs)} tensor(s) ({', '.join(spec.outputs)})"
        )
    outputs = dict(zip(spec.outputs, values))
    result = CallResult(outputs)
    for name in spec.inplace:
        outputs[name] = args[name]
    for name, before in inputs.items():
        if not isinstance(before, torch.Tensor) or name in spec.inplace:
            continue
        after = args[name]
        if not torch.equal(after, before):
            changed = after.reshape(-1) != before.reshape(-1)
            flat = _first(changed) if bool(changed.any()) else 0
            allowed = ", ".join(f"'{n}'" for n in spec.inplace) or "none"
            result.modified.append(
                f"modified its input '{name}' (first change at {index_str(flat, tuple(before.shape))}:"
                f" {float(before.reshape(-1)[flat]):.6g} -> {float(after.reshape(-1)[flat]):.6g});"
                f" inputs it may update in place: {allowed}"
            )
    # Returning an in-place input (an updated state handed back) is legitimate; returning any
    # other input as an output is not.
    storages = {
        name: t.untyped_storage().data_ptr()
        for name, t in args.items()
        if isinstance(t, torch.Tensor) and name not in spec.inplace
    }
    for out_name, out in zip(spec.outputs, values):
        for in_name, ptr in storages.items():
            if out.untyped_storage().data_ptr() == ptr:
                result.aliased.append(f"returned '{out_name}' shares memory with its input '{in_name}'")
    return result


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"one tensor {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__}"


def poison_allocator(like: dict[str, torch.Tensor]) -> None:
    """Hand freshly freed NaN-filled blocks of the outputs' sizes to the next allocations, so an
    output the candidate allocates but leaves partly unwritten shows NaN, not stale results."""
    blocks = []
    for t in like.values():
        block = torch.empty_like(t)
        block.fill_(float("nan") if block.is_floating_point() else -1)
        blocks.append(block)
    del blocks


_ALLOCATORS = ("empty", "empty_like", "empty_strided")


def _poisoned(alloc):
    def wrapper(*args, **kwargs):
        out = alloc(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.numel():
            out.fill_(float("nan") if out.is_floating_point() else -1)
        return out

    return wrapper


@contextlib.contextmanager
def poisoned_allocations():
    """While active, torch.empty / empty_like / empty_strided / Tensor.new_empty return memory
    filled with NaN (-1 for integers): whatever a launcher allocates and leaves unwritten shows,
    whatever the allocator would have handed back (the CPU allocator gives no reuse guarantee)."""
    saved = {name: getattr(torch, name) for name in _ALLOCATORS}
    saved_new_empty = torch.Tensor.new_empty
    try:
        for name, alloc in saved.items():
            setattr(torch, name, _poisoned(alloc))
        torch.Tensor.new_empty = _poisoned(saved_new_empty)
        yield
    finally:
        for name, alloc in saved.items():
            setattr(torch, name, alloc)
        torch.Tensor.new_empty = saved_new_empty


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
