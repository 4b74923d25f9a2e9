"""`skel match TARGET`: the skeletons that apply to each kernel of one file, and why the others do not."""
from __future__ import annotations

import argparse

from skel.commands.common import add_json, add_library, emit_json, load_user_library, positive_int
from skel.errors import EXIT_FINDINGS, EXIT_OK

EPILOG = """\
For every kernel in TARGET (a Triton .py file or a CUDA source), each skeleton of the
library is evaluated: it applies when all of its conditions hold, and the conditions are
listed with what the detector saw; otherwise the first condition that fails is given,
in words. The file is parsed, never imported or run.

Exit status: 0 when no skeleton applies to any kernel (or the file has no kernel),
1 when at least one skeleton applies (there is something to do), 2 for an input error
(missing, unreadable, binary or undecodable file, a FIFO or device, a file over --max-bytes,
syntax error, unknown --skeleton). Python files are decoded per PEP 263 (a coding cookie is
honoured); CUDA files as UTF-8.

--json prints {"kernels": [{"name", "line", "language", "applicable": [{"skeleton",
"conditions": [{"id", "detail"}], "sites", "used_at"}], "not_applicable": [{"skeleton",
"reason", "condition"}]}]}."""


def register(sub) -> None:
    p = sub.add_parser(
        "match",
        help="which skeletons apply to the kernels of one file, and why not the others",
        description="Evaluate every skeleton's conditions on each kernel of TARGET.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="a kernel file (.py with Triton kernels, or CUDA)")
    p.add_argument("--skeleton", metavar="CODE", help="evaluate only this skeleton (e.g. SK001)")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="N",
                   help="refuse a file larger than N bytes (default: $SKEL_MAX_BYTES, else 5000000)")
    add_json(p)
    add_library(p)
    p.set_defaults(func=handler)


def handler(args) -> int:
    from skel.miner.match import match_file

    library = load_user_library(args)
    report = match_file(args.target, skeleton=args.skeleton, library=library, max_bytes=args.max_bytes)
    if args.json:
        emit_json(report.to_json())
    else:
        print(render(report))
    return EXIT_FINDINGS if report.any_applicable else EXIT_OK


def render(report) -> str:
    if not report.kernels:
        return f"{report.path}: no kernels found"
    out = []
    for k in report.kernels:
        out.append(f"{report.path}:{k.line}: kernel {k.name} ({k.language})")
        if not k.applicable:
            out.append("  applies: none")
        for a in k.applicable:
            where = f" at line{'s' if len(a.sites) > 1 else ''} {', '.join(map(str, a.sites))}" if a.sites else ""
            used = f" (already used at {', '.join(map(str, a.used_at))})" if a.used_at else ""
            manual = "" if a.rewrite else " (no automatic rewrite: apply the method in `skel catalog show` by hand)"
            out.append(f"  applies: {a.skeleton}{where}{used}{manual}")
            for cid, detail in a.conditions:
                out.append(f"    + {cid}: {detail}")
        for n in k.not_applicable:
            out.append(f"  not {n.skeleton}: {n.reason}")
    return "\n".join(out)
