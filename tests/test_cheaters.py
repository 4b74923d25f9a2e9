"""Dishonest and broken kda_decode candidates: every one rejected with a reason a person
understands (one line, no traceback), and the gate survives to judge the next."""
from __future__ import annotations

from pathlib import Path

import pytest

from skel.validate import validate

CHEATERS = Path(__file__).parent / "cheaters"
KERNEL = Path(__file__).parent.parent / "kernels" / "kda_decode" / "kernel.py"

# candidate file -> words the reason must contain (lower-cased)
DISHONEST = {
    "cached_result.py": ["'o'", "cached or stale result"],
    "skipped_tiles.py": ["'o'", "nan/inf", "unwritten"],
    "state_not_updated.py": ["'state'", "not updated in place"],
    "mutates_q.py": ["modified its input 'q'"],
    "output_in_v.py": ["modified its input 'v'"],
    "constant_output.py": ["'o'", "constant"],
    "bf16_state.py": ["'state'", "float64 reference", "rel-rms error"],
    "tf32_state.py": ["precision downgrade", "'state'", "original kernel"],
}
BROKEN = {
    "syntax_error.py": ["does not import", "syntaxerror", "line 4"],
    "import_error.py": ["does not import", "modulenotfounderror", "import_error.py:2"],
    "no_launcher.py": ["defines no launcher 'kda_decode'"],
    "wrong_signature.py": ["wrong signature", "g"],
    "raises.py": ["raised notimplementederror", "head dim", "raises.py:5"],
    "hangs.py": ["timed out", "3 s"],
    "aborts.py": ["crashed", "sigabrt"],
    "segfaults.py": ["crashed", "sigsegv"],
    "exits.py": ["exit status 3", "without a verdict"],
}


def _judge(name: str):
    return validate("kda_decode", CHEATERS / name, shapes="ci", seeds=(0, 1), device="cpu", time_limit=3.0)


@pytest.mark.parametrize("name", sorted(DISHONEST))
def test_dishonest_candidate_is_rejected_with_its_reason(name):
    result = _judge(name)
    assert not result.accepted and result.error is None
    text = " ".join(result.reasons).lower()
    for word in DISHONEST[name]:
        assert word in text, f"{name}: {word!r} not in {result.reasons}"
    failed = [s for s in result.shapes if s.numerics is not None and not s.numerics.passed]
    assert failed and all(s.perf is None for s in result.shapes)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_candidate_is_rejected_in_one_line(name):
    result = _judge(name)
    assert not result.accepted and result.error is None
    assert result.reasons
    for reason in result.reasons:
        assert "\n" not in reason and "Traceback" not in reason
    text = " ".join(result.reasons).lower()
    for word in BROKEN[name]:
        assert word in text, f"{name}: {word!r} not in {result.reasons}"


def test_gate_survives_a_crash_and_accepts_the_honest_kernel_next():
    assert not _judge("aborts.py").accepted
    honest = validate("kda_decode", KERNEL, shapes="ci", seeds=(0, 1), device="cpu")
    assert honest.accepted, honest.reasons
    assert all(s.numerics.passed and s.perf is None and "not measured" in s.perf_note for s in honest.shapes)
