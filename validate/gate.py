"""The gate: ``validate(target, candidate)`` -> GateResult.

The candidate runs in a worker process (``skel.validate.worker``) started from a fork server
that has torch imported already (each candidate costs a fork, not an interpreter start). The parent only watches: a call of candidate code that outlives ``time_limit`` is
killed and rejected as hung; a worker that dies (abort, segfault, exit) is a crash rejected
with the signal and where it happened; the gate itself survives to judge the next candidate.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterable

from skel.validate.load import TargetError, load_spec, resolve_target
from skel.validate.result import GateResult, PerfResult, ShapeVerdict
from skel.validate.spec import Shape, dtype_name

REQUIRE = ("correct", "not-slower", "faster")
_MAX_REASONS = 12


class GateInputError(ValueError):
    """What the gate was asked to judge does not exist or does not fit (usage error)."""


def validate(
    target: str | Path,
    candidate: str | Path,
    *,
    shapes: str | Iterable[str | Shape] | None = None,
    seeds: Iterable[int] | None = None,
    device: str | None = None,
    dtype: str | None = None,
    time_limit: float = 60.0,
    total_time_limit: float | None = None,
    bench=None,
    require: str = "correct",
    spec: str | Path | None = None,
    entry: str | None = None,
    fail_fast: bool = True,
    machine=None,
) -> GateResult:
    """Judge ``candidate`` (a .py file with the target's launcher) against ``target``.

    target: a family under kernels/ ("kda_decode") or the path of a kernel file (its spec is
        ``spec``, a family name or spec file, else the spec.py beside the file).
    shapes: a shape-set name of the spec ("ci", "decode", ...) or shapes/labels; default "ci"
        on CPU and "decode" on a GPU.
    seeds: input seeds per shape; default (0, a fresh random seed), so no fixed inputs can be
        memorised. device: "cpu" or "cuda", default cuda when available.
    time_limit: seconds one stretch of candidate code (import, one call, one shape's
        benchmark) may run before it is judged hung. total_time_limit: the whole worker
        (default max(600, 30 s per shape and seed)).
    bench: a bench.BenchConfig (GPU timing); default BenchConfig(); False to skip timing.
    require: "correct" (numerics only), "not-slower" (no shape measurably slower) or
        "faster" (measurably faster at some shape and slower at none).
    machine: a bench.Machine (copy bandwidth, matmul rate) for the roofline, so that the candidates of
        one run share one denominator; default: the worker measures it (GateResult.machine returns it).
    Raises GateInputError for an unknown target, spec, shape set or a missing candidate file.
    """
    if require not in REQUIRE:
        raise GateInputError(f"require={require!r}: choose one of {', '.join(REQUIRE)}")
    try:
        ref = resolve_target(target, spec)
        target_spec = load_spec(ref.spec)
    except TargetError as exc:
        raise GateInputError(str(exc)) from None
    cand = Path(candidate).expanduser().resolve()
    if not cand.is_file():
        raise GateInputError(f"candidate {candidate} is not a file")
    device = device or _default_device()
    if device not in ("cpu", "cuda"):
        raise GateInputError(f"device {device!r}: use 'cpu' or 'cuda'")
    shape_list, set_name = _shapes(target_spec, shapes, device)
    dtype = dtype_name(dtype or target_spec.dtypes[0])
    if dtype not in target_spec.dtypes:
        raise GateInputError(f"dtype {dtype}: {target_spec.family} supports {', '.join(target_spec.dtypes)}")
    seeds = tuple(int(s) for s in seeds) if seeds is not None else (0, random.randrange(1, 2**31))
    if bench is None:
        from skel.validate.bench import BenchConfig

        bench = BenchConfig()
    from skel.validate.worker import Request

    request = Request(
        kernel=str(ref.kernel), spec=str(ref.spec), candidate=str(cand),
        entry=entry or target_spec.entry, shapes=tuple(s.label for s in shape_list), seeds=seeds,
        dtype=dtype, device=device, bench=bench or None, fail_fast=fail_fast, machine=machine,
    )
    if total_time_limit is None:  # a safety net for hangs outside candidate code (the original, the reference)
        total_time_limit = max(600.0, 30.0 * len(shape_list) * len(seeds))
    verdicts, rejection, error, measured = _run_worker(request, time_limit, total_time_limit)
    shapes_out = tuple(
        verdicts.get(s.label) or ShapeVerdict(s.label, None, None, "not run: the candidate was rejected earlier")
        for s in shape_list
    )
    reasons = _reasons(shapes_out, rejection, error, require, device)
    return GateResult(
        accepted=not reasons, reasons=tuple(reasons), shapes=shapes_out, family=target_spec.family,
        target=str(ref.kernel), candidate=str(cand), dtype=dtype, device=device, shape_set=set_name,
        seeds=seeds, error=error, machine=measured or (machine if any(s.perf for s in shapes_out) else None),
    )


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _shapes(spec, shapes, device: str) -> tuple[list[Shape], str]:
    if shapes is None:
        shapes = "ci" if device == "cpu" else "decode"
    if isinstance(shapes, str):
        if shapes not in spec.shape_sets:
            raise GateInputError(
                f"{spec.family} has no shape set {shapes!r} (has {', '.join(sorted(spec.shape_sets))})"
            )
        return list(spec.shape_sets[shapes]), shapes
    out = []
    for s in shapes:
        try:
            out.append(s if isinstance(s, Shape) else Shape.parse(str(s)))
        except ValueError as exc:
            raise GateInputError(str(exc)) from None
    if not out:
        raise GateInputError("no shapes to validate")
    return out, "custom"


def _reasons(shapes, rejection, error, require, device) -> list[str]:
    if error:
        return [f"cannot judge: {error}"]
    if rejection:
        return [rejection]
    reasons = []
    for verdict in shapes:
        if verdict.numerics is not None and not verdict.numerics.passed:
            reasons += [f"{verdict.shape} {line}" for line in verdict.numerics.failures]
    if reasons:
        return reasons[:_MAX_REASONS] + ([f"... and {len(reasons) - _MAX_REASONS} more"] if len(reasons) > _MAX_REASONS else [])
    if require == "correct":
        return []
    measured = [v for v in shapes if v.perf is not None]
    if len(measured) < len(shapes):
        missing = next(v for v in shapes if v.perf is None)
        return [f"require={require}: performance at {missing.shape} {missing.perf_note or 'not measured'}"]
    slower = [v.shape for v in measured if v.perf.verdict == "slower"]
    if slower:
        return [f"require={require}: measurably slower at {', '.join(slower)}"]
    if require == "faster" and not any(v.perf.verdict == "faster" for v in measured):
        return ["require=faster: not measurably faster at any shape (every difference within noise)"]
    return []


# -- the worker process ------------------------------------------------------------------------
_CONTEXT = None


def _context():
    """A fork server with torch preloaded (no CUDA context: children may make one). Triton is
    left out on purpose: TRITON_INTERPRET must be set before triton is imported (its standard
    library functions are jitted at import), and the worker decides that per request."""
    global _CONTEXT
    if _CONTEXT is None:
        method = os.environ.get("SKEL_GATE_START_METHOD") or (
            "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        )
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["torch", "skel.validate.worker", "skel.validate.judge"])
        _CONTEXT = ctx
    return _CONTEXT


def _run_worker(request, time_limit: float, total_time_limit: float | None):
    """Returns (verdicts by shape label, rejection or None, error or None, the machine the worker measured or None)."""
    from skel.validate.worker import main

    ctx = _context()
    with tempfile.NamedTemporaryFile(prefix="skel-gate-", suffix=".log", delete=False) as log:
        log_path = log.name
    request = _with_log(request, log_path)
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=main, args=(request, sender), daemon=True)
    proc.start()
    sender.close()
    verdicts: dict[str, ShapeVerdict] = {}
    perf: dict[str, tuple[PerfResult | None, str]] = {}
    outcome = None
    machine = None
    doing = "starting the worker"
    in_candidate = False
    call_deadline = None
    deadline = time.monotonic() + total_time_limit if total_time_limit else None
    try:
        while outcome is None:
            limits = [d for d in (call_deadline, deadline) if d is not None]
            wait = min(limits) - time.monotonic() if limits else 1.0
            if wait <= 0:
                proc.kill()
                proc.join()
                limit = time_limit if call_deadline is not None and call_deadline <= time.monotonic() else total_time_limit
                what = f"the candidate timed out: no progress for {limit:g} s while {doing}"
                return _merge(verdicts, perf), what if in_candidate else None, None if in_candidate else what, machine
            if not receiver.poll(min(wait, 1.0)):
                if not proc.is_alive() and not receiver.poll(0.1):
                    break
                continue
            try:
                kind, payload = receiver.recv()
            except (EOFError, OSError):
                break
            if kind == "stage":
                doing, in_candidate, call_deadline = payload, False, None
            elif kind == "call":
                doing, in_candidate = payload, True
                call_deadline = time.monotonic() + time_limit
            elif kind == "done":
                in_candidate, call_deadline = False, None
            elif kind == "shape":
                verdicts[payload.shape] = payload
            elif kind == "perf":
                perf[payload[0]] = (payload[1], payload[2])
            elif kind == "machine":
                machine = payload
            elif kind == "result":
                outcome = payload
        proc.join(timeout=30)
        if outcome is None:
            code = proc.exitcode
            if code is not None and code < 0:
                how = f"crashed the worker process ({_signal_name(-code)})"
            else:
                how = f"ended the worker process (exit status {code}) without a verdict"
            what = f"the candidate {how} while {doing}{_last_words(log_path)}"
            if in_candidate:
                return _merge(verdicts, perf), what, None, machine
            return _merge(verdicts, perf), None, f"the gate's worker died while {doing} ({how.split(' ', 1)[1]})", machine
        if outcome.internal:
            raise RuntimeError(f"internal error in the gate worker:\n{outcome.internal}")
        return _merge(verdicts, perf), outcome.rejection, outcome.error, machine
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        receiver.close()
        try:
            os.unlink(log_path)
        except OSError:
            pass


def _last_words(log_path: str) -> str:
    """The worker's last line of output (a device assert, 'Fatal Python error: ...'), if any."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    last = lines[-1] if len(lines[-1]) <= 160 else lines[-1][:157] + "..."
    return f"; its last output: {last!r}"


def _with_log(request, log_path: str):
    from dataclasses import replace

    return replace(request, log=log_path)


def _merge(verdicts: dict[str, ShapeVerdict], perf: dict) -> dict[str, ShapeVerdict]:
    from dataclasses import replace

    out = dict(verdicts)
    for label, (result, note) in perf.items():
        if label in out:
            out[label] = replace(out[label], perf=result, perf_note=note)
    return out


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
