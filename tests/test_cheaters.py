"""Dishonest and broken kda_decode candidates: every one rejected with a reason a person
understands (one line, no traceback), and the gate survives to judge the next."""
from __future__ import annotations

import shutil
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


# -- candidates that attack the gate instead of the numbers ------------------------------------------------
# Each is rejected for what it did (its own process reports it, and that can only count against it),
# and where it returned garbage the judge, in a process it cannot reach, rejects the garbage too.
ONE = dict(shapes=["N2-T1-H1-HV2-K32-V64"], seeds=(0,), device="cpu", time_limit=20.0)
TAMPERING = {
    "patches_judge.py": ["replaced skel.validate.judge.shapejudge._judge", "'o' against the float64 reference"],
    "patches_compare.py": ["replaced skel.validate.numerics.compare", "'o' against the float64 reference"],
    "patches_torch.py": ["replaced torch.equal", "replaced torch.isfinite", "'o'"],
    "patches_timer.py": ["replaced torch.cuda.event.elapsed_time", "replaced torch.cuda.cudagraph.replay"],
}


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_a_candidate_that_patches_the_gate_or_torch_is_rejected(name):
    result = validate("kda_decode", CHEATERS / name, **ONE)
    assert not result.accepted and result.error is None
    text = " ".join(result.reasons).lower()
    for word in TAMPERING[name]:
        assert word in text, f"{name}: {word!r} not in {result.reasons}"


def _digests(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _user_project(tmp_path: Path) -> tuple[Path, Path]:
    """A user's folder: their copy of the kernel (the target) and a notes file beside it."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(KERNEL, project / "kda.py")
    (project / "notes.txt").write_text("the user's own notes\n")
    return project, project / "kda.py"


FILE_CHEATERS = {  # cheater -> (victim in the user's folder, what the rejection says without Landlock)
    "writes_file.py": ("kda.py", "modified"),
    "deletes_file.py": ("notes.txt", "deleted"),
    "renames_file.py": ("notes.txt", "deleted"),
    "raw_write.py": ("notes.txt", "modified"),
}


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "no-landlock"])
@pytest.mark.parametrize("name", sorted(FILE_CHEATERS))
def test_a_candidate_that_touches_the_users_files_is_rejected_and_the_files_stay(name, landlock, tmp_path,
                                                                                monkeypatch):
    from skel.validate.sandbox import landlock_abi

    if landlock and not landlock_abi():
        pytest.skip("this kernel has no Landlock")
    project, target = _user_project(tmp_path)
    victim, what = FILE_CHEATERS[name]
    cheater = tmp_path / name
    cheater.write_text((CHEATERS / name).read_text().replace("__VICTIM__", str(project / victim)))
    monkeypatch.chdir(project)  # the working directory is watched too
    before = _digests(project)
    result = validate(target, cheater, spec="kda_decode", landlock=landlock, **ONE)
    assert _digests(project) == before  # blocked, or put back from the backup
    text = " ".join(result.reasons)
    if landlock and name == "raw_write.py":
        # Landlock refused the write in the kernel; no Python audit event saw the attempt: harmless and unreported.
        assert result.isolation["writes_confined"]
        return
    assert not result.accepted, result.reasons
    if landlock:
        assert f"tried to" in text and str(project / victim) in text, result.reasons
    else:
        assert f"{what} {project / victim} (restored from the backup)" in text, result.reasons
        assert not result.isolation["writes_confined"]


def test_a_candidate_cannot_read_the_reference_from_other_processes_or_disk():
    result = validate("kda_decode", CHEATERS / "reads_memory.py", **ONE)
    assert not result.accepted and result.error is None
    text = " ".join(result.reasons).lower()
    assert "leak" not in text, result.reasons  # it found nothing to read
    assert "'o'" in text, result.reasons  # and its own stale memory is not the answer


def test_a_candidate_that_leaves_processes_behind_is_rejected_and_they_are_killed():
    import re

    result = validate("kda_decode", CHEATERS / "spawns_orphan.py", **ONE)
    assert not result.accepted
    [reason] = [r for r in result.reasons if "left" in r]
    assert "process(es) running after its worker finished" in reason and reason.endswith("killed")
    pids = [int(p) for p in re.findall(r"(\d+): ", reason)]
    assert len(pids) >= 2, reason
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_candidate_cannot_signal_the_gate():
    from skel.validate.sandbox import landlock_abi

    if (landlock_abi() or 0) < 6:
        pytest.skip("signal scoping needs Landlock ABI 6")
    result = validate("kda_decode", CHEATERS / "signals_gate.py", **ONE)
    assert not result.accepted and result.error is None
    assert any("sent signal 9 to process" in r for r in result.reasons), result.reasons
    assert validate("kda_decode", KERNEL, **ONE).accepted  # the gate's processes are all still there
