"""Timing cheats, on a GPU only (skipped elsewhere): candidates whose numbers are right but whose timing
lies, each with the worker's in-process check blinded, so that only the judge's own checks (its clock,
the original timed alone, what the timed calls left, the roofline) can catch them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from skel.validate import validate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="timing cheats need a GPU")

CHEATERS = Path(__file__).parent / "cheaters"
ROOT = Path(__file__).parent.parent
KDA = ["N64-T1-H32-HV32-K128-V128"]

# cheater -> (target family, shapes, words the rejection must contain; "a|b": either)
TIMING = {
    "patches_timer.py": ("kda_decode", KDA, ["replaced torch.cuda.event.elapsed_time"]),
    "gpu_blind_timer.py": ("kda_decode", KDA, ["timer disagrees with the judge's clock"]),
    "gpu_blind_skip.py": ("kda_decode", KDA, ["did not do the work it was timed on"]),
    # its queued work shows as work left running, or (the launches hold its own reply up) on the judge's clock
    "gpu_blind_busy.py": ("kda_decode", KDA, ["left work|disagrees with the judge's clock"]),
    "gpu_blind_once.py": ("state_merge", ["N64-HV32-C4-K128-V128"], ["of the roofline", "not believed"]),
}


@pytest.mark.parametrize("name", sorted(TIMING))
def test_a_timing_cheat_is_rejected_for_what_it_did(name):
    family, shapes, words = TIMING[name]
    result = validate(family, CHEATERS / name, shapes=shapes, seeds=(0,), device="cuda", require="correct")
    assert not result.accepted and result.error is None, result.reasons
    text = " ".join(result.reasons).lower()
    for word in words:
        assert any(w in text for w in word.split("|")), f"{name}: {word!r} not in {result.reasons}"
    assert not result.faster_at  # no speedup is ever reported for it


@pytest.mark.parametrize("family", ["kda_decode", "state_merge"])
def test_the_honest_kernel_passes_every_timing_check(family):
    shapes = KDA if family == "kda_decode" else ["N64-HV32-C4-K128-V128"]
    result = validate(family, ROOT / "kernels" / family / "kernel.py", shapes=shapes, seeds=(0,), device="cuda",
                      require="not-slower")
    assert result.accepted, result.reasons
    assert all(s.perf is not None and s.perf.verdict == "within noise" for s in result.shapes), result.shapes
