"""`skel catalog repair`: salvage what still reads from a damaged catalog (``skel.catalog.repair``).

Registered by ``skel.commands.catalog`` (it adds this action to its sub-parsers).
"""
from __future__ import annotations

import argparse

from skel.commands.common import add_catalog, add_json, emit_json
from skel.errors import EXIT_OK

DESCRIPTION = """\
Salvage what still reads from a damaged catalog into a fresh file at the same path.

Every row SQLite still reads is copied table by table, stepping over the rowids on pages that
do not read; rows SQLite cannot reach (below a damaged interior page, or in tables whose schema
page is damaged) are read from the file's pages directly. The fresh file has the current schema,
and only rows that decode as skel reads them are kept. What was partly lost is redone by the
next runs: files whose kernels or findings were lost are marked stale (the next `skel mine`
re-parses them); lost history makes the next `skel mine --history REPO` re-walk the repository.

Nothing is deleted: the damaged file (with its -wal/-shm) is kept beside the repaired one as
CATALOG.damaged-<UTC time>. A catalog without damage is left as it was. Run it while no other
skel process uses the catalog.

Prints, per table, how many rows were salvaged and how many were lost (and why); --json prints
{"catalog", "damaged", "backup", "usable", "from_version", "schema_version", "tables": [{"table",
"salvaged", "lost", "expected", "unreadable_rowids", "undecodable", "refused", "from_pages"}],
"problems", "follow_up", "seconds"} ("lost" is null when how many rows a table held is not known).

Exit codes: 0 a usable catalog is in place (repaired, or nothing to repair), 2 the file is not
a skel catalog or nothing could be salvaged (it is then left untouched)."""


def add_parser(verbs) -> None:
    p = verbs.add_parser("repair", help="salvage what still reads from a damaged catalog into a fresh file",
                         description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_json(p)
    add_catalog(p)
    p.set_defaults(func=cmd_repair)


def cmd_repair(args) -> int:
    from skel.catalog import store
    from skel.catalog.repair import repair

    report = repair(store.resolve_catalog_path(args.catalog))
    if args.json:
        emit_json(report.to_json())
    else:
        print("\n".join(report.lines()))
    return EXIT_OK
