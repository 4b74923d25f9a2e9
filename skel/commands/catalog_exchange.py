"""`skel catalog export` and `skel catalog import|merge`: catalogs of many machines merged into one
(``skel.catalog.exchange``). Registered by ``skel.commands.catalog``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skel.commands.common import add_catalog, add_json, emit_json, positive_int
from skel.errors import EXIT_OK, UsageError

EXPORT = """\
Write the catalog's records as JSON Lines: a header (format, schema version, this catalog, host and
time, and the catalogs imported into it), then every mined file with its kernels and findings,
every verdict, the history edits and repositories, and the promoted candidates, each kind in the
order of its key. Two catalogs with the same records export the same lines after the header.
Another machine merges it with `skel catalog import FILE`."""

IMPORT = """\
Merge catalogs into this one (--catalog, else $SKEL_CATALOG or the default). Each SOURCE is an export
(`skel catalog export`) or a catalog file itself (read only, never changed). The merge is
deterministic, whatever the order of the sources: a mined file is keyed by its path and the record
mined last wins, with its own kernels and findings (never added twice); a verdict is keyed by its
content, so evidence already here is not added again; history edits are keyed by repository, commit,
file and kernel, and the preview candidates are distilled again from all of them (promotions kept).
Records keep their provenance (paths, repositories, commits, GPU, versions, times); each import is
noted in the catalog with its origin, and later exports carry that note. Importing the same export
twice changes nothing. `merge` is the same verb.

Exit codes: 0 merged; 2 a SOURCE is missing, not an export or catalog, or of a newer format."""


def add_parser(verbs) -> None:
    p = verbs.add_parser("export", help="write the catalog as JSON Lines for another machine to merge",
                         description=EXPORT, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="where to write (default: stdout)")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the export is JSON Lines already")
    add_catalog(p)
    p.set_defaults(func=cmd_export)

    p = verbs.add_parser("import", aliases=["merge"], help="merge exports or catalog files into this catalog",
                         description=IMPORT, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="export files or catalog files")
    p.add_argument("--min-support", type=positive_int, default=None, metavar="N",
                   help="when history edits arrive: a candidate needs N occurrences (default 2)")
    add_json(p)
    add_catalog(p)
    p.set_defaults(func=cmd_import)


def cmd_export(args) -> int:
    from skel.catalog.store import open_catalog

    with open_catalog(args.catalog) as cat:
        if args.output:
            tmp = args.output.with_name(args.output.name + ".part")
            with open(tmp, "w", encoding="utf-8") as fh:
                for line in cat.export_lines():
                    fh.write(line + "\n")
            tmp.replace(args.output)
            print(f"exported {cat.path} to {args.output}", file=sys.stderr)
        else:
            for line in cat.export_lines():
                sys.stdout.write(line + "\n")
    return EXIT_OK


def cmd_import(args) -> int:
    import functools

    from skel.catalog.exchange import ExchangeError, read_export
    from skel.catalog.store import open_catalog, resolve_catalog_path
    from skel.miner.history_cluster import distill
    from skel.miner.history_patterns import MIN_SUPPORT

    target = resolve_catalog_path(args.catalog).resolve()
    for src in args.sources:
        if not src.is_file():
            raise UsageError(f"{src}: no such file")
        if src.resolve() == target:
            raise UsageError(f"{src}: is the catalog being merged into")
    reports = []
    redistill = functools.partial(distill, min_support=args.min_support or MIN_SUPPORT)
    with open_catalog(args.catalog) as cat:
        for src in args.sources:
            try:
                reports.append(cat.import_records(read_export(src), str(src.resolve()), redistill))
            except ExchangeError as exc:
                raise UsageError(str(exc)) from None
    if args.json:
        emit_json([r.to_json() for r in reports])
    else:
        for r in reports:
            print(r.summary())
    return EXIT_OK
