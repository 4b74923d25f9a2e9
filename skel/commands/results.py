"""`skel results export`: the catalog's verdicts as a long table (csv, json, parquet)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skel.commands.common import add_catalog
from skel.errors import EXIT_OK, UsageError

EPILOG = """\
One row per target x candidate x shape x dtype x metric, from every `skel apply` and `skel validate`
recorded in the catalog: target, candidate, skeletons, shape (and its dims as dim_N, dim_T, ...),
dtype, metric (speedup, numerics, head-to-head), verdict, median with its 95 % interval (ci_low,
ci_high; empty where nothing was measured, e.g. on a CPU), baseline/candidate microseconds and % of
roofline, and where it was measured: gpu, driver, cuda, torch, triton, python, skel, date and the
target's git commit.

Formats: csv (default) and json need nothing; parquet needs pyarrow (not a dependency of skel:
`pip install pyarrow`; without it the command says so and exits 2).

    skel results export --format csv -o results.csv
    python -c "import pandas as pd; print(pd.read_csv('results.csv').pivot_table('median', 'dim_N', 'candidate'))"
"""


def register(sub) -> None:
    p = sub.add_parser("results", help="the catalog's verdicts as a table: skel results export",
                       description="Results recorded in the catalog.")
    verbs = p.add_subparsers(dest="results_verb", metavar="ACTION", required=True)
    e = verbs.add_parser("export", help="write every recorded verdict as one long table (csv, json, parquet)",
                         description="Write every recorded verdict as one long table.", epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--format", choices=("csv", "json", "parquet"), default=None, help="default: csv")
    e.add_argument("--json", action="store_true", help="the same as --format json")
    e.add_argument("-o", "--output", type=Path, metavar="FILE", help="where to write (default: stdout; parquet needs -o)")
    e.add_argument("--force", action="store_true", help="overwrite an existing --output file")
    e.add_argument("--skeleton", metavar="CODE", help="only runs of rewrites that include this skeleton")
    e.add_argument("--target", metavar="NAME", help="only runs on this target (the table's `target` column)")
    add_catalog(e)
    e.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from skel.catalog import results, store

    if args.json and args.format not in (None, "json"):
        raise UsageError(f"--json and --format {args.format} exclude each other")
    args.format = "json" if args.json else (args.format or "csv")
    if args.format == "parquet" and args.output is None:
        raise UsageError("--format parquet writes a binary file: give -o FILE")
    if args.output is not None and args.output.exists() and not args.force:
        raise UsageError(f"{args.output} exists: pass --force to overwrite it")
    path = store.resolve_catalog_path(args.catalog)
    if not path.exists():
        raise UsageError(f"{path}: no catalog here (run `skel apply` or `skel validate` first, or pass --catalog)")
    with store.open_catalog(path) as cat:
        runs = cat.validation_runs(skeleton=args.skeleton.upper() if args.skeleton else None, kernel=args.target)
    table = results.rows(runs)
    if args.format == "parquet":
        results.write_parquet(table, args.output)
    else:
        text = results.to_csv(table) if args.format == "csv" else results.to_json(table)
        if args.output is None:
            sys.stdout.write(text)
        else:
            args.output.write_text(text, encoding="utf-8")
    if args.output is not None:
        print(f"skel: wrote {len(table)} rows to {args.output}", file=sys.stderr)
    return EXIT_OK
