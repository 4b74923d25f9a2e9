"""Where SQLite's errors about the catalog *file* become one clear ``CatalogError``.

Every statement the catalog runs goes through ``GuardedConnection`` (``sqlite3.connect(...,
factory=GuardedConnection)``) and its ``GuardedCursor``: an ``sqlite3.Error`` raised while
preparing, stepping or fetching is looked at once, here, and when it says something about the
file rather than about the statement (a damaged page, not a database, a disk I/O error, read-only,
disk full, cannot open, locked past the busy timeout, a table of skel's schema missing, text that
is not UTF-8) it is replaced by a ``CatalogError`` whose message is one line naming the catalog,
what is wrong and the way forward. Errors that mean a bug or a refused record (constraint
violations, SQL errors) pass through unchanged.

Damage (``CatalogDamaged``) always points at ``--catalog PATH`` and ``skel catalog repair``;
rows that read but do not decode (``undecodable``) are damage too.
"""
from __future__ import annotations

import re
import shlex
import sqlite3
from pathlib import Path

from skel.errors import UsageError

# Primary result codes (https://sqlite.org/rescode.html); extended codes carry them in the low byte.
SQLITE_ERROR, SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 1, 3, 5, 6, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_AUTH = 10, 11, 13, 14, 23
SQLITE_FORMAT, SQLITE_NOTADB = 24, 26
_DAMAGE = {SQLITE_CORRUPT: "the file is damaged", SQLITE_NOTADB: "the file is damaged",
           SQLITE_FORMAT: "the file is damaged", SQLITE_IOERR: "the file cannot be read or written"}
# Messages of errors raised without a result code (older SQLite, or raised by Python's module itself).
_BY_MESSAGE = (
    ("malformed", SQLITE_CORRUPT), ("not a database", SQLITE_NOTADB), ("disk i/o error", SQLITE_IOERR),
    ("readonly database", SQLITE_READONLY), ("database or disk is full", SQLITE_FULL),
    ("unable to open database", SQLITE_CANTOPEN), ("database is locked", SQLITE_BUSY),
)
_UTF8 = re.compile(r"Could not decode to UTF-8 column '([^']*)'")
_NO_TABLE = re.compile(r"^no such table: (?:main\.)?(\w+)")
_TABLE_OF = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+(\w+)", re.IGNORECASE)


class CatalogError(UsageError):
    """The catalog file cannot be used as it is; the message names the file and why."""


class CatalogDamaged(CatalogError):
    """The catalog file is damaged: some of it does not read, or reads as something it cannot be.

    ``problem`` says what (SQLite's words or the row that does not decode); the message adds the
    way forward: another catalog, or ``skel catalog repair``.
    """

    def __init__(self, path: Path | str, problem: str, at_open: bool = False):
        self.path, self.problem = Path(path), problem
        untouched = " it was left untouched;" if at_open else ""
        super().__init__(
            f"{path}: not a usable skel catalog: {problem};{untouched} use another catalog with --catalog PATH, "
            f"or salvage what still reads into a fresh file with `skel catalog repair --catalog "
            f"{shlex.quote(str(path))}` (the damaged file is kept beside it)"
        )


class CatalogBusy(CatalogError):
    """Another process held the catalog's lock for longer than the busy timeout."""

    def __init__(self, path: Path | str, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: the catalog is busy ({problem}): another process held it for longer than the "
                         "30 s busy timeout; try again when it is done")


def undecodable(path: Path | str, table: str, rowid: object, exc: BaseException) -> CatalogDamaged:
    """A row that SQLite reads but skel cannot decode (bad JSON, a profile without its fields)."""
    what = f"{type(exc).__name__}: {exc}"
    return CatalogDamaged(path, f"the file is damaged (row {rowid} of table {table} does not decode: {what[:160]})")


def translate(exc: sqlite3.Error, path: Path | str, sql: str = "", at_open: bool = False) -> CatalogError | None:
    """The ``CatalogError`` that ``exc`` means for the file at ``path``, or None when it is not about the file."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else next(
        (c for phrase, c in _BY_MESSAGE if phrase in text.lower()), None)
    table = _table_of(sql)
    where = f", in table {table}" if table else ""
    if m := _UTF8.search(text):  # raised by Python's module; the message would quote the whole bad text
        column = f"column {m.group(1)}" + (f" of table {table}" if table else "")
        return CatalogDamaged(path, f"the file is damaged ({column} holds text that is not UTF-8)", at_open)
    if primary in _DAMAGE:
        return CatalogDamaged(path, f"{_DAMAGE[primary]} ({_short(text)}{where})", at_open)
    if primary == SQLITE_ERROR and (m := _NO_TABLE.match(text)) and m.group(1) in _schema_tables():
        return CatalogDamaged(path, f"the file is damaged (table {m.group(1)} of skel's schema is missing)", at_open)
    if primary == SQLITE_READONLY:
        return CatalogError(f"{path}: the catalog cannot be written ({_short(text)}): make the file and its folder "
                            "writable, or use another catalog with --catalog PATH")
    if primary in (SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_AUTH):
        return CatalogError(f"{path}: cannot open the catalog file or its -wal/-shm companions ({_short(text)}): "
                            "check the permissions of the file and its folder, or use another catalog with --catalog PATH")
    if primary == SQLITE_FULL:
        return CatalogError(f"{path}: the disk holding the catalog is full ({_short(text)}{where}); free some space "
                            "or use another catalog with --catalog PATH")
    if primary in (SQLITE_BUSY, SQLITE_LOCKED):
        return CatalogBusy(path, f"{_short(text)}{where}")
    return None


def _short(text: str) -> str:
    return " ".join(text.split())[:160]


def _table_of(sql: str) -> str:
    """The first table a statement names (what a message can say it was reading or writing)."""
    m = _TABLE_OF.search(sql or "")
    if not m or m.group(1).lower() in ("json_each", "sqlite_master", "sqlite_schema"):
        return ""
    return m.group(1)


def _schema_tables() -> set[str]:
    from skel.catalog import schema

    return set(re.findall(r"CREATE TABLE (\w+)", schema.DDL_V4))


class GuardedCursor(sqlite3.Cursor):
    """A cursor whose errors about the file become ``CatalogError`` (see the module docstring)."""

    _sql = ""

    def _fail(self, exc: sqlite3.Error):
        conn = self.connection
        err = translate(exc, getattr(conn, "catalog_path", "?"), self._sql, getattr(conn, "opening", False))
        if err is None:
            raise exc
        raise err from exc

    def execute(self, sql, parameters=()):
        self._sql = sql
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            self._fail(exc)

    def executemany(self, sql, seq_of_parameters):
        self._sql = sql
        try:
            return super().executemany(sql, seq_of_parameters)
        except sqlite3.Error as exc:
            self._fail(exc)

    def executescript(self, sql_script):
        self._sql = sql_script
        try:
            return super().executescript(sql_script)
        except sqlite3.Error as exc:
            self._fail(exc)

    def fetchone(self):
        try:
            return super().fetchone()
        except sqlite3.Error as exc:
            self._fail(exc)

    def fetchmany(self, size=None):
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.Error as exc:
            self._fail(exc)

    def fetchall(self):
        try:
            return super().fetchall()
        except sqlite3.Error as exc:
            self._fail(exc)

    def __next__(self):
        try:
            return super().__next__()
        except sqlite3.Error as exc:
            self._fail(exc)


class GuardedConnection(sqlite3.Connection):
    """``sqlite3.connect(path, factory=GuardedConnection)``; set ``catalog_path`` (and ``opening``) after."""

    catalog_path: Path | str = "?"
    opening = False

    def cursor(self, factory=GuardedCursor):
        return super().cursor(factory)

    def execute(self, sql, parameters=()):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, seq_of_parameters):
        return self.cursor().executemany(sql, seq_of_parameters)

    def executescript(self, sql_script):
        return self.cursor().executescript(sql_script)
