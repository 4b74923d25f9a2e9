"""What `skel catalog repair` did, per table: the report it prints and its --json (``skel.catalog.repair``)."""
from __future__ import annotations

from dataclasses import dataclass

from skel.catalog import schema
from skel.catalog.salvage import MIN_ROWID


@dataclass(frozen=True)
class TableSalvage:
    table: str
    salvaged: int  # rows in the repaired file
    expected: int | None  # rows the damaged file held, when a count still read (through the table or an index)
    unreadable: tuple[tuple[int, int | None], ...]  # rowid ranges on pages that did not read (None: to the end)
    undecodable: int  # rows that read but did not decode (text not UTF-8, bad JSON, a profile without its fields)
    refused: int  # rows the fresh schema refused (a kernel whose file's row was lost, a duplicate key)
    from_pages: int = 0  # of the salvaged rows, those found by reading pages directly

    @property
    def lost(self) -> int | None:
        """Rows of the damaged file not in the repaired one; None when it is not known how many did not read."""
        if self.expected is not None:
            return max(0, self.expected - self.salvaged)
        if self.unreadable:
            return None
        return self.undecodable + self.refused

    @property
    def complete(self) -> bool:
        """Every row the damaged file held is in the repaired one (known only when a count still read)."""
        return self.lost == 0

    @property
    def intact(self) -> bool:
        return self.complete and not self.unreadable

    def to_json(self) -> dict:
        return {"table": self.table, "salvaged": self.salvaged, "lost": self.lost, "expected": self.expected,
                "unreadable_rowids": [list(r) for r in self.unreadable], "undecodable": self.undecodable,
                "refused": self.refused, "from_pages": self.from_pages}

    def line(self) -> str:
        pages = f" ({self.from_pages} of them read page by page)" if self.from_pages else ""
        why = [f"{_ranges(self.unreadable)} on pages that do not read"] if self.unreadable else []
        why += [f"{self.undecodable} that do not decode"] if self.undecodable else []
        why += [f"{self.refused} refused by the schema (their parent rows were lost)"] if self.refused else []
        if self.lost is None and self.expected is None and self.unreadable == ((MIN_ROWID, None),):
            return (f"{self.table}: {self.salvaged} rows salvaged{pages}; SQLite could not read the table, so how "
                    "many rows it held is not known")
        lost = "an unknown number" if self.lost is None else str(self.lost)
        return (f"{self.table}: {self.salvaged} rows salvaged{pages}, {lost} lost"
                + (f" ({'; '.join(why)})" if why and self.lost != 0 else ""))


@dataclass(frozen=True)
class RepairReport:
    catalog: str
    damaged: bool  # False: nothing to repair, the file was left as it was
    backup: str | None  # where the damaged file now lies (its -wal/-shm beside it)
    from_version: int  # the damaged file's schema version; the repaired file is at schema.CURRENT_VERSION
    tables: tuple[TableSalvage, ...]
    problems: tuple[str, ...]  # what SQLite's integrity check said about the damaged file (first lines)
    follow_up: tuple[str, ...]  # what the next runs redo because it was partly lost
    seconds: float

    @property
    def usable(self) -> bool:
        return True  # a report is only returned for a catalog that opens and passes the integrity check

    def to_json(self) -> dict:
        return {"catalog": self.catalog, "damaged": self.damaged, "backup": self.backup, "usable": self.usable,
                "from_version": self.from_version, "schema_version": schema.CURRENT_VERSION,
                "tables": [t.to_json() for t in self.tables], "problems": list(self.problems),
                "follow_up": list(self.follow_up), "seconds": round(self.seconds, 3)}

    def lines(self) -> list[str]:
        if not self.damaged:
            return [f"{self.catalog}: no damage found (integrity check ok, every row reads and decodes); left as it was"]
        out = [f"{self.catalog}: repaired (schema version {self.from_version} -> {schema.CURRENT_VERSION}); "
               f"the damaged file is kept as {self.backup}"]
        if self.problems:
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            out.append(f"  SQLite's integrity check of the damaged file: {self.problems[0]}{more}")
        out += [f"  {t.line()}" for t in self.tables if t.salvaged or not t.intact]
        out += [f"  then: {f}" for f in self.follow_up]
        return out


def _ranges(ranges) -> str:
    parts = []
    for low, high in ranges:
        if low == MIN_ROWID and high is None:
            parts.append("every row")
        elif low == MIN_ROWID:
            parts.append(f"rowids up to {high}")
        elif high is None:
            parts.append(f"rowids from {low} on")
        else:
            parts.append(f"rowid {low}" if low == high else f"rowids {low}-{high}")
    return "rows at " + ", ".join(parts) if parts else ""
