"""The gate itself: comparisons, statistics, target resolution, the API and the CLI."""
from __future__ import annotations

import itertools
import time
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from skel.cli import main
from skel.validate import GateInputError, validate
from skel.validate.bench import median_interval
from skel.validate.load import TargetError, resolve_target, signature_problem
from skel.validate.numerics import compare, describe_exception, index_str, nonfinite, poisoned_allocations
from skel.validate.spec import Shape, Tolerance

ROOT = Path(__file__).parent.parent
KDA = ROOT / "kernels" / "kda_decode" / "kernel.py"


# -- pieces ----------------------------------------------------------------------------------------
def test_shape_label_round_trip_keeps_order():
    shape = Shape.of(N=64, T=1, H=32, HV=32, K=128, V=128)
    assert shape.label == "N64-T1-H32-HV32-K128-V128"
    assert Shape.parse(shape.label) == shape and shape["HV"] == 32
    with pytest.raises(ValueError):
        Shape.parse("N64-T")


def test_compare_reports_first_element_over_the_limit():
    expected = torch.zeros(2, 3, dtype=torch.float64)
    got = expected.clone()
    got[1, 2] = 0.5
    got[0, 1] = 0.01
    cmp = compare(got, expected, Tolerance(rel_rms=1e-3, max_abs=0.1))
    assert not cmp.passed and cmp.max_abs == pytest.approx(0.5)
    assert "[1, 2]: got 0.5, expected 0" in cmp.detail
    ok = compare(torch.ones(4), torch.ones(4, dtype=torch.float64) * (1 + 1e-7), Tolerance(1e-5, 1e-5))
    assert ok.passed and ok.rel_rms == pytest.approx(1e-7, rel=0.1)


def test_nonfinite_is_reported_separately_with_its_index():
    x = torch.zeros(3, 4)
    x[2, 1] = float("nan")
    x[2, 3] = float("inf")
    msg = nonfinite("o", x)
    assert "2 NaN/inf of 12" in msg and "[2, 1]" in msg
    assert nonfinite("o", torch.zeros(3)) is None
    assert index_str(7, (2, 2, 2)) == "[1, 1, 1]"


def test_an_operation_the_interpreter_lacks_is_named():
    """The CPU interpreter has no builder for some operations (bf16 constants: ``get_bf16``): the message
    says the kernel must be judged on a GPU instead of leaving a bare AttributeError."""
    exc = AttributeError("'InterpreterBuilder' object has no attribute 'get_bf16'")
    text = describe_exception(exc, None)
    assert "get_bf16" in text and "judge the kernel on a GPU" in text
    assert "GPU" not in describe_exception(AttributeError("'NoneType' object has no attribute 'type'"), None)


def test_poisoned_allocations_fill_and_restore():
    empty = torch.empty
    with poisoned_allocations():
        assert torch.isnan(torch.empty(5)).all()
        assert torch.isnan(torch.empty_like(torch.zeros(3))).all()
        assert (torch.empty(3, dtype=torch.int64) == -1).all()
    assert torch.empty is empty


def test_median_interval_is_order_statistics():
    med, lo, hi = median_interval([float(i) for i in range(1, 31)])
    assert med == 15.5 and lo == 9.0 and hi == 22.0
    assert median_interval([3.0]) == (3.0, 3.0, 3.0)


def test_signature_problem():
    def good(q, k, scale=None):
        return q

    def bad(q):
        return q

    assert signature_problem(good, ("q", "k")) is None
    assert "cannot take (q, k)" in signature_problem(bad, ("q", "k"))


def test_target_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_target("kda_decode").kernel == KDA.resolve()
    assert resolve_target(str(KDA)).spec.name == "spec.py"
    copy = tmp_path / "my_kda.py"
    shutil.copy(KDA, copy)
    inferred = resolve_target(copy)  # no spec anywhere: the one inferred from its launcher
    assert inferred.inferred and inferred.spec.name == "spec.py" and inferred.spec.parent != copy.parent
    no_launcher = tmp_path / "lone.py"
    no_launcher.write_text(KDA.read_text().split("def kda_decode(")[0])
    with pytest.raises(TargetError, match="no spec for target.*none can be inferred"):
        resolve_target(no_launcher)
    assert resolve_target(copy, "kda_decode").spec == KDA.parent.resolve() / "spec.py"
    with pytest.raises(TargetError, match="neither a family"):
        resolve_target("no_such_family")


# -- the API ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gdn_decode", "state_merge", "dsa_indexer"])
def test_each_family_accepts_its_own_kernel(family):
    kernel = ROOT / "kernels" / family / "kernel.py"
    result = validate(family, kernel, device="cpu", seeds=(0, 1))
    assert result.accepted, result.reasons
    assert result.shape_set == "ci" and len(result.shapes) >= 2
    for verdict in result.shapes:
        assert verdict.numerics.passed and verdict.perf is None
        assert verdict.perf_note.startswith("not measured")
        for out in verdict.numerics.outputs:
            if out.rel_rms is not None:
                assert out.diff_rel_rms == 0.0  # the same kernel reproduces itself bit for bit


def test_honest_rsqrt_rewrite_is_accepted(tmp_path):
    source = KDA.read_text()
    edited = re.sub(r"(b_[qk]) = \1 / tl\.sqrt\(tl\.sum\(\1 \* \1\) \+ 1e-6\)",
                    r"\1 = \1 * tl.rsqrt(tl.sum(\1 * \1) + 1e-6)", source)
    assert edited.count("tl.rsqrt") == 2
    candidate = tmp_path / "kda_rsqrt.py"
    candidate.write_text(edited)
    result = validate("kda_decode", candidate, device="cpu")
    assert result.accepted, result.reasons
    assert len(result.seeds) == 2 and result.seeds[0] == 0  # a fresh random seed besides 0


def test_a_broken_original_cannot_be_judged(tmp_path):
    target = tmp_path / "kda_wrong_scale.py"
    target.write_text(KDA.read_text().replace("scale = K ** -0.5", "scale = 1.0"))
    result = validate(target, KDA, spec="kda_decode", device="cpu", seeds=(0,), shapes=["N2-T1-H1-HV2-K32-V64"])
    assert not result.accepted and result.error
    assert "original kernel fails the float64 reference" in result.reasons[0]


def test_require_faster_is_never_granted_without_a_gpu():
    result = validate("kda_decode", KDA, device="cpu", seeds=(0,), shapes=["N2-T1-H1-HV2-K32-V64"], require="faster")
    assert not result.accepted
    assert "not measured" in result.reasons[0]


def test_bad_requests_are_input_errors(tmp_path):
    with pytest.raises(GateInputError, match="not a file"):
        validate("kda_decode", tmp_path / "missing.py", device="cpu")
    with pytest.raises(GateInputError, match="no shape set 'huge'"):
        validate("kda_decode", KDA, shapes="huge", device="cpu")
    with pytest.raises(GateInputError, match="supports"):
        validate("state_merge", KDA, dtype="bfloat16", device="cpu")


# -- the CLI ------------------------------------------------------------------------------------------
def test_cli_json_and_exit_codes(capsys):
    code = main(["validate", "kda_decode", str(ROOT / "tests" / "cheaters" / "constant_output.py"),
                 "--seeds", "0", "--shapes", "N2-T1-H1-HV2-K32-V64", "--device", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["accepted"] is False and "constant" in out["reasons"][0]
    assert {"shape", "numerics", "perf"} <= set(out["shapes"][0])

    code = main(["validate", "kda_decode", str(KDA), "--seeds", "0", "--shapes", "N2-T1-H1-HV2-K32-V64",
                 "--device", "cpu"])
    text = capsys.readouterr().out
    assert code == 0 and "ACCEPTED" in text and "not measured" in text

    assert main(["validate", "no_such_family", str(KDA)]) == 2
    assert "neither a family" in capsys.readouterr().err


def test_harness_spec_with_a_returned_in_place_state(tmp_path):
    # A launcher that hands the updated state back as a second output (as FLA's does) is judged
    # through a harness spec; returning the in-place input is legitimate, not aliasing.
    kernel = tmp_path / "kda_two_outputs.py"
    kernel.write_text(KDA.read_text() + (
        "\n\ndef kda_with_state(q, k, v, g, beta, A_log, dt_bias, state, scale=None):\n"
        "    return kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale), state\n"))
    harness = tmp_path / "harness_spec.py"
    harness.write_text(
        "import dataclasses\n"
        "from skel.kernels.kda_decode.spec import SPEC as FAMILY\n\n"
        "def reference(**inputs):\n"
        "    out = FAMILY.reference(**inputs)\n"
        "    return {'o': out['o'], 'final': out['state'], 'state': out['state']}\n\n"
        "SPEC = dataclasses.replace(FAMILY, entry='kda_with_state', reference=reference, outputs=('o', 'final'))\n")
    result = validate(kernel, kernel, spec=harness, device="cpu", seeds=(0,), shapes=["N2-T1-H1-HV2-K32-V64"])
    assert result.accepted, result.reasons
    assert [o.output for o in result.shapes[0].numerics.outputs] == ["o", "final", "state"]


def test_graph_sequence_amortises_replay_gap_in_whole_rounds():
    from skel.validate.bench import graph_sequence

    # one set over the L2: the graph still makes eight calls, so the replay gap is paid once per eight
    assert graph_sequence(1, 8) == [0] * 8
    # three sets: whole rounds, every set called equally often
    assert graph_sequence(3, 8) == [0, 1, 2] * 3
    # enough sets already: each once
    assert graph_sequence(16, 8) == list(range(16))


# -- the judge's checks on a timing (GPU runs feed them; here, on numbers) ---------------------------------
def test_timing_checks_catch_a_timer_that_reports_less_than_the_judges_clock_saw():
    from skel.validate.timing import Untrusted, _check_clock, _Samples

    honest_a = _Samples([2000.0 + i for i in range(30)], [2080.0 + i for i in range(30)])  # 80 us protocol
    honest_b = _Samples([1500.0 + i for i in range(30)], [1585.0 + i for i in range(30)])
    _check_clock(honest_a, honest_b)
    halved = _Samples([750.0 + i for i in range(30)], [1585.0 + i for i in range(30)])
    with pytest.raises(Untrusted, match="disagrees with the judge's clock"):
        _check_clock(honest_a, halved)


def test_timing_checks_catch_work_left_running_while_the_original_is_timed():
    from skel.validate.bench import BenchConfig
    from skel.validate.timing import Untrusted, _check_alone, _drain, _Samples

    solo = _Samples([100.0, 101.0, 100.5, 99.5, 100.2] * 2, [0.0] * 10)
    _check_alone(solo, _Samples([100.3 + 0.1 * i for i in range(30)], [0.0] * 30), BenchConfig())
    with pytest.raises(Untrusted, match="left work running"):
        _check_alone(solo, _Samples([130.0 + i for i in range(30)], [0.0] * 30), BenchConfig())
    times = iter([500.0, 300.0, 150.0, 101.0, 100.5])  # queued work drains, then two samples agree
    assert _drain(lambda: next(times)) == 5
    with pytest.raises(Untrusted, match="stayed busy"):
        flip = itertools.cycle([100.0, 150.0])  # never two in a row alike: the device never settles
        _drain(lambda: next(flip), max_s=0.2)


def _descendants(pid: int) -> set[int]:
    from skel.validate.sandbox import children

    found, todo = set(), [pid]
    while todo:
        for kid in children(todo.pop()):
            if kid not in found:
                found.add(kid)
                todo.append(kid)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killing_skel_validate_leaves_no_process_of_the_gate_behind(tmp_path):
    """kill -9 of `skel validate` while its candidate hangs: the fork server, the supervisors and the
    workers all go with it (the fork server sees its socket close, supervisors and workers die with
    their parents)."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "skel", "validate", "kda_decode", str(ROOT / "tests/cheaters/hangs.py"),
                             "--device", "cpu", "--seeds", "0", "--time-limit", "120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        tree: set[int] = set()
        while time.monotonic() < deadline and len(tree) < 5:  # fork server, 2 supervisors, 2 workers
            time.sleep(0.2)
            tree = _descendants(proc.pid)
        assert len(tree) >= 5, f"the gate's processes did not all start: {tree}"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.1)
        assert not [p for p in tree if _alive(p)], "processes left behind"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_spec_that_raises_is_a_clear_input_error_not_a_traceback(tmp_path):
    spec = tmp_path / "broken_spec.py"
    spec.write_text(
        "import dataclasses\n"
        "from skel.kernels.kda_decode.spec import SPEC as FAMILY\n\n"
        "def make_inputs(shape, dtype, seed, device):\n"
        "    return 1 / 0\n\n"
        "SPEC = dataclasses.replace(FAMILY, make_inputs=make_inputs)\n")
    result = validate(KDA, KDA, spec=spec, device="cpu", seeds=(0,), shapes=["N2-T1-H1-HV2-K32-V64"])
    assert not result.accepted and result.error
    assert "ZeroDivisionError" in result.error and "broken_spec.py:5" in result.error, result.error
    assert "\n" not in result.error


def test_a_kernel_calling_aliased_builtins_runs_in_the_interpreter(tmp_path, monkeypatch):
    """`exp = tl.exp` in the kernel file, and `exp` imported from a helper module (as FLA, SGLang and vLLM
    write them): the interpreter used to fail the original; the gate binds the aliases late."""
    helper = tmp_path / "my_ops.py"
    helper.write_text("import triton.language as tl\n\nexp = tl.exp\nsigmoid = tl.sigmoid\n")
    source = KDA.read_text()
    assert source.count("tl.exp(") == 3 and "tl.sigmoid(" in source
    local = tmp_path / "kda_alias.py"
    local.write_text(source.replace("import triton.language as tl\n",
                                                      "import triton.language as tl\nexp = tl.exp\n", 1)
                     .replace("tl.exp(", "exp("))
    imported = tmp_path / "kda_imported.py"
    imported.write_text(source.replace("import triton.language as tl\n",
                                       "import triton.language as tl\nfrom my_ops import exp, sigmoid\n", 1)
                        .replace("tl.exp(", "exp(").replace("tl.sigmoid(", "sigmoid("))
    monkeypatch.syspath_prepend(str(tmp_path))
    for target in (local, imported):
        result = validate(target, target, spec="kda_decode", device="cpu", seeds=(0,), shapes=["N2-T1-H1-HV2-K32-V64"])
        assert result.accepted and result.error is None, (target.name, result.reasons)
