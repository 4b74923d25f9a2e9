"""Variant mining: two implementations of one op, written in the test, aligned and diffed exactly."""
from __future__ import annotations

import json

from skel.catalog.store import open_catalog
from skel.cli import main
from skel.miner.variants import mine_variants, op_words

REFERENCE = '''import triton
import triton.language as tl


@triton.jit
def l2norm_fwd_kernel(x, y, eps, D: tl.constexpr):
    i_n = tl.program_id(0)
    o_d = tl.arange(0, D)
    b_x = tl.load(x + i_n * D + o_d).to(tl.float32)
    b_x = b_x / tl.sqrt(tl.sum(b_x * b_x) + eps)
    tl.store(y + i_n * D + o_d, b_x)


@triton.jit
def softplus_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.load(x + offs, mask=offs < n)
    tl.store(y + offs, tl.log(1 + tl.exp(b)), mask=offs < n)
'''

# The same op in another backend: renamed kernel and locals, reformatted, rsqrt instead of
# a division; plus an unrelated kernel that shares nothing but the decorator.
VARIANT = '''import triton
import triton.language as tl


@triton.jit
def _l2norm_fwd_kernel_npu(x, y, eps, D: tl.constexpr):
    # one row per program
    row = tl.program_id(0)
    cols = tl.arange(0, D)
    v = tl.load(x + row * D + cols).to(tl.float32)
    v = v * tl.rsqrt(tl.sum(v * v) + eps)
    tl.store(y + row * D + cols, v)


@triton.jit
def rope_kernel(q, cos, sin, T, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, BLOCK)
    c = tl.load(cos + i * BLOCK + o)
    s = tl.load(sin + i * BLOCK + o)
    b = tl.load(q + i * BLOCK + o)
    tl.store(q + i * BLOCK + o, b * c + b * s)
'''

RSQRT = "replace: $1 / tl.sqrt($2) => $1 * tl.rsqrt($2)"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_division_by_sqrt_and_its_rsqrt_variant_give_the_rsqrt_pattern(tmp_path):
    ref, var = _write(tmp_path, "ref.py", REFERENCE), _write(tmp_path, "npu.py", VARIANT)
    report = mine_variants([ref, var], catalog=tmp_path / "c.sqlite")
    [pair] = report.pairs  # softplus and rope are not the same op as anything: not aligned
    assert (pair.reference.name, pair.variant.name, pair.edits) == ("l2norm_fwd_kernel", "_l2norm_fwd_kernel_npu", 1)
    assert (report.files, report.kernels, report.kernel_edits) == (2, 4, 1)
    [cand] = report.candidates
    assert cand.key == RSQRT
    assert [h.to_json() for h in cand.holes] == [
        {"name": "$1", "kind": "name", "examples": ["v"]},
        {"name": "$2", "kind": "expr", "examples": ["tl.sum(v * v) + eps"]},
    ]
    assert [e.to_json() for e in cand.refined] == [
        {"kind": "replace", "before": "$1 / tl.sqrt(tl.sum($1 * $1) + $2)", "after": "$1 * tl.rsqrt(tl.sum($1 * $1) + $2)"}]
    assert [h.to_json() for h in cand.refined_holes] == [
        {"name": "$1", "kind": "name", "examples": ["v"]}, {"name": "$2", "kind": "name", "examples": ["eps"]}]
    assert [o.to_json() for o in cand.occurrences] == [
        {"repo": "variants:" + f"{ref.resolve()},{var.resolve()}", "commit": f"{ref}:6 vs {var}:6",
         "path": str(var), "line": 11, "kernel": "_l2norm_fwd_kernel_npu",
         "message": f"variant pair: {ref}:6 vs {var}:6", "date": ""}]
    assert (cand.kernels, cand.commits, cand.perf_commits) == (1, 1, 0)
    assert [c.id for c in cand.conditions] == ["seen-form", "in-jit-function"]
    assert len(cand.sources) == 2  # both files: gate evidence on either is not held-out
    again = mine_variants([ref, var], catalog=tmp_path / "c.sqlite")
    assert again.unchanged and [c.code for c in again.candidates] == [cand.code]


def test_an_identical_pair_yields_nothing_and_direction_follows_path_order(tmp_path):
    ref = _write(tmp_path, "ref.py", REFERENCE)
    same = _write(tmp_path, "same.py", REFERENCE.replace("b_x", "b_y").replace("    i_n", "    # same\n    i_n"))
    report = mine_variants([ref, same], catalog=tmp_path / "a.sqlite")
    assert len(report.pairs) == 2 and all(p.edits == 0 for p in report.pairs)
    assert report.candidates == () and report.kernel_edits == 0
    var = _write(tmp_path, "npu.py", VARIANT)
    backwards = mine_variants([var, ref], catalog=tmp_path / "b.sqlite")
    assert [c.key for c in backwards.candidates] == ["replace: $1 * tl.rsqrt($2) => $1 / tl.sqrt($2)"]


def test_unrelated_kernels_are_not_aligned():
    assert op_words("_l2norm_fwd_kernel_npu") == op_words("l2norm_fwd_kernel") == "l2norm_fwd"
    from skel.miner.variants import collect, similarity

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        ref, var = Path(d, "a.py"), Path(d, "b.py")
        ref.write_text(REFERENCE)
        var.write_text(VARIANT.replace("def rope_kernel", "def softplus_kernel"))  # same name, different op
        sites, _, _ = collect([ref, var])
        by = {(s.tree, s.name): s for s in sites}
        assert similarity(by[0, "softplus_kernel"], by[1, "softplus_kernel"]) is None  # body and parameters differ
        assert similarity(by[0, "l2norm_fwd_kernel"], by[1, "softplus_kernel"]) is None


def test_cli_mine_variants(tmp_path, capsys):
    ref, var = _write(tmp_path, "ref.py", REFERENCE), _write(tmp_path, "npu.py", VARIANT)
    db = str(tmp_path / "c.sqlite")
    assert main(["mine", "--variants", str(ref), str(var), "--catalog", db, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["variant_kernel"] for p in data["pairs"]] == ["_l2norm_fwd_kernel_npu"]
    assert [c["key"] for c in data["candidates"]] == [RSQRT]
    assert main(["mine", "--variants", str(ref), "--catalog", db]) == 2
    assert main(["mine", "--variants", "--history", str(ref), str(var), "--catalog", db]) == 2
    with open_catalog(db) as cat:
        [edit] = cat.history_edits()
    assert edit.commit == f"{ref}:6 vs {var}:6"
    code = data["candidates"][0]["code"]
    assert main(["catalog", "show", code, "--catalog", db]) == 0
    assert f"- variant pair: {ref}:6 vs {var}:6" in capsys.readouterr().out
