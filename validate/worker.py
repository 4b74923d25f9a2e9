"""The gate's worker process: loads the original and the candidate, runs numerics and the
benchmark, and streams its verdicts back over a pipe.

Everything that executes candidate code runs here, in a process of its own, so a candidate
that hangs, aborts or segfaults takes down only this process. Messages sent to the parent:
("stage", text), ("call", text) before and ("done", "") after each stretch of candidate code
(the parent times those against the per-call limit), ("shape", ShapeVerdict) as each shape
is judged, ("machine", Machine) when it measured the roofline's rates itself, and finally
("result", Outcome).
"""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from skel.validate.result import ShapeVerdict


@dataclass(frozen=True)
class Request:
    kernel: str  # the original kernel file
    spec: str  # its spec file
    candidate: str  # the candidate file
    entry: str  # launcher name in both files
    shapes: tuple[str, ...]  # shape labels, in order
    seeds: tuple[int, ...]
    dtype: str
    device: str  # "cpu" (numerics in the Triton interpreter) or "cuda"
    bench: object | None  # BenchConfig, or None to skip timing
    fail_fast: bool = True
    log: str = os.devnull  # where the worker's stdout/stderr go (candidates may print)
    machine: object | None = None  # bench.Machine: the roofline's rates, measured by an earlier worker; None: measure


@dataclass(frozen=True)
class Outcome:
    rejection: str | None = None  # the candidate is unusable (import, launcher, signature)
    error: str | None = None  # the gate cannot judge (the original or its spec is broken)
    internal: str | None = None  # a bug in the gate itself: full traceback


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(request: Request, conn) -> None:
    _redirect(request.log)
    # Chosen before any kernel module is loaded: triton.jit reads it when a kernel is defined.
    if request.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    if "triton" in sys.modules:  # its jitted standard library would be in the wrong mode
        conn.send(("result", Outcome(internal="triton was imported before the worker chose TRITON_INTERPRET")))
        conn.close()
        return
    try:
        outcome = _run(request, lambda kind, payload: conn.send((kind, payload)))
    except BaseException:  # the gate's own failure: report it whole, it is not the candidate's
        outcome = Outcome(internal=traceback.format_exc())
    conn.send(("result", outcome))
    conn.close()


def _run(request: Request, send) -> Outcome:
    from skel.validate.load import TargetError, load_module, load_spec, signature_problem
    from skel.validate.judge import ShapeJudge
    from skel.validate.numerics import describe_exception
    from skel.validate.spec import Shape

    try:
        spec = load_spec(request.spec)
    except TargetError as exc:
        return Outcome(error=str(exc))
    send("stage", "loading the original kernel")
    kernel_path = Path(request.kernel)
    try:
        original_module = load_module(kernel_path, "original")
    except Exception as exc:
        return Outcome(error=f"the original kernel {kernel_path} does not import: {describe_exception(exc, kernel_path)}")
    original = getattr(original_module, request.entry, None)
    if not callable(original):
        return Outcome(error=f"the original kernel {kernel_path} defines no launcher '{request.entry}'")

    cand_path = Path(request.candidate)
    send("call", f"importing the candidate {cand_path.name}")
    try:
        cand_module = load_module(cand_path, "candidate")
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a module body too
        return Outcome(rejection=f"the candidate {cand_path.name} does not import: {describe_exception(exc, cand_path)}")
    send("done", "")
    candidate = getattr(cand_module, request.entry, None)
    if candidate is None:
        return Outcome(rejection=f"the candidate {cand_path.name} defines no launcher '{request.entry}'")
    if not callable(candidate):
        return Outcome(rejection=f"the candidate's '{request.entry}' is a {type(candidate).__name__}, not a function")
    shapes = [Shape.parse(label) for label in request.shapes]
    names = tuple(spec.make_inputs(shapes[0], request.dtype, 0, request.device))
    problem = signature_problem(candidate, names)
    if problem:
        return Outcome(rejection=f"the candidate's launcher has the wrong signature: {problem}")

    all_passed = True
    for shape in shapes:
        send("stage", f"numerics at {shape.label}")
        judge = ShapeJudge(spec, shape, request.dtype, request.device, original, candidate, cand_path, send)
        numerics = judge.run(request.seeds)
        if judge.original_failure:
            return Outcome(error=f"{shape.label}: {judge.original_failure}")
        all_passed &= numerics.passed
        note = "" if request.device != "cpu" else "not measured: no GPU (numerics ran in the Triton interpreter)"
        if not numerics.passed:
            note = "not measured: numerics failed"
        elif request.device != "cpu" and request.bench is None:
            note = "not measured: timing not requested"
        send("shape", ShapeVerdict(shape.label, numerics, None, note))
        if not numerics.passed and request.fail_fast:
            return Outcome()
    if all_passed and request.device != "cpu" and request.bench is not None:
        _benchmark(request, spec, shapes, original, candidate, send)
    return Outcome()


def _benchmark(request: Request, spec, shapes, original, candidate, send) -> None:
    from skel.validate.bench import benchmark_shape, measure_machine

    machine = request.machine
    if machine is None:
        send("stage", "measuring copy bandwidth and matmul rate")
        machine = measure_machine()
        send("machine", machine)
    for shape in shapes:
        send("call", f"benchmarking {shape.label}")
        try:
            perf = benchmark_shape(spec, shape, request.dtype, original, candidate, machine, request.bench)
            note = ""
        except RuntimeError as exc:
            perf, note = None, f"not measured: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        send("done", "")
        send("perf", (shape.label, perf, note))
