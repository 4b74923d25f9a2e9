"""A user's own skeletons, in a folder outside skel, through the CLI end to end: one Python rule
scaffolded by `skel new` (its golden check failing, then passing once filled in) and one pattern
rule (``[[pattern]]`` in skeleton.toml), added by ``--library`` and by ``[tool.skel] skeleton_dirs``;
checked, matched, applied and validated on a Triton file with no spec (the gate infers a harness)."""
from __future__ import annotations

import json
import textwrap

from skel.cli import main

KERNEL = textwrap.dedent('''\
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def scale_rows(x_ptr, y_ptr, D, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < D
        x = tl.load(x_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32)
        y = x / 2.0 + tl.exp(-x)
        tl.store(y_ptr + row * D + offs, y.to(y_ptr.dtype.element_ty), mask=m)


    def scale(x: torch.Tensor) -> torch.Tensor:
        N, D = x.shape
        y = torch.empty_like(x)
        scale_rows[(N,)](x, y, D, BLOCK=triton.next_power_of_2(D))
        return y
''')

PATTERN_RULE = textwrap.dedent('''\
    code = "SK902"
    name = "negated-exp-as-reciprocal"
    title = "exp(-x) as 1 / exp(x)"
    category = "compute"
    lifecycle = "preview"
    targets = ["triton"]

    [[pattern]]
    before = "tl.exp(-$1)"
    after = "1.0 / tl.exp($1)"
    safety = "unsafe"
    where = { "$1" = { is = "name" } }

    [transformation]
    method = "Rewrite tl.exp(-x) as 1.0 / tl.exp(x)."

    [constraints]
    registers = "no change"
    shared_memory = "no change"
    warps = "no change"
    occupancy = "no change"
    grows_with = "nothing"

    [[provenance]]
    repo = "example/user"
    path = "kernel.py"
    line = 1
    version = "test"
''')


def _docs(code: str) -> str:
    from skel.skeletons.library import DOC_HEADINGS

    return "\n".join([f"# {code}", ""] + [x for h in DOC_HEADINGS for x in (f"## {h}", "Text.", "")])


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_user_rules_checked_matched_applied_and_validated(tmp_path, capsys, monkeypatch):
    rules = tmp_path / "rules"
    rules.mkdir()
    # 1. a Python rule scaffolded by `skel new`: valid as written, its golden check failing until filled in
    assert _run(capsys, "new", "SK901-halve-by-multiply", "--dir", str(rules))[0] == 0
    assert _run(capsys, "catalog", "check", "--library", str(rules))[0] == 0
    code, _, err = _run(capsys, "catalog", "check", "--library", str(rules), "--golden")
    assert code == 2 and "SK901 does not fire" in err
    rule = rules / "SK901-halve-by-multiply" / "rule.py"
    rule.write_text(rule.read_text().replace('"TODO_BEFORE($1)", "TODO_AFTER($1)"', '"$1 / 2.0", "$1 * 0.5"')
                    .replace('"TODO_BEFORE(" in ctx.text(ln)', '"/ 2.0" in ctx.text(ln)'))
    code, _, err = _run(capsys, "catalog", "check", "--library", str(rules), "--golden")
    assert code == 0, err
    # 2. a pattern rule: a few lines of TOML, no Python
    folder = rules / "SK902-negated-exp-as-reciprocal"
    (folder / "examples").mkdir(parents=True)
    (folder / "skeleton.toml").write_text(PATTERN_RULE)
    (folder / "docs.md").write_text(_docs("SK902"))
    (folder / "examples" / "before.py").write_text(KERNEL)
    (folder / "examples" / "after.py").write_text(KERNEL.replace("tl.exp(-x)", "1.0 / tl.exp(x)"))
    code, out, err = _run(capsys, "catalog", "check", "--library", str(rules), "--golden")
    assert code == 0, err
    # matched (through [tool.skel] skeleton_dirs this time: no flag)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.skel]\nskeleton_dirs = ["../rules"]\n')
    target = project / "kernel.py"
    target.write_text(KERNEL)
    monkeypatch.chdir(project)
    code, out, _ = _run(capsys, "match", str(target), "--json")
    assert code == 1
    applies = {a["skeleton"] for k in json.loads(out)["kernels"] for a in k["applicable"]}
    assert {"SK901", "SK902"} <= applies
    # applied and validated on the CPU: numerics in the interpreter, a harness inferred from the launcher
    code, out, err = _run(capsys, "apply", str(target), "--skeleton", "SK901", "--skeleton", "SK902", "--unsafe",
                          "--device", "cpu", "--report-dir", str(tmp_path / "report"),
                          "--catalog", str(tmp_path / "cat.sqlite"), "--json")
    data = json.loads(out)
    assert code == 1 and data["perf_measured"] is False, err  # CPU: nothing accepted, speed not measured
    passed = {tuple(c["skeletons"]) for c in data["candidates"] if c["numerics_passed"]}
    assert ("SK901",) in passed and ("SK902",) in passed, data["candidates"]
    assert "harness inferred" in data["binding"]["how"]
    # and `skel validate` judges a rewritten file against the original, zero-config
    cand = tmp_path / "report" / "candidates"
    first = sorted(cand.glob("*.py"))[0]
    code, out, err = _run(capsys, "validate", str(target), str(first), "--device", "cpu", "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["accepted"] is True, err  # CPU: numerics only, accepted on them
    assert all(s["numerics"]["passed"] for s in verdict["shapes"])


def test_a_broken_user_rule_is_reported_with_its_line_and_skipped(tmp_path, capsys):
    rules = tmp_path / "rules"
    rules.mkdir()
    for spec in ("SK950-broken-one", "SK951-good-one"):
        assert _run(capsys, "new", spec, "--dir", str(rules))[0] == 0
    broken = rules / "SK950-broken-one" / "rule.py"
    n = len(broken.read_text().splitlines())
    broken.write_text(broken.read_text() + "raise RuntimeError('boom')\n")
    code, _, err = _run(capsys, "catalog", "check", "--library", str(rules))
    assert code == 2 and f"{broken}:{n + 1}: rule.py: import failed: RuntimeError: boom" in err
    target = tmp_path / "k.py"
    target.write_text(KERNEL)
    code, out, err = _run(capsys, "match", str(target), "--library", str(rules), "--json")
    seen = {n["skeleton"] for k in json.loads(out)["kernels"] for n in k["applicable"] + k["not_applicable"]}
    assert "SK951" in seen and "SK950" not in seen and "skipped:" in err and "boom" in err
