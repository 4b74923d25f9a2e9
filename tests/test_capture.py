"""`skel capture`: a model's own run recorded, a spec written from it, that spec judged in a fresh process.

The end-to-end test runs examples/capture_demo/model.py (a toy decoder calling kernel.decay_step once
per layer and token, at batch 2 and 3) under `skel capture`, then `skel validate` and `skel apply`
on the written spec, each a separate process (CPU: Triton's interpreter)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skel.cli import main
from skel.harness.capture_plan import _batch_plans
from skel.harness.launchers import LauncherError, find_launchers, pick
from skel.harness.recording import PlainArg, RecordedCall, TensorArg
from skel.validate.load import load_spec
from skel.validate.spec import Shape

ROOT = Path(__file__).parent.parent
DEMO = ROOT / "examples" / "capture_demo"
KERNEL = DEMO / "kernel.py"


def skel(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("PYTHONPATH", None)  # the spec must load without the user's package on the path
    return subprocess.run([sys.executable, "-m", "skel", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("capture")
    out = work / "cap"
    proc = skel("capture", "--entry", str(KERNEL), "-o", str(out), "--", "python", str(DEMO / "model.py"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "decay_step: 12 call(s), 2 signature(s), 4 kept with tensors" in proc.stdout
    assert "batch 3:" in proc.stderr or "batch 3:" in proc.stdout  # the model's own output still shows
    return out


def test_capture_records_every_call_and_keeps_k_per_signature(captured):
    data = json.loads((captured / "calls.json").read_text())
    assert data["tallies"] == [{"launcher": "decay_step", "calls": 12, "signatures": 2, "kept": 4}]
    kept = [c for c in data["calls"] if c["file"]]
    assert [c["label"] for c in kept] == ["call0", "call1", "call2", "call3"]
    assert all(c["modified"] == ["state"] for c in kept)  # the in-place state, found by comparing before/after
    assert sorted(p.name for p in captured.glob("*.safetensors")) == [f"call{i}.safetensors" for i in range(4)]


def test_captured_spec_replays_the_recorded_tensors(captured):
    from safetensors.torch import load_file

    spec = load_spec(captured / "spec.py")
    assert spec.reference is None and spec.tolerances == {}
    assert spec.entry == "decay_step" and spec.outputs == ("o",) and spec.inplace == ("state",)
    assert spec.dtypes == ("float32",)
    assert [s.label for s in spec.shapes("ci")] == ["call0-N2", "call2-N3", "call1-N2", "call3-N3"]
    assert "call0-N256" in [s.label for s in spec.shapes("decode")]
    recorded = load_file(str(captured / "call1.safetensors"))
    exact = spec.make_inputs(Shape.parse("call1-N2"), "float32", 0, "cpu")
    assert list(exact) == ["x", "g", "state", "eps"] and exact["eps"] == 1e-6
    assert all(torch.equal(exact[k], recorded[k]) for k in ("x", "g", "state"))
    assert float(recorded["state"].abs().sum()) > 0  # the second token's call: the state it carried in
    fresh = spec.make_inputs(Shape.parse("call1-N2"), "float32", 1, "cpu")
    assert not torch.equal(fresh["x"], exact["x"])
    assert set(fresh["x"].unique().tolist()) <= set(exact["x"].unique().tolist())  # drawn from its own values
    scaled = spec.make_inputs(Shape.parse("call0-N8"), "float32", 0, "cpu")
    assert scaled["x"].shape == (8, 2, 32) and torch.equal(scaled["x"][2:4], scaled["x"][:2])
    # x, g, state read; state and o written (float32)
    assert spec.bytes(Shape.parse("call0-N2"), "float32") == 4 * (128 + 4 + 128 + 128 + 128)


def test_captured_spec_judges_in_a_fresh_process(captured, tmp_path):
    same = tmp_path / "same" / "kernel.py"
    same.parent.mkdir()
    shutil.copyfile(KERNEL, same)
    flipped = tmp_path / "flipped" / "kernel.py"
    flipped.parent.mkdir()
    source = KERNEL.read_text()
    assert "s = a * s + (1 - a) * x" in source
    flipped.write_text(source.replace("s = a * s + (1 - a) * x", "s = a * s - (1 - a) * x"))
    spec = str(captured / "spec.py")

    ok = skel("validate", str(KERNEL), str(same), "--spec", spec, "--device", "cpu", cwd=tmp_path)
    assert ok.returncode == 0 and "ACCEPTED" in ok.stdout, ok.stdout + ok.stderr
    assert "oracle: the original kernel" in ok.stdout
    bad = skel("validate", str(KERNEL), str(flipped), "--spec", spec, "--device", "cpu", "--seeds", "0", cwd=tmp_path)
    assert bad.returncode == 1 and "REJECTED" in bad.stdout, bad.stdout + bad.stderr
    assert "'state'" in bad.stdout or "'o'" in bad.stdout
    # the state's own term dropped: right wherever the state is still empty, so only a call sampled later
    # in the run (the capture keeps calls 1 and 4 of each signature here, not 1 and 2) can reject it
    dropped = tmp_path / "dropped" / "kernel.py"
    dropped.parent.mkdir()
    dropped.write_text(source.replace("s = a * s + (1 - a) * x", "s = (1 - a) * x"))
    late = skel("validate", str(KERNEL), str(dropped), "--spec", spec, "--device", "cpu", "--seeds", "0", cwd=tmp_path)
    assert late.returncode == 1 and re.search(r"call0-N2\s+ok", late.stdout), late.stdout + late.stderr
    assert re.search(r"call1-N2\s+FAIL", late.stdout), late.stdout

    # apply judges its rewrite (rsqrt for the division by a square root) on the captured calls; on a CPU
    # nothing is accepted (no timing), so it exits 1 with the numerics verdict
    apply = skel("apply", str(KERNEL), "--harness", spec, "--device", "cpu", "--unsafe", "--skeleton", "SK001",
                 "--no-record", cwd=tmp_path)
    assert apply.returncode == 1 and f"harness {spec}" in apply.stderr, apply.stdout + apply.stderr
    assert "SK001: numerics passed; performance not measured" in apply.stdout, apply.stdout + apply.stderr


OPS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _acc_kernel(x_ptr, sx0, sx1, acc_ptr, o_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    acc = tl.load(acc_ptr + r * N + offs, mask=m, other=0.0) + 2.0 * tl.load(x_ptr + r * sx0 + offs * sx1, mask=m)
    tl.store(acc_ptr + r * N + offs, acc, mask=m)
    tl.store(o_ptr + r * N + offs, acc * 0.5, mask=m)


def accumulate(x, acc, flag=None):
    o = torch.empty_like(acc)
    _acc_kernel[(x.shape[0],)](x, x.stride(0), x.stride(1), acc, o, N=x.shape[1], BLOCK=16)
    return o, acc, None, 3
"""

TEST_OPS = """\
import torch
from pkg.ops import accumulate


def test_accumulate():
    for rows in (3, 5):
        x = torch.randn(16, rows).t()  # a transposed view: not contiguous
        acc = torch.zeros(rows, 16)
        for _ in range(3):
            o, same, _, n = accumulate(x, acc, flag=True)
        assert same is acc and n == 3
"""


def test_a_pytest_run_captures_layouts_and_a_mixed_return(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ops.py").write_text(OPS)
    (tmp_path / "test_ops.py").write_text(TEST_OPS)
    proc = skel("capture", "--entry", "pkg/ops.py", "-o", "cap", "--", "pytest", "-q", "-p", "no:cacheprovider",
                "test_ops.py", cwd=tmp_path)
    assert proc.returncode == 0 and "accumulate: 6 call(s), 2 signature(s), 4 kept" in proc.stdout, proc.stderr
    spec = load_spec(tmp_path / "cap" / "spec.py")
    # o is compared; the handed-back input, the None and the int are passed over; acc is in place
    assert spec.outputs == ("o", "_acc", "_out2", "_out3") and spec.inplace == ("acc",)
    x = spec.make_inputs(Shape.parse("call0-N3"), "float32", 0, "cpu")["x"]
    assert x.stride() == (1, 3) and x.shape == (3, 16)  # replayed with the layout the kernel was given
    copy = tmp_path / "copy" / "ops.py"
    copy.parent.mkdir()
    copy.write_text(OPS)
    ok = skel("validate", "pkg/ops.py", str(copy), "--spec", "cap/spec.py", "--device", "cpu", "--seeds", "0",
              cwd=tmp_path)
    assert ok.returncode == 0 and "ACCEPTED" in ok.stdout, ok.stdout + ok.stderr


# -- what fails, and says so ---------------------------------------------------------------------
def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_failing_command_is_an_error_with_its_stderr(tmp_path, capsys):
    code, text = run_cli(capsys, "capture", "--entry", str(KERNEL), "-o", str(tmp_path / "c"), "--",
                         "python", "-c", "import sys; sys.stderr.write('boom: no model\\n'); sys.exit(3)")
    assert code == 2 and "the command failed (exit 3)" in text and "boom: no model" in text
    assert not (tmp_path / "c").exists()  # nothing half-written is left


def test_a_run_that_never_imports_the_file_captures_nothing(tmp_path, capsys):
    code, text = run_cli(capsys, "capture", "--entry", str(KERNEL), "-o", str(tmp_path / "c"), "--",
                         "python", "-c", "print('hello')")
    assert code == 2 and "nothing captured" in text and "was never imported" in text


def test_a_run_that_imports_the_file_but_calls_nothing_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(DEMO)
    code, text = run_cli(capsys, "capture", "--entry", f"{KERNEL}:decay_step", "-o", str(tmp_path / "c"), "--",
                         "python", "-c", "import sys; sys.path.insert(0, '.'); import kernel")
    assert code == 2 and "imported (as kernel)" in text and "none of its launchers (decay_step) was called" in text


def test_a_kernel_launched_only_from_another_file_has_no_launcher(tmp_path):
    kernels = tmp_path / "kernels.py"
    kernels.write_text("import triton\n\n@triton.jit\ndef _k(x_ptr):\n    pass\n")
    ops = tmp_path / "ops.py"
    ops.write_text("from kernels import _k\n\ndef run(x):\n    _k[(1,)](x)\n    return x\n")
    with pytest.raises(LauncherError, match="launched only from another file"):
        pick(find_launchers(kernels), None)
    with pytest.raises(LauncherError, match="defines no @triton.jit kernel .*run launches _k"):
        pick(find_launchers(ops), None)
    with pytest.raises(LauncherError, match="'nope' is not a launcher of this file .*decay_step"):
        pick(find_launchers(KERNEL), "nope")
    assert [(l.name, l.kernels, l.returns) for l in find_launchers(KERNEL).launchers] == [
        ("decay_step", ("_decay_step_kernel",), ("o",))]


def test_an_existing_capture_is_not_overwritten_without_force(tmp_path, capsys):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep me")
    code, text = run_cli(capsys, "capture", "--entry", str(KERNEL), "-o", str(folder), "--", "python", "-c", "pass")
    assert code == 2 and "--force" in text
    code, text = run_cli(capsys, "capture", "--entry", str(KERNEL), "-o", str(folder), "--force", "--",
                         "python", "-c", "pass")
    assert code == 2 and "not a capture folder" in text and (folder / "mine.txt").read_text() == "keep me"


# -- batch scaling decided from the calls --------------------------------------------------------
def _call(label: str, batch: int, *, slots: bool = False, n_arg: int | None = None) -> RecordedCall:
    def tensor(name, shape, dtype="float32"):
        return TensorArg(name, shape, dtype, tuple(1 for _ in shape), True, "cpu", 0, 0)

    args = [tensor("x", (batch, 4)), tensor("w", (4,))]
    if slots:
        args.append(tensor("slots", (batch,), "int32"))
    if n_arg is not None:
        args.append(PlainArg("n", n_arg))
    return RecordedCall("f", label, label, tuple(args), (), None, (), f"{label}.safetensors", None, 1, 0.0)


def test_batch_scaling_only_where_the_calls_prove_it():
    plans = _batch_plans([_call("call0", 2, n_arg=2), _call("call1", 5, n_arg=5)])
    assert plans["call0"].batched == ("x", "n") and not plans["call0"].why_not and not plans["call0"].assumed
    # index tensors carry structure a scaled copy would not have
    assert "slots" in _batch_plans([_call("call0", 2, slots=True), _call("call1", 3, slots=True)])["call0"].why_not
    # a plain int equal to the batch in one call only is a coincidence the capture will not bet on
    plans = _batch_plans([_call("call0", 2, n_arg=2), _call("call1", 3, n_arg=7)])
    assert "n equal the batch" in plans["call0"].why_not and not plans["call1"].why_not
    assert "only batch 1" in _batch_plans([_call("call0", 1)])["call0"].why_not
    single = _batch_plans([_call("call0", 4)])["call0"]
    assert single.assumed and not single.why_not
