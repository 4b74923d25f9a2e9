"""`skel apply TARGET.py`: rewrite a kernel with the skeletons that apply, keep only validated wins."""
from __future__ import annotations

import sys
from pathlib import Path

from skel.commands.common import add_catalog, add_json, add_library, dims_arg, emit_json, load_user_library, positive_int
from skel.commands.console import add_verbosity, print_lines
from skel.commands.progress import StepProgress
from skel.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from skel.executor import add_executor_args, executor_from_args

DESCRIPTION = """\
Profile the target, find the skeletons whose conditions hold, generate candidates (each
skeleton alone, their composition along the skeleton graph, launch-config variants), and
judge every candidate with the gate: numerics against the original kernel and a float64
reference, then (GPU only) an interleaved CUDA-graph microbenchmark, and a second round that
composes the other skeletons on top of each shape bucket's winner. The best candidate per
shape bucket is accepted (candidates within 5 % of the best are timed against it head to head
first); if different candidates win in different buckets the output holds
all of them behind a dispatch on shape. The input is never overwritten unless --in-place
(which keeps a .orig backup). Without a GPU, numerics run in Triton's interpreter and
performance is reported as not measured: nothing is accepted.

With --executor ray [--address ADDR] (needs `pip install 'skel[ray]'`), every judgement (each candidate
against the original, each run-off, the dispatch check) is a Ray task holding one GPU (one CPU with --device
cpu): the same gate, with the original and the candidate in their own contained workers, judging a round's
candidates all at once; the roofline is measured once per GPU model; a judgement whose worker or node is lost is
re-run. The target, its spec and the report folder must be at the same path on every node.

Exit codes: 0 a rewrite was accepted and written; 1 nothing accepted (or dry run with
candidates); 2 usage or input error: a missing, unreadable, binary or undecodable target (Python
sources are decoded per PEP 263: a coding cookie is honoured), a folder, an empty file, a CUDA
file (apply rewrites Triton; skel match and skel mine read CUDA), a file over --max-bytes."""


def register(sub) -> None:
    p = sub.add_parser("apply", help="rewrite a kernel with validated skeletons", description=DESCRIPTION,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("target", type=Path, help="kernel file (a kernels/ target, FLA's decode files, or any file with --harness)")
    p.add_argument("-o", "--output", type=Path, help="where to write the accepted kernel (default TARGET.skel.py)")
    p.add_argument("--in-place", action="store_true", help="overwrite TARGET (a backup TARGET.orig is kept)")
    p.add_argument("--skeleton", action="append", default=[], metavar="CODE", help="only these skeletons (repeatable)")
    p.add_argument("--unsafe", action="store_true", help="allow unsafe rewrites (rounding or reduction order changes, or an assumption "
                   "static analysis cannot prove; each skeleton's docs say which)")
    p.add_argument("--dry-run", action="store_true", help="show the candidate diffs without running anything")
    p.add_argument("--shapes", help="shape set of the target's spec (default: ci on CPU, decode on GPU)")
    p.add_argument("--harness", type=Path, help="spec file (SPEC = TargetSpec(...)); default: the one inferred from"
                                                " the file's launcher (skel harness)")
    p.add_argument("--entry", metavar="NAME", help="without --harness: the launcher to judge (default: every launcher that reaches"
                   " kernels of its own, one stage each, the first forward one first)")
    p.add_argument("--variant", action="append", default=[], metavar="ARG",
                   help="without --harness: also pass this Optional argument / set this flag (repeatable)")
    p.add_argument("--dims", type=dims_arg, default={}, metavar="N=64,H=32",
                   help="without --harness: decode sizes for the inferred harness")
    p.add_argument("--device", metavar="cpu|cuda|cuda:N",
                   help="default: cuda when available; cuda:N judges on GPU N (the only one its workers see)")
    p.add_argument("--max-candidates", type=int, default=16,
                   help="candidates judged in the first round (on a GPU, a second round adds at most one per shape "
                   "bucket: the other skeletons composed on top of that bucket's winner, with its variants)")
    p.add_argument("--exhaustive", action="store_true", help="try every subset of the structural skeletons")
    p.add_argument("--report-dir", type=Path, help="default ./skel-report-<target stem>/")
    p.add_argument("--time-limit", type=float, default=300.0, help="seconds one candidate step may run")
    p.add_argument("--no-record", action="store_true", help="do not store verdicts in the catalog")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="N",
                   help="refuse a target larger than N bytes (default: $SKEL_MAX_BYTES, else 5000000)")
    p.add_argument("--preview", action="store_true",
                   help="also judge the catalog's preview candidates (SKP..., `skel mine --history/--variants`): "
                   "each alone, unsafe, through the same gate; their verdicts rank and admit them")
    add_json(p)
    add_verbosity(p)
    add_library(p)
    add_catalog(p)
    add_executor_args(p)
    p.set_defaults(func=cmd_apply)


def cmd_apply(args) -> int:
    from skel.device import select_device
    from skel.pipeline.apply import ApplyOptions, apply, read_target_source

    read_target_source(args.target, args.max_bytes)  # a UsageError naming the file unless it is a readable Triton source
    if args.in_place and args.output:
        raise UsageError("--in-place and --output exclude each other")
    if args.output and args.output.resolve() == args.target.resolve():
        raise UsageError(f"--output {args.output} is the target itself: use --in-place (which keeps a backup)")
    library = load_user_library(args)
    known = {s.code for s in library}
    unknown = [c for c in args.skeleton if c.upper() not in known]
    if args.preview and unknown:  # SKP... codes are the catalog's preview candidates: skel.pipeline.preview
        from skel.pipeline.preview import unknown_codes

        unknown = unknown_codes(unknown, known, args.catalog)
    if unknown:
        raise UsageError(f"unknown skeleton code(s): {', '.join(unknown)}")
    executor = executor_from_args(args.executor, args.address)
    if executor is not None and args.device and ":" in args.device:
        raise UsageError(f"--device {args.device} with --executor ray: Ray places each judgement on a GPU of its own; "
                         "pass --device cuda (or cpu)")
    device = select_device(args.device)
    options = ApplyOptions(
        target=args.target, output=args.output, in_place=args.in_place, skeletons=tuple(args.skeleton),
        allow_unsafe=args.unsafe, dry_run=args.dry_run, shapes=args.shapes, harness=args.harness,
        device=device, max_candidates=args.max_candidates, exhaustive=args.exhaustive,
        report_dir=args.report_dir, time_limit=args.time_limit, catalog=args.catalog, record=not args.no_record,
        preview=args.preview, max_bytes=args.max_bytes, entry=args.entry, variants=tuple(args.variant),
        dims=tuple(args.dims.items()), executor=executor,
    )
    if args.harness and (args.entry or args.variant or args.dims):
        raise UsageError("--entry, --variant and --dims shape the inferred harness: leave them out with --harness")
    progress = StepProgress(sys.stderr, "skel apply", quiet=args.quiet)
    try:
        result = apply(options, library, progress)
    finally:
        progress.close()
    if args.json:
        data = result.to_json()
        data["candidates"] = [
            {"skeletons": c["skeletons"], "accepted": c["accepted"], "reason": c["reason"], "label": c["label"],
             "numerics_passed": c["numerics_passed"], "params": c["params"], "unsafe": c["unsafe"], "diff": c["diff"]}
            for c in data["candidates"]
        ]
        emit_json(data)
    else:
        _print_summary(result, args.dry_run, quiet=args.quiet)
    return EXIT_OK if result.output else EXIT_FINDINGS


def _print_summary(result, dry_run: bool, quiet: bool = False) -> None:
    """The verdicts; a dry run's diffs, each as `git apply` takes it from the repository root. ``quiet``: a dry
    run prints its diffs only (`skel apply K --dry-run -q --skeleton SK001 | git apply`), a run its output."""
    if quiet:
        for c in result.candidates:
            if dry_run and c.diff:
                print(c.diff, end="")
        if not dry_run and result.output:
            print(result.output)
        return
    lines = []
    for c in result.candidates:
        mark = "ACCEPTED" if c.accepted else ("dry-run " if dry_run else "        ")
        lines.append((f"{mark} {c.label}: {c.reason}", "accepted" if c.accepted else ""))
        if dry_run:
            lines.extend((line, "") for line in c.diff.rstrip("\n").split("\n"))
    for skeletons, reason in result.skipped:
        lines.append((f"skipped  {'+'.join(skeletons)}: {reason}", "dim"))
    for note in result.notes:
        lines.append((f"note: {note}", "dim"))
    print_lines(lines)
    print(f"output: {result.output or 'none'}")
    print(f"report: {result.report or 'none (dry run: nothing written)'}")
