"""The catalog store on real SQLite files: round trips, migration, crashes, concurrency, bad files."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from skel.catalog import schema
from skel.skeletons.library import Condition, Constraints, Provenance, Skeleton, Transformation
from skel.skeletons.rule import Rule
from skel.catalog.store import (
    CatalogError,
    Evidence,
    Finding,
    RecordError,
    SourceRecord,
    ValidationRun,
    default_catalog_path,
    open_catalog,
    resolve_catalog_path,
)
from skel.errors import UsageError
from skel.catalog.records import KernelProfile, Loop, MathOp, Param, ProgramAxis


# ------------------------------------------------------------------ builders
def skeleton(code="SK001", name="rsqrt-norm", lifecycle="preview", method="multiply by tl.rsqrt") -> Skeleton:
    return Skeleton(
        code=code, name=name, title="Norm by rsqrt", category="compute", lifecycle=lifecycle,
        availability="always", safety="unsafe", targets=("triton",), families=("kda",),
        conditions=(Condition("div-by-sqrt-norm", "divides by tl.sqrt of a reduction", "no such division"),),
        transformation=Transformation("codemod", method, ("find the division", "rewrite")),
        constraints=Constraints("none", "none", "any", "unchanged", "nothing"),
        provenance=(Provenance("fla-core", "fla/ops/kda/fused_recurrent.py", 120, "0.6.0"),),
        conflicts=(), enables=(), docs={"What it does": "x"}, rule=Rule, before="a = 1\n", after="a = 2\n",
        folder=Path("/lib") / code,
    )


def profile(name="kda_kernel", path="repo/k.py", line=10, end_line=60) -> KernelProfile:
    return KernelProfile(
        name=name, path=path, language="triton", line=line, end_line=end_line,
        params=(Param("q", None, False), Param("BV", "tl.constexpr", True)),
        program_axes=(ProgramAxis(0, "i_v", line + 1, ("i_v",), (("i_v", "v-tile"),)),),
        loops=(Loop(line + 5, line + 20, "i_t", "range(0, T)", "range", True, 1),),
        memops=(), reductions=(), dots=(),
        math=(MathOp("div", line + 7, "b_q / tl.sqrt(x)", None, (("denominator", "tl.sqrt(x)"),)),),
        dtypes=("tl.float32",), launches=(), dataflow=(("pid:0", "i_v@11"),), notes=("test",),
    )


def finding(kind="instance", path="repo/k.py", line=17, kernel="kda_kernel", code="SK001", **params) -> Finding:
    return Finding(code, kind, path, line, line + 1, kernel, tuple(params.items()))


def run(codes=("SK001",), verdict="accepted", median=80.8, ci=(80.1, 81.5), **kw) -> ValidationRun:
    lo, hi = ci if ci else (None, None)
    return ValidationRun(skeletons=tuple(codes), kernel="kda_decode", shape="N=64,T=1", dtype="bf16",
                         metric="time", verdict=verdict, median=median, ci_low=lo, ci_high=hi, unit="us", **kw)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def layout(db: Path) -> dict:
    """Tables with their columns (name, type, notnull, default, pk), foreign keys and indexes."""
    conn = sqlite3.connect(db)
    out = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
        out[table] = (
            conn.execute(f"PRAGMA table_info({table})").fetchall(),
            conn.execute(f"PRAGMA foreign_key_list({table})").fetchall(),
            sorted((r[1], tuple(c[2] for c in conn.execute(f"PRAGMA index_info({r[1]})")))
                   for r in conn.execute(f"PRAGMA index_list({table})")),
        )
    conn.close()
    return out


# ------------------------------------------------------------------- paths
def test_path_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("SKEL_CATALOG", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_catalog_path() == tmp_path / "home" / ".cache" / "skel" / "catalog.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec ignores relative values
    assert default_catalog_path() == tmp_path / "home" / ".cache" / "skel" / "catalog.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_catalog_path() == tmp_path / "xdg" / "skel" / "catalog.sqlite"
    monkeypatch.setenv("SKEL_CATALOG", str(tmp_path / "env.sqlite"))
    assert default_catalog_path() == tmp_path / "env.sqlite"
    assert resolve_catalog_path(None) == tmp_path / "env.sqlite"
    assert resolve_catalog_path(tmp_path / "explicit.sqlite") == tmp_path / "explicit.sqlite"

    with open_catalog() as cat:  # env var used, parent folders created
        assert cat.path == tmp_path / "env.sqlite"
    assert (tmp_path / "env.sqlite").is_file()
    monkeypatch.delenv("SKEL_CATALOG")
    with open_catalog() as cat:
        assert cat.path == tmp_path / "xdg" / "skel" / "catalog.sqlite"
    assert cat.path.is_file()


def test_fresh_catalog_is_marked_and_in_wal(tmp_path):
    db = tmp_path / "a" / "b" / "cat.sqlite"
    with open_catalog(db) as cat:
        assert cat.version == schema.CURRENT_VERSION == 3
        assert cat.stats().to_json() == {
            "path": str(db), "schema_version": 3, "skeletons": 0, "sources": 0, "failed_sources": 0,
            "kernels": 0, "instances": 0, "opportunities": 0, "validation_runs": 0,
        }
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert dict(conn.execute("SELECT key, value FROM meta")) == {"app": "skel", "schema_version": "3"}
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    open_catalog(db).close()  # reopening an up-to-date catalog works and changes nothing
    assert layout(db)["meta"]


def test_empty_file_is_initialised_but_directory_is_refused(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with open_catalog(empty) as cat:
        assert cat.stats().schema_version == 3
    with pytest.raises(CatalogError, match="not a regular file") as err:
        open_catalog(tmp_path)
    assert str(tmp_path) in str(err.value)


# -------------------------------------------------------------- round trips
def test_sync_library_upserts_and_reports(tmp_path):
    with open_catalog(tmp_path / "c.sqlite") as cat:
        first = cat.sync_library([skeleton("SK001"), skeleton("SK002", "launch-bv")])
        assert (first.added, first.changed, first.unchanged, first.absent) == (("SK001", "SK002"), (), (), ())
        entries = cat.skeleton_entries()
        assert entries["SK001"] == skeleton("SK001").to_json()
        again = cat.sync_library([skeleton("SK001", lifecycle="stable"), skeleton("SK002", "launch-bv")])
        assert again.changed == ("SK001",) and again.unchanged == ("SK002",)
        moved = cat.sync_library([dataclasses.replace(skeleton("SK001", lifecycle="stable"), folder=Path("/other"))])
        assert moved.unchanged == ("SK001",), "the folder location is not part of the content hash"
        assert moved.absent == ("SK002",)
        assert set(cat.skeleton_entries()) == {"SK001", "SK002"}, "absent codes are kept, never reused"
        row = cat._conn.execute("SELECT lifecycle FROM skeletons WHERE code='SK001'").fetchone()
        assert row == ("stable",)
        assert cat.stats().skeletons == 2


def test_record_file_round_trip(tmp_path):
    k1, k2 = profile("kda_kernel", line=10, end_line=60), profile("gdn_kernel", line=70, end_line=90)
    found = [
        finding("instance", line=17, BV=32, shape=(4, 128)),
        finding("opportunity", line=75, kernel="gdn_kernel", code="SK002"),
        finding("opportunity", line=5, kernel="host_helper"),  # names no recorded kernel
    ]
    src = SourceRecord("repo/k.py", "hash-1", repo="fla-core", mtime=1.5, size=1234)
    with open_catalog(tmp_path / "c.sqlite") as cat:
        assert cat.source_hash("repo/k.py") is None
        sid = cat.record_file(src, [k1, k2], found)
        assert cat.source_hash("repo/k.py") == "hash-1"
        stored = cat.source("repo/k.py")
        assert stored.mined_at and dataclasses.replace(stored, mined_at="") == src
        assert cat.profiles("repo/k.py") == [k1, k2]
        assert cat.findings(path="repo/k.py") == sorted(found, key=lambda f: f.line)
        assert cat.findings(skeleton="sk002") == [found[1]]
        assert cat.findings(kind="instance")[0].params == (("BV", 32), ("shape", (4, 128)))
        assert cat.findings(kernel="gdn_kernel", limit=5) == [found[1]]
        links = dict(cat._conn.execute("SELECT f.line, k.name FROM findings f LEFT JOIN kernels k ON k.id = f.kernel_id"))
        assert links == {17: "kda_kernel", 75: "gdn_kernel", 5: None}
        assert cat._conn.execute("SELECT DISTINCT source_id FROM findings").fetchall() == [(sid,)]
        assert found[0].to_json()["params"] == {"BV": 32, "shape": [4, 128]}
        json.dumps([f.to_json() for f in found] + [src.to_json()])


def test_dict_params_and_lists_are_normalised_to_hashable_pairs(tmp_path):
    f = Finding("SK001", "instance", "a.py", 3, 4, "k", {"BV": 16, "dims": [1, 2]})
    assert f.params == (("BV", 16), ("dims", (1, 2))) and hash(f)
    r = dataclasses.replace(run(), extra={"seeds": [0, 1]}, skeletons=["SK001"])
    assert r.extra == (("seeds", (0, 1)),) and r.skeletons == ("SK001",) and hash(r)
    with open_catalog(tmp_path / "c.sqlite") as cat:
        cat.record_file(SourceRecord("a.py", "h"), [], [f])
        cat.record_validation(r)
        assert cat.findings() == [f]
        assert dataclasses.replace(cat.validation_runs()[0], id=None, created_at="") == r


def test_record_file_replaces_everything_for_that_file(tmp_path):
    with open_catalog(tmp_path / "c.sqlite") as cat:
        cat.record_file(SourceRecord("other.py", "o"), [profile(path="other.py")], [finding(path="other.py")])
        cat.record_file(SourceRecord("repo/k.py", "v1"), [profile(), profile("second", line=70, end_line=80)],
                        [finding(line=12), finding(line=13), finding("opportunity", line=72, kernel="second")])
        cat.record_file(SourceRecord("repo/k.py", "v2"), [profile(line=20, end_line=40)], [finding(line=25, BV=16)])
        assert cat.source_hash("repo/k.py") == "v2"
        assert cat.findings(path="repo/k.py") == [finding(line=25, BV=16)]
        assert [p.line for p in cat.profiles("repo/k.py")] == [20]
        s = cat.stats()
        assert (s.sources, s.kernels, s.instances, s.opportunities) == (2, 2, 2, 0)
        orphans = cat._conn.execute(
            "SELECT COUNT(*) FROM findings WHERE kernel_id IS NOT NULL AND kernel_id NOT IN (SELECT id FROM kernels)"
        ).fetchone()[0]
        assert orphans == 0 and cat._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        # A file that no longer parses replaces its old kernels and findings with the error.
        cat.record_file(SourceRecord("repo/k.py", "v3", error="SyntaxError: line 3"))
        assert cat.findings(path="repo/k.py") == [] and cat.profiles("repo/k.py") == []
        assert [x.path for x in cat.sources(failed_only=True)] == ["repo/k.py"]
        assert cat.source_hash("repo/k.py") == "v3", "an unchanged broken file is not re-parsed"
        assert cat.stats().failed_sources == 1
        assert cat.forget_source("repo/k.py") and not cat.forget_source("repo/k.py")
        assert [x.path for x in cat.sources()] == ["other.py"] and cat.stats().kernels == 1


def test_validation_runs_and_evidence(tmp_path):
    with open_catalog(tmp_path / "c.sqlite") as cat:
        cat.record_file(SourceRecord("a.py", "h"), [profile(path="a.py")],
                        [finding(path="a.py", line=12), finding("opportunity", path="a.py", line=30),
                         finding("opportunity", path="a.py", line=31), finding(path="a.py", line=20, code="SK002")])
        r1 = cat.record_validation(run(extra=(("rotations", 4), ("shapes", ("a", "b")))))
        r2 = cat.record_validation(run(("SK002", "SK001"), verdict="rejected", median=None, ci=None,
                                       reason="numerics: rel rms 0.2 > 0.005 at element (0, 3)"))
        cat.record_validation(run(("SK002",), verdict="not-measured", median=None, ci=None, created_at="2026-01-01T00:00:00+00:00"))
        ev = cat.evidence("sk001")
        assert ev.code == "SK001"
        assert [(f.path, f.line) for f in ev.instances] == [("a.py", 12)]
        assert ev.opportunities == 2
        assert [r.id for r in ev.runs] == [r1, r2]
        assert ev.verdicts == {"accepted": 1, "rejected": 1}
        first = ev.runs[0]
        assert (first.median, first.ci_low, first.ci_high, first.unit) == (80.8, 80.1, 81.5, "us")
        assert first.extra == (("rotations", 4), ("shapes", ("a", "b")))
        assert dataclasses.replace(first, id=None, created_at="") == run(extra=first.extra)
        assert ev.runs[1].median is None and ev.runs[1].ci_low is None
        assert cat.evidence("SK002").verdicts == {"not-measured": 1, "rejected": 1}
        assert cat.validation_runs(skeleton="SK002")[-1].created_at == "2026-01-01T00:00:00+00:00"
        assert cat.evidence("SK009").to_json() == Evidence.empty("sk009").to_json() == {
            "code": "SK009", "instance_count": 0, "opportunities": 0, "verdicts": {}, "items": []}
        js = ev.to_json()
        assert js["instance_count"] == 1 and js["opportunities"] == 2
        assert [(i["type"], i.get("line"), i.get("verdict")) for i in js["items"]] == [
            ("instance", 12, None), ("verdict", None, "accepted"), ("verdict", None, "rejected")]
        assert js["items"][1]["kernel"] == "kda_decode" and js["items"][1]["ci_low"] == 80.1
        assert js["items"][1]["extra"] == {"rotations": 4, "shapes": ["a", "b"]}
        json.dumps(js)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: ("rec", finding(kind="maybe")), "kind 'maybe'"),
        (lambda: ("rec", finding(code="X1")), "not a code"),
        (lambda: ("rec", Finding("SK001", "instance", "repo/k.py", 9, 3, "k")), "line <= end_line"),
        (lambda: ("rec", finding(path="elsewhere.py")), "another file"),
        (lambda: ("rec", finding(bad=float("nan"))), "not storable as JSON"),
        (lambda: ("rec", finding(bad=object())), "not storable as JSON"),
        (lambda: ("val", run(ci=(2.0, 1.0))), "ci_low 2.0 > ci_high 1.0"),
        (lambda: ("val", run(median=float("inf"))), "finite"),
        (lambda: ("val", run(codes=())), "non-empty tuple of codes"),
        (lambda: ("val", dataclasses.replace(run(), verdict="")), "'verdict'"),
    ],
)
def test_malformed_records_are_refused_and_nothing_is_written(tmp_path, bad, message):
    with open_catalog(tmp_path / "c.sqlite") as cat:
        what, record = bad()
        with pytest.raises(RecordError, match=message):
            if what == "rec":
                cat.record_file(SourceRecord("repo/k.py", "h"), [profile()], [finding(line=40), record])
            else:
                cat.record_validation(record)
        s = cat.stats()
        assert (s.sources, s.kernels, s.instances, s.validation_runs) == (0, 0, 0, 0)


def test_transaction_groups_work_and_rolls_back_on_error(tmp_path):
    with open_catalog(tmp_path / "c.sqlite") as cat:
        with pytest.raises(RuntimeError):
            with cat.transaction():
                cat.record_file(SourceRecord("a.py", "h"), [], [finding(path="a.py")])
                cat.record_validation(run())
                raise RuntimeError("boom")
        assert cat.stats().sources == 0 and cat.stats().validation_runs == 0
        with cat.transaction():
            cat.record_file(SourceRecord("a.py", "h"))
            try:  # a caught failure inside rolls back only its own (savepoint) part
                with cat.transaction():
                    cat.record_validation(run())
                    raise KeyError("inner")
            except KeyError:
                pass
            cat.record_file(SourceRecord("b.py", "h"))
        assert [s.path for s in cat.sources()] == ["a.py", "b.py"] and cat.stats().validation_runs == 0


# ---------------------------------------------------------------- migration
def build_v1(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("BEGIN")
    schema.create_version(conn, schema.DDL_V1, 1)
    conn.execute("INSERT INTO skeletons VALUES ('SK001', 'rsqrt-norm', 'compute', 'preview', '{}', 'h0')")
    conn.execute("INSERT INTO sources(id, repo, path, content_hash, mtime, size, mined_at) "
                 "VALUES (7, 'fla-core', 'fla/k.py', 'abc', 2.0, 99, '2025-01-01T00:00:00+00:00')")
    conn.execute("INSERT INTO kernels(id, source_id, name, language, line, end_line, profile_json) "
                 "VALUES (3, 7, 'kda_kernel', 'triton', 10, 60, ?)", (json.dumps(profile(path="fla/k.py").to_json()),))
    conn.execute("INSERT INTO findings(id, skeleton, source_id, kernel_id, path, line, end_line, kernel, params_json) "
                 "VALUES (11, 'SK001', 7, 3, 'fla/k.py', 17, 18, 'kda_kernel', '{\"BV\": 32}')")
    conn.execute("INSERT INTO validation_runs(id, skeletons_json, kernel, shape, dtype, metric, median, unit, verdict, "
                 "reason, created_at) VALUES (5, '[\"SK001\"]', 'kda_decode', 'N=64', 'bf16', 'time', 80.8, 'us', "
                 "'accepted', '', '2025-01-02T00:00:00+00:00')")
    conn.execute("COMMIT")
    conn.close()


def test_v1_database_is_migrated_forward(tmp_path):
    old, fresh = tmp_path / "v1.sqlite", tmp_path / "fresh.sqlite"
    build_v1(old)
    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone()[0] == 1
    with open_catalog(old) as cat:
        assert cat.version == 3
        assert cat.findings() == [Finding("SK001", "instance", "fla/k.py", 17, 18, "kda_kernel", (("BV", 32),))]
        [r] = cat.validation_runs()
        assert (r.id, r.median, r.ci_low, r.ci_high, r.verdict) == (5, 80.8, None, None, "accepted")
        assert cat.profiles("fla/k.py") == [profile(path="fla/k.py")]
        assert cat.source_hash("fla/k.py") == "abc"
        assert cat.evidence("SK001").to_json()["instance_count"] == 1
        assert cat.validation_runs(kernel="kda_decode")[0].id == 5
        assert cat._conn.execute("SELECT id, kernel_id FROM findings").fetchall() == [(11, 3)]
        assert cat._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert cat._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The migrated tables behave as v2: kinds are checked, cascades still work.
        with pytest.raises(sqlite3.IntegrityError):
            cat._conn.execute("INSERT INTO findings(skeleton, kind, source_id, path, line, end_line, kernel) "
                              "VALUES ('SK001', 'bogus', 7, 'p', 1, 1, 'k')")
        cat.record_file(SourceRecord("fla/k.py", "def"), [], [finding("opportunity", path="fla/k.py")])
        assert cat.stats().opportunities == 1 and cat.stats().instances == 0 and cat.stats().kernels == 0
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert dict(conn.execute("SELECT key, value FROM meta")) == {"app": "skel", "schema_version": "3"}
    conn.close()
    open_catalog(fresh).close()
    assert layout(old) == layout(fresh), "a migrated file has exactly the layout of a fresh one"


def test_failed_migration_leaves_the_v1_file_as_it_was(tmp_path, monkeypatch):
    db = tmp_path / "v1.sqlite"
    build_v1(db)
    before = layout(db)

    def half_then_fail(conn):
        conn.execute("ALTER TABLE findings RENAME TO findings_v1")
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    monkeypatch.setitem(schema.MIGRATIONS, 1, half_then_fail)
    with pytest.raises(CatalogError, match="simulated"):
        open_catalog(db)
    assert layout(db) == before
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 1


# ------------------------------------------------------------- bad files
def test_newer_version_is_refused_and_untouched(tmp_path):
    db = tmp_path / "future.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    schema.create_version(conn, schema.DDL_V3, 4)
    conn.execute("COMMIT")
    conn.close()
    digest = sha(db)
    with pytest.raises(CatalogError, match="newer than this skel supports") as err:
        open_catalog(db)
    assert str(db) in str(err.value) and isinstance(err.value, UsageError)
    assert sha(db) == digest and sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize("kind", ["other-app", "other-meta"])
def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path, kind):
    db = tmp_path / "foreign.db"
    conn = sqlite3.connect(db)
    if kind == "other-app":
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users(name) VALUES ('ada')")
    else:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('app', 'someone-else')")
    conn.commit()
    conn.close()
    digest = sha(db)
    with pytest.raises(CatalogError, match="not a skel catalog") as err:
        open_catalog(db)
    assert str(db) in str(err.value)
    assert sha(db) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"], "no -wal/-journal files left behind"


def test_non_sqlite_and_corrupt_files_are_refused_and_untouched(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("these are my notes, not a database\n" * 50)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    trashed = tmp_path / "trashed.sqlite"  # a real catalog whose first page (the schema) was overwritten
    conn = sqlite3.connect(trashed, isolation_level=None)
    conn.execute("BEGIN")
    schema.create_current(conn)
    conn.execute("COMMIT")
    conn.close()
    data = bytearray(trashed.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)
    trashed.write_bytes(bytes(data))
    for path, message in ((text, "not an SQLite database"), (garbage, "not a usable skel catalog"),
                          (trashed, "not a usable skel catalog")):
        digest = sha(path)
        with pytest.raises(CatalogError, match=message) as err:
            open_catalog(path)
        msg = str(err.value)
        assert str(path) in msg and ("untouched" in msg or "refusing" in msg), msg
        assert sha(path) == digest, path


# ------------------------------------------------- crashes and concurrency
CHILD_HEADER = """
import os, signal, sys
from skel.catalog.store import open_catalog, SourceRecord, Finding, ValidationRun
"""


def child(script: str, *args: str) -> subprocess.Popen:
    code = CHILD_HEADER + textwrap.dedent(script)
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("death", ["sigkill", "os_exit"])
def test_writer_killed_mid_transaction_leaves_catalog_intact(tmp_path, death):
    db = tmp_path / "c.sqlite"
    proc = child(
        """
        cat = open_catalog(sys.argv[1])
        cat.record_file(SourceRecord("kept.py", "k"), [], [Finding("SK001", "instance", "kept.py", 1, 2, "k")])
        with cat.transaction():
            # Big enough (several MB) that SQLite spills uncommitted pages into the WAL.
            for i in range(300):
                fs = [Finding("SK002", "opportunity", f"partial{i}.py", j + 1, j + 1, "k", (("pad", "x" * 400),))
                      for j in range(40)]
                cat.record_file(SourceRecord(f"partial{i}.py", "p"), [], fs)
            cat.record_validation(ValidationRun(("SK002",), "t", "s", "fp32", "time", "accepted"))
            print("written", flush=True)
            if sys.argv[2] == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        """,
        str(db), death,
    )
    out, err = proc.communicate(timeout=120)
    assert out.strip() == "written", err
    assert proc.returncode == (-signal.SIGKILL if death == "sigkill" else 3)
    assert Path(str(db) + "-wal").stat().st_size > 1_000_000, "the partial transaction did reach the WAL file"
    with open_catalog(db) as cat:
        assert cat._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [s.path for s in cat.sources()] == ["kept.py"]
        s = cat.stats()
        assert (s.instances, s.opportunities, s.validation_runs) == (1, 0, 0)
        cat.record_validation(run())  # the dead writer's lock is gone
        assert cat.stats().validation_runs == 1


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db = tmp_path / "shared" / "c.sqlite"  # does not exist yet: both processes race to create it
    go = tmp_path / "go"
    script = """
        import time
        tag, go = sys.argv[2], sys.argv[3]
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        start = time.time()
        cat = open_catalog(sys.argv[1])
        for i in range(100):
            time.sleep(0.001)  # let the other writer in between our transactions
            path = f"{tag}/{i}.py"
            cat.record_file(SourceRecord(path, f"h{i}"), [],
                            [Finding("SK001", "instance", path, 3, 4, "k", (("i", i),)),
                             Finding("SK002", "opportunity", path, 8, 9, "k")])
            cat.record_validation(ValidationRun(("SK001",), f"{tag}-{i}", "s", "fp32", "time", "accepted", 1.0 + i))
        print("done", start, time.time(), flush=True)
    """
    procs = [child(script, str(db), tag, str(go)) for tag in ("a", "b")]
    for p in procs:  # both imported and waiting before either starts
        assert p.stdout.readline().strip() == "ready"
    go.touch()
    spans = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.split()[0] == "done", err
        spans.append(tuple(map(float, out.split()[1:])))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, f"the writers did not overlap in time: {spans}"
    with open_catalog(db) as cat:
        s = cat.stats()
        assert (s.sources, s.instances, s.opportunities, s.validation_runs) == (200, 200, 200, 200)
        for tag in ("a", "b"):
            assert {r.kernel for r in cat.validation_runs(skeleton="SK001") if r.kernel.startswith(tag)} == {
                f"{tag}-{i}" for i in range(100)}
            assert sorted(dict(f.params)["i"] for f in cat.findings(kind="instance") if f.path.startswith(tag)) == list(range(100))
        assert cat._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"



def test_switch_to_wal_waits_for_a_writer_instead_of_failing(tmp_path):
    # SQLite answers "database is locked" at once (no busy handler) when a journal-mode switch
    # meets another connection's write lock; several processes opening a new catalog together hit it.
    db = tmp_path / "c.sqlite"
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN")
    schema.create_current(conn)  # a current catalog still in rollback-journal mode
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for a moment
    releaser = threading.Timer(0.3, lambda: conn.execute("COMMIT"))
    releaser.start()
    try:
        with open_catalog(db) as cat:
            assert cat._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        releaser.join()
        conn.close()


def test_validation_runs_accept_preview_candidate_codes(tmp_path):
    """Verdicts on history-mined candidates (SKP + 5 hex) are evidence too; other codes are refused."""
    from skel.catalog.records import RecordError, ValidationRun

    with open_catalog(tmp_path / "c.sqlite") as cat:
        cat.record_validation(ValidationRun(("SK001", "SKP0A1B2"), "kda_decode", "N1-T1", "bfloat16", "speedup", "faster"))
        assert [r.skeletons for r in cat.validation_runs(skeleton="SKP0A1B2")] == [("SK001", "SKP0A1B2")]
        with pytest.raises(RecordError):
            cat.record_validation(ValidationRun(("SKPXYZ",), "kda_decode", "N1-T1", "bfloat16", "speedup", "faster"))
