"""Hostile catalogs: damaged pages, rows that do not decode, missing tables, truncated files, and their repair.

Every catalog here is a real SQLite file made by `skel mine kernels` and `skel mine --history` (on the
repository of tests/history_repo.py), damaged by writing garbage over whole pages. Every verb either
works (when it does not read what was damaged) or exits 2 with one line that names the catalog and the
way forward; never a traceback. (Crafted names at promote: test_promote_paths.py; `skel mine
--history` killed with SIGKILL and resumed: test_history_resume.py.)
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import history_repo as hr
from catalog_files import (candidate_code, copy, damage, history_state, page_count, page_size, quiet, rightmost_child,
                           root_page, sha, table_rows)
from skel.catalog import schema
from skel.catalog.damage import CatalogBusy, CatalogDamaged, CatalogError, translate
from skel.cli import main

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repositories")

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNEL = "kernels/kda_decode/kernel.py"


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "repo"
    hr.build(path)
    return path


@pytest.fixture(scope="module")
def base(repo, tmp_path_factory):
    """A real catalog: the bundled kernels mined, and the test repository's history."""
    db = tmp_path_factory.mktemp("base") / "catalog.sqlite"
    quiet(["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--catalog", str(db)], expect=(0,))
    quiet(["mine", "--history", str(repo), "--no-progress", "--catalog", str(db)], expect=(0,))
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert not Path(str(db) + "-wal").exists() or Path(str(db) + "-wal").stat().st_size == 0
    conn.close()
    return db


# Which page a damage hits, as a function of the base catalog.
ROLES = {
    "findings root (interior)": lambda db: root_page(db, "findings"),
    "findings leaf": lambda db: rightmost_child(db, root_page(db, "findings")),
    "kernels root (interior)": lambda db: root_page(db, "kernels"),
    "candidates table": lambda db: root_page(db, "candidates"),
    "schema leaf": lambda db: rightmost_child(db, 1),
    "middle page": lambda db: page_count(db) // 2,
}

VERBS = {
    "list": ["catalog", "list", "--json"],  # with evidence (the text listing reads only the candidates)
    "list-preview": ["catalog", "list", "--status", "preview", "--json"],
    "show": ["catalog", "show", "SK015"],  # a skeleton with mined instances in kernels/
    "show-candidate": ["catalog", "show", "{cand}"],
    "prompt": ["catalog", "prompt", KERNEL],
    "mine": ["mine", str(REPO_ROOT / "kernels"), "--no-progress"],
    "mine-force": ["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--force"],
    "mine-history": ["mine", "--history", "{repo}", "--no-progress"],
    "search": ["catalog", "search", "rsqrt"],
    "match": ["match", KERNEL],
}
# Verbs that read (or write) what the damaged page holds: each of them must stop with exit 2.
MUST_FAIL = {
    "findings root (interior)": {"list", "show", "prompt", "mine", "mine-force"},
    "findings leaf": {"list", "mine", "mine-force"},
    "kernels root (interior)": {"mine", "mine-force"},
    "candidates table": {"list", "list-preview", "show-candidate", "mine-history"},
    "schema leaf": {"list", "list-preview", "show", "show-candidate", "prompt", "mine", "mine-force", "mine-history"},
    "middle page": set(),
}
NEVER_READ_THE_CATALOG = {"search", "match"}


def run_verb(verb: str, db: Path, repo: Path, cand: str, capsys) -> tuple[int, str, str]:
    argv = [a.format(cand=cand, repo=repo) for a in VERBS[verb]]
    if verb not in ("match",):
        argv += ["--catalog", str(db)]
    capsys.readouterr()
    try:
        rc = main(argv)
    except BaseException as exc:  # what the user would see as a traceback
        pytest.fail(f"skel {' '.join(argv)} raised {type(exc).__name__}: {exc}")
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clear_failure(rc: int, err: str, db: Path, what: str, before: int = 0) -> None:
    """Exit 2 and one error line naming the catalog and the way forward (after ``before`` lines of the verb's own
    progress notes)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (what, rc, err)
    assert len(lines) == before + 1 and "Traceback" not in err, (what, lines)
    line = lines[-1]
    assert line.startswith("skel: error: ") and str(db) in line, (what, line)
    assert "damaged" in line and "skel catalog repair" in line and "--catalog PATH" in line, line


def state(db: Path) -> tuple:
    """The main file and what its WAL holds (an empty -wal left by a reader holds nothing)."""
    wal = Path(str(db) + "-wal")
    return sha(db), sha(wal) if wal.exists() and wal.stat().st_size else None


# ------------------------------------------------------------ damaged pages
@pytest.mark.parametrize("role", ROLES)
def test_a_damaged_page_stops_every_verb_that_reads_it_with_one_clear_line(base, repo, tmp_path, capsys, role):
    cand = candidate_code(base)
    db = copy(base, tmp_path)
    page = ROLES[role](db)
    damage(db, page)
    for verb in VERBS:
        before = state(db)
        rc, out, err = run_verb(verb, db, repo, cand, capsys)
        if verb in MUST_FAIL[role] or rc == 2:
            assert_clear_failure(rc, err, db, f"{verb} with page {page} ({role}) damaged")
            assert state(db) == before, f"{verb} failed and wrote nothing"
        if verb in NEVER_READ_THE_CATALOG:
            assert rc in (0, 1), (verb, err)


def test_every_page_damaged_in_turn_never_gives_a_traceback(base, repo, tmp_path, capsys):
    cand = candidate_code(base)
    caught = set()
    for page in range(1, page_count(base) + 1):
        db = copy(base, tmp_path, f"p{page}.sqlite")
        damage(db, page)
        for verb in ("list-preview", "mine"):  # between them they read every table
            rc, _, err = run_verb(verb, db, repo, cand, capsys)
            if rc == 2:
                assert_clear_failure(rc, err, db, f"{verb} with page {page} damaged")
                caught.add(page)
            else:
                assert rc in (0, 1), (verb, page, err)
    print(f"{len(caught)} of {page_count(base)} damaged pages stopped a verb")
    assert len(caught) >= page_count(base) // 2, "most pages hold something these verbs read"


def test_the_cli_prints_no_traceback_and_json_gets_the_error(base, tmp_path):
    db = copy(base, tmp_path)
    damage(db, root_page(db, "findings"))
    for argv in (["catalog", "show", "SK015"], ["catalog", "list", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "skel", *argv, "--catalog", str(db)], capture_output=True,
                              text=True, cwd=REPO_ROOT, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and str(db) in proc.stderr
        if "--json" in argv:
            assert "skel catalog repair" in json.loads(proc.stdout)["error"]


def test_mcp_tools_answer_a_damaged_catalog_with_a_tool_error(base, tmp_path):
    pytest.importorskip("mcp", reason="the mcp SDK is not installed")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    db = copy(base, tmp_path)
    damage(db, root_page(db, "findings"))

    async def session_checks():
        env = {"SKEL_CATALOG": str(db), "TRITON_INTERPRET": "1", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        params = StdioServerParameters(command=sys.executable, args=["-m", "skel", "mcp"], env=env, cwd=str(REPO_ROOT))
        with open(tmp_path / "server.stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.call_tool("list_skeletons", {})
                text = "".join(getattr(c, "text", "") for c in listed.content)
                assert listed.is_error and str(db) in text and "skel catalog repair" in text, text
                assert "internal error" not in text
                found = await session.call_tool("search_skeletons", {"text": "rsqrt"})
                assert not found.is_error  # the server keeps serving; search never reads the catalog

    async def run():
        with anyio.fail_after(60):
            await session_checks()

    anyio.run(run)


def test_apply_preview_reading_damaged_candidates_exits_2(base, tmp_path, capsys):
    db = copy(base, tmp_path)
    damage(db, root_page(db, "candidates"))
    rc = main(["apply", KERNEL, "--dry-run", "--preview", "--catalog", str(db)])
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("skel apply: ")]
    assert_clear_failure(rc, err, db, "apply --preview", before=len(notes))


# ------------------------------------------------------------------- repair
def repair_json(db: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(["catalog", "repair", "--catalog", str(db), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("role", ["findings root (interior)", "kernels root (interior)", "candidates table",
                                  "schema leaf"])
def test_repair_salvages_every_row_when_only_structure_was_damaged(base, repo, tmp_path, capsys, role):
    cand = candidate_code(base)
    before = table_rows(base, skip=("mined_at", "updated_at", "content_hash", "head"))
    listed = run_verb("list-preview", copy(base, tmp_path, "pristine.sqlite"), repo, cand, capsys)[1]
    db = copy(base, tmp_path)
    damage(db, ROLES[role](db))
    damaged = sha(db)
    report = repair_json(db, capsys)
    assert report["damaged"] and report["usable"] and report["schema_version"] == schema.CURRENT_VERSION
    backup = Path(report["backup"])
    assert backup.parent == db.parent and backup.name.startswith("catalog.sqlite.damaged-")
    assert sha(backup) == damaged, "the damaged original is kept byte for byte"
    after = table_rows(db, skip=("mined_at", "updated_at", "content_hash", "head"))
    after["meta"].discard(("candidates_stale", "1"))  # how many rows a table held is not known: redistil
    assert after == before
    assert sum(t["from_pages"] for t in report["tables"]) > 0, "rows SQLite could not reach were read page by page"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    for verb in VERBS:  # every verb works again
        rc, out, err = run_verb(verb, db, repo, cand, capsys)
        assert rc in (0, 1), (verb, err)
    assert run_verb("list-preview", db, repo, cand, capsys)[1] == listed


def test_repair_reports_what_a_damaged_leaf_lost_and_the_next_mine_restores_it(base, repo, tmp_path, capsys):
    db = copy(base, tmp_path)
    before = table_rows(base, skip=("mined_at", "content_hash"))
    damage(db, rightmost_child(db, root_page(db, "findings")))
    capsys.readouterr()
    assert main(["catalog", "repair", "--catalog", str(db)]) == 0
    text = capsys.readouterr().out
    assert "findings:" in text and "lost" in text and "skel mine" in text, text
    report_after = table_rows(db, skip=("mined_at", "content_hash"))
    lost = len(before["findings"] - report_after["findings"])
    assert lost > 0 and not report_after["findings"] - before["findings"]
    # the report's count is the true one: the findings index still counted them
    again = copy(base, tmp_path, "again.sqlite")
    damage(again, rightmost_child(again, root_page(again, "findings")))
    findings = next(t for t in repair_json(again, capsys)["tables"] if t["table"] == "findings")
    assert findings["lost"] == lost and findings["expected"] == len(before["findings"])
    # every source is stale, so the next `skel mine` re-parses the files and records their findings again
    capsys.readouterr()
    assert main(["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--json", "--catalog", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["files"] > 0
    ids = ("mined_at", "content_hash", "id", "source_id", "kernel_id")
    assert table_rows(db, skip=ids)["findings"] == table_rows(base, skip=ids)["findings"]


def test_repair_of_a_healthy_catalog_changes_nothing(base, tmp_path, capsys):
    db = copy(base, tmp_path)
    digest = sha(db)
    report = repair_json(db, capsys)
    assert report["damaged"] is False and report["backup"] is None
    assert sha(db) == digest and sorted(p.name for p in tmp_path.iterdir()) == ["catalog.sqlite"]


def test_repair_refuses_what_is_not_a_skel_catalog(tmp_path, capsys):
    notes = tmp_path / "notes.sqlite"
    notes.write_text("my notes\n" * 100)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    broken = tmp_path / "broken.sqlite"  # someone else's SQLite file whose schema page is damaged
    with sqlite3.connect(broken) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        conn.executemany("INSERT INTO users(name, age) VALUES (?, ?)", [("ada", 36), ("alan", 41)])
    conn.close()
    damage(broken, 1)
    for path in (notes, foreign, broken, tmp_path / "missing.sqlite"):
        digest = sha(path) if path.exists() else None
        capsys.readouterr()
        assert main(["catalog", "repair", "--catalog", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and len(err.strip().splitlines()) == 1
        assert (sha(path) if path.exists() else None) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.sqlite", "foreign.sqlite", "notes.sqlite"]


def test_rows_that_do_not_decode_are_damage_and_repair_drops_them(base, tmp_path, capsys):
    db = copy(base, tmp_path)
    with sqlite3.connect(db) as conn:
        kid = conn.execute("SELECT id FROM kernels ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute("UPDATE kernels SET profile_json = '{\"name\": \"cut he' WHERE id = ?", (kid,))
        conn.execute("UPDATE kernels SET profile_json = CAST(X'7B22FF' AS TEXT) WHERE id = ?", (kid + 1,))
    capsys.readouterr()
    rc = main(["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--catalog", str(db)])
    err = capsys.readouterr().err
    assert_clear_failure(rc, err, db, "mine with a kernel row that does not decode")
    assert "table kernels" in err
    report = repair_json(db, capsys)
    kernels = next(t for t in report["tables"] if t["table"] == "kernels")
    assert kernels["undecodable"] == 2 and kernels["lost"] == 2
    assert main(["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--catalog", str(db)]) == 0
    assert table_rows(db, ("mined_at", "content_hash", "id", "source_id"))["kernels"] == \
        table_rows(base, ("mined_at", "content_hash", "id", "source_id"))["kernels"]


def test_a_missing_table_and_a_truncated_file_are_damage_and_repair_restores_a_usable_catalog(base, tmp_path,
                                                                                             capsys):
    dropped = copy(base, tmp_path, "dropped.sqlite")
    with sqlite3.connect(dropped) as conn:
        conn.execute("DROP TABLE validation_runs")
    truncated = copy(base, tmp_path, "truncated.sqlite")
    truncated.write_bytes(truncated.read_bytes()[:page_size(truncated) * (page_count(truncated) // 2)])
    for db in (dropped, truncated):
        capsys.readouterr()
        rc = main(["catalog", "list", "--catalog", str(db)])
        assert_clear_failure(rc, capsys.readouterr().err, db, f"catalog list on {db.name}")
        assert repair_json(db, capsys)["damaged"]
        assert main(["catalog", "list", "--catalog", str(db)]) == 0
        assert main(["mine", str(REPO_ROOT / "kernels"), "--no-progress", "--catalog", str(db)]) == 0


def test_repair_reads_committed_work_a_killed_writer_left_in_the_wal(base, tmp_path, capsys):
    db = copy(base, tmp_path)
    code = textwrap.dedent("""
        import os, signal, sys
        from skel.catalog.store import open_catalog, ValidationRun
        cat = open_catalog(sys.argv[1])
        cat.record_validation(ValidationRun(("SK002",), "kda", "T=1", "fp32", "speedup", "accepted", median=1.5))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert Path(str(db) + "-wal").stat().st_size > 0, "the verdict is only in the WAL"
    damage(db, rightmost_child(db, 1))  # the schema: SQLite cannot read the file at all now
    report = repair_json(db, capsys)
    runs = next(t for t in report["tables"] if t["table"] == "validation_runs")
    assert runs["salvaged"] == 1 and runs["from_pages"] == 1
    assert Path(report["backup"] + "-wal").exists(), "the WAL went with the damaged file"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT verdict, median FROM validation_runs").fetchall() == [("accepted", 1.5)]


@pytest.mark.parametrize("code, name, kind", [
    (11, "database disk image is malformed", CatalogDamaged), (26, "file is not a database", CatalogDamaged),
    (522, "disk I/O error", CatalogDamaged), (8, "attempt to write a readonly database", CatalogError),
    (13, "database or disk is full", CatalogError), (14, "unable to open database file", CatalogError),
    (5, "database is locked", CatalogBusy), (1, "no such table: kernels", CatalogDamaged),
    (1, "no such table: someone_elses", None), (1, 'near "SELEC": syntax error', None),
    (19, "UNIQUE constraint failed: sources.path", None),
])
def test_sqlite_errors_about_the_file_become_one_line_naming_it(tmp_path, code, name, kind):
    exc = sqlite3.OperationalError(name)
    exc.sqlite_errorcode = code
    got = translate(exc, tmp_path / "c.sqlite", "SELECT * FROM findings")
    if kind is None:
        assert got is None
        return
    assert type(got) is kind
    assert str(tmp_path / "c.sqlite") in str(got) and "\n" not in str(got)
    assert ("--catalog PATH" in str(got)) == (kind is not CatalogBusy)  # busy: wait, not another catalog
    assert ("skel catalog repair" in str(got)) == (kind is CatalogDamaged)


def test_lost_history_is_rewalked_after_repair(base, repo, tmp_path, capsys):
    db = copy(base, tmp_path)
    damage(db, root_page(db, "history_edits"))  # a one-page table: its edits are gone
    report = repair_json(db, capsys)
    edits = next(t for t in report["tables"] if t["table"] == "history_edits")
    assert edits["salvaged"] == 0 and edits["lost"] == len(table_rows(base)["history_edits"])
    assert any("mine --history" in f for f in report["follow_up"])
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress"]) == 0
    assert history_state(db) == history_state(base)
