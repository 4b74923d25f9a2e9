"""Real catalog files for the hostile-input tests: copies, page geometry, damage, row dumps.

``damage`` writes deterministic garbage over one whole page (from byte 100 on page 1, so the file
header stays intact); ``rightmost_child`` and ``root_page`` find pages by role without SQLite's
optional dbstat table.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import random
import shutil
import sqlite3
from pathlib import Path

from skel.cli import main


def quiet(argv: list[str], expect=(0, 1)) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(argv)
    assert rc in expect, (argv, rc, err.getvalue())
    return rc


def copy(base: Path, tmp_path: Path, name: str = "catalog.sqlite") -> Path:
    db = tmp_path / name
    shutil.copy(base, db)
    return db


def page_size(db: Path) -> int:
    return int.from_bytes(db.read_bytes()[16:18], "big")


def page_count(db: Path) -> int:
    return db.stat().st_size // page_size(db)


def root_page(db: Path, name: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    finally:
        conn.close()


def rightmost_child(db: Path, page: int) -> int:
    """The right-most child of an interior b-tree page (the header's pointer at offset 8)."""
    size = page_size(db)
    head = (page - 1) * size + (100 if page == 1 else 0)
    data = db.read_bytes()
    assert data[head] in (2, 5), f"page {page} is not an interior page"
    return int.from_bytes(data[head + 8:head + 12], "big")


def damage(db: Path, page: int) -> None:
    """Garbage over page ``page`` (from byte 100 on page 1, so that the file header stays intact)."""
    size = page_size(db)
    data = bytearray(db.read_bytes())
    start = (page - 1) * size + (100 if page == 1 else 0)
    data[start:page * size] = random.Random(page).randbytes(page * size - start)
    db.write_bytes(bytes(data))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def candidate_code(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT code FROM candidates ORDER BY score DESC, code").fetchone()[0]
    finally:
        conn.close()


def table_rows(db: Path, skip=("mined_at", "updated_at")) -> dict[str, set]:
    conn = sqlite3.connect(db)
    try:
        out = {}
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})") if r[1] not in skip]
            out[t] = set(conn.execute(f"SELECT {', '.join(cols)} FROM {t}"))
        return out
    finally:
        conn.close()



HISTORY_TABLES = ("meta", "history_repos", "history_edits", "candidates", "candidate_occurrences")


def history_state(db: Path) -> dict:
    """What history mining left in the catalog, timestamps aside."""
    return {t: rows for t, rows in table_rows(db).items() if t in HISTORY_TABLES}
