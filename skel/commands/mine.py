"""`skel mine PATH...`: profile kernels, detect skeletons, record findings in the catalog."""
from __future__ import annotations

import argparse
import os
import sys
import time

from skel.commands.common import add_catalog, add_json, emit_json
from skel.errors import EXIT_OK, UsageError

EPILOG = """\
What is mined: .py files that mention triton and jit (Triton kernels) and CUDA/C++
files (.cu .cuh .cuhpp .h .hpp .cc .cpp ...) that contain __global__. Directories are
walked recursively; hidden folders (.git, .venv), __pycache__ and virtual environments
are skipped; symbolic links are followed, loops are reported and not entered. Code is
parsed, never imported or run.

Incremental: a file whose content (and the miner itself) is unchanged since the last run
is not parsed again; its recorded findings are reused. --force re-parses everything.

Bad input (syntax errors, non-UTF-8 or binary files, empty files named on the command
line, files over --max-bytes, unreadable files, broken links, symlink loops, paths that
do not exist) is listed under errors with a reason; the run goes on.

Exit status: 0 when the run completes, whatever it found or could not read (mining is
not a check: see `skel match` for a verdict on one file); 2 for a usage error or an
unusable catalog.

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
    p.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                   help="worker processes for parsing (default: the number of CPUs)")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    p.add_argument("--force", action="store_true", help="re-parse files even when unchanged since the last run")
    p.add_argument("--max-bytes", type=_positive_int, default=None, metavar="N",
                   help="skip files larger than N bytes (default: 5000000)")
    p.set_defaults(func=handler)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def handler(args) -> int:
    from skel.miner.mine import MAX_BYTES, mine

    if not args.paths:
        raise UsageError("skel mine: give at least one PATH")
    progress = None if args.no_progress else Progress(sys.stderr)
    try:
        report = mine(args.paths, catalog=args.catalog, jobs=args.jobs, force=args.force,
                      max_bytes=args.max_bytes or MAX_BYTES, progress=progress)
    finally:
        if progress:
            progress.close()
    if args.json:
        emit_json(report.to_json())
    else:
        for path, error in report.errors:
            print(f"{path}: error: {error}")
        for line in tally(report):
            print(line)
    print(report.summary(), file=sys.stderr)
    return EXIT_OK


def tally(report) -> list[str]:
    """One line per skeleton: how many instances and opportunities were found."""
    counts: dict[str, list[int]] = {}
    for f in report.instances:
        counts.setdefault(f.skeleton, [0, 0])[0] += 1
    for f in report.opportunities:
        counts.setdefault(f.skeleton, [0, 0])[1] += 1
    return [f"{code}: {i} instances, {o} opportunities" for code, (i, o) in sorted(counts.items())]


class Progress:
    """A one-line bar when stderr is a terminal; otherwise a plain line every few seconds."""

    def __init__(self, stream, every_s: float = 5.0):
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.every_s = every_s
        self.last = time.monotonic()
        self.drawn = False

    def __call__(self, done: int, total: int, path: str) -> None:
        now = time.monotonic()
        if self.tty:
            if now - self.last < 0.05 and done < total:
                return
            width = 30
            filled = int(width * done / max(total, 1))
            name = os.path.basename(path)[:40]
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {name:<40}")
            self.stream.flush()
            self.drawn = True
        elif now - self.last >= self.every_s:
            self.stream.write(f"skel mine: {done}/{total} files\n")
            self.stream.flush()
        else:
            return
        self.last = now

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()
