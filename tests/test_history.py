"""History mining: git repositories built in the test, distilled patterns asserted exactly."""
from __future__ import annotations

import ast
import json
import shutil
import sqlite3

import pytest

import history_repo as hr
from skel.catalog import schema
from skel.skeletons.library import load_skeleton
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

    from skel.skeletons.promote import next_code

    new_code = next_code(lib)  # the library's next free code (SK016 with SK001-SK015 shipped)
    assert main(["catalog", "promote", code, "--catalog", str(db), "--library", str(lib)]) == 0
    folder = lib / f"{new_code}-sqrt-to-rsqrt"
    sk, problems = load_skeleton(folder)
    assert problems == [] and sk.code == new_code and sk.transformation.kind == "pattern"
    assert [p.line for p in sk.provenance] == [10, 19, 29]
    # the promoted folder is a runnable rule, with no hand edit: its golden checks pass (fires on its
    # before.py, rewrite(before) == after) and it applies to a kernel it was not distilled from
    from skel.skeletons.golden import check_golden
    from skel.skeletons.library import load_library

    promoted = load_library(lib).get(new_code)
    assert check_golden(promoted) == []
    kernel = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef l2(x, y, D: tl.constexpr):\n"
              "    o = tl.arange(0, D)\n    b = tl.load(x + o).to(tl.float32)\n"
              "    b = b / tl.sqrt(tl.sum(b * b) + 1e-6)\n    tl.store(y + o, b)\n")
    [r] = promoted.rule.rewrite(kernel)
    assert r.applied and "rsqrt" in r.source, r.reason
    capsys.readouterr()
    assert main(["catalog", "promote", code, "--check", "--catalog", str(db), "--library", str(lib)]) == 0
    (folder / "docs.md").write_text((folder / "docs.md").read_text() + "\nhand edit\n")
    assert main(["catalog", "promote", code, "--check", "--catalog", str(db), "--library", str(lib)]) == 1
    assert "docs.md: differs" in capsys.readouterr().err
    assert main(["catalog", "promote", code, "--catalog", str(db), "--library", str(lib)]) == 2  # already promoted
    with open_catalog(db) as cat:
        assert cat.candidate(code).promoted_as == new_code


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


# A held-out kernel for the exp2 candidate: online softmax over a key block, written by someone
# else (other names, a block loop, a masked tail) than the kernels the pattern was mined from.
SOFTMAX = '''import torch
import triton
import triton.language as tl


@triton.jit
def attend(Q, Kc, Vc, Out, qk_mul, L, BL: tl.constexpr, D: tl.constexpr):
    """One query row against L keys in blocks of BL."""
    row = tl.program_id(0)
    d = tl.arange(0, D)
    qv = tl.load(Q + row * D + d)
    run_max = tl.full([1], float("-inf"), tl.float32)
    run_sum = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for j in range(0, L):
        kv = tl.load(Kc + j * D + d)
        vv = tl.load(Vc + j * D + d)
        sc = tl.sum(qv * kv) * qk_mul
        nm = tl.maximum(run_max, sc)
        corr = tl.exp(run_max - nm)
        pj = tl.exp(sc - nm)
        run_sum = run_sum * corr + pj
        acc = acc * corr + pj * vv
        run_max = nm
    tl.store(Out + row * D + d, acc / run_sum)


def run(q, k, v, scale):
    out = torch.empty_like(q)
    attend[(q.shape[0],)](q, k, v, out, scale, k.shape[0], BL=16, D=q.shape[1])
    return out
'''


def _load(source: str, tmp_path, name: str):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pattern_engine_inserts_the_folded_constant_before_the_loop_and_keeps_the_numbers(mined, tmp_path):
    """The mined exp2 candidate (insert + two replacements) on a kernel it was not mined from."""
    import torch

    from skel.rewriter.pattern import apply_pattern

    _, exp2 = mined[0].candidates
    edits = [e.to_json() for e in exp2.refined]
    conditions = [{"id": c.id} for c in exp2.conditions]
    r = apply_pattern(exp2.code, SOFTMAX, edits, conditions)
    assert r.status == "applied", r.reason
    assert r.reason == "3 replacement(s) and 1 inserted statement(s) by pattern"
    assert [(c.line, c.description) for c in r.changes] == [
        (15, "inserted before line 15: qk_mul_folded = qk_mul * 1.4426950408889634"),
        (18, "tl.sum(qv * kv) * qk_mul -> tl.sum(qv * kv) * qk_mul_folded"),
        (20, "tl.exp(run_max - nm) -> tl.math.exp2(run_max - nm)"),
        (21, "tl.exp(sc - nm) -> tl.math.exp2(sc - nm)"),
    ]
    lines = r.source.splitlines()
    assert lines[13:16] == ["    acc = tl.zeros([D], dtype=tl.float32)",
                            "    qk_mul_folded = qk_mul * 1.4426950408889634",
                            "    for j in range(0, L):"]
    # Everything else is as it was: drop the three edited lines and the inserted one.
    assert lines[:14] + lines[15:] == [  # the rest as it was: the three edited lines aside
        x if i not in (18, 20, 21) else lines[i]  # lines[i]: the edited line, one further down
        for i, x in enumerate(SOFTMAX.splitlines(), 1)]
    assert (lines[18], lines[20], lines[21]) == ("        sc = tl.sum(qv * kv) * qk_mul_folded",
                                                 "        corr = tl.math.exp2(run_max - nm)",
                                                 "        pj = tl.math.exp2(sc - nm)")
    again = apply_pattern(exp2.code, r.source, edits, conditions)
    assert again.status == "skipped" and again.source == r.source
    # The interpreter runs both: the same attention output (exp2 of log2e-scaled scores).
    before, after = _load(SOFTMAX, tmp_path, "sm_before"), _load(r.source, tmp_path, "sm_after")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 32, generator=g) for n in (3, 20, 20))
    ref = torch.softmax(q @ k.T * 0.3, -1) @ v
    assert torch.allclose(before.run(q, k, v, 0.3), ref, atol=1e-5)
    assert torch.allclose(after.run(q, k, v, 0.3), ref, atol=1e-5)


def test_pattern_engine_refuses_what_it_cannot_apply_whole():
    from skel.rewriter.pattern import apply_pattern

    def run(edits, source=SOFTMAX):
        return apply_pattern("SKP00000", source, edits, [{"id": "in-jit-function"}])

    exp_only = {"kind": "replace", "before": "tl.exp($1 - $2)", "after": "tl.math.exp2($1 - $2)"}
    no_match = {"kind": "replace", "before": "tl.sqrt($1)", "after": "tl.rsqrt($1)"}
    r = run([exp_only, no_match])  # half of a compound is a different program
    assert (r.status, r.source) == ("skipped", SOFTMAX) and "only part of the pattern matches" in r.reason
    r = run([{"kind": "replace", "before": "tl.exp($1)", "after": "tl.exp($1 * $2)"}])
    assert r.status == "skipped" and "uses $2, which no match binds" in r.reason
    r = run([{"kind": "insert", "before": "", "after": "$3 = $4 * 2"}, exp_only])
    assert r.status == "skipped" and "uses $4" in r.reason
    r = run([{"kind": "delete", "before": "$1 = $2", "after": ""}, exp_only])
    assert r.status == "skipped" and "deletes statements" in r.reason
    r = run([{"kind": "replace", "before": "$1", "after": "$1.to(tl.float32)"}])
    assert r.status == "skipped" and "any expression at all" in r.reason
    r = run([{"kind": "insert", "before": "", "after": "$1 = 2"}])
    assert r.status == "skipped" and "only inserts statements" in r.reason


def test_pattern_engine_rewrites_values_not_names_or_targets():
    from skel.rewriter.pattern import apply_pattern

    src = ('@triton.jit\ndef k(x, o, D: tl.constexpr):\n    x = tl.load(x + 1, mask=x > 0, other=0)\n'
           '    tl.store(o, tl.where(x > 0, x, 0))\n')
    r = apply_pattern("SKP00000", src, [{"kind": "replace", "before": "x", "after": "x.to(tl.float32)"}])
    # The parameter, the assignment target and nothing named x by attribute or keyword are touched.
    assert r.source == ('@triton.jit\ndef k(x, o, D: tl.constexpr):\n'
                        '    x = tl.load(x.to(tl.float32) + 1, mask=x.to(tl.float32) > 0, other=0)\n'
                        '    tl.store(o, tl.where(x.to(tl.float32) > 0, x.to(tl.float32), 0))\n')
    r = apply_pattern("SKP00000", src, [{"kind": "replace", "before": "tl.where($1, $2, $3)",
                                         "after": "tl.where($1, $2, $3.to(tl.float32))"}])
    assert "tl.where(x > 0, x, (0).to(tl.float32))" in r.source  # `0.to(...)` would not parse
