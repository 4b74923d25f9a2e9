"""`skel match PATH...`: the skeletons that apply to each kernel of some files and folders, and why the others do not."""
from __future__ import annotations

import argparse
import sys

from skel.commands.common import add_catalog, add_json, add_library, emit_json, load_user_library, positive_int
from skel.commands.console import add_verbosity, print_lines
from skel.commands.match_formats import FORMATS, render_github, render_sarif, render_text
from skel.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE

EPILOG = """\
For every kernel in each PATH (a Triton .py file, a CUDA source, or a folder, walked for both;
files without kernels are passed over), each skeleton of the library is evaluated: it applies
when all of its conditions hold, and the conditions are listed with what the detector saw;
otherwise the first condition that fails is given, in words. Files are parsed, never imported
or run.

Which skeletons: --skeleton CODE (repeatable; globs such as 'SKP*'), --select and --ignore with
codes or prefixes (SK00, SK00*), and [tool.skel] select / ignore / exclude in pyproject.toml.
--ignore wins over --select. A suppression comment in the kernel silences a finding:
    x = a / tl.sqrt(s)  # skel: ignore[SK001] the paper's formula, kept on purpose
alone on a line it covers the next line; on a kernel's def or decorator lines, the whole kernel;
'# skel: ignore-file[SK002] reason' the file; '# noqa: SK001' is understood too.

Formats (--format): text (default), json (= --json), sarif (SARIF 2.1.0, for code scanning; paths
relative to the working directory, run it from the repository root), github (workflow commands:
::warning annotations on the pull request, ::error for files that could not be read).

Exit status: 0 when no skeleton applies to any kernel (or no file has a kernel), 1 when at least
one unsuppressed skeleton applies (there is something to do), 2 when an input could not be matched
(missing, unreadable, binary or undecodable file, a FIFO or device, a file over --max-bytes, syntax
error; the other files are still matched and reported) or for a usage error (unknown --skeleton).
Python files are decoded per PEP 263 (a coding cookie is honoured); CUDA files as UTF-8.

--json prints {"files": [PATH], "kernels": [{"path", "name", "line", "language", "applicable":
[{"skeleton", "conditions": [{"id", "detail"}], "sites", "used_at", "rewrite"}], "not_applicable":
[{"skeleton", "reason", "condition"}], "suppressed": [{"skeleton", "line", "reason", "sites"}]}],
"errors": [{"path", "line", "error"}], "notes": [...], "skeletons": [CODE]}."""


def register(sub) -> None:
    p = sub.add_parser(
        "match",
        help="which skeletons apply to the kernels of some files or folders, and why not the others",
        description="Evaluate every skeleton's conditions on each kernel under PATH...",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="kernel files (.py with Triton kernels, or CUDA) or folders")
    p.add_argument("--skeleton", metavar="CODE", action="append", default=[],
                   help="evaluate only this skeleton (e.g. SK001; a glob such as 'SK00*'); repeatable")
    p.add_argument("--select", metavar="CODES", action="append", default=[],
                   help="evaluate only codes matching these comma-separated codes or prefixes (SK00, SK00*); repeatable")
    p.add_argument("--ignore", metavar="CODES", action="append", default=[],
                   help="never evaluate codes matching these comma-separated codes or prefixes; repeatable")
    p.add_argument("--no-suppress", action="store_true",
                   help="report findings even where a '# skel: ignore[...]' comment silences them")
    p.add_argument("--format", choices=FORMATS, default=None, help="output format (default: text)")
    p.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                   help="worker processes for many files (default: every core; 1: in this process)")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="N",
                   help="refuse a file larger than N bytes (default: $SKEL_MAX_BYTES, else 5000000)")
    add_json(p)
    add_verbosity(p)
    add_catalog(p, used=False)
    add_library(p)
    p.set_defaults(func=handler)


def split_codes(values: list[str]) -> tuple[str, ...]:
    return tuple(c.strip() for v in values for c in v.split(",") if c.strip())


def selection_from(args, config):
    from skel.catalog.selection import Selection

    select = split_codes(args.select) or tuple(config.select)
    return Selection(skeletons=tuple(args.skeleton), select=select,
                     ignore=(*config.ignore, *split_codes(args.ignore)))


def handler(args) -> int:
    from skel.catalog.config import load_config
    from skel.miner.match import match_paths

    fmt = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        from skel.errors import UsageError

        raise UsageError(f"--json and --format {fmt} exclude each other")
    config = load_config()
    library = load_user_library(args)
    progress = None
    if not args.quiet and fmt in ("text", "github"):
        from skel.commands.progress import RateProgress

        progress = RateProgress(sys.stderr, "skel match", "files")
    try:
        run = match_paths(args.paths, library=library, selection=selection_from(args, config),
                          max_bytes=args.max_bytes, config=config, suppress=not args.no_suppress,
                          on_file=progress, jobs=args.jobs)
    finally:
        if progress is not None:
            progress.close()
    if fmt == "json":
        emit_json(run.to_json())
    elif fmt == "sarif":
        from skel.cli import _version

        emit_json(render_sarif(run, _version()))
    elif fmt == "github":
        for line in render_github(run):
            print(line)
    else:
        print_lines(render_text(run, quiet=args.quiet, verbose=args.verbose))
    if fmt in ("text", "json"):
        for e in run.errors:
            print(f"skel: error: {e}", file=sys.stderr)
    if run.errors:
        return EXIT_USAGE
    return EXIT_FINDINGS if run.any_applicable else EXIT_OK


def render(report) -> str:
    """One file's report as text (what ``skel match FILE`` prints)."""
    from skel.miner.match import MatchRun

    return "\n".join(t for t, _ in render_text(MatchRun((report,), ())))
