"""Reading what still reads from a damaged SQLite file, table by table, through SQLite itself.

``open_damaged`` opens the file read-only (its -wal included: committed work a killed writer
left there is read too); text comes back as bytes so that text that is not UTF-8 is one bad
row, not an error that stops the scan. ``read_table`` walks a table in rowid order; when a
step fails (a damaged leaf, an overflow chain cut by a damaged page) it looks for the
first rowid from which reading forward works again (exponential, then binary search over
rowids: seeks land on the damaged page while they aim inside its range) and records the
rowids in between as unreadable. What lies under a damaged *interior* page can only be
reached by reading pages directly (``skel.catalog.pages``).
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

MIN_ROWID, MAX_ROWID = -(2 ** 63), 2 ** 63 - 1


class Unreadable(Exception):
    """The file does not read through SQLite at all (its schema is damaged, or it is not a database)."""


@dataclass
class TableScan:
    """What ``read_table`` met: filled in while its rows are consumed."""

    table: str
    columns: tuple[str, ...]
    expected: int | None = None  # rows the file says it holds (a count through the table or one of its indexes)
    read: int = 0
    not_utf8: int = 0
    unreadable: list[tuple[int, int | None]] = field(default_factory=list)  # rowid ranges, None: to the end


def open_damaged(path: Path) -> sqlite3.Connection:
    """A read-only connection to ``path`` that returns text as bytes; raises ``Unreadable`` when even the schema
    does not read."""
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        conn.text_factory = bytes
        conn.execute("SELECT name FROM sqlite_master").fetchall()
    except sqlite3.Error as exc:
        raise Unreadable(f"{exc}") from None
    return conn


def tables(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Table name -> its columns, in the file's creation order (skel's tables only, never sqlite_*)."""
    names = [r[0].decode() for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    return {n: tuple(r[1].decode() for r in conn.execute(f'PRAGMA table_info("{n}")')) for n in names}


def indexes(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[0].decode() for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,))]


def count(conn: sqlite3.Connection, table: str) -> int | None:
    """How many rows ``table`` holds, through whichever of the table and its indexes still reads; None if none."""
    ways = [f'"{table}"', f'"{table}" NOT INDEXED'] + [f'"{table}" INDEXED BY "{i}"' for i in indexes(conn, table)]
    for way in ways:
        try:
            return conn.execute(f"SELECT COUNT(*) FROM {way}").fetchone()[0]
        except sqlite3.Error:
            continue
    return None


def read_table(conn: sqlite3.Connection, scan: TableScan) -> Iterator[tuple[int, dict[str, object]]]:
    """(rowid, column -> value) of every row that reads, in rowid order; text decoded, bad text counted."""
    cols = ", ".join(f'"{c}"' for c in scan.columns)
    sql = f'SELECT rowid, {cols} FROM "{scan.table}" WHERE rowid >= ? ORDER BY rowid'
    start, last = MIN_ROWID, None
    while True:
        try:
            for row in conn.execute(sql, (start,)):
                last, start = row[0], row[0] + 1
                scan.read += 1
                values = _text(row[1:])
                if values is None:
                    scan.not_utf8 += 1
                    continue
                yield row[0], dict(zip(scan.columns, values))
                if start > MAX_ROWID:
                    return
            return
        except sqlite3.Error:
            resume = _readable_from(conn, sql, start)
            low = last + 1 if last is not None else MIN_ROWID
            if resume is None:
                scan.unreadable.append((low, None))
                return
            nxt = conn.execute(sql + " LIMIT 1", (resume,)).fetchone()
            scan.unreadable.append((low, nxt[0] - 1 if nxt else None))
            if nxt is None:
                return
            start = resume


def _readable_from(conn: sqlite3.Connection, sql: str, bad: int) -> int | None:
    """The smallest rowid > ``bad`` from which the first row reads (or there is none left); None if no such rowid."""
    def reads(x: int) -> bool:
        try:
            conn.execute(sql + " LIMIT 1", (x,)).fetchone()
            return True
        except sqlite3.Error:
            return False

    step, good = 1, None
    while good is None:
        probe = bad + step
        if probe > MAX_ROWID:
            if reads(MAX_ROWID) and MAX_ROWID > bad:
                good = MAX_ROWID
                break
            return None
        if reads(probe):
            good = probe
        else:
            bad, step = probe, step * 2
    while good - bad > 1:
        mid = (bad + good) // 2
        if reads(mid):
            good = mid
        else:
            bad = mid
    return good


def _text(values: tuple) -> list | None:
    out = []
    for v in values:
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                return None
        out.append(v)
    return out
