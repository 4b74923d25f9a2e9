"""The catalog store: an embedded SQLite file holding what skel mined and measured.

Where it lives: an explicit path (``--catalog PATH``), else ``$SKEL_CATALOG``,
else ``$XDG_CACHE_HOME/skel/catalog.sqlite`` (``~/.cache/skel/catalog.sqlite``).

Safety: WAL mode with a 30 s busy timeout, so concurrent writers wait rather
than fail; each write is one ``BEGIN IMMEDIATE`` transaction (take the write
lock up front, so two writers never deadlock upgrading a read lock); a writer
killed mid-transaction leaves nothing behind. A file that is not skel's catalog
(not SQLite, corrupt, someone else's SQLite, or newer than this code) is
reported with its path and never modified. SQLite errors about the file itself (a damaged
page met by any query, disk I/O, read-only...) become one ``CatalogError`` naming the file and
the way forward (``skel.catalog.damage``); ``skel catalog repair`` salvages a damaged file.

One ``Catalog`` per thread (sqlite3 connections are not shared across threads);
any number of processes may open the same file.

The queries that read the catalog back are in ``skel.catalog.queries``.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from skel.catalog import schema
from skel.catalog.candidates import HistoryStore
from skel.catalog.damage import CatalogBusy, CatalogDamaged, CatalogError, GuardedConnection
from skel.catalog.exchange import ExchangeStore
from skel.catalog.queries import QueryStore
from skel.catalog.records import (
    Evidence,
    Finding,
    LibrarySync,
    RecordError,
    SourceRecord,
    Stats,
    ValidationRun,
    check_finding,
    check_run,
    skeleton_hash,
)
__all__ = [
    "Catalog", "CatalogDamaged", "CatalogError", "Evidence", "Finding", "LibrarySync", "RecordError", "SourceRecord", "Stats",
    "ValidationRun", "default_catalog_path", "open_catalog", "resolve_catalog_path",
]

BUSY_TIMEOUT_S = 30.0
SQLITE_MAGIC = b"SQLite format 3\x00"


def default_catalog_path() -> Path:
    """``$SKEL_CATALOG`` if set, else ``$XDG_CACHE_HOME/skel/catalog.sqlite`` (default ``~/.cache``)."""
    env = os.environ.get("SKEL_CATALOG", "").strip()
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "skel" / "catalog.sqlite"


def resolve_catalog_path(path: Path | str | None = None) -> Path:
    """An explicit path wins over the environment and the default."""
    return Path(path).expanduser() if path else default_catalog_path()


def open_catalog(path: Path | str | None = None) -> "Catalog":
    """Open (creating or migrating forward if needed) the catalog at ``path`` or the default."""
    return Catalog.open(resolve_catalog_path(path))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _dumps(value: object, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"{what}: not storable as JSON ({exc})") from None


class Catalog(HistoryStore, QueryStore, ExchangeStore):
    def __init__(self, path: Path, conn: sqlite3.Connection, version: int):
        self.path = path
        self.version = version
        self._conn = conn
        self._depth = 0

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: Path) -> "Catalog":
        path = Path(path)
        _check_file(path)
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CatalogError(f"{path}: cannot create the catalog's folder ({exc.strerror})") from None
        try:
            conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=GuardedConnection)
        except sqlite3.Error as exc:
            raise CatalogError(f"{path}: cannot open the catalog ({exc})") from None
        conn.catalog_path, conn.opening = path, True
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            # Read-only look in one read transaction (one snapshot: a concurrent creator's
            # commit cannot fall between our reads); nothing is written to a file we reject.
            with _snapshot(conn):
                version = _inspect(conn, path)
            if version != schema.CURRENT_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Look again under the write lock: another process may have created or
                    # migrated the file while we waited.
                    version = _inspect(conn, path)
                    if version == 0:
                        schema.create_current(conn)
                    else:
                        schema.migrate(conn, version)
                    conn.execute("COMMIT")
                except BaseException:
                    _abort(conn)
                    raise
            # WAL: readers never block the writer; NORMAL sync is crash-safe in WAL
            # (a killed process loses nothing committed), only power loss may drop the
            # last commits, which re-mining restores.
            _use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.opening = False
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise CatalogError(f"{path}: not a usable skel catalog ({exc}); the file was left untouched") from None
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, schema.CURRENT_VERSION)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ transactions
    @contextmanager
    def transaction(self) -> Iterator["Catalog"]:
        """One write transaction (``BEGIN IMMEDIATE``), committed when the block ends.

        Nested uses become savepoints inside the outer transaction: an exception rolls
        back the inner block only if it is caught, and nothing is durable until the
        outermost block commits.
        """
        if self._depth:
            name = f"skel_sp{self._depth}"
            self._conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self
            except BaseException:
                _abort(self._conn, name)
                raise
            else:
                self._conn.execute(f"RELEASE {name}")
            finally:
                self._depth -= 1
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except CatalogBusy as exc:
            raise CatalogError(
                f"{self.path}: cannot start a write transaction ({exc.problem}); "
                f"another writer held the catalog for over {BUSY_TIMEOUT_S:.0f} s?"
            ) from None
        self._depth = 1
        try:
            yield self
        except BaseException:
            self._depth = 0
            _abort(self._conn)
            raise
        self._depth = 0
        try:
            self._conn.execute("COMMIT")
        except CatalogError:
            _abort(self._conn)
            raise
        except sqlite3.Error as exc:
            _abort(self._conn)
            raise CatalogError(f"{self.path}: commit failed ({exc})") from None

    @contextmanager
    def snapshot(self) -> Iterator["Catalog"]:
        """One read transaction, so that several queries see the same state under concurrent writers
        (inside a write transaction: that transaction's state)."""
        if self._depth:
            yield self
            return
        with _snapshot(self._conn):
            yield self

    def _q(self, sql: str, args: Sequence = ()) -> list[sqlite3.Row]:
        cur = self._conn.execute(sql, tuple(args))
        cur.row_factory = sqlite3.Row
        return cur.fetchall()

    # --------------------------------------------------------------- skeletons
    def sync_library(self, library: Iterable) -> LibrarySync:
        """Upsert every skeleton of the library; codes in the catalog but not the library are kept."""
        added, changed, unchanged = [], [], []
        with self.transaction():
            known = {r["code"]: r["content_hash"] for r in self._q("SELECT code, content_hash FROM skeletons")}
            seen = set()
            for sk in library:
                entry = sk.to_json()
                digest = skeleton_hash(sk)
                seen.add(sk.code)
                if sk.code not in known:
                    added.append(sk.code)
                elif known[sk.code] != digest:
                    changed.append(sk.code)
                else:
                    unchanged.append(sk.code)
                    continue
                self._conn.execute(
                    "INSERT INTO skeletons(code, name, category, lifecycle, entry_json, content_hash) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(code) DO UPDATE SET name = excluded.name, "
                    "category = excluded.category, lifecycle = excluded.lifecycle, "
                    "entry_json = excluded.entry_json, content_hash = excluded.content_hash",
                    (sk.code, sk.name, sk.category, sk.lifecycle, _dumps(entry, f"skeleton {sk.code}"), digest),
                )
        absent = sorted(set(known) - seen)
        return LibrarySync(tuple(added), tuple(changed), tuple(unchanged), tuple(absent))

    # ------------------------------------------------------------------ mining
    def record_file(self, source: SourceRecord, kernels: Sequence = (), findings: Sequence[Finding] = ()) -> int:
        """Replace everything known about ``source.path`` with this file's kernels and findings.

        One transaction: readers see the old state or the new, never a mix. A file that
        failed to parse is recorded with ``source.error`` set (and usually no kernels), so
        an unchanged broken file is not re-parsed. Returns the source id.
        """
        where = source.path
        if not source.path or not source.content_hash:
            raise RecordError(f"record_file: source needs a path and a content hash, got {source!r}")
        for f in findings:
            check_finding(f)
            if f.path != source.path:
                raise RecordError(f"{f.path}:{f.line}: finding {f.skeleton} recorded under another file {source.path!r}")
        with self.transaction():
            # Deleting the source cascades to its kernels and findings.
            self._conn.execute("DELETE FROM sources WHERE path = ?", (source.path,))
            source_id = self._conn.execute(
                "INSERT INTO sources(repo, path, content_hash, mtime, size, mined_at, error) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (source.repo, source.path, source.content_hash, source.mtime, source.size,
                 source.mined_at or _now(), source.error),
            ).lastrowid
            # One statement for all the kernels and one for all the findings (a file may hold thousands)
            self._conn.executemany(
                "INSERT INTO kernels(source_id, name, language, line, end_line, profile_json) VALUES (?, ?, ?, ?, ?, ?)",
                [(source_id, k.name, k.language, k.line, k.end_line,
                  _dumps(k.to_json(), f"{where}:{k.line}: profile of kernel {k.name}")) for k in kernels])
            kernel_ids: dict[str, list[tuple[int, int, int]]] = {}  # by name: one lookup per finding
            for kid, name, line, end_line in self._conn.execute(
                    "SELECT id, name, line, end_line FROM kernels WHERE source_id = ? ORDER BY id", (source_id,)):
                kernel_ids.setdefault(name, []).append((line, end_line, kid))
            self._conn.executemany(
                "INSERT INTO findings(skeleton, kind, source_id, kernel_id, path, line, end_line, kernel, params_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(f.skeleton, f.kind, source_id, _kernel_id(kernel_ids, f), f.path, f.line, f.end_line, f.kernel,
                  _params_json(f)) for f in findings])
        return source_id

    def forget_source(self, path: str | Path) -> bool:
        """Remove a file (deleted from its repo) with its kernels and findings; False if unknown."""
        with self.transaction():
            return self._conn.execute("DELETE FROM sources WHERE path = ?", (str(path),)).rowcount > 0

    # -------------------------------------------------------------- validation
    def record_validation(self, run: ValidationRun) -> int:
        """Store one measured (or refused) validation run; returns its id."""
        check_run(run)
        what = f"validation run {','.join(run.skeletons)} on {run.kernel} [{run.shape}]"
        with self.transaction():
            return self._conn.execute(
                "INSERT INTO validation_runs(skeletons_json, kernel, shape, dtype, metric, median, ci_low, ci_high, unit, "
                "gpu, torch_version, triton_version, source_hash, verdict, reason, created_at, extra_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (json.dumps(list(run.skeletons)), run.kernel, run.shape, run.dtype, run.metric, run.median, run.ci_low,
                 run.ci_high, run.unit, run.gpu, run.torch_version, run.triton_version, run.source_hash, run.verdict,
                 run.reason, run.created_at or _now(), _dumps(dict(run.extra), what + " extra")),
            ).lastrowid


# --------------------------------------------------------------------- helpers
@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")
    try:
        yield
    except BaseException:
        _abort(conn)
        raise
    conn.execute("COMMIT")


def _abort(conn: sqlite3.Connection, savepoint: str | None = None) -> None:
    """Roll back what the failed block did, keeping the error that failed it.

    SQLite may already have rolled the transaction back itself (after an I/O error or a damaged
    page); then there is nothing to undo and the rollback's own complaint would only hide why.
    """
    if not conn.in_transaction:
        return
    try:
        if savepoint:
            conn.execute(f"ROLLBACK TO {savepoint}")
            conn.execute(f"RELEASE {savepoint}")
        else:
            conn.execute("ROLLBACK")
    except (sqlite3.Error, CatalogError):
        pass


def _check_file(path: Path) -> None:
    """Reject what is plainly not a catalog before SQLite touches it."""
    if not path.exists():
        return
    if not path.is_file():
        raise CatalogError(f"{path}: the catalog path exists but is not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the catalog ({exc.strerror})") from None
    if head and head != SQLITE_MAGIC:
        raise CatalogError(f"{path}: not an SQLite database (unexpected file header); refusing to touch it: "
                           "use another catalog with --catalog PATH")


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (persistent: only the first opener does it).

    The switch needs the file to itself and SQLite answers "locked" at once rather
    than calling the busy handler, so when several processes open a new catalog
    together we retry here within the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.001
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            # A file system without shared memory keeps the rollback journal (still safe,
            # writers just block readers); SQLite answers with the old mode, not an error.
            return
        except CatalogBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _inspect(conn: sqlite3.Connection, path: Path) -> int:
    """The file's skel schema version, 0 for an empty database; raise for anything else."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    if not tables and version == 0:
        return 0
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
    if meta.get("app") != schema.APP:
        raise CatalogError(
            f"{path}: an SQLite database that is not a skel catalog (no meta table with app = 'skel'; "
            f"tables: {', '.join(sorted(tables)) or 'none'}); refusing to touch it"
        )
    if str(version) != meta.get("schema_version"):
        raise CatalogError(
            f"{path}: inconsistent skel catalog (user_version {version}, meta schema_version "
            f"{meta.get('schema_version')!r}); left untouched"
        )
    if version > schema.CURRENT_VERSION:
        raise CatalogError(
            f"{path}: catalog schema version {version} is newer than this skel supports "
            f"({schema.CURRENT_VERSION}); upgrade skel or point --catalog elsewhere. The file was left untouched"
        )
    if version < 1:
        raise CatalogError(f"{path}: skel catalog with invalid schema version {version}; left untouched")
    return version


def _params_json(f: Finding) -> str:
    if not f.params:  # most findings: no need to encode
        return "{}"
    return _dumps(dict(f.params), f"{f.path}:{f.line}: params of finding {f.skeleton}")


def _kernel_id(kernel_ids: dict[str, list[tuple[int, int, int]]], f: Finding) -> int | None:
    """The recorded kernel a finding lies in: same name, and its line inside the kernel when names repeat.

    None when the finding names no recorded kernel (the name column still says which).
    """
    named = kernel_ids.get(f.kernel, [])
    inside = [k for k in named if k[0] <= f.line <= k[1]]
    chosen = inside or named
    return chosen[0][2] if chosen else None
