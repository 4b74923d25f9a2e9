"""Catalogs from many machines, merged: ``skel catalog export`` and ``skel catalog import|merge``.

An export is JSON Lines: a header (format, schema version, where it came from), then one record per
mined file (with its kernels and findings), per validation run, per history repository and history
edit, and per promoted candidate, each kind sorted by its key, so that two catalogs with the same
content export the same lines. Importing is a deterministic merge, whatever the order of the inputs:

- a mined file is keyed by its path: the record mined last wins (mined_at, then content hash), and it
  brings its own kernels and findings, which replace the old ones (findings are never added twice);
- a validation run (a verdict) is keyed by its content (every field but the row id): one already
  present is not added again, so importing the same evidence twice changes nothing;
- a history edit is keyed by (repo, commit, path, kernel), a history repository by its name (the walk
  with more commits wins); the preview candidates are then distilled again from all edits, and
  promotions are kept;
- provenance stays: records keep their own paths, repositories, commits, GPUs, versions and times,
  and every import is noted (origin catalog, host, time) in the catalog's ``meta``; an export lists
  them in its header.
"""
from __future__ import annotations

import hashlib
import json
import socket
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from skel.catalog import schema
from skel.catalog.records import MinedEdit

FORMAT = "skel-catalog-export"
FORMAT_VERSION = 1
IMPORT_KEY = "import:{digest}"


class ExchangeError(ValueError):
    """An export file or catalog that cannot be imported (the message names it and why)."""


@dataclass(frozen=True)
class ImportReport:
    origin: str
    sources_added: int = 0
    sources_replaced: int = 0
    sources_kept: int = 0  # the catalog's own record was the newer one
    runs_added: int = 0
    runs_known: int = 0
    edits_added: int = 0
    edits_known: int = 0
    already_imported: bool = False

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> str:
        if self.already_imported:
            return f"{self.origin}: already imported, nothing changed"
        return (f"{self.origin}: files {self.sources_added} added, {self.sources_replaced} replaced, "
                f"{self.sources_kept} kept (newer here); verdicts {self.runs_added} added, {self.runs_known} already "
                f"here; history edits {self.edits_added} added, {self.edits_known} already here")


# ------------------------------------------------------------------------------------------ export
def export_records(conn: sqlite3.Connection, origin: str, header: bool = True) -> Iterator[dict]:
    """Every record of the catalog behind ``conn``, header first, each kind in key order."""
    if header:
        yield {"type": "header", "format": FORMAT, "format_version": FORMAT_VERSION,
               "schema_version": schema.CURRENT_VERSION, "origins": _origins(conn, origin)}
    yield from _sources(conn)
    runs = [_run_record(r) for r in _rows(conn, "SELECT * FROM validation_runs")]
    yield from sorted(runs, key=lambda r: r["key"])
    for r in _rows(conn, "SELECT * FROM history_repos ORDER BY repo"):
        yield {"type": "history_repo", "repo": r["repo"], "head": r["head"], "commits": r["commits"],
               "mined_at": r["mined_at"]}
    for r in _rows(conn, "SELECT * FROM history_edits ORDER BY repo, commit_sha, path, kernel"):
        yield _edit_record(r)
    for r in _rows(conn, "SELECT code, promoted_as FROM candidates WHERE status = 'promoted' ORDER BY code"):
        yield {"type": "promoted", "code": r["code"], "promoted_as": r["promoted_as"]}


def export_lines(conn: sqlite3.Connection, origin: str, header: bool = True) -> Iterator[str]:
    for record in export_records(conn, origin, header):
        yield json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)


def content_digest(conn: sqlite3.Connection) -> str:
    """sha256 of the export without its header: equal for catalogs holding the same records."""
    h = hashlib.sha256()
    for line in export_lines(conn, "", header=False):
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def _sources(conn: sqlite3.Connection) -> Iterator[dict]:
    for s in _rows(conn, "SELECT * FROM sources ORDER BY path"):
        kernels = _rows(conn, "SELECT * FROM kernels WHERE source_id = ? ORDER BY line, name, id", (s["id"],))
        findings = _rows(conn, "SELECT * FROM findings WHERE source_id = ?", (s["id"],))
        yield {
            "type": "source", "path": s["path"], "repo": s["repo"], "content_hash": s["content_hash"],
            "mtime": s["mtime"], "size": s["size"], "mined_at": s["mined_at"], "error": s["error"],
            "kernels": [{"name": k["name"], "language": k["language"], "line": k["line"], "end_line": k["end_line"],
                         "profile": json.loads(k["profile_json"])} for k in kernels],
            "findings": sorted(({"skeleton": f["skeleton"], "kind": f["kind"], "line": f["line"],
                                 "end_line": f["end_line"], "kernel": f["kernel"],
                                 "params": json.loads(f["params_json"])} for f in findings), key=_canonical),
        }


_RUN_FIELDS = ("kernel", "shape", "dtype", "metric", "median", "ci_low", "ci_high", "unit", "gpu", "torch_version",
               "triton_version", "source_hash", "verdict", "reason", "created_at")


def _run_record(r) -> dict:
    record = {name: r[name] for name in _RUN_FIELDS}
    record["skeletons"] = json.loads(r["skeletons_json"])
    record["extra"] = json.loads(r["extra_json"])
    return {"type": "run", "key": run_key(record), **record}


def run_key(record: dict) -> str:
    """A verdict's identity: the hash of everything it says (not the row id it got in one catalog)."""
    body = {k: v for k, v in record.items() if k not in ("type", "key", "id")}
    return hashlib.sha256(_canonical(body).encode()).hexdigest()[:32]


def _edit_record(r) -> dict:
    return {"type": "history_edit", "repo": r["repo"], "commit_sha": r["commit_sha"], "message": r["message"],
            "committed_at": r["committed_at"], "path": r["path"], "kernel": r["kernel"], "line": r["line"],
            "jit": r["jit"], "local_names": json.loads(r["local_names_json"]), "edits": json.loads(r["edits_json"])}


def _origins(conn: sqlite3.Connection, origin: str) -> list[dict]:
    """This catalog, then every import it holds (each with its own origins): the provenance chain."""
    me = {"catalog": origin, "host": socket.gethostname(), "exported_at": _now()}
    imported = [json.loads(r["value"]) for r in _rows(conn, "SELECT value FROM meta WHERE key LIKE 'import:%' "
                                                            "ORDER BY key")]
    return [me, *imported]


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------ import
def read_export(path: Path) -> Iterator[dict]:
    """The records of an export file (JSON Lines) or of a catalog file (read-only, never modified)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise ExchangeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(b"SQLite format 3"):
        return _read_catalog(path)
    return _read_lines(path)


def _read_catalog(path: Path) -> Iterator[dict]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error as exc:
        raise ExchangeError(f"{path}: not a readable skel catalog ({exc})") from None
    if meta.get("app") != schema.APP:
        raise ExchangeError(f"{path}: an SQLite file that is not a skel catalog")
    if version != schema.CURRENT_VERSION:
        raise ExchangeError(f"{path}: catalog schema version {version}, this skel reads {schema.CURRENT_VERSION}: "
                            f"open it once with this skel (skel catalog list --catalog {path}) to migrate it")

    def records():
        try:
            yield from export_records(conn, str(path.resolve()))
        finally:
            conn.close()

    return records()


def _read_lines(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ExchangeError(f"{path}:{n}: not a JSON line ({exc})") from None
            if n == 1 and (record.get("type") != "header" or record.get("format") != FORMAT):
                raise ExchangeError(f"{path}: not a skel catalog export (no {FORMAT} header on line 1)")
            if record.get("type") == "header" and record.get("format_version", 0) > FORMAT_VERSION:
                raise ExchangeError(f"{path}: export format {record['format_version']} is newer than this skel "
                                    f"reads ({FORMAT_VERSION})")
            yield record


class ExchangeStore:
    """Catalog methods for export and import (mixed into ``skel.catalog.store.Catalog``)."""

    def export_lines(self, header: bool = True) -> Iterator[str]:
        with self.snapshot():
            yield from export_lines(self._conn, str(Path(self.path).resolve()), header)

    def content_digest(self) -> str:
        with self.snapshot():
            return content_digest(self._conn)

    def import_records(self, records: Iterable[dict], origin: str,
                       distill: Callable[[list[MinedEdit]], Iterable]) -> ImportReport:
        """Merge ``records`` (``read_export``) into this catalog in one transaction (see the module docstring).

        ``distill`` turns all history edits into the patterns of the preview candidates (the miner's
        clustering, ``skel.miner.history_cluster.distill`` with the support the caller wants); it runs when the
        import brought edits or promotions."""
        from skel.catalog.store import _kernel_id
        from skel.catalog.records import Finding

        records = list(records)
        header = records[0] if records and records[0].get("type") == "header" else {}
        body = [r for r in records if r.get("type") != "header"]
        digest = hashlib.sha256("\n".join(_canonical(r) for r in body).encode()).hexdigest()[:24]
        counts = dict(sources_added=0, sources_replaced=0, sources_kept=0, runs_added=0, runs_known=0,
                      edits_added=0, edits_known=0)
        conn = self._conn
        with self.transaction():
            key = IMPORT_KEY.format(digest=digest)
            if conn.execute("SELECT 1 FROM meta WHERE key = ?", (key,)).fetchone():
                return ImportReport(origin, already_imported=True)
            known_runs = {_run_record(r)["key"] for r in _rows(conn, "SELECT * FROM validation_runs")}
            promoted: list[dict] = []
            for r in body:
                kind = r.get("type")
                if kind == "source":
                    counts[self._import_source(r, _kernel_id, Finding)] += 1
                elif kind == "run":
                    if run_key(r) in known_runs:
                        counts["runs_known"] += 1
                    else:
                        self._import_run(r)
                        known_runs.add(run_key(r))
                        counts["runs_added"] += 1
                elif kind == "history_repo":
                    self._import_repo(r)
                elif kind == "history_edit":
                    counts["edits_added" if self._import_edit(r) else "edits_known"] += 1
                elif kind == "promoted":
                    promoted.append(r)
            note = {"catalog": origin, "host": socket.gethostname(), "imported_at": _now(),
                    "origins": header.get("origins", []), **counts}
            self._set_meta(key, _canonical(note))
        if counts["edits_added"] or promoted:
            self._redistill(promoted, distill)
        return ImportReport(origin, **counts)

    # -- one record each --------------------------------------------------------------------------------
    def _import_source(self, r: dict, kernel_id, finding_cls) -> str:
        conn = self._conn
        mine = conn.execute("SELECT id, mined_at, content_hash FROM sources WHERE path = ?", (r["path"],)).fetchone()
        if mine is not None and (mine[1], mine[2]) >= (r["mined_at"], r["content_hash"]):
            return "sources_kept"
        if mine is not None:
            conn.execute("DELETE FROM sources WHERE id = ?", (mine[0],))
        sid = conn.execute(
            "INSERT INTO sources(repo, path, content_hash, mtime, size, mined_at, error) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (r["repo"], r["path"], r["content_hash"], r["mtime"], r["size"], r["mined_at"], r["error"])).lastrowid
        ids: dict[str, list[tuple[int, int, int]]] = {}
        for k in r["kernels"]:
            kid = conn.execute(
                "INSERT INTO kernels(source_id, name, language, line, end_line, profile_json) VALUES (?, ?, ?, ?, ?, ?)",
                (sid, k["name"], k["language"], k["line"], k["end_line"], json.dumps(k["profile"]))).lastrowid
            ids.setdefault(k["name"], []).append((k["line"], k["end_line"], kid))
        for f in r["findings"]:
            probe = finding_cls(f["skeleton"], f["kind"], r["path"], f["line"], f["end_line"], f["kernel"])
            conn.execute(
                "INSERT INTO findings(skeleton, kind, source_id, kernel_id, path, line, end_line, kernel, params_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (f["skeleton"], f["kind"], sid, kernel_id(ids, probe), r["path"], f["line"], f["end_line"], f["kernel"],
                 json.dumps(f["params"])))
        return "sources_replaced" if mine is not None else "sources_added"

    def _import_run(self, r: dict) -> None:
        self._conn.execute(
            "INSERT INTO validation_runs(skeletons_json, kernel, shape, dtype, metric, median, ci_low, ci_high, unit, "
            "gpu, torch_version, triton_version, source_hash, verdict, reason, created_at, extra_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (json.dumps(r["skeletons"]), *(r[name] for name in _RUN_FIELDS[:14]), r["created_at"],
             json.dumps(r["extra"])))

    def _import_repo(self, r: dict) -> None:
        mine = self._conn.execute("SELECT commits, head FROM history_repos WHERE repo = ?", (r["repo"],)).fetchone()
        if mine is not None and (mine[0], mine[1]) >= (r["commits"], r["head"]):
            return
        self._conn.execute(
            "INSERT INTO history_repos(repo, head, commits, mined_at) VALUES (?, ?, ?, ?) ON CONFLICT(repo) DO UPDATE "
            "SET head = excluded.head, commits = excluded.commits, mined_at = excluded.mined_at",
            (r["repo"], r["head"], r["commits"], r["mined_at"]))

    def _import_edit(self, r: dict) -> bool:
        """True when the edit was new here. Two versions of one edit (miners of different versions): the one
        whose content hashes lower is kept, so the outcome does not depend on the import order."""
        conn = self._conn
        where = (r["repo"], r["commit_sha"], r["path"], r["kernel"])
        found = conn.execute("SELECT * FROM history_edits WHERE repo = ? AND commit_sha = ? AND path = ? AND "
                             "kernel = ?", where).fetchone()
        if found is not None:
            mine = _edit_record(_rows(conn, "SELECT * FROM history_edits WHERE id = ?", (found[0],))[0])
            if _canonical(mine) <= _canonical(r):
                return False
            conn.execute("DELETE FROM history_edits WHERE id = ?", (found[0],))
        if conn.execute("SELECT 1 FROM history_repos WHERE repo = ?", (r["repo"],)).fetchone() is None:
            conn.execute("INSERT INTO history_repos(repo, head, commits, mined_at) VALUES (?, '', 0, ?)",
                         (r["repo"], _now()))
        conn.execute(
            "INSERT INTO history_edits(repo, commit_sha, message, committed_at, path, kernel, line, jit, "
            "local_names_json, edits_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*where[:2], r["message"], r["committed_at"], r["path"], r["kernel"], r["line"], r["jit"],
             json.dumps(r["local_names"]), json.dumps(r["edits"])))
        return found is None

    def _redistill(self, promoted: list[dict], distill) -> None:
        self.store_candidates(list(distill(self.history_edits())))
        with self.transaction():
            for p in promoted:
                self._conn.execute("UPDATE candidates SET status = 'promoted', promoted_as = ? WHERE code = ? AND "
                                   "status = 'preview'", (p["promoted_as"], p["code"]))


def _rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
    cur = conn.execute(sql, args)
    cur.row_factory = sqlite3.Row
    return cur.fetchall()
