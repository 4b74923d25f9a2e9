"""`skel apply`: profile -> match -> candidates -> gate -> accept per shape bucket -> output + report.

On a GPU the search has a second, measured round: the structural skeletons composed on top of each
bucket's first-round winner with the winner's own variants (candidates.refine), judged by the same gate.
It adds at most one candidate per shape bucket beyond --max-candidates; a winner holding a launch-config
search (SK005) or a preview (SKP...) step is not composed further, and the second round's compositions
get no launch search on top.

A rewrite is accepted only when the gate's numerics pass at every shape AND (on a GPU) the
interleaved microbenchmark finds it faster at some shape of a bucket and slower at none.
Without a GPU the numerics still run (interpreter, "ci" shapes) but nothing is accepted:
performance is "not measured", and no speedup is ever claimed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from skel.skeletons.library import Library
from skel.errors import UsageError
from skel.miner.sourcefile import SourceText, read_source, read_written, write_source
from skel.rewriter.base import RewriteOptions
from skel.pipeline.candidates import Candidate, enumerate_candidates
from skel.pipeline.targets import TargetBinding


@dataclass(frozen=True)
class ApplyOptions:
    target: Path
    output: Path | None = None
    in_place: bool = False
    skeletons: tuple[str, ...] = ()  # restrict to these codes
    allow_unsafe: bool = False
    dry_run: bool = False
    shapes: str | None = None  # shape set of the spec; default "ci" on CPU, "decode" on GPU
    harness: Path | None = None
    device: str | None = None
    max_candidates: int = 16
    exhaustive: bool = False
    report_dir: Path | None = None
    time_limit: float = 300.0
    catalog: Path | None = None
    record: bool = True
    preview: bool = False  # also judge the catalog's preview candidates (SKP...): skel.pipeline.preview
    max_bytes: int | None = None  # a larger target is refused (default: SKEL_MAX_BYTES or 5 MB)
    # without a harness, the one inferred from the file's launcher (skel harness): which launcher,
    # which Optional arguments to pass, which decode sizes
    entry: str | None = None
    variants: tuple[str, ...] = ()
    dims: tuple[tuple[str, int], ...] = ()
    # a later stage of a file with several launchers (``apply``): the functions earlier stages judged,
    # which this stage's candidates must leave as they are
    frozen: tuple[str, ...] = ()
    executor: object = None  # a skel.executor.RayExecutor: every gate judgement becomes a Ray task (remote_gate)


@dataclass(frozen=True)
class Applicability:
    kernel: str
    applicable: tuple[tuple[str, tuple[str, ...]], ...]  # (code, conditions that hold, with details)
    not_applicable: tuple[tuple[str, str], ...]  # (code, first failing condition in words)


@dataclass(frozen=True)
class CandidateOutcome:
    skeletons: tuple[str, ...]
    label: str
    accepted: bool  # passed numerics and won somewhere (GPU) -- on CPU always False
    numerics_passed: bool | None
    reason: str
    unsafe: bool
    diff: str
    params: dict = field(default_factory=dict)
    gate: dict | None = None  # GateResult.to_dict()
    path: str = ""
    round: int = 1  # 2: built on a first-round winner by the measured second round

    def to_json(self) -> dict:
        return {"skeletons": list(self.skeletons), "label": self.label, "accepted": self.accepted,
                "numerics_passed": self.numerics_passed, "reason": self.reason, "unsafe": self.unsafe,
                "params": self.params, "gate": self.gate, "diff": self.diff, "path": self.path, "round": self.round}


@dataclass(frozen=True)
class ApplyResult:
    target: str
    binding: dict
    device: str
    perf_measured: bool
    applicability: tuple[Applicability, ...]
    candidates: tuple[CandidateOutcome, ...]
    skipped: tuple[tuple[tuple[str, ...], str], ...]
    winners: tuple[tuple[str, str], ...]  # (bucket, candidate label)
    output: str | None
    report: str | None
    notes: tuple[str, ...] = ()
    runoffs: tuple = ()  # select.Runoff: head-to-heads between close qualifiers of a bucket
    environment: dict | None = None  # validate.environment.Environment: GPU, driver, versions, commit, date

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "environment": self.environment,
            "binding": self.binding,
            "device": self.device,
            "perf_measured": self.perf_measured,
            "applicability": [
                {"kernel": a.kernel,
                 "applicable": [{"skeleton": c, "conditions": list(h)} for c, h in a.applicable],
                 "not_applicable": [{"skeleton": c, "reason": r} for c, r in a.not_applicable]}
                for a in self.applicability
            ],
            "candidates": [c.to_json() for c in self.candidates],
            "skipped": [{"skeletons": list(s), "reason": r} for s, r in self.skipped],
            "winners": [{"bucket": b, "candidate": c} for b, c in self.winners],
            "output": self.output,
            "report": self.report,
            "notes": list(self.notes),
            "runoffs": [r.to_json() for r in self.runoffs],
        }


Progress = Callable[[str], None]


def _stderr_progress(message: str) -> None:
    print(f"skel apply: {message}", file=sys.stderr, flush=True)


def match_target(source: str, path: Path, library: Library) -> tuple[Applicability, ...]:
    """Every skeleton's conditions on every kernel of the file: `skel match`'s verdicts, as apply reports them."""
    from skel.miner.match import match_kernel, profile_target

    out = []
    for profile in profile_target(str(path), source, "triton"):
        m = match_kernel(profile, source, list(library))
        out.append(Applicability(
            m.name,
            tuple((a.skeleton, tuple(f"{i}: {d}" for i, d in a.conditions)) for a in m.applicable),
            tuple((n.skeleton, f"{n.condition}: {n.reason}") for n in m.not_applicable),
        ))
    return tuple(out)


def read_target_source(target: Path, max_bytes: int | None = None) -> SourceText:
    """The text of a Triton target; ``UsageError`` naming the file and the problem otherwise
    (missing, a folder, CUDA, not .py, unreadable, binary, undecodable, too large, empty)."""
    from skel.miner.walk import language_of

    if not os.path.lexists(target):
        raise UsageError(f"{target}: no such file")
    if os.path.isdir(target):
        raise UsageError(f"{target}: is a directory; skel apply rewrites one kernel file")
    language = language_of(str(target))
    if language == "cuda":
        raise UsageError(f"skel apply rewrites Triton (.py) files; {target} is CUDA: use skel match/mine for CUDA")
    if language is None:
        raise UsageError(f"{target}: not a Triton source: skel apply rewrites .py files")
    src = read_source(str(target), "triton", max_bytes)
    if not src.text.strip():
        raise UsageError(f"{target}: empty file: no kernel to rewrite")
    return src


def apply(options: ApplyOptions, library: Library, progress: Progress = _stderr_progress) -> ApplyResult:
    """One launcher's pipeline, or, for a file whose launchers reach different kernels and no --entry or
    --harness, one stage per launcher (the first forward one first, then each that reaches a kernel no
    earlier one did). Stage k judges candidates through its launcher against the file as stage k - 1
    left it (accepted rewrites included), changing only what its launcher runs and earlier stages did
    not; the output holds every stage's accepted rewrite."""
    entries = _stage_entries(options)
    if len(entries) <= 1:
        return _apply_one(options, library, progress)
    return _apply_stages(options, library, progress, entries)


def _stage_entries(options: ApplyOptions) -> list[str]:
    """The launchers to judge in turn ([] or one: a single stage)."""
    import ast

    from skel.harness.launchers import jit_functions, kernels_reached, launcher_functions
    from skel.pipeline.targets import NotRecognised, bind_target

    if options.harness is not None or options.entry or options.variants or options.dims or options.frozen:
        return []
    try:
        source = read_target_source(options.target, options.max_bytes).text
        tree = ast.parse(source)
        binding = bind_target(options.target.resolve(), source, None, None, (), {})
    except (SyntaxError, UsageError, NotRecognised):
        return []
    if not binding.how.startswith("harness inferred"):
        return []  # a recognised target: its spec names the one entry it judges
    from skel.harness.infer import launcher_rank

    found = launcher_functions(tree)
    kernels = set(jit_functions(tree))
    entries, covered = [binding.entry], kernels_reached(tree, binding.entry)
    for name in sorted((n for n in found if n != binding.entry), key=launcher_rank):
        reached = kernels_reached(tree, name) & kernels
        if reached - covered:
            entries.append(name)
            covered |= reached
    return entries


def _apply_stages(options: ApplyOptions, library: Library, progress: Progress, entries: list[str]) -> ApplyResult:
    import ast

    from skel.harness.launchers import functions_reached
    from skel.pipeline.report import report_path, write_report

    path = options.target.resolve()
    read = read_target_source(options.target, options.max_bytes)
    report_dir = options.report_dir or Path.cwd() / f"skel-report-{path.stem}"
    progress(f"{path.name}: {len(entries)} launchers reach different kernels: judged in turn"
             f" ({', '.join(entries)})")
    text, frozen, results, staged = read.text, set(), [], None
    tree = ast.parse(read.text)
    try:
        for k, entry in enumerate(entries, 1):
            target = options.target
            if k > 1 and text != read.text and not options.dry_run:
                staged = path.with_name(f".{path.stem}.skel-stage{k}{path.suffix}")  # beside it: same package
                write_source(staged, text, read.encoding)
                target = staged
            stage = dataclasses.replace(
                options, target=target, entry=entry, frozen=tuple(sorted(frozen)), in_place=False,
                output=report_dir / entry / f"{path.stem}.skel{path.suffix}", report_dir=report_dir / entry)
            progress(f"stage {k}/{len(entries)}: {entry}")
            try:
                result = _apply_one(stage, library, progress)
            except (UsageError, ValueError) as exc:
                progress(f"stage {k}/{len(entries)}: {entry}: {exc}")
                results.append((entry, None, str(exc)))
                continue
            results.append((entry, result, ""))
            if result.output:
                text = read_written(Path(result.output), read.encoding)
            frozen |= functions_reached(tree, entry)
    finally:
        if staged is not None:
            for k in range(2, len(entries) + 1):
                path.with_name(f".{path.stem}.skel-stage{k}{path.suffix}").unlink(missing_ok=True)
    output, notes = None, []
    for entry, result, error in results:
        if result is None:
            notes.append(f"{entry}: not judged ({error})")
    if text != read.text and not options.dry_run:
        output = _write_text(path, text, options, read.encoding)
    done = [(e, r) for e, r, _ in results if r is not None]
    first = done[0][1] if done else None
    result = ApplyResult(
        target=str(options.target), binding=first.binding if first else {}, device=first.device if first else "",
        perf_measured=any(r.perf_measured for _, r in done),
        applicability=first.applicability if first else (),
        candidates=tuple(dataclasses.replace(c, label=f"{e}: {c.label}") for e, r in done for c in r.candidates),
        skipped=tuple((codes, f"{e}: {why}") for e, r in done for codes, why in r.skipped),
        winners=tuple((f"{e}: {b}", f"{e}: {c}") for e, r in done for b, c in r.winners),
        output=str(output) if output else None, report=None if options.dry_run else str(report_path(report_dir)),
        notes=tuple(notes + [f"{e}: {n}" for e, r in done for n in r.notes]
                    + [f"{e}: its own report is {r.report}" for e, r in done if r.report]),
        runoffs=tuple(x for _, r in done for x in r.runoffs),
        environment=first.environment if first else None,
    )
    if not options.dry_run:
        write_report(result, report_dir)
    return result


def _write_text(path: Path, text: str, options: ApplyOptions, encoding: str) -> Path:
    """The accepted file where the user asked: --in-place (with a backup), --output, or TARGET.skel.py."""
    if options.in_place:
        shutil.copy2(path, _backup_path(path))
        write_source(path, text, encoding)
        return path
    out = options.output or path.with_name(f"{path.stem}.skel{path.suffix}")
    if out.resolve() == path:
        raise ValueError(f"refusing to overwrite the input {path} without --in-place")
    write_source(out, text, encoding)
    return out


def _apply_one(options: ApplyOptions, library: Library, progress: Progress = _stderr_progress) -> ApplyResult:
    from skel.pipeline.report import report_path, write_report
    from skel.pipeline.select import choose_winners
    from skel.pipeline.targets import NotRecognised, bind_target, unbound

    path = options.target.resolve()
    read = read_target_source(options.target, options.max_bytes)
    source, encoding = read.text, read.encoding  # candidates and output keep the target's encoding
    try:
        binding = bind_target(path, source, options.harness, options.entry, options.variants, dict(options.dims))
    except NotRecognised:
        if not options.dry_run:
            raise
        binding = unbound(path)  # a dry run executes nothing, so it needs no spec
    progress(f"{path.name}: {binding.how}")
    applicability = match_target(source, path, library)
    codes = sorted({c for a in applicability for c, _ in a.applicable})
    if options.skeletons:
        wanted = {c.upper() for c in options.skeletons}
        codes = [c for c in codes if c in wanted]
    progress(f"applicable skeletons: {', '.join(codes) or 'none'}")
    remote = None
    if options.executor is not None and not options.dry_run:
        from skel.pipeline.remote_gate import RemoteGate

        remote = RemoteGate(options.executor)
    device = options.device or (remote.default_device() if remote else _default_device())
    if remote is not None:
        remote.check(device)
    shape_set = options.shapes or ("decode" if device == "cuda" else "ci")
    from skel.device import device_profile

    largest, smallest = _shape_hint(binding, shape_set)
    profile = device_profile(probe=device == "cuda" and remote is None)
    progress(f"planning for {profile.describe()}")
    rewrite_options = RewriteOptions(shape=largest, small_shape=smallest, device=profile, max_variants=10)
    cset = enumerate_candidates(source, codes, library, rewrite_options, options.allow_unsafe,
                                max_candidates=options.max_candidates, exhaustive=options.exhaustive)
    if options.preview:  # hook: preview candidates join the library's; the logic lives in skel.pipeline.preview
        from skel.pipeline.preview import add_preview_candidates

        add_preview_candidates(cset, source, options.catalog, options.skeletons, options.max_candidates)
    progress(f"{len(cset.candidates)} candidate(s); {len(cset.skipped)} skeleton(s) produced none")
    skipped = [(s.skeletons, s.reason) for s in cset.skipped]
    report_dir = options.report_dir or Path.cwd() / f"skel-report-{path.stem}"
    work = report_dir / "candidates"  # every candidate file stays beside the report, for a person to read
    try:
        if not options.dry_run:  # a dry run writes nothing: its diffs are printed, never stored
            work.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{report_dir}: cannot create the report folder ({exc.strerror or exc}); "
                         "choose another with --report-dir") from None
    # The roofline's rates (copy bandwidth, matmul rate): measured by the first timed candidate's worker and
    # reused by the others, so every "% of roofline" in one report has one denominator.
    machine = None

    def stage(cand: Candidate, number: int, step: str):
        """Restrict the candidate to what the entry runs and write its file (kept beside the report): (the
        candidate as judged, its diff, its file, its outcome when it is not for the gate, the names restored)."""
        missed = _missed_by_entry(source, cand.source, binding.entry) if not options.dry_run else ""
        restored: tuple[str, ...] = ()
        if not options.dry_run and not missed:
            text, restored = restrict_to_entry(source, cand.source, binding.entry, options.frozen)
            if restored and text == source:
                missed = (f"not judged: it changes only {', '.join(restored)}, which {binding.entry} never runs or an"
                          " earlier stage judged")
            cand = dataclasses.replace(cand, source=text)
        diff = unified_diff(source, cand.source, path)
        cand_path = work / f"candidate_{number:02d}.py"
        if options.dry_run:
            return cand, diff, None, CandidateOutcome(cand.skeletons, cand.label, False, None,
                                                      "dry run: not validated", cand.unsafe, diff, cand.params,
                                                      None, None), restored
        write_source(cand_path, cand.source, encoding)
        if restored:
            progress(f"[{step}] {cand.label}: its changes to {', '.join(restored)} are left out: the gate does not"
                     f" judge them through {binding.entry} (--entry NAME judges their launcher)")
        if missed:
            progress(f"[{step}] {cand.label}: {missed}")
            return cand, diff, cand_path, CandidateOutcome(cand.skeletons, cand.label, False, None, missed,
                                                           cand.unsafe, diff, cand.params, None, str(cand_path)), restored
        return cand, diff, cand_path, None, restored

    def judge(cand: Candidate, number: int, step: str) -> CandidateOutcome:
        """Stage the candidate and run the gate on it, with progress."""
        cand, diff, cand_path, decided, restored = stage(cand, number, step)
        if decided is not None:
            return decided
        progress(f"[{step}] gate: {cand.label}")
        started = time.monotonic()
        nonlocal machine
        outcome, machine = _judge(cand, cand_path, binding, path, shape_set, device, diff, options, machine)
        outcome = _left_out(outcome, restored, binding.entry)
        progress(f"[{step}] {outcome.reason} ({time.monotonic() - started:.0f} s)")
        return outcome

    def judge_round(numbered: list[tuple[Candidate, int, str]]) -> list[CandidateOutcome]:
        """Each (candidate, number, step) judged: one after the other here, or all at once as Ray tasks."""
        if remote is None:
            return [judge(*n) for n in numbered]
        return _judge_remote(remote, numbered, stage, binding, path, shape_set, device, options, progress)

    outcomes = judge_round([(cand, i, f"{i}/{len(cset.candidates)}") for i, cand in enumerate(cset.candidates, 1)])
    perf_measured = device == "cuda" and not options.dry_run
    precision_only = frozenset(o.label for o in outcomes
                               if all((s := library.get(c)) and s.category == "precision" for c in o.skeletons))
    if perf_measured:  # second round: compose the rest on top of each bucket's measured winner
        refined = _refine(source, cset.candidates, outcomes, codes, library, rewrite_options, options, precision_only,
                          skipped, binding.batch)
        judged = judge_round([(cand, len(outcomes) + k, f"second round {k}/{len(refined)}")
                              for k, (cand, _) in enumerate(refined, 1)])
        for (_, origin), j in zip(refined, judged):
            outcomes.append(dataclasses.replace(j, reason=f"second round, on {origin}: {j.reason}", round=2))
    runoffs: list = []
    runoff = (_runoff(binding, device, options, progress, lambda: machine, **({"remote": remote} if remote else {}))
              if perf_measured else None)
    winners, outcomes = choose_winners(outcomes, perf_measured, precision_only, runoff, runoffs, binding.batch)
    output = None
    notes: list[str] = []
    if winners and not options.dry_run:
        progress("checking the output file")
        output, out_notes = _write_output(path, source, binding, winners, outcomes, options,
                                          _dispatch_check(path, binding, shape_set, device, options, work, encoding,
                                                          remote),
                                          encoding)
        notes += out_notes
        progress(f"wrote {output}")
    elif not perf_measured and not options.dry_run:
        notes.append("performance not measured (no GPU): numerics were checked in the interpreter; "
                     "nothing is accepted without a microbenchmark")
    result = ApplyResult(
        target=str(options.target), binding=binding.to_json(), device=device, perf_measured=perf_measured,
        applicability=applicability, candidates=tuple(outcomes), skipped=tuple(skipped),
        winners=tuple((b, o.label) for b, o in winners), output=str(output) if output else None,
        report=None if options.dry_run else str(report_path(report_dir)), notes=tuple(notes), runoffs=tuple(runoffs),
        environment=_environment(options.target, device, outcomes),
    )
    if not options.dry_run:
        write_report(result, report_dir)
    if options.record and not options.dry_run:
        _record(result, binding, source, options.catalog)
    return result


def _refine(source: str, candidates: list[Candidate], outcomes: list[CandidateOutcome], codes: list[str],
            library: Library, rewrite_options: RewriteOptions, options: ApplyOptions,
            precision_only: frozenset, skipped: list, batch: str = "N") -> list[tuple[Candidate, str]]:
    """New candidates for the second round, each with the winner it was built on: the structural skeletons
    composed on top of each bucket's first-round leader and of every candidate within run-off distance of it
    (select.contenders), with that candidate's own variants (candidates.refine). A contender with no new
    composition, or whose composition was already judged, is said in ``skipped``."""
    from skel.pipeline.candidates import refine
    from skel.pipeline.select import contenders

    winners = contenders(outcomes, True, precision_only, batch=batch)
    by_label = {c.label: c for c in candidates}
    judged = {c.source for c in candidates}
    buckets: dict[str, list[str]] = {}
    for bucket, o in winners:
        buckets.setdefault(o.label, []).append(bucket)
    out: list[tuple[Candidate, str]] = []
    for label, won in buckets.items():
        if label in precision_only or label not in by_label:
            continue
        cand = refine(source, by_label[label], codes, library, rewrite_options, options.allow_unsafe)
        if isinstance(cand, str):
            skipped.append((by_label[label].skeletons, f"second round on {label}: none ({cand})"))
        elif cand.source in judged:
            skipped.append((cand.skeletons, f"second round on {label}: {cand.label} was judged in the first round"))
        else:
            judged.add(cand.source)
            out.append((cand, f"{label}, a first-round leader or contender for {', '.join(won)}"))
    return out


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def restrict_to_entry(source: str, candidate: str, entry: str,
                      frozen: frozenset[str] | tuple[str, ...] = ()) -> tuple[str, tuple[str, ...]]:
    """The candidate with every top-level function that ``entry`` never runs restored to the original's
    text, and the names restored: the gate judges a file through one launcher, so only what that
    launcher runs may change (a rewrite of another launcher's kernel would go out unjudged)."""
    import ast

    from skel.harness.launchers import functions_reached
    from skel.pipeline.dispatch import _defs, _text

    try:
        reached = functions_reached(ast.parse(source), entry)
        old, new = _defs(source), _defs(candidate)
    except SyntaxError:
        return candidate, ()
    if entry not in old:
        return candidate, ()
    drop = [n for n in new if n in old and (n not in reached or n in frozen)
            and ast.dump(new[n][2]) != ast.dump(old[n][2])]
    lines = candidate.splitlines(True)
    for name in sorted(drop, key=lambda n: -new[n][0]):  # bottom up: earlier spans stay valid
        start, end, _ = new[name]
        original = _text(source, old[name])
        lines[start - 1:end] = [original if original.endswith("\n") or end == len(lines) else original + "\n"]
    return "".join(lines), tuple(sorted(drop))


def _missed_by_entry(source: str, candidate: str, entry: str) -> str:
    """Why the gate cannot judge a candidate through ``entry`` (it changes only kernels the entry never
    launches), or ""; then the candidate is reported, not judged."""
    import ast

    from skel.harness.launchers import changed_kernels, kernels_reached

    changed = changed_kernels(source, candidate)
    try:
        reached = kernels_reached(ast.parse(source), entry)
    except SyntaxError:
        return ""
    if not changed or not reached or changed & reached:
        return ""
    return (f"not judged: it changes only {', '.join(sorted(changed))}, which {entry} never launches"
            f" (judge it through their launcher: --entry NAME)")


def _shape_hint(binding: TargetBinding, shape_set: str) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """The largest shape of the set (resource pruning of launch variants) and the smallest batch's (where the
    search also ranks by how a variant fills the device's SMs)."""
    from skel.validate.gate import spec_info
    from skel.validate.spec import Shape

    try:
        arg = _shape_arg(shape_set)
        shapes = [Shape.parse(s) for s in arg] if isinstance(arg, list) else spec_info(binding.spec).shapes(arg)
    except Exception:
        return (), ()
    if not shapes:
        return (), ()
    biggest = max(shapes, key=lambda s: sum(v for _, v in s.dims))
    batch = binding.batch or "N"
    smallest = min(shapes, key=lambda s: (dict(s.dims).get(batch, 0), sum(v for _, v in s.dims)))
    return biggest.dims, smallest.dims


def _shape_arg(shapes: str):
    """A shape-set name ("decode") or comma-separated shape labels ("N64-T1-H32-HV32-K128-V128,...")."""
    if "," in shapes or "-" in shapes:
        return [s.strip() for s in shapes.split(",") if s.strip()]
    return shapes


def unified_diff(before: str, after: str, path) -> str:
    """A diff ``git apply`` takes from the repository root (``skel.rewriter.diffs``)."""
    from skel.rewriter.diffs import unified_diff as diff

    return diff(before, after, path)


def _gate(binding: TargetBinding, original: Path, candidate: Path, shapes, device: str, options: ApplyOptions,
          remote=None, **kwargs):
    """The gate as `skel apply` calls it: the target's spec and launcher, numerics required, the run's time limit;
    with ``remote`` (remote_gate.RemoteGate) as a Ray task, which uses its cluster's roofline rates."""
    from skel.validate.gate import validate

    if remote is not None:
        return remote.validate(remote.job(original, candidate, binding.spec, binding.entry, shapes, device,
                                          options.time_limit, timed=kwargs.get("bench") is not False))
    return validate(original, candidate, spec=binding.spec, entry=binding.entry, shapes=shapes, device=device,
                    time_limit=options.time_limit, require="correct", **kwargs)


def _judge(cand: Candidate, cand_path: Path, binding: TargetBinding, target: Path, shape_set: str,
           device: str, diff: str, options: ApplyOptions, machine=None):
    """The gate's verdict on one candidate, and the machine rates its roofline used (``machine`` when given,
    else what the worker measured; None when nothing was timed)."""
    from skel.validate.gate import GateInputError

    try:
        result = _gate(binding, target, cand_path, _shape_arg(shape_set), device, options, machine=machine)
    except GateInputError as exc:
        result = exc
    return _outcome(cand, cand_path, result, device, diff), getattr(result, "machine", None) or machine


def _outcome(cand: Candidate, cand_path: Path, result, device: str, diff: str) -> CandidateOutcome:
    """The candidate's outcome from the gate's result (or the GateInputError it raised)."""
    from skel.validate.gate import GateInputError

    if isinstance(result, GateInputError):
        return CandidateOutcome(cand.skeletons, cand.label, False, None, f"gate could not run: {result}",
                                cand.unsafe, diff, cand.params, None, str(cand_path))
    numerics = all(s.numerics is not None and s.numerics.passed for s in result.shapes)
    if result.error:
        reason = f"gate error: {result.error}"
    elif not numerics:
        reason = "rejected: " + "; ".join(result.reasons[:3])
    elif device != "cuda":
        reason = "numerics passed; performance not measured (no GPU)"
    else:
        faster, slower = result.faster_at, result.slower_at
        reason = f"numerics passed; faster at {len(faster)}, slower at {len(slower)} of {len(result.shapes)} shapes"
    return CandidateOutcome(cand.skeletons, cand.label, False, numerics, reason, cand.unsafe, diff, cand.params,
                            result.to_dict(), str(cand_path))


def _judge_remote(remote, numbered, stage, binding: TargetBinding, target: Path, shape_set: str, device: str,
                  options: ApplyOptions, progress: Progress) -> list[CandidateOutcome]:
    """A round's candidates staged here, then judged all at once as Ray tasks (``remote``), in order."""
    staged = [stage(*n) for n in numbered]
    out: list[CandidateOutcome | None] = [decided for _, _, _, decided, _ in staged]
    todo = [k for k, o in enumerate(out) if o is None]
    jobs = [remote.job(target, staged[k][2], binding.spec, binding.entry, _shape_arg(shape_set), device,
                       options.time_limit) for k in todo]
    for k in todo:
        progress(f"[{numbered[k][2]}] gate (Ray task): {staged[k][0].label}")
    started = time.monotonic()
    for j, result in remote.validate_many(jobs):
        k = todo[j]
        cand, diff, cand_path, _, restored = staged[k]
        out[k] = _left_out(_outcome(cand, cand_path, result, device, diff), restored, binding.entry)
        progress(f"[{numbered[k][2]}] {out[k].reason} ({time.monotonic() - started:.0f} s since the round began)")
    return out


def _left_out(outcome: CandidateOutcome, restored: tuple[str, ...], entry: str) -> CandidateOutcome:
    """The outcome, saying which of the candidate's changes were restored (its entry never runs them)."""
    if not restored:
        return outcome
    return dataclasses.replace(outcome, reason=f"{outcome.reason} (its changes to {', '.join(restored)},"
                                               f" which {entry} never runs, left out)")


def _runoff(binding: TargetBinding, device: str, options: ApplyOptions, progress: Progress, machine, remote=None):
    """select.choose_winners' head-to-head: the challenger's file judged by the gate with the leader's file as
    the original, on the bucket's shapes, in one worker; ``machine()`` the run's roofline rates."""
    from skel.pipeline.select import settle
    from skel.validate.gate import GateInputError

    def run(bucket: str, leader: CandidateOutcome, challenger: CandidateOutcome, shapes: list[str]):
        progress(f"run-off in {bucket}: {challenger.label} against {leader.label}")
        started = time.monotonic()
        try:
            result = _gate(binding, Path(leader.path), Path(challenger.path), shapes, device, options, remote,
                           machine=machine())
        except GateInputError as exc:
            return settle(bucket, leader, challenger, None, f"gate could not run: {exc}")
        if result.error or not result.accepted:
            why = f"gate error: {result.error}" if result.error else "; ".join(result.reasons[:2]) or "rejected"
            return settle(bucket, leader, challenger, None, why)
        r = settle(bucket, leader, challenger, result.to_dict())
        progress(f"run-off in {bucket}: {r.winner} ({r.why}; {time.monotonic() - started:.0f} s)")
        return r

    return run


def _write_output(path: Path, source: str, binding: TargetBinding, winners, outcomes, options,
                  check: Callable[[str], str | None] | None = None, encoding: str = "utf-8") -> tuple[Path, list[str]]:
    """Write the accepted kernel; a dispatch over several winners must itself pass ``check``."""
    from skel.pipeline.dispatch import build_dispatch

    from skel.pipeline.select import bucket_of

    labels = {o.label: o for o in outcomes}
    chosen = [(bucket, labels[o.label]) for bucket, o in winners]
    notes: list[str] = []
    best = max(chosen, key=lambda bo: sum(1 for _, o in chosen if o.label == bo[1].label))[1]
    text = read_written(best.path, encoding)
    # buckets timed where no candidate won keep the original there (it was as fast or faster)
    won = {b for b, _ in chosen}
    kept = sorted({bucket_of(s["shape"], binding.batch) for o in outcomes if o.gate for s in o.gate.get("shapes", ())
                   if s.get("perf")} - won)
    if len({o.label for _, o in chosen}) > 1 or kept:
        try:
            dispatch = build_dispatch(source, [(b, read_written(o.path, encoding)) for b, o in chosen]
                                      + [(b, source) for b in kept], binding)
            problem = check(dispatch) if check else None
        except ValueError as exc:
            dispatch, problem = None, str(exc)
        if problem:
            notes.append(f"the dispatch over the bucket winners was not usable ({problem}); "
                         f"wrote the single variant {best.label} instead")
        else:
            text = dispatch
            notes.append("the output dispatches on shape between " + ", ".join(
                [f"{o.label} ({b})" for b, o in chosen] + [f"the original ({b})" for b in kept])
                + "; the dispatch file itself passed the numerics gate")
    return _write_text(path, text, options, encoding), notes


def _dispatch_check(target: Path, binding: TargetBinding, shape_set: str, device: str, options: ApplyOptions,
                    work: Path, encoding: str = "utf-8", remote=None) -> Callable[[str], str | None]:
    """Numerics of an emitted dispatch file at every shape (no timing: its parts were timed)."""
    def check(text: str) -> str | None:
        cand = work / "dispatch.py"
        write_source(cand, text, encoding)
        result = _gate(binding, target, cand, _shape_arg(shape_set), device, options, remote, bench=False)
        return None if result.accepted else "; ".join(result.reasons[:2]) or "rejected"

    return check


def _backup_path(path: Path) -> Path:
    backup = path.with_name(path.name + ".orig")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.orig{n}")
        n += 1
    return backup


def _record(result: ApplyResult, binding: TargetBinding, source: str, catalog: Path | None) -> None:
    """Every candidate's per-shape verdict becomes evidence for its skeletons; so does every run-off, as the
    challenger's skeletons timed against the leader (metric "head-to-head speedup", verdicts "head-to-head ...",
    which the prompt's win and loss counts leave out: they compare two rewrites, not a rewrite and the original)."""
    from skel.pipeline.prompt import HEAD_TO_HEAD
    from skel.catalog.store import ValidationRun, open_catalog

    from skel.validate.environment import current
    from skel.validate.record import runs_from_gate

    source_hash = hashlib.sha256(source.encode()).hexdigest()
    env = result.environment or current(result.target, result.device, gpu=_gpu_name(result.device)).to_json()
    env_pairs = tuple((k, v) for k, v in env.items() if k not in ("gpu", "torch", "triton", "date") and v)
    kernel = f"{binding.family}:{Path(result.target).name}"
    runs = [run for cand in result.candidates
            for run in runs_from_gate(cand.gate, cand.skeletons, cand.label, kernel, source_hash, cand.reason, env)]
    by_label = {c.label: c for c in result.candidates}
    for r in result.runoffs:
        challenger, leader = by_label.get(r.challenger), by_label.get(r.leader)
        if challenger is None or leader is None:
            continue
        for shape, speedup, low, high, verdict in r.shapes:
            runs.append(ValidationRun(
                skeletons=tuple(challenger.skeletons), kernel=f"{binding.family}:{Path(result.target).name}",
                shape=shape, dtype=(leader.gate or {}).get("dtype", ""), metric=HEAD_TO_HEAD,
                verdict=f"head-to-head {verdict}", median=speedup, ci_low=low, ci_high=high, unit="x",
                gpu=_gpu_name(result.device), torch_version=_version("torch"), triton_version=_version("triton"),
                source_hash=source_hash, reason=f"{r.challenger} timed against {r.leader} in one judgement; kept "
                                                f"{r.winner}: {r.why}",
                extra=(("label", r.challenger), ("against", r.leader), ("kept", r.winner), *env_pairs),
            ))
    if not runs:
        return
    with open_catalog(catalog) as cat:
        with cat.transaction():
            for run in runs:
                cat.record_validation(run)


def _environment(target: Path, device: str, outcomes) -> dict:
    """Where the verdicts were measured (``validate.environment``): the GPU and driver as the gate's workers
    read them, versions, the target's commit and the date; reports and recorded runs carry it."""
    from skel.validate.environment import current

    machine = next((o.gate["machine"] for o in outcomes
                    if o.gate and isinstance(o.gate.get("machine"), dict) and o.gate["machine"].get("name")), {})
    return current(target, device, gpu=machine.get("name", ""), driver=machine.get("driver", "")).to_json()


def _gpu_name(device: str) -> str:
    if device != "cuda":
        return ""
    import torch

    return torch.cuda.get_device_name()


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""
