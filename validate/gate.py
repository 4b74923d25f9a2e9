"""The gate: ``validate(target, candidate)`` -> GateResult.

The judged never holds the judgement. This process (the judge) runs no kernel code: the spec and
the original kernel run in an **oracle** worker, the candidate in a **candidate** worker of its
own, both forked from the gate's fork server and contained (``sandbox``: scratch folders, Landlock
where the kernel has it, no capabilities, own session, supervised). Inputs, reference outputs and
results cross as data; the comparisons, the timing's checks and the verdict happen here. A
request of candidate code that outlives ``time_limit`` is killed and rejected as hung; a worker
that dies is a crash rejected with the signal and where it happened; files around the target are
hashed before and after (``integrity``), and what the candidate did to its own process, the
processes it left behind and the files it touched are rejections of their own.
"""
from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from skel.validate.integrity import FileGuard
from skel.validate.load import TargetError, resolve_target
from skel.validate.result import GateResult, PerfResult, ShapeVerdict
from skel.validate.session import Worker, WorkerLost, scratch_config
from skel.validate.spec import Shape, SpecInfo, dtype_name

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
    landlock: bool = True,
) -> GateResult:
    """Judge ``candidate`` (a .py file with the target's launcher) against ``target``.

    target: a family under kernels/ ("kda_decode") or the path of a kernel file (its spec is
        ``spec``, a family name or spec file, else the spec.py beside the file).
    shapes: a shape-set name of the spec ("ci", "decode", ...) or shapes/labels; default "ci"
        on CPU and "decode" on a GPU.
    seeds: input seeds per shape; default (0, a fresh random seed), so no fixed inputs can be
        memorised. device: "cpu" or "cuda", default cuda when available.
    time_limit: seconds one request of candidate code (import, one call, one timing sample) may
        run before it is judged hung. total_time_limit: the oracle's whole budget (default
        max(600, 30 s per shape and seed)).
    bench: a bench.BenchConfig (GPU timing); default BenchConfig(); False to skip timing.
    require: "correct" (numerics only), "not-slower" (no shape measurably slower) or
        "faster" (measurably faster at some shape and slower at none). Untrusted timing rejects
        whatever ``require`` says.
    machine: a bench.Machine (copy bandwidth, matmul rate) for the roofline, so that the candidates of
        one run share one denominator; default: the oracle measures it (GateResult.machine returns it).
    landlock: False runs the workers without Landlock (for tests of the other defences).
    Raises GateInputError for an unknown target, spec, shape set or a missing candidate file.
    """
    if require not in REQUIRE:
        raise GateInputError(f"require={require!r}: choose one of {', '.join(REQUIRE)}")
    try:
        ref = resolve_target(target, spec, entry)
    except TargetError as exc:
        raise GateInputError(str(exc)) from None
    cand = Path(candidate).expanduser().resolve()
    if not cand.is_file():
        raise GateInputError(f"candidate {candidate} is not a file")
    device = device or _default_device()
    if device not in ("cpu", "cuda"):
        raise GateInputError(f"device {device!r}: use 'cpu' or 'cuda'")
    if bench is None:
        from skel.validate.bench import BenchConfig

        bench = BenchConfig()
    request = _Request(ref.kernel, ref.spec, cand, entry, shapes, seeds, device, dtype, time_limit, total_time_limit,
                       bench or None, require, fail_fast, machine, landlock)
    _protect_judge()
    guard = FileGuard([ref.kernel, ref.spec, cand], [ref.kernel.parent, ref.spec.parent, cand.parent, Path.cwd()])
    root = Path(tempfile.mkdtemp(prefix="skel-gate-"))
    try:
        judgement = _Judgement(request, root)
        judgement.run()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    confined = bool(judgement.isolation and judgement.isolation.get("writes_confined"))
    touched = guard.check_and_restore(folders=not confined)
    if ref.inferred:
        judgement.notes.insert(0, f"no spec given: the harness was inferred from {ref.kernel.name}'s launcher"
                                  f" (skel harness; written to {ref.spec})")
    if confined and touched:  # not the candidate's doing: its writes could not leave its scratch folder
        judgement.error = judgement.error or (
            "the files judged changed during the judgement, by another process (every worker's writes were"
            " confined to its scratch folder): " + "; ".join(c.describe() for c in touched[:6]) + "; judge again")
        touched = []
    return judgement.result([c.describe() for c in touched])


def spec_info(spec: str | Path) -> SpecInfo:
    """A spec file's data (family, entry, shape sets, tolerances...), read in a contained oracle worker:
    the spec is code, and this process runs none. Raises GateInputError when it does not load."""
    return _ask_spec(spec, None)[0]


def spec_dims(spec: str | Path) -> tuple[tuple[tuple[str, str], ...], str]:
    """``spec.infer_dims`` of a spec file, in a contained oracle worker."""
    reply = _ask_spec(spec, {"op": "infer_dims"})[1]
    return tuple((str(d), str(e)) for d, e in reply["dims"]), str(reply["note"])


def _ask_spec(spec: str | Path, message: dict | None) -> tuple[SpecInfo, dict]:
    from skel.validate.roles import Deadline, OracleClient, OracleFailed

    root = Path(tempfile.mkdtemp(prefix="skel-spec-"))
    worker = None
    try:
        worker = Worker(scratch_config(root, "oracle", "cpu", kernel="", spec=str(Path(spec).resolve()),
                                       **_oracle_cache()), "cpu")
        client = OracleClient(worker, Deadline(120.0))
        try:
            info = client.hello(load_kernel=False)
            return info, client.ask(message, "reading the spec") if message else {}
        except OracleFailed as exc:
            raise GateInputError(str(exc)) from None
    finally:
        if worker is not None:
            worker.finish()
        shutil.rmtree(root, ignore_errors=True)


def _protect_judge() -> None:
    """This process holds the oracle's outputs and the verdict: no other process of the same user (a
    candidate outside Landlock, say) may read its memory or ptrace it."""
    from skel.validate.sandbox import PR_SET_DUMPABLE, prctl

    prctl(PR_SET_DUMPABLE, 0)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class _Request:
    kernel: Path
    spec: Path
    candidate: Path
    entry: str | None
    shapes: object
    seeds: object
    device: str
    dtype: str | None
    time_limit: float
    total_time_limit: float | None
    bench: object
    require: str
    fail_fast: bool
    machine: object
    landlock: bool


@dataclass
class _Judgement:
    """One validate() call: the workers, what they said, and the verdict built from it."""

    req: _Request
    root: Path
    info: SpecInfo | None = None
    shape_list: list[Shape] = field(default_factory=list)
    set_name: str = "custom"
    dtype: str = ""
    seeds: tuple[int, ...] = ()
    verdicts: dict[str, ShapeVerdict] = field(default_factory=dict)
    rejection: str | None = None
    error: str | None = None
    misconduct: list[str] = field(default_factory=list)
    machine: object = None
    isolation: dict | None = None
    calibrated: dict[str, dict] = field(default_factory=dict)  # shape -> dtype -> Tolerance (self-oracle specs)
    notes: list[str] = field(default_factory=list)

    def run(self) -> None:
        from skel.validate.roles import Deadline, OracleClient, OracleFailed

        req = self.req
        oracle = candidate = None
        try:
            oracle = Worker(scratch_config(self.root, "oracle", req.device, kernel=str(req.kernel), spec=str(req.spec),
                                           entry=req.entry, landlock=req.landlock, **_oracle_cache()), req.device)
            client = OracleClient(oracle, Deadline(req.total_time_limit or 600.0))
            try:
                self.info = client.hello(load_kernel=False)
            except OracleFailed as exc:
                raise GateInputError(str(exc)) from None
            self._choose(self.info)
            if req.total_time_limit is None:  # a safety net for hangs outside candidate code
                client.deadline = Deadline(max(600.0, 30.0 * len(self.shape_list) * len(self.seeds)))
            try:
                client.hello(load_kernel=True)
            except OracleFailed as exc:
                self.error = str(exc)
                return
            self.notes.extend(client.load_notes)
            candidate = self._start_candidate()
            self._judge(client, candidate)
        except WorkerLost as lost:
            self._lost(lost, oracle if lost.role == "oracle" else candidate)
        except OracleFailed as exc:  # the spec or the original broke mid-judgement: the input is bad
            self.error = str(exc)
        finally:
            for worker in (candidate, oracle):
                if worker is not None:
                    ending = worker.finish()
                    if worker is candidate and ending.survivors and not self.rejection and not self.error:
                        self.misconduct.append(
                            f"the candidate left {len(ending.survivors)} process(es) running after its worker finished"
                            f" ({'; '.join(ending.survivors[:3])}): killed")

    def _choose(self, info: SpecInfo) -> None:
        req = self.req
        self.shape_list, self.set_name = _shapes(info, req.shapes, req.device)
        self.dtype = dtype_name(req.dtype or info.dtypes[0])
        if self.dtype not in info.dtypes:
            raise GateInputError(f"dtype {self.dtype}: {info.family} supports {', '.join(info.dtypes)}")
        self.seeds = (tuple(int(s) for s in req.seeds) if req.seeds is not None
                      else (0, random.randrange(1, 2**31)))

    def _start_candidate(self):
        req = self.req
        cache = _candidate_cache()
        config = scratch_config(self.root, "candidate", req.device, landlock=req.landlock,
                                display_name=req.candidate.name, triton_cache=cache, writable=[cache],
                                package_of=str(req.kernel))
        copy = Path(config["scratch"]) / "work" / req.candidate.name
        shutil.copyfile(req.candidate, copy)
        config["candidate"] = str(copy)
        worker = Worker(config, req.device)
        self.isolation = worker.isolation
        return worker

    def _judge(self, oracle, worker) -> None:
        from skel.validate.judge import ShapeJudge
        from skel.validate.roles import CandidateClient

        req, info = self.req, self.info
        roofline, arguments = oracle.describe(self.shape_list, self.dtype)
        client = CandidateClient(worker, req.time_limit)
        try:
            self.rejection = client.load(req.entry or info.entry, arguments, req.candidate.name)
            if self.rejection:
                return
            all_passed = True
            for shape in self.shape_list:
                judge = ShapeJudge(info, shape, self.dtype, oracle, client)
                numerics = judge.run(self.seeds)
                self.calibrated[shape.label] = judge.calibrated
                self.notes += [n for n in judge.notes if n not in self.notes]
                if judge.original_failure:
                    self.error = f"{shape.label}: {judge.original_failure}"
                    return
                all_passed &= numerics.passed
                note = "" if req.device != "cpu" else "not measured: no GPU (numerics ran in the Triton interpreter)"
                if not numerics.passed:
                    note = "not measured: numerics failed"
                elif req.device != "cpu" and req.bench is None:
                    note = "not measured: timing not requested"
                self.verdicts[shape.label] = ShapeVerdict(shape.label, numerics, None, note)
                if not numerics.passed and req.fail_fast:
                    return
            if all_passed and req.device != "cpu" and req.bench is not None and not client.conduct:
                self._time(oracle, worker, roofline)
        finally:
            self.misconduct += [f"the candidate {line}" for line in client.conduct]

    def _time(self, oracle, worker, roofline) -> None:
        from skel.validate.timing import NotMeasured, Untrusted, time_shape

        req = self.req
        self.machine = oracle.machine(req.machine)
        for shape in self.shape_list:
            nbytes, nflops = roofline[shape.label]
            try:
                perf: PerfResult | None = time_shape(oracle.worker, worker, self.info, shape, self.dtype, self.machine,
                                                     req.bench, nbytes, nflops, req.time_limit, oracle.deadline.left(),
                                                     self.calibrated.get(shape.label))
                note = ""
            except NotMeasured as exc:
                perf, note = None, f"not measured: {exc}"
            except Untrusted as exc:
                perf, note = None, f"not trusted: {exc}"
                self.misconduct.append(f"timing at {shape.label} not trusted: {exc}")
            self.verdicts[shape.label] = replace(self.verdicts[shape.label], perf=perf, perf_note=note)
            if self.misconduct:
                return

    def _lost(self, lost, worker) -> None:
        ending = worker.finish() if worker is not None else None
        if lost.role == "candidate":
            if lost.timed_out:
                self.rejection = f"the candidate timed out: {lost}"
            else:
                how = ending.how() if ending else "ended its worker"
                words = f"; its last output: {ending.last_words!r}" if ending and ending.last_words else ""
                self.rejection = f"the candidate {how} while {lost.doing}{words}"
        else:
            how = f" ({ending.how()})" if ending else ""
            self.error = f"the gate's oracle worker (spec and original kernel) stopped: {lost}{how}"

    def result(self, touched: list[str]) -> GateResult:
        req = self.req
        if touched:
            self.misconduct.append("the candidate changed files outside its scratch folder: " + "; ".join(touched[:6]))
        shapes_out = tuple(
            self.verdicts.get(s.label) or ShapeVerdict(s.label, None, None, "not run: the candidate was rejected earlier")
            for s in self.shape_list
        )
        reasons = _reasons(shapes_out, self.rejection, self.error, self.misconduct, req.require, req.device)
        measured = self.machine if any(s.perf for s in shapes_out) else None
        return GateResult(
            accepted=not reasons, reasons=tuple(reasons), shapes=shapes_out, family=self.info.family if self.info else "?",
            target=str(req.kernel), candidate=str(req.candidate), dtype=self.dtype, device=req.device,
            shape_set=self.set_name, seeds=self.seeds, error=self.error, machine=measured or req.machine,
            isolation=self.isolation, oracle=self.info.oracle if self.info else "reference", notes=tuple(self.notes),
        )


def _oracle_cache() -> dict:
    """The oracle keeps the user's Triton cache warm (the original and its spec are the user's own code;
    candidates never write there): its folder, writable, as the worker's configuration says it."""
    import os

    cache = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")
    try:
        os.makedirs(cache, exist_ok=True)
    except OSError:
        return {}
    return {"triton_cache": cache, "writable": [cache]}


_CANDIDATE_CACHE: str | None = None


def _candidate_cache() -> str:
    """One Triton cache for the candidates this process judges (never the oracle's)."""
    global _CANDIDATE_CACHE
    if _CANDIDATE_CACHE is None or not Path(_CANDIDATE_CACHE).is_dir():
        import atexit

        _CANDIDATE_CACHE = tempfile.mkdtemp(prefix="skel-candidate-triton-")
        atexit.register(shutil.rmtree, _CANDIDATE_CACHE, True)
    return _CANDIDATE_CACHE


def _shapes(spec: SpecInfo, shapes, device: str) -> tuple[list[Shape], str]:
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


def _reasons(shapes, rejection, error, misconduct, require, device) -> list[str]:
    if error:
        return [f"cannot judge: {error}"]
    reasons = list(misconduct)
    if rejection:
        return reasons + [rejection]
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
