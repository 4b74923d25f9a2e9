"""The catalog's SQLite schema, every version of it, and the steps between them.

The schema version lives in two places: ``PRAGMA user_version`` (what SQLite
tools show) and the ``meta`` table (``app = 'skel'``, ``schema_version``), so a
SQLite file that skel did not create is recognised as foreign and left alone.

Each migration is one function ``v(N) -> v(N+1)`` run inside the caller's write
transaction; SQLite DDL is transactional, so a failed or interrupted migration
leaves the file at the old version. Old DDL stays here, unchanged, so tests can
build a real database of each old version and open it.
"""
from __future__ import annotations

import sqlite3
from typing import Callable

APP = "skel"
CURRENT_VERSION = 4

# Tables whose layout is the same in every version so far.
COMMON = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE skeletons (
    code         TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    category     TEXT NOT NULL,
    lifecycle    TEXT NOT NULL,
    entry_json   TEXT NOT NULL,
    content_hash TEXT NOT NULL
);
CREATE TABLE sources (
    id           INTEGER PRIMARY KEY,
    repo         TEXT NOT NULL DEFAULT '',
    path         TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL,
    mtime        REAL,
    size         INTEGER,
    mined_at     TEXT NOT NULL,
    error        TEXT
);
CREATE TABLE kernels (
    id           INTEGER PRIMARY KEY,
    source_id    INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    language     TEXT NOT NULL,
    line         INTEGER NOT NULL,
    end_line     INTEGER NOT NULL,
    profile_json TEXT NOT NULL
);
CREATE INDEX kernels_source ON kernels(source_id);
"""

# Version 1: the first released layout. Findings were all mined instances (no
# ``kind``) and validation runs kept a median without its confidence interval.
FINDINGS_V1 = """
CREATE TABLE findings (
    id          INTEGER PRIMARY KEY,
    skeleton    TEXT NOT NULL,
    source_id   INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    kernel_id   INTEGER REFERENCES kernels(id) ON DELETE CASCADE,
    path        TEXT NOT NULL,
    line        INTEGER NOT NULL,
    end_line    INTEGER NOT NULL,
    kernel      TEXT NOT NULL,
    params_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX findings_skeleton ON findings(skeleton);
CREATE INDEX findings_source ON findings(source_id);
"""

VALIDATION_RUNS_V1 = """
CREATE TABLE validation_runs (
    id             INTEGER PRIMARY KEY,
    skeletons_json TEXT NOT NULL,
    kernel         TEXT NOT NULL,
    shape          TEXT NOT NULL,
    dtype          TEXT NOT NULL,
    metric         TEXT NOT NULL,
    median         REAL,
    unit           TEXT NOT NULL DEFAULT '',
    gpu            TEXT NOT NULL DEFAULT '',
    torch_version  TEXT NOT NULL DEFAULT '',
    triton_version TEXT NOT NULL DEFAULT '',
    source_hash    TEXT NOT NULL DEFAULT '',
    verdict        TEXT NOT NULL,
    reason         TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL,
    extra_json     TEXT NOT NULL DEFAULT '{}'
);
"""
DDL_V1 = COMMON + FINDINGS_V1 + VALIDATION_RUNS_V1

# Version 2: findings carry a kind (instance | opportunity); runs carry a confidence interval.
FINDINGS_V2 = """
CREATE TABLE findings (
    id          INTEGER PRIMARY KEY,
    skeleton    TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('instance', 'opportunity')),
    source_id   INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    kernel_id   INTEGER REFERENCES kernels(id) ON DELETE CASCADE,
    path        TEXT NOT NULL,
    line        INTEGER NOT NULL,
    end_line    INTEGER NOT NULL,
    kernel      TEXT NOT NULL,
    params_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX findings_skeleton ON findings(skeleton, kind);
CREATE INDEX findings_source ON findings(source_id);
"""

VALIDATION_RUNS_V2 = """
CREATE TABLE validation_runs (
    id             INTEGER PRIMARY KEY,
    skeletons_json TEXT NOT NULL,
    kernel         TEXT NOT NULL,
    shape          TEXT NOT NULL,
    dtype          TEXT NOT NULL,
    metric         TEXT NOT NULL,
    median         REAL,
    ci_low         REAL,
    ci_high        REAL,
    unit           TEXT NOT NULL DEFAULT '',
    gpu            TEXT NOT NULL DEFAULT '',
    torch_version  TEXT NOT NULL DEFAULT '',
    triton_version TEXT NOT NULL DEFAULT '',
    source_hash    TEXT NOT NULL DEFAULT '',
    verdict        TEXT NOT NULL,
    reason         TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL,
    extra_json     TEXT NOT NULL DEFAULT '{}'
);
"""


DDL_V2 = COMMON + FINDINGS_V2 + VALIDATION_RUNS_V2

# Version 3: history mining. The edits each commit made to each kernel (kept so clusters can be
# recomputed when more history arrives), the last mined commit per repository (incremental
# mining), and the candidate (preview) skeletons distilled from them with their occurrences.
HISTORY_V3 = """
CREATE TABLE history_repos (
    repo     TEXT PRIMARY KEY,
    head     TEXT NOT NULL,
    commits  INTEGER NOT NULL,
    mined_at TEXT NOT NULL
);
CREATE TABLE history_edits (
    id               INTEGER PRIMARY KEY,
    repo             TEXT NOT NULL REFERENCES history_repos(repo) ON DELETE CASCADE,
    commit_sha       TEXT NOT NULL,
    message          TEXT NOT NULL,
    committed_at     TEXT NOT NULL,
    path             TEXT NOT NULL,
    kernel           TEXT NOT NULL,
    line             INTEGER NOT NULL,
    jit              INTEGER NOT NULL,
    local_names_json TEXT NOT NULL,
    edits_json       TEXT NOT NULL,
    UNIQUE (repo, commit_sha, path, kernel)
);
CREATE TABLE candidates (
    code         TEXT PRIMARY KEY,
    pattern_key  TEXT NOT NULL UNIQUE,
    name         TEXT NOT NULL,
    title        TEXT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'preview' CHECK (status IN ('preview', 'promoted')),
    promoted_as  TEXT,
    score        REAL NOT NULL,
    kernels      INTEGER NOT NULL,
    commits      INTEGER NOT NULL,
    perf_commits INTEGER NOT NULL,
    pattern_json TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE TABLE candidate_occurrences (
    id           INTEGER PRIMARY KEY,
    candidate    TEXT NOT NULL REFERENCES candidates(code) ON DELETE CASCADE,
    repo         TEXT NOT NULL,
    commit_sha   TEXT NOT NULL,
    path         TEXT NOT NULL,
    line         INTEGER NOT NULL,
    kernel       TEXT NOT NULL,
    message      TEXT NOT NULL,
    committed_at TEXT NOT NULL
);
CREATE INDEX candidate_occurrences_candidate ON candidate_occurrences(candidate);
"""
DDL_V3 = DDL_V2 + HISTORY_V3

# Version 4: indexes only. Without ``findings(kernel_id)`` every kernel row deleted (re-mining a
# changed file cascades to its findings) scanned the whole findings table: 0.24 s per file in a
# catalog of 5,000 files. ``findings(path)`` serves the per-file queries of match, prompt and show.
INDEXES_V4 = """
CREATE INDEX findings_kernel ON findings(kernel_id);
CREATE INDEX findings_path ON findings(path, line);
"""
DDL_V4 = DDL_V3 + INDEXES_V4


def write_version(conn: sqlite3.Connection, version: int) -> None:
    conn.execute(f"PRAGMA user_version = {int(version)}")
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(version),),
    )


def create_version(conn: sqlite3.Connection, ddl: str, version: int) -> None:
    """Create an empty catalog of the given DDL/version (inside the caller's transaction)."""
    for stmt in ddl.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("INSERT INTO meta(key, value) VALUES ('app', ?)", (APP,))
    write_version(conn, version)


def create_current(conn: sqlite3.Connection) -> None:
    create_version(conn, DDL_V4, CURRENT_VERSION)


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    # Rebuild rather than ALTER TABLE ADD COLUMN so a migrated file has exactly the
    # columns, order and constraints of a fresh version-2 file. Every v1 finding was a
    # mined instance; v1 runs had no interval, so theirs stays NULL (never guessed).
    conn.execute("ALTER TABLE findings RENAME TO findings_v1")
    conn.execute("DROP INDEX findings_skeleton")
    conn.execute("DROP INDEX findings_source")
    for stmt in FINDINGS_V2.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute(
        "INSERT INTO findings(id, skeleton, kind, source_id, kernel_id, path, line, end_line, kernel, params_json) "
        "SELECT id, skeleton, 'instance', source_id, kernel_id, path, line, end_line, kernel, params_json FROM findings_v1"
    )
    conn.execute("DROP TABLE findings_v1")

    conn.execute("ALTER TABLE validation_runs RENAME TO validation_runs_v1")
    conn.execute(VALIDATION_RUNS_V2)
    cols = (
        "id, skeletons_json, kernel, shape, dtype, metric, median, unit, gpu, torch_version, "
        "triton_version, source_hash, verdict, reason, created_at, extra_json"
    )
    conn.execute(f"INSERT INTO validation_runs({cols}) SELECT {cols} FROM validation_runs_v1")
    conn.execute("DROP TABLE validation_runs_v1")


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    # Purely additive: the history tables start empty (history is re-mined on demand).
    for stmt in HISTORY_V3.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    # Indexes only: the tables and their rows stay as they are.
    for stmt in INDEXES_V4.split(";"):
        if stmt.strip():
            conn.execute(stmt)


# MIGRATIONS[n] takes a version-n database to version n+1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _migrate_1_to_2,
    2: _migrate_2_to_3,
    3: _migrate_3_to_4,
}


def migrate(conn: sqlite3.Connection, from_version: int) -> list[int]:
    """Step ``conn`` forward to CURRENT_VERSION inside the caller's transaction; return the versions passed."""
    passed = []
    version = from_version
    while version < CURRENT_VERSION:
        MIGRATIONS[version](conn)
        version += 1
        write_version(conn, version)
        passed.append(version)
    return passed
