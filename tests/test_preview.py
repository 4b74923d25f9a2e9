"""Closing the loop: preview candidates (SKP...) judged by `skel apply --preview`, ranked and admitted by verdicts."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import history_repo as hr
import skel.kernels
from skel.skeletons.library import load_library
from skel.catalog.store import ValidationRun, open_catalog
from skel.cli import main
from skel.miner.history import mine_history, text_hash
from skel.pipeline.apply import ApplyOptions, apply
from skel.pipeline.preview import BONUS_HELD_OUT, BONUS_SOURCE, PENALTY_NUMERICS, PENALTY_SLOWER, standings

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repositories")
KDA = Path(skel.kernels.__file__).resolve().parent / "kda_decode" / "kernel.py"
RSQRT_KEY = "replace: $1 / tl.sqrt($2) => $1 * tl.rsqrt($2)"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("kernels")
    return path, hr.build(path)


def _mined(repo, tmp_path):
    db = tmp_path / "catalog.sqlite"
    report = mine_history(repo[0], catalog=db)
    rsqrt, exp2 = report.candidates
    assert rsqrt.key == RSQRT_KEY
    return db, rsqrt.code, exp2.code


def test_candidates_remember_the_file_versions_they_were_distilled_from(repo, tmp_path):
    path, shas = repo
    db, rsqrt, _ = _mined(repo, tmp_path)

    def version(rev):
        return text_hash(subprocess.run(["git", "-C", str(path), "show", f"{rev}:ops/kernels.py"],
                                        capture_output=True, text=True, check=True).stdout)

    with open_catalog(db) as cat:
        sources = cat.candidate(rsqrt).pattern["sources"]
    # The rsqrt edits came from commits 2 and 6: both sides of each.
    assert sources == sorted({version(shas[2]), version(shas[1]), version(shas[6]), version(shas[5])})


def test_preview_candidates_join_apply_and_plain_apply_is_unchanged(repo, tmp_path, capsys):
    db, rsqrt, exp2 = _mined(repo, tmp_path)
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    args = ["apply", str(target), "--dry-run", "--catalog", str(db), "--report-dir", str(tmp_path / "r"), "--json"]
    assert main(args) == 1
    library_only = [c["label"] for c in json.loads(capsys.readouterr().out)["candidates"]]
    assert library_only and not any(label.startswith("SKP") for label in library_only)
    assert main(args + ["--preview"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [c["label"] for c in data["candidates"]] == library_only + [rsqrt]  # beside the library's, after them
    assert {"skeletons": ["SKP*"], "reason": "1 preview candidate(s) do not match the target"} in data["skipped"]
    cand = data["candidates"][-1]
    assert cand["unsafe"] is True and "+        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q) + 1e-6)" in cand["diff"]
    # The exp2 candidate asked for by code: its own reason (the KDA kernel has no `tl.exp(a - b)`).
    assert main(args + ["--preview", "--skeleton", exp2]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["candidates"] == [] and "no code matches the pattern" in data["skipped"][0]["reason"]
    # --skeleton 'SKP*': every preview candidate and no library one.
    assert main(args + ["--preview", "--skeleton", "SKP*"]) == 1
    assert [c["label"] for c in json.loads(capsys.readouterr().out)["candidates"]] == [rsqrt]
    # Without --preview nothing changes: no SKP candidate, and an SKP code is unknown.
    assert main(args + ["--unsafe", "--skeleton", "SK001"]) == 1
    assert [c["label"] for c in json.loads(capsys.readouterr().out)["candidates"]] == ["SK001"]
    assert main(args + ["--skeleton", rsqrt]) == 2
    assert main(args + ["--preview", "--skeleton", "SKP00000"]) == 2
    assert "unknown skeleton code(s): SKP00000" in capsys.readouterr().err
    assert target.read_text() == KDA.read_text()


def test_gated_preview_verdicts_are_evidence_and_admit_on_a_held_out_kernel(repo, tmp_path, capsys):
    """One candidate through the CPU gate: numerics pass on kernels/kda_decode, a kernel it was not mined from."""
    db, rsqrt, _ = _mined(repo, tmp_path)
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    result = apply(ApplyOptions(target=target, skeletons=(rsqrt,), device="cpu", preview=True, catalog=db,
                                report_dir=tmp_path / "r"), load_library(), progress=lambda m: None)
    [out] = result.candidates
    assert (out.label, out.unsafe, out.numerics_passed, out.accepted) == (rsqrt, True, True, False)
    assert result.output is None
    with open_catalog(db) as cat:
        runs = cat.validation_runs(skeleton=rsqrt)
        [(cand, st)] = [cs for cs in standings(cat) if cs[0].code == rsqrt]
    assert runs and {r.verdict for r in runs} == {"numerics-pass"}
    assert {r.source_hash for r in runs} == {hashlib.sha256(KDA.read_text().encode()).hexdigest()}
    [trial] = st.trials
    assert (trial.held_out, trial.accepted, trial.perf_measured) == (True, True, False)
    # Correct on a held-out kernel, but a CPU run cannot reproduce the speed-up it was mined for.
    assert not st.admitted and st.rank_score == cand.score and "speed-up was not measured" in st.why

    assert main(["catalog", "show", rsqrt, "--catalog", str(db)]) == 0
    shown = capsys.readouterr().out
    for part in ("## Pattern\n- replace: $1 / tl.sqrt($2 + $3) => $1 * tl.rsqrt($2 + $3)", "## Holes\n- $1 (name)",
                 "- hole-2-reduction:", "ops/kernels.py:10 l2norm_q_kernel", "3 kernels, 2 commits",
                 "- accepted: kda_decode:kda.py (held-out"):
        assert part in shown
    assert main(["catalog", "list", "--status", "preview", "--catalog", str(db), "--json"]) == 0
    listed = {e["code"]: e for e in json.loads(capsys.readouterr().out) if e.get("origin")}
    assert listed[rsqrt]["admitted"] is False and listed[rsqrt]["trials"][0]["held_out"] is True
    assert listed[rsqrt]["appliable"] is True and "cannot apply" not in shown
    assert main(["catalog", "show", "SKP00000", "--catalog", str(db)]) == 2


def test_patterns_the_engine_can_never_apply_are_flagged():
    from skel.commands.catalog_preview import list_line, render
    from skel.rewriter.pattern import pattern_problem

    bare = [{"kind": "replace", "before": "$1", "after": "$1.to(tl.float32)"}]
    assert "any expression at all" in pattern_problem(bare)
    assert pattern_problem([{"kind": "replace", "before": "tl.exp($1)", "after": "tl.exp2($1 * $2)"}]) \
        .startswith("the pattern's replacement uses $2")
    assert pattern_problem([{"kind": "insert", "before": "", "after": "$1 = $2 * 1.44"},
                            {"kind": "replace", "before": "tl.sum($3) * $2", "after": "tl.sum($3) * $1"}]) is None

    class Cand:  # the fields render/list_line read
        code, name, title, status, promoted_as, score, kernels, commits, perf_commits = \
            "SKP00001", "to-float32", "t", "preview", None, 1.0, 2, 2, 0
        pattern = {"refined": bare, "refined_holes": [], "edits": bare, "conditions": [], "occurrences": []}

    class St:
        admitted, rank_score, trials, why = False, 1.0, (), "not admitted: never judged"

    assert "- the pattern engine cannot apply it to any kernel: the pattern rewrites `$1`" in render(Cand, St)
    assert list_line(Cand, St, 10).endswith("not admitted (the pattern engine cannot apply it)")


def _run(code, verdict, source, shape="N1", metric="numerics"):
    perf = metric == "speedup"
    return ValidationRun((code,), "kda_decode:k.py", shape, "bfloat16", metric, verdict,
                         median=1.1 if perf else None, ci_low=1.0 if perf else None, ci_high=1.2 if perf else None,
                         unit="x" if perf else "", gpu="NVIDIA H200" if perf else "", source_hash=source)


def test_rejections_sink_a_candidate_and_only_held_out_acceptance_admits(repo, tmp_path):
    db, rsqrt, exp2 = _mined(repo, tmp_path)
    with open_catalog(db) as cat:
        own = cat.candidate(rsqrt).pattern["sources"][0]
        before = {c.code: s for c, s in standings(cat)}
        assert before[rsqrt].rank_score > before[exp2].rank_score and not before[rsqrt].admitted
        assert "never judged" in before[rsqrt].why
        # Accepted (faster) on a file it was distilled from: no held-out evidence.
        cat.record_validation(_run(rsqrt, "faster", own, metric="speedup"))
        # Numerics fail on one held-out kernel, slower-only on another: both sink it.
        cat.record_validation(_run(rsqrt, "numerics-fail", "a" * 64))
        cat.record_validation(_run(rsqrt, "numerics-pass", "a" * 64, shape="N2"))
        cat.record_validation(_run(rsqrt, "slower", "b" * 64, metric="speedup"))
        after = {c.code: s for c, s in standings(cat)}
        st = after[rsqrt]
        assert (st.failures, st.slower, st.admitted) == (1, 1, False)
        sunk = round(before[rsqrt].score - PENALTY_NUMERICS - PENALTY_SLOWER + BONUS_SOURCE, 2)
        assert st.rank_score == sunk
        assert "accepted only on kernels it was distilled from" in st.why
        assert [c.code for c, _ in standings(cat)] == [exp2, rsqrt]  # it sank below the other candidate
        # Faster at one shape (and slower at none needed only per shape) on a held-out kernel: admitted.
        cat.record_validation(_run(rsqrt, "faster", "c" * 64, metric="speedup"))
        cat.record_validation(_run(rsqrt, "same", "c" * 64, shape="N2", metric="speedup"))
        st = {c.code: s for c, s in standings(cat)}[rsqrt]
        assert st.admitted and "held-out, source cccccccccccc" in st.why and "faster at 1, slower at 0 of 2" in st.why
        assert st.rank_score == sunk + BONUS_HELD_OUT  # confirmed away from its source: it rises again
