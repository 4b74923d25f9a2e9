"""History mining: git repositories built in the test, distilled patterns asserted exactly."""
from __future__ import annotations

import ast
import json
import shutil
import sqlite3

import pytest

import history_repo as hr
from skel.catalog import schema
from skel.catalog.library import load_skeleton
from skel.catalog.store import open_catalog
from skel.cli import main
from skel.miner.history import mine_history
from skel.miner.history_edits import diff_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repositories")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("kernels")
    shas = hr.build(path)
    return path, shas


@pytest.fixture(scope="module")
def mined(repo, tmp_path_factory):
    path, shas = repo
    db = tmp_path_factory.mktemp("cat") / "catalog.sqlite"
    report = mine_history(path, catalog=db)
    return report, db


def test_two_patterns_with_exact_holes_and_provenance(repo, mined):
    path, shas = repo
    report, _ = mined
    assert report.commits == len(hr.STEPS) and report.kernel_commits == 4
    assert report.errors == ()
    rsqrt, exp2 = report.candidates

    assert rsqrt.key == "replace: $1 / tl.sqrt($2) => $1 * tl.rsqrt($2)"
    assert [h.to_json() for h in rsqrt.holes] == [
        {"name": "$1", "kind": "name", "examples": ["b_q", "b_k", "b_v"]},
        {"name": "$2", "kind": "expr",
         "examples": ["tl.sum(b_q * b_q) + 1e-06", "tl.sum(b_k * b_k) + 1e-05", "tl.sum(b_v * b_v) / D + eps"]},
    ]
    assert [e.to_json() for e in rsqrt.refined] == [
        {"kind": "replace", "before": "$1 / tl.sqrt($2 + $3)", "after": "$1 * tl.rsqrt($2 + $3)"}]
    assert [(h.name, h.kind) for h in rsqrt.refined_holes] == [("$1", "name"), ("$2", "expr"), ("$3", "expr")]
    assert [c.id for c in rsqrt.conditions] == ["seen-form", "hole-2-reduction", "in-jit-function"]
    assert "$2 is computed by a reduction (tl.sum)" in rsqrt.conditions[1].holds
    msg_rsqrt = hr.STEPS[2][0]
    assert [o.to_json() for o in rsqrt.occurrences] == [
        {"repo": str(path.resolve()), "commit": shas[2], "path": "ops/kernels.py", "line": 10,
         "kernel": "l2norm_q_kernel", "message": msg_rsqrt, "date": "2024-01-03T12:00:00+00:00"},
        {"repo": str(path.resolve()), "commit": shas[2], "path": "ops/kernels.py", "line": 19,
         "kernel": "l2norm_k_kernel", "message": msg_rsqrt, "date": "2024-01-03T12:00:00+00:00"},
        {"repo": str(path.resolve()), "commit": shas[6], "path": "ops/kernels.py", "line": 29,
         "kernel": "rmsnorm_kernel", "message": "perf: rsqrt in rmsnorm", "date": "2024-01-07T12:00:00+00:00"},
    ]
    assert (rsqrt.kernels, rsqrt.commits, rsqrt.perf_commits, rsqrt.score) == (3, 2, 2, 10.0)

    assert [e.to_json() for e in exp2.edits] == [
        {"kind": "insert", "before": "", "after": "$1 = $2 * 1.4426950408889634"},
        {"kind": "replace", "before": "$3 * $2", "after": "$3 * $1"},
        {"kind": "replace", "before": "tl.exp($4)", "after": "tl.math.exp2($4)"},
    ]
    assert [h.to_json() for h in exp2.holes] == [
        {"name": "$1", "kind": "name", "examples": ["qk_scale", "qs"]},
        {"name": "$2", "kind": "name", "examples": ["scale", "sm_scale"]},
        {"name": "$3", "kind": "expr", "examples": ["tl.sum(b_q * b_k)", "tl.sum(q * kj)"]},
        {"name": "$4", "kind": "expr", "examples": ["b_m - b_m_new", "m_i - m_new"]},
    ]
    assert [e.to_json() for e in exp2.refined] == [
        {"kind": "insert", "before": "", "after": "$1 = $2 * 1.4426950408889634"},
        {"kind": "replace", "before": "tl.sum($3 * $4) * $2", "after": "tl.sum($3 * $4) * $1"},
        {"kind": "replace", "before": "tl.exp($5 - $6)", "after": "tl.math.exp2($5 - $6)"},
    ]
    assert [c.id for c in exp2.conditions] == ["seen-form", "inside-loop", "in-jit-function"]
    assert [(o.commit, o.kernel, o.line) for o in exp2.occurrences] == [
        (shas[7], "attn_fwd_kernel", 38), (shas[8], "decode_kernel", 60)]
    assert (exp2.kernels, exp2.commits, exp2.perf_commits, exp2.score) == (2, 2, 1, 7.58)


def test_noise_commits_yield_no_edit(repo, mined):
    """Reformatting, a consistent rename, moving statements and a README change are not kernel edits."""
    _, shas = repo
    _, db = mined
    with open_catalog(db) as cat:
        by_commit = {}
        for m in cat.history_edits():
            by_commit.setdefault(m.commit, []).append(m.kernel_edit.kernel)
    assert by_commit == {shas[2]: ["l2norm_q_kernel", "l2norm_k_kernel"], shas[6]: ["rmsnorm_kernel"],
                         shas[7]: ["attn_fwd_kernel"], shas[8]: ["decode_kernel"]}


def test_noise_only_history_distils_nothing(tmp_path):
    steps = [s for s in hr.STEPS if s[0] in ("initial kernels", "style: reformat kernels", "rename rmsnorm locals",
                                             "move independent statements", "docs: README")]
    hr.build(tmp_path / "noise", steps)
    report = mine_history(tmp_path / "noise", catalog=tmp_path / "c.sqlite")
    assert report.commits == 5 and report.files == 3
    assert report.kernel_edits == 0 and report.candidates == ()


def test_single_edit_is_not_a_pattern(tmp_path):
    """One occurrence is below the support threshold; lowering it to 1 distils it."""
    hr.build(tmp_path / "r", hr.STEPS[:3])
    assert mine_history(tmp_path / "r", catalog=tmp_path / "a.sqlite").candidates != ()  # two kernels in one commit
    hr.build(tmp_path / "s", hr.STEPS[:2] + [("rsqrt q", {"q_op": "* tl.rsqrt(tl.sum(b_q * b_q) + 1e-6)"}, True)])
    assert mine_history(tmp_path / "s", catalog=tmp_path / "b.sqlite").candidates == ()
    assert len(mine_history(tmp_path / "s", catalog=tmp_path / "c.sqlite", min_support=1).candidates) == 1


def test_incremental_remine_does_no_work_and_new_commits_are_added(tmp_path):
    path, db = tmp_path / "r", tmp_path / "c.sqlite"
    shas = hr.build(path, hr.STEPS[:7])
    first = mine_history(path, catalog=db)
    assert [c.key for c in first.candidates] == ["replace: $1 / tl.sqrt($2) => $1 * tl.rsqrt($2)"]
    again = mine_history(path, catalog=db)
    assert (again.commits, again.blobs, again.files, again.since) == (0, 0, 0, shas[-1])
    assert [c.code for c in again.candidates] == [c.code for c in first.candidates]
    # Two more commits: only they are walked, and the exp2 pattern appears.
    state = dict(hr.INITIAL)
    for _, change, _ in hr.STEPS[:7]:
        state.update(change or {})
    for n, (message, change, messy) in enumerate(hr.STEPS[7:], 7):
        state.update(change)
        (path / "ops" / "kernels.py").write_text(hr.render(state, messy))
        hr.git(path, "commit", "-qam", message, date=f"2024-01-{n + 1:02d}T12:00:00+00:00")
    more = mine_history(path, catalog=db)
    assert more.commits == 2 and more.since == shas[-1]
    assert len(more.candidates) == 2 and more.candidates[0].code == first.candidates[0].code
    with open_catalog(db) as cat:
        assert cat.history_repos()[0]["commits"] == 9


def test_renamed_locals_are_not_edits_but_a_rename_plus_change_is_one_edit():
    old = ast.parse("@triton.jit\ndef k(x, D):\n    b_x = tl.load(x)\n    b_x = b_x / tl.sqrt(tl.sum(b_x * b_x))\n    return b_x\n")
    renamed = ast.parse("@triton.jit\ndef k(x, D):\n    b_y = tl.load(x)\n    b_y = b_y / tl.sqrt(tl.sum(b_y * b_y))\n    return b_y\n")
    both = ast.parse("@triton.jit\ndef k(x, D):\n    b_y = tl.load(x)\n    b_y = b_y * tl.rsqrt(tl.sum(b_y * b_y))\n    return b_y\n")
    assert diff_files("f.py", old, renamed) == []
    [ke] = diff_files("f.py", old, both)
    assert [(e.kind, e.before, e.after) for e in ke.edits] == [
        ("replace", "b_y / tl.sqrt(tl.sum(b_y * b_y))", "b_y * tl.rsqrt(tl.sum(b_y * b_y))")]


def test_hoisting_out_of_a_loop_is_an_edit_but_reordering_is_not():
    base = "def k(a, T):\n    s = 0\n    for t in range(T):\n        w = tl.load(a)\n        s += w * t\n    return s\n"
    hoisted = "def k(a, T):\n    s = 0\n    w = tl.load(a)\n    for t in range(T):\n        s += w * t\n    return s\n"
    reordered = "def k(a, T):\n    for t in range(T):\n        w = tl.load(a)\n        s += w * t\n    s = 0\n    return s\n"
    [ke] = diff_files("f.py", ast.parse(base), ast.parse(hoisted))
    assert [(e.kind, e.nesting) for e in ke.edits] == [("insert", ""), ("delete", "for")]
    assert diff_files("f.py", ast.parse(base), ast.parse(base.replace("    s = 0\n", "    s = 0  # init\n"))) == []
    assert len(diff_files("f.py", ast.parse(base), ast.parse(reordered))) == 0


def test_not_a_git_repository_is_a_usage_error(tmp_path, capsys):
    assert main(["mine", "--history", str(tmp_path), "--catalog", str(tmp_path / "c.sqlite")]) == 2
    assert "not a git repository" in capsys.readouterr().err


def test_cli_list_preview_shows_candidates_and_promote_writes_a_checked_folder(repo, mined, tmp_path, capsys):
    _, db = mined
    lib = tmp_path / "lib"
    shutil.copytree(load_skeleton.__globals__["default_root"](), lib,
                    ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    assert main(["catalog", "list", "--status", "preview", "--catalog", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    cands = [e for e in listed if e.get("origin") == "history"]
    assert [(c["name"], c["support"]["kernels"]) for c in cands] == [("sqrt-to-rsqrt", 3), ("exp-to-exp2", 2)]
    code = cands[0]["code"]
    assert main(["catalog", "list", "--status", "stable", "--catalog", str(db), "--json"]) == 0
    assert all(e.get("origin") != "history" for e in json.loads(capsys.readouterr().out))

    assert main(["catalog", "promote", code, "--catalog", str(db), "--library", str(lib)]) == 0
    folder = lib / "SK014-sqrt-to-rsqrt"
    sk, problems = load_skeleton(folder)
    assert problems == [] and sk.code == "SK014" and sk.transformation.kind == "pattern"
    assert [p.line for p in sk.provenance] == [10, 19, 29]
    capsys.readouterr()
    assert main(["catalog", "promote", code, "--check", "--catalog", str(db), "--library", str(lib)]) == 0
    (folder / "docs.md").write_text((folder / "docs.md").read_text() + "\nhand edit\n")
    assert main(["catalog", "promote", code, "--check", "--catalog", str(db), "--library", str(lib)]) == 1
    assert "docs.md: differs" in capsys.readouterr().err
    assert main(["catalog", "promote", code, "--catalog", str(db), "--library", str(lib)]) == 2  # already promoted
    with open_catalog(db) as cat:
        assert cat.candidate(code).promoted_as == "SK014"


def test_v2_catalog_is_migrated_to_v3_with_empty_history_tables(tmp_path):
    db = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    schema.create_version(conn, schema.DDL_V2, 2)
    conn.execute("COMMIT")
    conn.close()
    with open_catalog(db) as cat:
        assert cat.version == schema.CURRENT_VERSION
        assert cat.candidates() == [] and cat.history_edits() == [] and cat.history_head("x") is None
    fresh = tmp_path / "fresh.sqlite"
    open_catalog(fresh).close()

    def tables(p):
        c = sqlite3.connect(p)
        rows = sorted(c.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        c.close()
        return rows

    assert tables(db) == tables(fresh)


# ------------------------------------------------------------ pattern engine
TARGET = '''import triton
import triton.language as tl


@triton.jit
def k(x, o, eps, D: tl.constexpr):
    b = tl.load(x + tl.arange(0, D))  # row
    c = tl.load(o + tl.arange(0, D))
    b = b / tl.sqrt(tl.sum(b * b) + eps)   # normalise
    c = c / tl.sqrt(tl.sum(b * b) + eps)
    tl.store(o + tl.arange(0, D), b + c)


def host(b):
    return b / tl.sqrt(tl.sum(b * b) + 1)
'''
L2 = [{"kind": "replace", "before": "$1 / tl.sqrt(tl.sum($1 * $1) + $2)", "after": "$1 * tl.rsqrt(tl.sum($1 * $1) + $2)"}]


def test_pattern_engine_binds_repeated_holes_keeps_formatting_and_is_idempotent():
    from skel.rewriter.pattern import apply_pattern

    r = apply_pattern("SKP00000", TARGET, L2, [{"id": "in-jit-function"}])
    assert r.status == "applied" and [c.line for c in r.changes] == [9]
    assert "    b = b * tl.rsqrt(tl.sum(b * b) + eps)   # normalise\n" in r.source
    assert "    c = c / tl.sqrt(tl.sum(b * b) + eps)\n" in r.source  # $1 bound twice: c != b
    assert "return b / tl.sqrt(tl.sum(b * b) + 1)" in r.source  # not a jit function
    assert r.source.replace("b * tl.rsqrt(tl.sum(b * b) + eps)", "b / tl.sqrt(tl.sum(b * b) + eps)") == TARGET
    assert apply_pattern("SKP00000", r.source, L2, [{"id": "in-jit-function"}]).status == "skipped"
    everywhere = apply_pattern("SKP00000", TARGET, L2)
    assert [c.line for c in everywhere.changes] == [9, 15]


def test_pattern_engine_skips_statement_insertions_with_a_reason():
    from skel.rewriter.pattern import apply_pattern

    r = apply_pattern("SKP00000", TARGET, [{"kind": "insert", "before": "", "after": "$1 = $2 * 1.4426950408889634"}])
    assert r.status == "skipped" and "inserts statements" in r.reason and r.source == TARGET


# `skel apply --preview` (gated preview candidates) is tested in tests/test_preview.py.


def test_cli_mine_history_json_and_incremental(repo, tmp_path, capsys):
    path, shas = repo
    db = str(tmp_path / "c.sqlite")
    assert main(["mine", "--history", str(path), "--catalog", db, "--json"]) == 0
    [first] = json.loads(capsys.readouterr().out)
    assert (first["commits"], first["head"], first["since"]) == (len(shas), shas[-1], None)
    assert [c["key"].splitlines()[0] for c in first["candidates"]] == [
        "replace: $1 / tl.sqrt($2) => $1 * tl.rsqrt($2)", "insert:  => $1 = $2 * 1.4426950408889634"]
    assert main(["mine", "--history", str(path), "--catalog", db, "--json"]) == 0
    [again] = json.loads(capsys.readouterr().out)
    assert (again["commits"], again["blobs"]) == (0, 0)
    assert [c["code"] for c in again["candidates"]] == [c["code"] for c in first["candidates"]]
