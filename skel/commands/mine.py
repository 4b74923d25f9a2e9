"""`skel mine PATH...`: profile kernels, detect skeletons, record findings in the catalog."""
from __future__ import annotations

import argparse
import os
import sys

from skel.commands.common import add_catalog, add_json, emit_json, positive_int
from skel.commands.console import add_verbosity
from skel.commands.progress import TallyProgress
from skel.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from skel.executor import add_executor_args, executor_from_args

EPILOG = """\
What is mined: .py files that mention triton and jit (Triton kernels) and CUDA/C++
files (.cu .cuh .cuhpp .h .hpp .cc .cpp ...) that contain __global__. Directories are
walked recursively; hidden folders (.git, .venv), __pycache__ and virtual environments
are skipped; symbolic links are followed, loops are reported and not entered. Code is
parsed, never imported or run.

Incremental: a file whose content (and the miner itself) is unchanged since the last run
is not parsed again; its recorded findings are reused. --force re-parses everything.

Python files are decoded as Python decodes them (PEP 263: a coding cookie such as
`# -*- coding: latin-1 -*-` is honoured), CUDA files as UTF-8. Bad input (syntax errors,
undecodable or binary files, empty files named on the command line, files over
--max-bytes or $SKEL_MAX_BYTES (default 5 MB; a larger file is never read), unreadable
files and folders, broken links, symlink loops, paths that do not exist) is listed under
errors with a reason; the run goes on. Workers die with skel mine, even when it is killed
with SIGKILL.

Exit status: 0 when every input was read (whatever it found: mining is not a check;
`skel match` gives a verdict on one file); 1 when some inputs could not be mined: each is
listed with its reason, and everything else was mined and recorded; 2 for a usage error
or an unusable catalog. With --history, files of past commits that do not parse are
listed but leave the status at 0: they are history, not input.

History (--history): PATH must be a git checkout or a bare repository. Every non-merge
commit that changed a Triton kernel file or a CUDA/C++ file with __global__/__device__
functions (under --under, if given) is diffed at the syntax-tree level, function by
function (formatting, consistent renames and moved code are not edits; CUDA is read with
tree-sitter and mirrored in Python syntax, e.g. `x * rsqrtf($2)`); recurring edits are generalised into patterns with holes and stored in
the catalog as preview candidate skeletons (`skel catalog list --status preview`). The
catalog remembers the last mined commit per repository: the next run walks only newer
commits. Each commit is recorded as it is walked, so a run that is stopped (even killed)
resumes where it stopped on the next run. Progress (commits done/total, rate, time left)
goes to stderr: redrawn on a terminal, a line every 10 s otherwise, none with --no-progress.
Plain mining (without --history) never reads history.

Variants (--variants): each PATH (file or folder) is one tree, e.g. an upstream library,
one of its backends, a vendored copy. The @jit and __global__ kernels of later PATHs are aligned with
those of earlier PATHs that implement the same op (same or similar name once role and
backend words such as kernel/npu/ascend are dropped, the same parameters modulo renames,
similar statement structure) and each aligned pair is diffed like a commit, from the
earlier PATH (the reference) to the later one (the variant). The edits join the history
edits in the same clustering; their provenance is "variant pair: A:line vs B:line", and
one pair is enough support. Unchanged files are not re-mined.

Ray (--executor ray [--address ADDR], needs `pip install 'skel[ray]'`): each file to parse is a Ray task
(--jobs is then unused); this process still walks and reads the files, sends each file's text with its task
and is the only writer of the catalog. A task whose worker or node dies is re-run (3 retries); one that still
fails is listed under errors. Progress shows tasks done, running, queued and failed. With --history, runs of
32 consecutive commits are the tasks (the repository must be at the same path on every node) and are recorded
in commit order. Without --address: $RAY_ADDRESS, else a local cluster.

--json prints {"files", "kernels", "instances": [{"skeleton", "path", "line", "kernel"}],
"opportunities": [...same keys...], "errors": [{"path", "error"}]}, where files counts the
source files looked at and kernels the kernels profiled (jit helper functions excluded)."""


def register(sub) -> None:
    p = sub.add_parser(
        "mine",
        help="mine kernels under paths for skeleton instances and opportunities",
        description="Profile every Triton and CUDA kernel under PATH... (files or directories), run the "
        "skeleton detectors, and record kernels and findings in the catalog.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (git checkouts included)")
    add_json(p)
    add_catalog(p)
    p.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                   help="worker processes for parsing (default: the number of CPUs)")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    add_verbosity(p)
    p.add_argument("--force", action="store_true", help="re-parse files even when unchanged since the last run")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="N",
                   help="skip files larger than N bytes (default: $SKEL_MAX_BYTES, else 5000000)")
    h = p.add_argument_group("history and variant mining")
    h.add_argument("--history", action="store_true",
                   help="mine the git history of PATH (a checkout or bare repository) into candidate skeletons")
    h.add_argument("--variants", action="store_true",
                   help="align kernels implementing the same op across PATHs (reference first) and mine their differences")
    h.add_argument("--under", action="append", default=[], metavar="DIR",
                   help="only kernel files under DIR (relative to the repository top; repeatable)")
    h.add_argument("--max-commits", type=positive_int, default=None, metavar="N",
                   help="on the first run, only the newest N commits")
    h.add_argument("--min-support", type=positive_int, default=2, metavar="N",
                   help="a pattern needs N distinct (commit, kernel) occurrences (default 2)")
    h.add_argument("--rev", default="HEAD", help="history up to this revision (default HEAD)")
    add_executor_args(p)
    p.set_defaults(func=handler)


def handler(args) -> int:
    from skel.miner.mine import mine

    if not args.paths:
        raise UsageError("skel mine: give at least one PATH")
    if args.history and args.variants:
        raise UsageError("skel mine: --history and --variants exclude each other (run them one after the other)")
    executor = executor_from_args(args.executor, args.address)
    if executor is not None and args.variants:
        raise UsageError("skel mine --variants runs on this machine only (leave out --executor ray)")
    if args.history:
        return _history(args, executor)
    if args.variants:
        return _variants(args)
    quiet = args.no_progress or args.quiet
    progress = None if quiet or executor else FileProgress(sys.stderr, verbose=args.verbose)
    tasks = None if quiet or not executor else TallyProgress(sys.stderr, "skel mine --executor ray", "files")
    try:
        report = mine(args.paths, catalog=args.catalog, jobs=args.jobs, force=args.force,
                      max_bytes=args.max_bytes, progress=progress, executor=executor, on_tally=tasks)
    finally:
        for shown in (progress, tasks):
            if shown:
                shown.close()
    if args.json:
        emit_json(report.to_json())
    else:
        for path, error in report.errors:
            print(f"{path}: error: {error}")
        if not args.quiet:
            for line in tally(report):
                print(line)
    sys.stdout.flush()
    if not args.quiet:
        print(report.summary(), file=sys.stderr)
    return EXIT_FINDINGS if report.errors else EXIT_OK


def _history(args, executor=None) -> int:
    from skel.miner.history import mine_history
    from skel.miner.history_git import GitError

    from skel.commands.progress import RateProgress

    reports = []
    for path in args.paths:
        progress = None if args.no_progress or args.quiet else RateProgress(sys.stderr, f"skel mine --history {path}",
                                                                            "commits")
        tasks = None if args.no_progress or args.quiet or not executor else TallyProgress(sys.stderr, f"Ray tasks for {path}",
                                                                            "chunks")
        try:
            reports.append(mine_history(path, catalog=args.catalog, paths=tuple(args.under), rev=args.rev,
                                        max_commits=args.max_commits, min_support=args.min_support, force=args.force,
                                        progress=progress, executor=executor, on_tally=tasks))
        except GitError as exc:
            raise UsageError(f"skel mine --history: {exc}") from None
        finally:
            for shown in (progress, tasks):
                if shown:
                    shown.close()
    if args.json:
        emit_json([r.to_json() for r in reports])
        return EXIT_OK
    for r in reports:
        for commit, path, error in r.errors:
            print(f"{path}@{commit[:10]}: error: {error}")
        for c in r.candidates[:20]:
            d = c.to_json()
            first = d["edits"][0]
            print(f"{c.code}  score {d['score']:g}  {d['kernels']} kernels, {d['commits']} commits: "
                  f"{first['before'] or '(insert)'} => {first['after'] or '(delete)'}"
                  + (f" (+{len(d['edits']) - 1} edits)" if len(d["edits"]) > 1 else ""))
        print(r.summary(), file=sys.stderr)
    return EXIT_OK


def _variants(args) -> int:
    from skel.miner.variants import mine_variants

    if len(args.paths) < 2:
        raise UsageError("skel mine --variants: give two or more PATHs (the reference first, then its variants)")
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        raise UsageError(f"skel mine --variants: {missing[0]}: no such file or directory")
    report = mine_variants(args.paths, catalog=args.catalog, min_support=args.min_support, force=args.force)
    status = EXIT_FINDINGS if report.errors else EXIT_OK  # a file the user named could not be mined
    if args.json:
        emit_json(report.to_json())
        return status
    for path, error in report.errors:
        print(f"{path}: error: {error}")
    for p in report.pairs:
        print(f"pair  {p.reference.where} {p.reference.name}  vs  {p.variant.where} {p.variant.name}: {p.edits} edits")
    variant = [c for c in report.candidates
               if any(o["message"].startswith("variant pair:") for o in c.to_json()["occurrences"])]
    for c in variant[:20]:
        d = c.to_json()
        first = d["edits"][0]
        print(f"{c.code}  score {d['score']:g}: {first['before'] or '(insert)'} => {first['after'] or '(delete)'}"
              + (f" (+{len(d['edits']) - 1} edits)" if len(d["edits"]) > 1 else ""))
    print(report.summary(), file=sys.stderr)
    return status


def tally(report) -> list[str]:
    """One line per skeleton: how many instances and opportunities were found."""
    counts: dict[str, list[int]] = {}
    for f in report.instances:
        counts.setdefault(f.skeleton, [0, 0])[0] += 1
    for f in report.opportunities:
        counts.setdefault(f.skeleton, [0, 0])[1] += 1
    return [f"{code}: {i} instances, {o} opportunities" for code, (i, o) in sorted(counts.items())]


class FileProgress:
    """Files mined, with rate and time left (``RateProgress``); ``verbose``: also one line per file."""

    def __init__(self, stream, verbose: bool = False):
        from skel.commands.progress import RateProgress

        self.rate = RateProgress(stream, "skel mine", "files", every_s=5.0)
        self.verbose = verbose

    def __call__(self, done: int, total: int, path: str) -> None:
        if self.verbose and path:
            self.rate.log(f"skel mine: {done}/{total} {path}")
        self.rate(done, total, os.path.basename(path)[:40])

    def close(self) -> None:
        self.rate.close()
