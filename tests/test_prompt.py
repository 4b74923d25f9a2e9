"""`skel catalog prompt`: the agent brief, its ranking, its budget, and snapshots of its text.

Snapshots live in tests/snapshots/; after an intended change of the brief (or of the library,
detectors or profiles it renders) regenerate them with

    SKEL_UPDATE_SNAPSHOTS=1 pytest tests/test_prompt.py

and review the diff before committing.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from skel.skeletons.library import load_library
from skel.pipeline.prompt import build_brief, estimate_tokens, render_markdown
from skel.pipeline.prompt_budget import BudgetError, fit_budget
from skel.catalog.store import Finding, SourceRecord, ValidationRun, open_catalog
from skel.cli import main

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
KDA_TARGET = "kernels/kda_decode/kernel.py"  # relative on purpose: the brief shows paths as given


@pytest.fixture(scope="module")
def library():
    return load_library()


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("SKEL_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path} is missing: run SKEL_UPDATE_SNAPSHOTS=1 pytest {__file__} and review it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} differs from its snapshot {path}; if the change is intended, regenerate with "
        f"SKEL_UPDATE_SNAPSHOTS=1 and review the diff")


def run_cli(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# --------------------------------------------------------------------------- must show (issue 6)
def test_upstream_kda_names_rsqrt_and_merge_v_tiles_with_their_lines(fla_corpus, tmp_path, capsys):
    target = str(fla_corpus / "fla" / "ops" / "kda" / "fused_recurrent.py")
    rc, out, err = run_cli(["catalog", "prompt", target, "--catalog", str(tmp_path / "none.sqlite")], capsys)
    assert rc == 0, err
    applicable = re.findall(r"^### \d+\. (SK\d{3}) ", out, re.MULTILINE)
    assert {"SK001", "SK002"} <= set(applicable), applicable
    # SK001's conditions hold because of the two L2-norm divisions on lines 157 and 158
    sk001 = out.split("SK001 rsqrt-for-norm-division")[1].split("\n### ")[0]
    assert "`divides-by-sqrt`: line 157: b_q = b_q / tl.sqrt(" in sk001
    assert "line 158: b_k = b_k / tl.sqrt(" in sk001
    # SK002 holds because the grid splits V into tiles that repeat the V-independent work
    sk002 = out.split("SK002 merge-v-tiles")[1].split("\n### ")[0]
    assert "`grid-splits-value-dim`: line 86: i_v = pid_rest % NV" in sk002
    assert "`repeats-tile-independent-work`:" in sk002 and "line 157" in sk002
    assert f"skel apply {target} --skeleton SK001" in out
    assert not (tmp_path / "none.sqlite").exists(), "the brief must never create a catalog"

    rc, out, _ = run_cli(["catalog", "prompt", target, "--json", "--catalog", str(tmp_path / "none.sqlite")], capsys)
    data = json.loads(out)
    by_code = {s["code"]: s for s in data["applicable"]}
    lines = {c["id"]: c["lines"] for c in by_code["SK001"]["matches"][0]["conditions"]}
    assert lines["divides-by-sqrt"] == [157, 158]


# --------------------------------------------------------------------------- snapshots
def test_snapshot_kda_decode_without_evidence(library, in_repo, tmp_path):
    brief = build_brief(KDA_TARGET, library, tmp_path / "none.sqlite")
    text = render_markdown(brief)
    assert text == render_markdown(build_brief(KDA_TARGET, library, tmp_path / "none.sqlite")), "not deterministic"
    assert str(REPO) not in text and str(tmp_path) not in text, "absolute paths leaked into the brief"
    check_snapshot("prompt_kda_decode.md", text)


def _catalog_with_evidence(path: Path, sha: str) -> Path:
    with open_catalog(path) as cat:
        src = SourceRecord("upstream/decode.py", "0" * 64, repo="example/repo")
        cat.record_file(src, (), (Finding("SK003", "instance", "upstream/decode.py", 40, 41, "decode_kernel"),))
        cat.record_validation(ValidationRun(
            skeletons=("SK005",), kernel="kda_decode_kernel", shape="N64-T1-H32-HV32-K128-V128", dtype="bfloat16",
            metric="time", verdict="faster", median=78.9, ci_low=78.5, ci_high=79.4, unit="us", gpu="NVIDIA H200",
            source_hash=sha, extra={"baseline_roofline_pct": 72.0}, created_at="2026-01-01T00:00:00+00:00"))
        # not timed (CPU): must neither count as a win nor show as a measurement
        cat.record_validation(ValidationRun(
            skeletons=("SK006",), kernel="kda_decode_kernel", shape="ci", dtype="float32", metric="time",
            verdict="accepted", source_hash=sha, created_at="2026-01-01T00:00:00+00:00"))
    return path


def test_ranking_by_evidence_and_roofline_standing(library, in_repo, tmp_path):
    plain = build_brief(KDA_TARGET, library, tmp_path / "none.sqlite")
    assert not plain.measurements
    catalog = _catalog_with_evidence(tmp_path / "cat.sqlite", plain.source_sha256)
    brief = build_brief(KDA_TARGET, library, catalog)
    codes = [s.code for s in brief.applicable]
    applicable = {s.code for s in plain.applicable}
    assert {"SK003", "SK005", "SK006"} <= applicable, "fixture assumption: these apply to the kda_decode target"
    # measured win (SK005) > mined instance (SK003) > the rest, by code
    assert codes[:2] == ["SK005", "SK003"], codes
    assert codes[2:] == sorted(codes[2:])
    assert [s.rank for s in brief.applicable] == list(range(1, len(codes) + 1))
    ev = {s.code: s.evidence for s in brief.applicable}
    assert (ev["SK005"].tier, ev["SK005"].wins) == ("measured", 1)
    assert (ev["SK003"].tier, ev["SK003"].instances) == ("mined", 1)
    assert ev["SK006"].tier == "none", "an untimed run is not a measured win"
    assert len(brief.measurements) == 1 and brief.measurements[0].roofline_pct == 72.0
    text = render_markdown(brief)
    assert "original at 72 % of the roofline; SK005 candidate 78.9 us (faster)" in text
    check_snapshot("prompt_kda_decode_evidence.md", text)


# --------------------------------------------------------------------------- budget
@pytest.mark.parametrize("budget", [900, 1200, 1600, 2500, 4000, 100000])
def test_budget_is_honoured_and_never_drops_names_or_conditions(library, in_repo, tmp_path, budget):
    full = build_brief(KDA_TARGET, library, tmp_path / "none.sqlite")
    try:
        brief = fit_budget(full, budget)
    except BudgetError as exc:
        assert exc.needed > budget
        assert f"at least {exc.needed}" in str(exc)
        assert estimate_tokens(render_markdown(exc.brief)) <= exc.needed
        return
    text = render_markdown(brief)
    assert estimate_tokens(text) <= budget
    for s in full.applicable:  # every applicable skeleton and every condition stays
        assert f"{s.code} {s.name}" in text
        for c in s.matches[0].conditions:
            assert f"`{c.id}`: {c.detail}" in text
    if estimate_tokens(render_markdown(full)) <= budget:
        assert brief.trimmed == () and "Trimmed" not in text
    else:
        assert brief.trimmed and "_Trimmed to fit" in text
        assert brief.trimmed[0] == "not-applicable list", "the least useful part goes first"


def test_budget_drops_in_the_documented_order(library, in_repo, tmp_path):
    full = build_brief(KDA_TARGET, library, tmp_path / "none.sqlite")
    with pytest.raises(BudgetError) as exc:
        fit_budget(full, 1)
    smallest = fit_budget(full, exc.value.needed)  # the tightest budget that fits: everything droppable dropped
    assert estimate_tokens(render_markdown(smallest)) <= exc.value.needed
    order = list(smallest.trimmed)
    top, second, lowest = full.applicable[0].code, full.applicable[1].code, full.applicable[-1].code
    assert order[:2] == ["not-applicable list", "provenance beyond the first"]
    at = order.index
    assert at(f"example of {lowest}") < at(f"example of {second}") < at(f"constraints of {lowest}")
    assert at(f"constraints of {second}") < at(f"method of {lowest}") < at("profile details")
    assert at("profile details") < at(f"example of {top}") < at(f"constraints of {top}") < at("provenance")
    assert at(f"method of {top}") < at(f"commands of {lowest}") < at("evidence")
    assert f"commands of {top}" not in order, "the top skeleton's commands are never dropped"
    for s in smallest.applicable:
        assert s.example is None and s.constraints == () and s.provenance == () and s.method is None
    assert smallest.applicable[0].commands, "the top skeleton keeps its commands"
    # one token less than the smallest brief cannot be met
    with pytest.raises(BudgetError):
        fit_budget(full, exc.value.needed - 1)


def test_cli_budget_too_small_exits_1_and_says_what_it_needs(in_repo, capsys):
    rc, out, err = run_cli(["catalog", "prompt", KDA_TARGET, "--budget", "50"], capsys)
    assert rc == 1 and out == ""
    m = re.search(r"needs (\d+) tokens", err)
    assert m and int(m.group(1)) > 50
    rc, out, err = run_cli(["catalog", "prompt", KDA_TARGET, "--budget", "50", "--json"], capsys)
    assert rc == 1 and json.loads(out)["needed_tokens"] == int(m.group(1))


def test_json_is_the_same_content(library, in_repo, capsys):
    rc, out, _ = run_cli(["catalog", "prompt", KDA_TARGET, "--json", "--budget", "4000"], capsys)
    assert rc == 0
    data = json.loads(out)
    assert data["target"] == KDA_TARGET and data["budget"] == 4000 and data["tokens"] <= 4000
    rc, md, _ = run_cli(["catalog", "prompt", KDA_TARGET, "--budget", "4000"], capsys)
    assert [s["code"] for s in data["applicable"]] == re.findall(r"^### \d+\. (SK\d{3}) ", md, re.MULTILINE)
    assert estimate_tokens(md) == data["tokens"]
    for n in data["not_applicable"]:
        assert f"- {n['code']} {n['name']}: `{n['condition']}` fails" in md


def test_input_errors_exit_2_with_what_and_where(in_repo, tmp_path, capsys):
    rc, _, err = run_cli(["catalog", "prompt", "no/such/kernel.py"], capsys)
    assert rc == 2 and "no/such/kernel.py: no such file" in err
    broken = tmp_path / "broken.py"
    broken.write_text("@triton.jit\ndef k(:\n    pass\n")
    rc, _, err = run_cli(["catalog", "prompt", str(broken)], capsys)
    assert rc == 2 and f"{broken}:2: does not parse as Python" in err
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    rc, _, err = run_cli(["catalog", "prompt", str(plain)], capsys)
    assert rc == 2 and "no @triton.jit kernel found" in err
    with pytest.raises(SystemExit) as exc:
        main(["catalog", "prompt", KDA_TARGET, "--budget", "0"])
    assert exc.value.code == 2
