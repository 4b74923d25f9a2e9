"""`skel catalog repair`: salvage what still reads from a damaged catalog into a fresh file.

The fresh file gets skel's schema at the version the damaged file had (its ``user_version``,
else inferred from its tables), every row that still reads and decodes is copied into it
(``skel.catalog.salvage``; rows SQLite cannot reach are looked for page by page,
``skel.catalog.pages``), then it is migrated to the current version and every row is decoded
as the queries decode it (``skel.catalog.rows``), so what is kept is what skel can read. The
fresh schema's constraints (foreign keys included) refuse rows whose parents were lost, e.g.
the kernels of a file whose ``sources`` row did not read.

What was partly lost is redone by the next runs rather than trusted: when kernels or findings
were lost every source is marked stale (the next ``skel mine`` re-parses its files); when
history rows were lost every repository's mined head is forgotten (the next ``skel mine
--history`` re-walks it and distils the candidates again). Lost verdicts are only reported.

Nothing is deleted: the damaged file (and its -wal/-shm) is renamed to
``<name>.damaged-<UTC time>`` beside the repaired one. A catalog with no damage is left as it
was. Run it while no other skel process uses the catalog.
"""
from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

from skel.catalog import rows, salvage, schema
from skel.catalog.candidates import PROGRESS_KEY, STALE_KEY, UNKNOWN_HEAD
from skel.catalog.damage import CatalogError
from skel.catalog.repair_report import RepairReport, TableSalvage

DDL = {1: schema.DDL_V1, 2: schema.DDL_V2, 3: schema.DDL_V3, 4: schema.DDL_V4}
STALE_HASH = "stale: salvaged by skel catalog repair"  # no content hash equals it: the file is re-parsed
MINED = ("sources", "kernels", "findings")
HISTORY = ("history_repos", "history_edits", "candidates", "candidate_occurrences")
COMPANIONS = ("-wal", "-shm", "-journal")


def repair(path: Path | str, now: datetime | None = None) -> RepairReport:
    """Salvage the catalog at ``path`` (see the module docstring); raise ``CatalogError`` when it cannot."""
    from skel.catalog.store import Catalog, _check_file

    started = time.perf_counter()
    path = Path(path)
    if not path.exists():
        raise CatalogError(f"{path}: no catalog here (nothing to repair)")
    _check_file(path)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    fresh = _free(path.with_name(f"{path.name}.repairing-{stamp}"))
    try:
        version, tables, problems = _salvage_into(path, fresh)
    except BaseException:
        _remove(fresh)
        raise
    if not problems and all(t.intact for t in tables):
        _remove(fresh)
        return RepairReport(str(path), False, None, version, tables, (), (), time.perf_counter() - started)
    backup = _free(path.with_name(f"{path.name}.damaged-{stamp}"))
    follow_up = _follow_up(tables)
    for suffix in ("", *COMPANIONS):
        if os.path.lexists(str(path) + suffix):
            os.replace(str(path) + suffix, str(backup) + suffix)
    os.replace(fresh, path)
    Catalog.open(path).close()  # the normal way in: WAL on, version checked
    return RepairReport(str(path), True, str(backup), version, tables, problems, follow_up,
                        time.perf_counter() - started)


def _salvage_into(path: Path, fresh: Path) -> tuple[int, tuple[TableSalvage, ...], tuple[str, ...]]:
    """Copy what reads from ``path`` into a new catalog at ``fresh``; its schema version, the tables, the problems."""
    pf = _Pages(path)
    existed = {s for s in COMPANIONS if os.path.lexists(str(path) + s)}
    try:
        src = salvage.open_damaged(path)
    except salvage.Unreadable as exc:
        src = None
        problems: tuple[str, ...] = (f"the file does not open through SQLite ({exc})",)
    try:
        if src is not None:
            problems = _integrity(src)
            version, source_tables = _version(src, path), salvage.tables(src)
        else:
            version, source_tables = pf.version(path), {}
        dst = sqlite3.connect(str(fresh), isolation_level=None)
        try:
            dst.execute("PRAGMA foreign_keys = ON")
            dst.execute("BEGIN")
            schema.create_version(dst, DDL[version], version)
            copies = {}
            for table in _fresh_tables(dst):  # parents first: a child's parent rows are in before it
                copy = _Copy(dst, table)
                scan = _copy_sql(src, copy, source_tables.get(table))
                if scan is None or scan.unreadable:
                    _copy_pages(pf, version, copy, scan)
                copies[table] = (copy, scan)
            if src is None and not any(c.from_pages for t, (c, _) in copies.items() if t != "meta"):
                raise CatalogError(f"{path}: nothing can be salvaged: {problems[0]}, and no page holds rows of a "
                                   "skel catalog; it was left untouched")
            schema.migrate(dst, version)
            undecodable = _drop_undecodable(dst)
            dst.execute("COMMIT")
            tables = tuple(_salvaged(dst, t, c, s, undecodable.get(t, 0)) for t, (c, s) in copies.items())
            _mark_follow_up(dst, tables)
            _verify(dst, fresh)
        finally:
            dst.close()
    finally:
        if src is not None:
            src.close()
        _tidy(path, existed)
    return version, tables, problems


def _tidy(path: Path, existed: set[str]) -> None:
    """Remove the empty -wal and the -shm that reading a WAL file read-only leaves behind (only those it created)."""
    wal, shm = Path(str(path) + "-wal"), Path(str(path) + "-shm")
    if "-wal" not in existed and wal.exists() and wal.stat().st_size == 0:
        wal.unlink()
        if "-shm" not in existed and shm.exists():
            shm.unlink()


class _Copy:
    """Rows going into one table of the fresh file; counts what the fresh schema refused."""

    def __init__(self, dst, table: str):
        self.dst, self.table = dst, table
        self.columns = tuple(r[1] for r in dst.execute(f'PRAGMA table_info("{table}")'))
        # (column, parent table, parent column) of each foreign key whose column may be NULL
        notnull = {r[1] for r in dst.execute(f'PRAGMA table_info("{table}")') if r[3]}
        self.nullable_refs = [(r[3], r[2], r[4]) for r in dst.execute(f'PRAGMA foreign_key_list("{table}")')
                              if r[3] not in notnull]
        self.refused = self.from_pages = 0

    def insert(self, values: dict, duplicate_ok: bool = False) -> bool:
        cols = [c for c in self.columns if c in values]
        verb = "INSERT OR IGNORE" if self.table == "meta" else "INSERT"  # the fresh file's app/schema_version win
        sql = f'{verb} INTO "{self.table}"({", ".join(cols)}) VALUES ({", ".join("?" * len(cols))})'
        for attempt in range(2):
            try:
                self.dst.execute(sql, [values[c] for c in cols])
                return True
            except sqlite3.IntegrityError:
                # A reference to a row that was lost, in a column that may be NULL (a finding's kernel):
                # keep the row without it rather than lose it.
                if attempt or not self._unlink(values):
                    break
        if not duplicate_ok:
            self.refused += 1
        return False

    def _unlink(self, values: dict) -> bool:
        changed = False
        for column, parent, key in self.nullable_refs:
            v = values.get(column)
            if v is not None and self.dst.execute(
                    f'SELECT 1 FROM "{parent}" WHERE "{key or "rowid"}" = ?', (v,)).fetchone() is None:
                values[column], changed = None, True
        return changed


class _Pages:
    """The file read page by page, opened the first time a table needs it."""

    def __init__(self, path: Path):
        self.path, self._pf, self.problem, self._rows = path, None, "", None

    def file(self):
        from skel.catalog import pages

        if self._pf is None and not self.problem:
            try:
                self._pf = pages.PageFile(self.path)
            except (pages.BadPage, OSError) as exc:
                self.problem = str(exc)
        return self._pf

    def rows(self, version: int, table: str):
        """The table's rows as read page by page (every table is read in one sweep, the first time)."""
        from skel.catalog import pages

        if self._rows is None:
            shapes = pages.shapes(DDL[version])
            self._rows = pages.table_rows(self._pf, shapes, set(shapes))
        return self._rows[table]

    def version(self, path: Path) -> int:
        pf = self.file()
        if pf is None:
            raise CatalogError(f"{path}: nothing can be salvaged: the file does not read through SQLite and its "
                               f"pages do not read either ({self.problem}); it was left untouched")
        if pf.user_version in DDL:
            return pf.user_version
        return schema.CURRENT_VERSION


def _copy_sql(src, copy: _Copy, columns: tuple[str, ...] | None) -> salvage.TableScan | None:
    """Pass 1: the rows SQLite still reads, in rowid order around the pages it cannot read."""
    if src is None or columns is None:
        return None
    scan = salvage.TableScan(copy.table, tuple(c for c in copy.columns if c in columns),
                             expected=salvage.count(src, copy.table))
    for _, values in salvage.read_table(src, scan):
        copy.insert(values)
    return scan


def _copy_pages(pf: _Pages, version: int, copy: _Copy, scan: salvage.TableScan | None) -> None:
    """Pass 2: rows inside the rowid ranges SQLite could not read (every row when it could not read the table),
    read from the pages."""
    if pf.file() is None:
        return
    found = pf.rows(version, copy.table)
    ranges = scan.unreadable if scan is not None else [(salvage.MIN_ROWID, None)]
    for rowid, values in found.rows:
        if any(lo <= rowid and (hi is None or rowid <= hi) for lo, hi in ranges):
            if copy.insert(dict(values), duplicate_ok=True):
                copy.from_pages += 1


def _drop_undecodable(dst) -> dict[str, int]:
    """Delete (and count) the rows the queries could not decode; their dependants go with them."""
    dropped = {}
    for table, decode in rows.DECODERS.items():
        cur = dst.execute(f'SELECT rowid AS rowid_, * FROM "{table}"')
        names = [d[0] for d in cur.description]
        bad = []
        for values in cur.fetchall():
            r = dict(zip(names, values))
            try:
                decode(r)
            except rows.DECODE_ERRORS:
                bad.append(r["rowid_"])
        for rowid in bad:
            dst.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))
        if bad:
            dropped[table] = len(bad)
    return dropped


def _salvaged(dst, table: str, copy: _Copy, scan: salvage.TableScan | None, undecodable: int) -> TableSalvage:
    kept = dst.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]
    if scan is None:  # SQLite could not read the table at all: how many rows it had is unknown
        return TableSalvage(table, kept, None, ((salvage.MIN_ROWID, None),), undecodable, copy.refused,
                            copy.from_pages)
    # Rows found page by page fill unreadable ranges; the ranges stay listed (whether all of them were found is
    # known only from the expected count).
    return TableSalvage(table, kept, scan.expected, tuple(scan.unreadable), undecodable + scan.not_utf8,
                        copy.refused, copy.from_pages)


def _mark_follow_up(dst, tables: tuple[TableSalvage, ...]) -> None:
    lost = {t.table for t in tables if not t.complete}
    dst.execute("BEGIN")
    if lost & {"kernels", "findings"}:
        dst.execute("UPDATE sources SET content_hash = ?", (STALE_HASH,))
    if lost & set(HISTORY):
        # Forget every head and every stopped run's progress (its edits may be among the lost): the next
        # `skel mine --history` re-walks each repository from the start and distils the candidates again.
        dst.execute("UPDATE history_repos SET head = ?", (UNKNOWN_HEAD,))
        dst.execute("DELETE FROM meta WHERE key LIKE ?", (PROGRESS_KEY.format(repo="%"),))
        dst.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (STALE_KEY,))
    dst.execute("COMMIT")


def _follow_up(tables: tuple[TableSalvage, ...]) -> tuple[str, ...]:
    lost = {t.table for t in tables if not t.complete}
    out = []
    if lost & {"kernels", "findings"}:
        out.append("every mined file is marked stale: the next `skel mine` re-parses it and records its kernels "
                   "and findings again")
    elif "sources" in lost:
        out.append("files whose row was lost are mined afresh by the next `skel mine`")
    if lost & set(HISTORY):
        out.append("every repository's mined head is forgotten: the next `skel mine --history REPO` re-walks it and "
                   "distils the candidates again")
    if "validation_runs" in lost:
        out.append("lost verdicts are gone from the evidence: `skel apply`/`skel validate` measure them again")
    return tuple(out)


def _integrity(src) -> tuple[str, ...]:
    try:
        found = [r[0].decode() if isinstance(r[0], bytes) else str(r[0])
                 for r in src.execute("PRAGMA integrity_check(20)")]
    except sqlite3.Error as exc:
        return (f"integrity check failed: {exc}",)
    return () if found == ["ok"] else tuple(found)


def _version(src, path: Path) -> int:
    """The damaged file's schema version: its user_version, else what its tables look like."""
    try:
        version = src.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error:
        version = 0
    have = salvage.tables(src)
    if 1 <= version <= schema.CURRENT_VERSION and (_app(src) == schema.APP or set(_ddl_tables(DDL[version])) <= set(have)):
        return version
    for v in sorted(DDL, reverse=True):
        need = _ddl_tables(DDL[v])
        if set(need) <= set(have) and all(set(_ddl_columns(DDL[v], t)) <= set(have[t]) for t in need):
            return v
    raise CatalogError(f"{path}: an SQLite database that is not a skel catalog (tables: {', '.join(have) or 'none'}); "
                       "repair only salvages skel catalogs, and this file was left untouched")


def _app(src) -> str | None:
    """The meta table's app, when it still reads."""
    try:
        row = src.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
    except sqlite3.Error:
        return None
    return row[0].decode("utf-8", "replace") if row and isinstance(row[0], bytes) else (row[0] if row else None)


def _ddl_tables(ddl: str) -> list[str]:
    import re

    return re.findall(r"CREATE TABLE (\w+)", ddl)


def _ddl_columns(ddl: str, table: str) -> list[str]:
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
    finally:
        conn.close()


def _fresh_tables(dst) -> list[str]:
    """The fresh file's tables in creation order: parents before the tables that refer to them."""
    return [r[0] for r in dst.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]


def _verify(dst, fresh: Path) -> None:
    ok = [r[0] for r in dst.execute("PRAGMA integrity_check")]
    orphans = dst.execute("PRAGMA foreign_key_check").fetchall()
    if ok != ["ok"] or orphans:
        raise CatalogError(f"{fresh}: the salvaged catalog does not pass its own checks ({ok[:3]}, {len(orphans)} "
                           "rows whose parent is missing); the damaged file was left where it was")


def _free(path: Path) -> Path:
    """``path``, or ``path-1``, ``path-2``... whichever does not exist yet (with its companions)."""
    n, candidate = 0, path
    while any(os.path.lexists(str(candidate) + s) for s in ("", *COMPANIONS)):
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _remove(path: Path) -> None:
    for suffix in ("", *COMPANIONS):
        try:
            os.remove(str(path) + suffix)
        except FileNotFoundError:
            pass
