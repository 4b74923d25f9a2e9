"""`skel apply`: binding, candidates, CPU mode (numerics only, nothing accepted), selection, dispatch, output safety."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from skel.skeletons.library import load_library
from skel.cli import main
from skel.errors import UsageError
from skel.pipeline.apply import ApplyOptions, CandidateOutcome, _write_output
from skel.pipeline.dispatch import build_dispatch
from skel.pipeline.select import bucket_of, choose_winners, contenders, settle
from skel.pipeline.targets import bind_target

import skel.kernels

KERNELS = Path(skel.kernels.__file__).resolve().parent
KDA = KERNELS / "kda_decode" / "kernel.py"


def test_bind_recognises_suite_copy_and_upstream(tmp_path, fla_corpus):
    copy = tmp_path / "my_kda.py"
    shutil.copy(KDA, copy)
    b = bind_target(copy, copy.read_text())
    assert (b.family, b.entry, b.spec.name) == ("kda_decode", "kda_decode", "spec.py")
    for family in ("gdn_decode", "state_merge", "dsa_indexer"):
        path = KERNELS / family / "kernel.py"
        assert bind_target(path, path.read_text()).family == family
    for rel, family, entry in [
        ("fla/ops/kda/fused_recurrent.py", "kda_decode", "fused_recurrent_kda_fwd"),
        ("fla/ops/gated_delta_rule/fused_recurrent.py", "gdn_decode", "fused_recurrent_gated_delta_rule_fwd"),
    ]:
        up = tmp_path / f"{family}_upstream.py"
        shutil.copy(fla_corpus / rel, up)
        b = bind_target(up, up.read_text())
        assert (b.family, b.entry, b.spec.name) == (family, entry, "fla_upstream.py")


def test_bind_unknown_file_asks_for_a_harness(tmp_path):
    f = tmp_path / "other.py"
    f.write_text("import triton\n\n@triton.jit\ndef k(x):\n    pass\n")
    with pytest.raises(UsageError, match="--harness"):
        bind_target(f, f.read_text())


def test_an_unknown_kernel_gets_an_inferred_harness(tmp_path, capsys, monkeypatch):
    """A kernel no fingerprint knows is bound to the harness inferred from its own launcher (a dry run
    shows its candidates through it); a file whose harness cannot be inferred still says --harness."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "their_decode.py"
    target.write_text(KDA.read_text().replace("def kda_decode(", "def their_decode("))
    code = main(["apply", str(target), "--dry-run", "--unsafe", "--skeleton", "SK001",
                 "--report-dir", str(tmp_path / "r"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["output"] is None and data["binding"]["entry"] == "their_decode"
    assert "harness inferred from launcher their_decode" in data["binding"]["how"]
    assert "state [N, HV, K, V]" in data["binding"]["how"]
    [cand] = data["candidates"]
    assert cand["label"] == "SK001" and cand["reason"] == "dry run: not validated"
    assert "rsqrt" in cand["diff"] and not (tmp_path / "r").exists()  # a dry run writes nothing
    lone = tmp_path / "lone.py"
    lone.write_text(KDA.read_text().split("def kda_decode(")[0])  # kernels, no launcher
    code = main(["apply", str(lone), "--unsafe", "--skeleton", "SK001", "--device", "cpu", "--report-dir", str(tmp_path / "r2")])
    assert code == 2 and "--harness" in capsys.readouterr().err


def test_a_user_harness_judges_a_kernel_skel_does_not_know(fla_corpus, tmp_path, capsys, monkeypatch):
    """examples/fla_delta_rule/spec.py, the README's worked harness, on fla-core's delta-rule decode file:
    SK002's rewrite of a third-party kernel passes the numerics gate in the interpreter."""
    pytest.importorskip("einops")
    monkeypatch.syspath_prepend(str(fla_corpus))  # the target imports fla
    target = tmp_path / "fla_delta.py"
    shutil.copy(fla_corpus / "fla/ops/delta_rule/fused_recurrent.py", target)
    harness = Path(__file__).resolve().parents[1] / "examples" / "fla_delta_rule" / "spec.py"
    code = main(["apply", str(target), "--harness", str(harness), "--unsafe", "--skeleton", "SK002",
                 "--max-candidates", "1", "--device", "cpu", "--report-dir", str(tmp_path / "r"),
                 "--catalog", str(tmp_path / "cat.sqlite"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["binding"]["entry"] == "fused_recurrent_delta_rule_fwd"
    [cand] = data["candidates"]
    assert cand["skeletons"] == ["SK002"] and cand["numerics_passed"] is True and not cand["accepted"]
    # the harness declares no dims: the ones a dispatch on shape needs are read off its ci inputs, when needed
    from skel.pipeline.targets import dispatch_dims

    binding = bind_target(target, target.read_text(), harness)
    dims, note = dispatch_dims(binding)
    assert binding.dims == () and ("T", "q.shape[1]") in dims and ("V", "v.shape[3]") in dims and not note
    from skel.rewriter.base import RewriteOptions
    from skel.rewriter.sk002_merge_tiles import merge_tiles
    from skel.validate.gate import validate

    src = target.read_text()
    [one] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [(2, 1, 2, True)]),)))
    [two] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [(1, 2, 4, True)]),)))
    path = tmp_path / "dispatch.py"
    path.write_text(build_dispatch(src, [("T1-H2-K32-V32", one.source), ("T3-H2-K16-V24", two.source)], binding))
    result = validate(target, path, spec=harness, entry=binding.entry, shapes="ci", device="cpu", seeds=(0,))
    assert result.accepted, result.reasons


def test_inferred_dims_leave_out_what_the_ci_shapes_cannot_tell_apart():
    import dataclasses

    from skel.validate.load import load_spec
    from skel.validate.spec import Shape, infer_dims

    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "fla_delta_rule" / "spec.py")
    one = dataclasses.replace(spec, shape_sets={**spec.shape_sets, "ci": (Shape.of(N=2, T=1, H=2, K=32, V=32),)})
    dims, note = infer_dims(one)
    assert dims == (("T", "q.shape[1]"),)  # N = H and K = V at the only ci shape: those cannot be read
    assert "N, H, K, V" in note and "TargetSpec.dims" in note
    broken = dataclasses.replace(spec, make_inputs=lambda *a: 1 / 0)
    assert infer_dims(broken) == ((), "shape dims for a dispatch not inferred (ZeroDivisionError: division by zero); "
                                      "give TargetSpec.dims")


def test_dry_run_shows_diffs_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    code = main(["apply", str(target), "--dry-run", "--unsafe", "--skeleton", "SK001", "--skeleton", "SK003",
                 "--report-dir", str(tmp_path / "report"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["output"] is None
    labels = [c["label"] for c in data["candidates"]]
    assert "SK001" in labels and "SK003" in labels and "SK001+SK003" in labels
    assert target.read_text() == KDA.read_text()
    assert not list(tmp_path.glob("*.skel.py"))
    assert not (tmp_path / "report").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["kda.py"]
    assert data["report"] is None
    cand = next(c for c in data["candidates"] if c["label"] == "SK001")
    assert cand["diff"].startswith(f"--- a/{target.name}\n+++ b/{target.name}\n")  # tmp_path is no git checkout


def test_candidates_over_the_budget_are_reported_not_dropped(tmp_path, capsys):
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    args = ["apply", str(target), "--dry-run", "--unsafe", "--skeleton", "SK001", "--skeleton", "SK002",
            "--report-dir", str(tmp_path / "r"), "--json"]
    main(args)
    everything = [c["label"] for c in json.loads(capsys.readouterr().out)["candidates"]]
    main(args + ["--max-candidates", "3"])
    data = json.loads(capsys.readouterr().out)
    assert [c["label"] for c in data["candidates"]] == everything[:3]
    [over] = [s for s in data["skipped"] if "over the budget" in s["reason"]]
    assert over["reason"].startswith(f"{len(everything) - 3} more candidate(s) not judged, over the budget of 3")
    assert everything[3] in over["reason"] and set(over["skeletons"]) <= {"SK001", "SK002"}


def test_unsafe_rewrites_need_the_flag(tmp_path, capsys):
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    main(["apply", str(target), "--dry-run", "--skeleton", "SK001", "--report-dir", str(tmp_path / "r"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert not data["candidates"]
    assert any("--unsafe" in s["reason"] for s in data["skipped"])


def test_cpu_apply_checks_numerics_and_never_claims_speed(tmp_path, capsys):
    """One real candidate through the gate in the interpreter; verdicts land in the catalog."""
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    catalog = tmp_path / "cat.sqlite"
    code = main(["apply", str(target), "--unsafe", "--skeleton", "SK001", "--device", "cpu",
                 "--report-dir", str(tmp_path / "report"), "--catalog", str(catalog), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["output"] is None and data["perf_measured"] is False
    [cand] = data["candidates"]
    assert cand["numerics_passed"] is True and cand["accepted"] is False
    assert "not measured" in cand["reason"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "performance not measured" in report and "faster" not in report.split("## Applicability")[0].lower()
    from skel.catalog.store import open_catalog

    with open_catalog(catalog) as cat:
        runs = cat.validation_runs(skeleton="SK001")
    assert runs and all(r.verdict == "numerics-pass" for r in runs)


def _gate(shapes):
    return {"dtype": "bfloat16", "shapes": [
        {"shape": label, "numerics": {"passed": True},
         "perf": {"verdict": verdict, "speedup": speedup, "speedup_low": speedup, "speedup_high": speedup}}
        for label, verdict, speedup in shapes]}


def _outcome(label, shapes):
    return CandidateOutcome((label,), label, False, True, "numerics passed", True, "", {}, _gate(shapes))


def test_selection_per_bucket_rejects_any_slowdown():
    t1, t8 = "T1-K128", "T8-K128"
    a = _outcome("A", [(f"N32-{t1}", "faster", 1.2), (f"N64-{t1}", "faster", 1.3),
                       (f"N32-{t8}", "slower", 0.8), (f"N64-{t8}", "faster", 1.1)])
    b = _outcome("B", [(f"N32-{t1}", "within noise", 1.0), (f"N64-{t1}", "faster", 1.05),
                       (f"N32-{t8}", "faster", 1.7), (f"N64-{t8}", "faster", 1.8)])
    winners, updated = choose_winners([a, b], perf_measured=True)
    assert [(bucket, o.label) for bucket, o in winners] == [(t1, "A"), (t8, "B")]
    assert all(o.accepted for o in updated)
    assert bucket_of("N64-T8-H32") == "T8-H32"
    assert choose_winners([a, b], perf_measured=False)[0] == []


def test_second_round_builds_on_every_contender():
    """The second round composes on each bucket's leader and on every candidate within run-off distance of
    it: the one a composition lifts most may trail the leader by a point estimate (fla-core's KDA at T = 8:
    SK002 on four heads per program, within noise of the P = 2 composition, composes to the faster one)."""
    lead = _outcome("SK001+SK002 [P=2]", [("N64-T8", "faster", 2.70)])
    close = _outcome("SK002 [P=4]", [("N64-T8", "faster", 2.66)])  # 1.5 % behind
    far = _outcome("SK002 [P=1]", [("N64-T8", "faster", 2.30)])  # 17 % behind
    slower = _outcome("SK005", [("N64-T8", "slower", 2.69)])
    assert [(b, o.label) for b, o in contenders([lead, close, far, slower], True)] == \
        [("T8", "SK001+SK002 [P=2]"), ("T8", "SK002 [P=4]")]
    assert contenders([lead, close], False) == []


def test_close_qualifiers_meet_head_to_head():
    """A qualifier within 5 % of a bucket's leader is timed against it in one process (the stand-in here
    answers with a fixed verdict); it takes the bucket when measurably faster, or when the two cannot be
    told apart and it is made of fewer skeletons. Leaders further ahead, or a run-off that fails, stand."""

    def combo(label, skeletons, speedup):
        o = _outcome(label, [("N32-T1", "faster", speedup), ("N64-T1", "faster", speedup)])
        return dataclasses.replace(o, skeletons=skeletons)

    lead = combo("SK001+SK002", ("SK001", "SK002"), 1.27)
    close = combo("SK002", ("SK002",), 1.25)  # 1.6 % behind: meets the leader
    far = combo("SK005", ("SK005",), 1.10)  # 15 % behind: never meets it

    def pick(verdict, speedup=1.0, error=None):
        met, runoffs = [], []

        def runoff(bucket, leader, challenger, shapes):
            met.append((leader.label, challenger.label, tuple(shapes)))
            perf = {"verdict": verdict, "speedup": speedup, "speedup_low": speedup, "speedup_high": speedup}
            gate = None if error else {"shapes": [{"shape": s, "perf": perf} for s in shapes]}
            return settle(bucket, leader, challenger, gate, error)

        winners, updated = choose_winners([lead, close, far], True, runoff=runoff, runoffs=runoffs)
        assert met == [("SK001+SK002", "SK002", ("N32-T1", "N64-T1"))] and len(runoffs) == 1
        return winners[0][1].label, next(o.reason for o in updated if o.accepted), runoffs[0]

    assert pick("faster", 1.03)[0] == "SK002"
    label, reason, r = pick("within noise")
    assert label == "SK002" and "fewer skeletons" in reason and r.winner == "SK002"
    assert pick("slower", 0.96)[0] == "SK001+SK002"
    label, reason, r = pick("", error="numerics failed")
    assert label == "SK001+SK002" and "not judged" in r.why and "kept after a run-off" in reason
    # the other way round, the simpler leader is kept when nothing separates them
    met = []
    winners, _ = choose_winners([dataclasses.replace(close, gate=lead.gate), dataclasses.replace(lead, gate=close.gate)],
                                True, runoff=lambda b, l, c, sh: met.append(c.label) or settle(b, l, c, {"shapes": [
                                    {"shape": x, "perf": {"verdict": "within noise", "speedup": 1.0, "speedup_low": 0.99,
                                                          "speedup_high": 1.01}} for x in sh]}))
    assert met == ["SK001+SK002"] and winners[0][1].label == "SK002"


def test_run_offs_are_recorded_as_evidence(tmp_path):
    """A run-off is a verdict too: stored for the challenger's skeletons, against the leader, under a metric
    and verdicts of its own that the prompt does not count as wins or losses over the original."""
    from skel.pipeline.prompt import LOSS_VERDICTS, WIN_VERDICTS, _measurements
    from skel.catalog.store import open_catalog
    from skel.pipeline.apply import ApplyResult, _record

    gate = {"dtype": "bfloat16", "shapes": []}  # their own verdicts are recorded as always; here only the run-off
    lead = dataclasses.replace(_outcome("SK001+SK002", []), skeletons=("SK001", "SK002"), gate=gate)
    chal = dataclasses.replace(_outcome("SK002", []), skeletons=("SK002",), gate=gate)
    same = {"verdict": "within noise", "speedup": 0.998, "speedup_low": 0.994, "speedup_high": 1.0}
    r = settle("T1", lead, chal, {"shapes": [{"shape": "N32-T1", "perf": same}]})
    binding = bind_target(KDA, KDA.read_text())
    result = ApplyResult(str(KDA), binding.to_json(), "cpu", True, (), (lead, chal), (), (("T1", "SK002"),), None,
                         None, runoffs=(r,))
    _record(result, binding, KDA.read_text(), tmp_path / "cat.sqlite")
    with open_catalog(tmp_path / "cat.sqlite") as cat:
        runs = [x for x in cat.validation_runs() if x.metric == "head-to-head speedup"]
        assert _measurements(cat, runs[0].source_hash, [runs[0].kernel]) == ()  # the brief's table: against the original
    assert len(runs) == 1
    h = runs[0]
    assert h.skeletons == ("SK002",) and h.verdict == "head-to-head within noise" and h.median == 0.998
    extra = dict(h.extra)
    assert {k: extra.get(k) for k in ("label", "against", "kept")} == {"label": "SK002", "against": "SK001+SK002",
                                                                       "kept": "SK002"}
    assert extra["python"] and extra["skel"]  # where it ran (skel.validate.environment); the commit when in a git checkout
    assert "fewer skeletons" in h.reason and h.verdict not in WIN_VERDICTS + LOSS_VERDICTS


def test_dispatch_file_passes_the_gate(tmp_path):
    """Two variants behind a dispatch on T: the emitted file is judged like any candidate."""
    from skel.skeletons.library import load_library
    from skel.rewriter.base import RewriteOptions
    from skel.pipeline.candidates import enumerate_candidates
    from skel.validate.gate import validate

    src = KDA.read_text()
    cs = enumerate_candidates(src, ["SK001", "SK005"], load_library(), RewriteOptions(shape=(("K", 32), ("V", 64))), True)
    one = next(c for c in cs.candidates if c.skeletons == ("SK001",))
    two = next(c for c in cs.candidates if c.skeletons == ("SK005",))
    out = build_dispatch(src, [("T1-K32", one.source), ("T3-K32", two.source)], bind_target(KDA, src))
    assert "def kda_decode(" in out and "kda_decode_skel_v2(" in out
    path = tmp_path / "dispatch.py"
    path.write_text(out)
    result = validate("kda_decode", path, shapes="ci", device="cpu", seeds=(0,))
    assert result.accepted, result.reasons


def test_output_never_overwrites_input_without_in_place(tmp_path):
    target = tmp_path / "kda.py"
    target.write_text("original\n")
    cand = tmp_path / "cand.py"
    cand.write_text("rewritten\n")
    o = CandidateOutcome(("SK001",), "SK001", True, True, "", True, "", {}, None, str(cand))
    binding = bind_target(KDA, KDA.read_text())
    out, _ = _write_output(target, "original\n", binding, [("T1", o)], [o], ApplyOptions(target=target))
    assert out == tmp_path / "kda.skel.py" and out.read_text() == "rewritten\n"
    assert target.read_text() == "original\n"
    with pytest.raises(ValueError, match="--in-place"):
        _write_output(target, "original\n", binding, [("T1", o)], [o], ApplyOptions(target=target, output=target))
    out, _ = _write_output(target, "original\n", binding, [("T1", o)], [o], ApplyOptions(target=target, in_place=True))
    assert out == target and target.read_text() == "rewritten\n"
    assert (tmp_path / "kda.py.orig").read_text() == "original\n"


def test_unusable_dispatch_falls_back_to_one_variant(tmp_path):
    target = tmp_path / "kda.py"
    target.write_text(KDA.read_text())
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(KDA.read_text().replace("BV = 32", "BV = 16"))
    b.write_text(KDA.read_text().replace("num_warps=4", "num_warps=2"))
    oa = CandidateOutcome(("SK005",), "A", True, True, "", True, "", {}, None, str(a))
    ob = CandidateOutcome(("SK005",), "B", True, True, "", True, "", {}, None, str(b))
    binding = bind_target(KDA, KDA.read_text())
    winners = [("T1-H32", oa), ("T8-H32", ob), ("T4-H32", oa)]
    out, notes = _write_output(target, KDA.read_text(), binding, winners, [oa, ob], ApplyOptions(target=target),
                               check=lambda text: "numerics failed at N1-T3")
    assert out.read_text() == a.read_text()  # A won two buckets
    assert "not usable" in notes[0] and "numerics failed" in notes[0]
    out, notes = _write_output(target, KDA.read_text(), binding, winners, [oa, ob], ApplyOptions(target=target),
                               check=lambda text: None)
    assert "def kda_decode_skel_v2(" in out.read_text() and "dispatches on shape" in notes[0]


def test_second_round_composes_on_each_bucket_winner(tmp_path, monkeypatch):
    """On a GPU the search measures twice: after the first round, the structural skeletons are composed
    on top of each bucket's winner with the winner's own variant (first-round compositions only take each
    skeleton's first variant). The gate is stood in for by a table of speedups (no GPU here); everything
    else (binding, candidates, selection, output) is the real code."""
    import dataclasses

    import skel.pipeline.apply as A
    from skel.validate.result import PerfResult, ShapeVerdict, Timing

    gdn = KERNELS / "gdn_decode" / "kernel.py"
    target = tmp_path / "gdn_decode.py"
    shutil.copy(gdn, target)
    p4 = "P=4,NS=1,num_warps=1,prefetch,num_stages=1"
    judged: list[str] = []

    p2 = "P=2,NS=1,num_warps=2,prefetch,num_stages=1"

    def speedups(label: str) -> dict[str, float]:
        if p4 in label:  # the one-warp plan wins at T = 8; with SK014 on top it wins more
            return {"T1": 0.9, "T8": 1.55 if "SK014" in label else 1.5}
        if label == f"SK002 [{p2}]":  # SK002's first plan alone wins T = 1: its composition is the first round's
            return {"T1": 1.4, "T8": 1.3}
        return {"T1": 1.3, "T8": 1.3}

    machines = []  # the roofline rates each judgement was given

    def judge(cand, cand_path, binding, path, shape_set, device, diff, options, machine=None):
        judged.append(cand.label)
        machines.append(machine)
        shapes = [dataclasses.asdict(ShapeVerdict(f"N64-{t}-H16-HV32-K128-V128", None, PerfResult(
            Timing(100.0, 99.0, 101.0, 40), Timing(100.0 / x, 99.0 / x, 101.0 / x, 40), x, x - 0.01, x + 0.01,
            "faster" if x > 1.02 else "slower" if x < 0.98 else "within noise", 1 << 27, 0, 4.2e3, 0.0,
            60.0, 60.0 * x, 2, 8), "")) for t, x in speedups(cand.label).items()]
        return A.CandidateOutcome(cand.skeletons, cand.label, False, True, "numerics passed", cand.unsafe, diff,
                                  cand.params, {"shapes": shapes}, str(cand_path)), machine or f"rates of {cand.label}"

    monkeypatch.setattr(A, "_judge", judge)
    monkeypatch.setattr(A, "_dispatch_check", lambda *a, **k: (lambda text: None))
    met = []  # head-to-heads: the refined T = 8 winner (1.55x) meets SK002's one-warp plan alone (1.5x, within 5 %)

    def runoff(binding, device, options, progress, machine):
        def run(bucket, leader, challenger, shapes):
            met.append((bucket, leader.label, challenger.label, tuple(shapes)))
            slower = {"speedup": 0.97, "speedup_low": 0.96, "speedup_high": 0.975, "verdict": "slower"}
            return settle(bucket, leader, challenger, {"shapes": [{"shape": s, "perf": slower} for s in shapes]})
        return run

    monkeypatch.setattr(A, "_runoff", runoff)
    opts = A.ApplyOptions(target=target, allow_unsafe=True, device="cuda", record=False, report_dir=tmp_path / "r",
                          shapes="N64-T1-H16-HV32-K128-V128,N64-T8-H16-HV32-K128-V128", max_candidates=16,
                          skeletons=("SK001", "SK002", "SK014"))
    result = A.apply(opts, load_library(), progress=lambda m: None)
    refined = f"SK001+SK002+SK014 [{p4}]"
    assert refined in judged and judged.index(refined) == len(judged) - 1  # judged after the first round
    assert f"SK002 [{p4}]" in judged and refined not in judged[:-1]
    assert dict(result.winners) == {"T8-H16-HV32-K128-V128": refined, "T1-H16-HV32-K128-V128": f"SK002 [{p2}]"}
    # the T = 1 winner's composition is the first round's own: said, not judged twice
    assert judged.count(f"SK001+SK002+SK014 [{p2}]") == 1
    # one roofline per run: the first candidate's worker measures the machine, every later one reuses it
    assert machines[0] is None and set(machines[1:]) == {f"rates of {judged[0]}"}
    assert met == [("T8-H16-HV32-K128-V128", refined, f"SK002 [{p4}]", ("N64-T8-H16-HV32-K128-V128",))]
    assert [r.winner for r in result.runoffs] == [refined]
    assert "kept after a run-off against" in next(c.reason for c in result.candidates if c.label == refined)
    assert "- roofline: copy 4.200 TB/s (best of 20 copies of 1 GiB), matmul 0 TFLOP/s (measured once for this run)" \
        in (tmp_path / "r" / "report.md").read_text()
    assert any("second round on SK002" in r and "judged in the first round" in r for _, r in result.skipped)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    [entry] = [c for c in report["candidates"] if c["label"] == refined]
    assert entry["accepted"] and entry["round"] == 2
    assert f"second round, on SK002 [{p4}], a first-round leader or contender for T8" in entry["reason"]
    paths = [c["path"] for c in report["candidates"]]
    assert len(set(paths)) == len(paths)  # a second-round file never overwrites a first-round one
    text = Path(entry["path"]).read_text()
    assert f"V tiles merged ({p4})" in text and "skel SK014" in text and "tl.rsqrt" in text
    out = Path(result.output).read_text()  # the dispatch holds the refined T = 8 variant
    assert f"V tiles merged ({p4})" in out and "skel SK014" in out and f"V tiles merged ({p2})" in out


def test_second_round_leaves_out_a_skeleton_that_blocks_the_winner():
    """SK002's prefetch leaves SK003 nothing to hoist: composed on top of an SK003 winner, SK002 is left
    out rather than the whole second round; a winner that nothing can be added to says so."""
    from skel.rewriter.base import RewriteOptions
    from skel.pipeline.candidates import enumerate_candidates, refine

    src = (KERNELS / "gdn_decode" / "kernel.py").read_text()
    codes, lib, opts = ["SK001", "SK002", "SK003", "SK006", "SK014"], load_library(), RewriteOptions(max_variants=10)
    cs = enumerate_candidates(src, codes, lib, opts, True, max_candidates=30)
    by_label = {c.label: c for c in cs.candidates}
    got = refine(src, by_label["SK003"], codes, lib, opts, True)
    assert got.skeletons == ("SK001", "SK003", "SK006", "SK014")
    full = next(c for c in cs.candidates if len(c.skeletons) > 1)  # the first round's composition
    assert "no other structural skeleton" in refine(src, full, codes, lib, opts, True)


def test_a_candidate_the_entry_never_launches_is_reported_not_judged():
    """A rewrite of a backward kernel judged through the forward launcher would pass as "unchanged":
    apply says which launcher reaches it instead."""
    from skel.pipeline.apply import _missed_by_entry

    src = (
        "import triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef fwd_k(x):\n    tl.store(x, tl.load(x) * 2)\n\n\n"
        "@triton.jit\ndef bwd_k(x):\n    tl.store(x, tl.load(x) * 3)\n\n\n"
        "def _go(x):\n    fwd_k[(1,)](x)\n\n\n"
        "def forward(x):\n    _go(x)\n    return x\n\n\n"
        "def backward(x):\n    bwd_k[(1,)](x)\n    return x\n"
    )
    bwd_only = src.replace("tl.load(x) * 3", "tl.load(x) * 4")
    both = bwd_only.replace("tl.load(x) * 2", "tl.load(x) * 5")
    assert "bwd_k, which forward never launches" in _missed_by_entry(src, bwd_only, "forward")
    assert _missed_by_entry(src, bwd_only, "backward") == ""
    assert _missed_by_entry(src, both, "forward") == ""  # through a helper it calls, forward reaches fwd_k


TWO_LAUNCHERS = '''\
import triton
import triton.language as tl


@triton.jit
def _h(x):
    return x * 2


@triton.jit
def k1(x, BLOCK: tl.constexpr):
    tl.store(x, _h(tl.load(x)))


@triton.jit
def k2(x):
    tl.store(x, tl.load(x) + 1)


def f1(x):
    k1[(1,)](x, BLOCK=4)


def f2(x):
    k2[(1,)](x)
'''


def test_a_candidate_is_judged_only_on_what_its_launcher_runs():
    """A rewrite of the whole file judged through f1: the changes to f2 and its kernel k2 (which f1 never
    runs, so the gate never exercises them) are restored to the original; those to k1, its launch in f1
    and the jitted helper k1 calls stay. A change to the helper alone is judged through f1, not missed."""
    from skel.pipeline.apply import _missed_by_entry, restrict_to_entry

    cand = (TWO_LAUNCHERS.replace("x * 2", "x + x").replace("tl.load(x) + 1", "1 + tl.load(x)")
            .replace("BLOCK=4", "BLOCK=8").replace("k2[(1,)](x)", "k2[(2,)](x)"))
    out, dropped = restrict_to_entry(TWO_LAUNCHERS, cand, "f1")
    assert dropped == ("f2", "k2")
    assert out == TWO_LAUNCHERS.replace("x * 2", "x + x").replace("BLOCK=4", "BLOCK=8")
    assert _missed_by_entry(TWO_LAUNCHERS, TWO_LAUNCHERS.replace("x * 2", "x + x"), "f1") == ""
    assert "never launches" in _missed_by_entry(TWO_LAUNCHERS, TWO_LAUNCHERS.replace("+ 1", "+ 2"), "f1")


TWO_NORMS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _norm_a(x, o, D: tl.constexpr, BD: tl.constexpr):
    o_d = tl.arange(0, BD)
    m = o_d < D
    b_x = tl.load(x + tl.program_id(0) * D + o_d, mask=m, other=0).to(tl.float32)
    b_x = b_x / tl.sqrt(tl.sum(b_x * b_x) + 1e-6)
    tl.store(o + tl.program_id(0) * D + o_d, b_x.to(o.dtype.element_ty), mask=m)


@triton.jit
def _norm_b(x, o, D: tl.constexpr, BD: tl.constexpr):
    o_d = tl.arange(0, BD)
    m = o_d < D
    b_x = tl.load(x + tl.program_id(0) * D + o_d, mask=m, other=0).to(tl.float32)
    b_x = 2.0 * b_x / tl.sqrt(tl.sum(b_x * b_x) + 1e-5)
    tl.store(o + tl.program_id(0) * D + o_d, b_x.to(o.dtype.element_ty), mask=m)


def norm_a(x: torch.Tensor) -> torch.Tensor:
    rows, D = x.shape
    o = torch.empty_like(x)
    _norm_a[(rows,)](x, o, D=D, BD=triton.next_power_of_2(D))
    return o


def norm_b(x: torch.Tensor) -> torch.Tensor:
    rows, D = x.shape
    o = torch.empty_like(x)
    _norm_b[(rows,)](x, o, D=D, BD=triton.next_power_of_2(D))
    return o
'''


def test_each_launcher_of_a_file_is_a_stage_of_its_own(tmp_path, monkeypatch):
    """Two launchers, two kernels, no --entry: apply judges each kernel through its own launcher, in
    turn, on the CPU (interpreter numerics, nothing accepted); each stage's candidate changes only what
    its launcher runs, though the rewrite (SK001) touched both kernels."""
    import skel.pipeline.apply as A

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "norms.py"
    target.write_text(TWO_NORMS)
    opts = A.ApplyOptions(target=target, device="cpu", record=False, report_dir=tmp_path / "r", skeletons=("SK001",),
                          allow_unsafe=True)
    result = A.apply(opts, load_library(), progress=lambda m: None)
    labels = [c.label for c in result.candidates]
    assert labels and {label.split(":")[0] for label in labels} == {"norm_a", "norm_b"}
    assert all(c.numerics_passed for c in result.candidates), [c.reason for c in result.candidates]
    for c in result.candidates:
        text = Path(c.path).read_text()
        mine, other = ("_norm_a", "_norm_b") if c.label.startswith("norm_a") else ("_norm_b", "_norm_a")
        assert A.restrict_to_entry(TWO_NORMS, text, c.label.split(":")[0])[1] == ()
        assert "left out" in c.reason and other in c.reason and "rsqrt" in text
    assert (tmp_path / "r" / "norm_a" / "report.md").is_file() and (tmp_path / "r" / "report.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no stage file left


def test_a_later_stage_starts_from_what_the_earlier_one_accepted(tmp_path, monkeypatch):
    """With a (stood-in) GPU that finds every candidate faster: stage 2 judges norm_b's candidates against
    the file as stage 1 left it (norm_a's kernel rewritten), in the target's own folder, never touching
    what stage 1 judged; the output holds both stages' rewrites."""
    import skel.pipeline.apply as A
    from skel.validate.result import PerfResult, ShapeVerdict, Timing

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "norms.py"
    target.write_text(TWO_NORMS)
    originals = []

    def judge(cand, cand_path, binding, path, shape_set, device, diff, options, machine=None):
        originals.append((binding.entry, path.name, path.read_text(), options.frozen))
        perf = PerfResult(Timing(10.0, 9.9, 10.1, 40), Timing(8.0, 7.9, 8.1, 40), 1.25, 1.24, 1.26, "faster",
                          1 << 20, 0, 100.0, 0.0, 10.0, 12.5, 2, 8)
        shapes = [dataclasses.asdict(ShapeVerdict(s, None, perf, "")) for s in ("rows1-D64", "rows8-D64")]
        return A.CandidateOutcome(cand.skeletons, cand.label, False, True, "numerics passed", cand.unsafe, diff,
                                  cand.params, {"shapes": shapes}, str(cand_path)), machine

    monkeypatch.setattr(A, "_judge", judge)
    monkeypatch.setattr(A, "_dispatch_check", lambda *a, **k: (lambda text: None))
    monkeypatch.setattr(A, "_runoff", lambda *a, **k: None)
    opts = A.ApplyOptions(target=target, device="cuda", record=False, report_dir=tmp_path / "r", skeletons=("SK001",),
                          shapes="rows1-D64,rows8-D64", allow_unsafe=True)
    result = A.apply(opts, load_library(), progress=lambda m: None)
    first = [o for o in originals if o[0] == "norm_a"]
    second = [o for o in originals if o[0] == "norm_b"]
    assert first and second and all(o[1] == "norms.py" and o[2] == TWO_NORMS for o in first)
    assert all(o[1] == ".norms.skel-stage2.py" and "rsqrt" in o[2].split("def _norm_b")[0] for o in second)
    assert all({"norm_a", "_norm_a"} <= set(o[3]) for o in second)
    out = Path(result.output).read_text()
    assert out.count("rsqrt") == 2 and result.output == str(tmp_path / "norms.skel.py")
    assert not (tmp_path / ".norms.skel-stage2.py").exists() and target.read_text() == TWO_NORMS
