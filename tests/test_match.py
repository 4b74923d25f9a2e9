"""`skel match`: applicable skeletons per kernel, first failing condition for the rest, exit codes."""
from __future__ import annotations

import json
import textwrap

import pytest

from skel.skeletons.library import load_library
from skel.cli import main
from skel.miner.match import match_file

KDA = "fla/ops/kda/fused_recurrent.py"

NO_DIVISION = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def copy_kernel(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        tl.store(y + i * D + o, tl.load(x + i * D + o) * 2.0)
    """)


def run_json(argv, capsys) -> tuple[int, dict]:
    rc = main(argv + ["--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_kda_decode_kernel(fla_corpus, capsys):
    path = str(fla_corpus / KDA)
    rc, out = run_json(["match", path], capsys)
    assert rc == 1  # something applies
    (k,) = out["kernels"]
    assert k["name"] == "fused_recurrent_kda_fwd_kernel" and k["line"] == 35
    applicable = {a["skeleton"]: a for a in k["applicable"]}
    not_applicable = {n["skeleton"]: n for n in k["not_applicable"]}
    library = {s.code for s in load_library()}
    assert set(applicable) | set(not_applicable) == library  # every skeleton is accounted for, once
    assert not set(applicable) & set(not_applicable)
    sk001 = applicable["SK001"]
    assert [c["id"] for c in sk001["conditions"]] == [c.id for c in load_library().get("SK001").conditions]
    assert "157" in sk001["conditions"][0]["detail"] and sk001["sites"] == [157, 158]
    assert "SK002" in applicable  # four V tiles per head repeat the q/k norms and the gate
    reason = not_applicable["SK007"]["reason"]
    assert reason and "tl.dot" in reason  # no dot in the kernel, said in words


def test_first_failing_condition_is_the_reason(tmp_path, capsys):
    f = tmp_path / "copy.py"
    f.write_text(NO_DIVISION)
    rc, out = run_json(["match", str(f), "--skeleton", "SK001"], capsys)
    assert rc == 0  # nothing applies
    (k,) = out["kernels"]
    assert k["applicable"] == []
    (n,) = k["not_applicable"]
    first = load_library().get("SK001").conditions[0]
    assert n["skeleton"] == "SK001" and n["condition"] == first.id
    assert n["reason"].startswith(first.fails) or first.fails.startswith(n["reason"][:20])


def test_text_output(fla_corpus, capsys):
    rc = main(["match", str(fla_corpus / KDA), "--skeleton", "sk001"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "kernel fused_recurrent_kda_fwd_kernel" in out and "applies: SK001 at lines 157, 158" in out
    assert "+ divides-by-sqrt: line 157" in out


def test_file_without_kernels_reports_its_jit_helpers(tmp_path, capsys):
    # a file of @triton.jit helpers and no kernel: the rules are evaluated on the helpers, as the agent
    # prompt does and as a rule's gated rewrite runs on them (records.reported)
    f = tmp_path / "helpers.py"
    f.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\ndef helper(x):\n    return x * 2\n")
    rc, out = run_json(["match", str(f)], capsys)
    assert rc == 0 and [k["name"] for k in out["kernels"]] == ["helper"] and out["kernels"][0]["applicable"] == []
    g = tmp_path / "norm_helper.py"
    g.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\ndef l2norm(x):\n"
                 "    x = x.to(tl.float32)\n    return x / tl.sqrt(tl.sum(x * x) + 1e-6)\n")
    rc, out = run_json(["match", str(g), "--skeleton", "SK001"], capsys)
    assert rc == 1 and [a["skeleton"] for a in out["kernels"][0]["applicable"]] == ["SK001"]


def test_file_without_jit_functions(tmp_path, capsys):
    f = tmp_path / "plain.py"
    f.write_text("import triton\n\ndef host(x):\n    return x * 2\n")
    assert main(["match", str(f)]) == 0
    assert "no kernels found" in capsys.readouterr().out


@pytest.mark.parametrize("name,content,expect", [
    ("missing.py", None, "no such file"),
    ("syntax.py", "import triton\n@triton.jit\ndef k(:\n", "syntax.py:3: syntax error"),
    ("binary.py", b"\x00\x01triton", "binary file"),
    ("latin1.py", b"import triton\n# caf\xe9\n", "latin1.py:2: not UTF-8"),
    ("notes.txt", "text", "not a kernel source"),
])
def test_input_errors_exit_2(tmp_path, capsys, name, content, expect):
    p = tmp_path / name
    if content == "dir":
        p.mkdir()
    elif isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    assert main(["match", str(p)]) == 2
    assert expect in capsys.readouterr().err


def test_a_folder_without_kernels_is_matched_and_clean(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    rc, out = run_json(["match", str(tmp_path / "folder")], capsys)
    assert (rc, out["files"], out["errors"]) == (0, [], [])


def test_unknown_skeleton_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "copy.py"
    f.write_text(NO_DIVISION)
    assert main(["match", str(f), "--skeleton", "SK999"]) == 2
    assert "SK999" in capsys.readouterr().err


def test_python_api_matches_cli(fla_corpus):
    report = match_file(str(fla_corpus / KDA), skeleton="SK003")
    (k,) = report.kernels
    (a,) = k.applicable
    assert a.skeleton == "SK003" and a.sites == (163, 166)
    assert report.any_applicable
