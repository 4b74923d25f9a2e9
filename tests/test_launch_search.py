"""SK005 reads launch parameters wherever the code decides them, and ranks for the device it plans for.

The cases are the SK005 folder's ``<case>.before.py`` kernels (a conditional tile, a nested conditional
over a shape dim, a same-file helper, a module constant, a ``triton.heuristics`` lambda); the golden test
checks their rewrites as text, this file checks what the search read from them, that the rewrites agree
with the originals in the interpreter, and that a different device changes the decisions.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from skel.device import ASSUMED, DeviceProfile, device_profile, select_device
from skel.errors import UsageError
from skel.rewriter import cst as C
from skel.rewriter import launch_decisions as D
from skel.rewriter.base import RewriteOptions
from skel.rewriter.launch_search import Launch, rewrite

EXAMPLES = Path(__file__).resolve().parents[1] / "skeletons" / "SK005-launch-config-search" / "examples"
CASES = {  # case -> how the V tile is decided, the text that decides it
    "conditional_tile": ("override", "BV = min(triton.next_power_of_2(V), 16 if N * H < 64 else 64)"),
    "nested_conditional": ("override", "BV, warps = (64, 4) if K <= 16 else"),
    "helper_tile": ("override", "BV, warps = _tile_for(V, N * H)"),
    "module_constant": ("override", "DEFAULT_BV (a module-level name)"),
    "heuristics_tile": ("heuristic", 'lambda args: min(triton.next_power_of_2(args["V"]), 32)'),
}


def _launch(case: str, shape: dict[str, int]) -> Launch:
    src = C.parse((EXAMPLES / f"{case}.before.py").read_text())
    ks = {k.name.value: k for k in C.kernels(src.module)}
    (call, kernel, host), = C.launches(src.module, ks)
    return Launch(src, call, kernel, host, D.Evaluator(src.module), shape)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_v_tile_is_found_where_the_code_decides_it(case):
    how, text = CASES[case]
    _, varied, notes = _launch(case, {"N": 2, "H": 4, "K": 16, "V": 128}).tiles()
    assert set(varied) == {"BV"}, notes
    assert varied["BV"].how == how and varied["BV"].decided_by.startswith(text)
    assert any(n.startswith("BK kept: the grid does not depend on it") for n in notes)


def test_decisions_are_evaluated_at_each_shape():
    # the nested conditional over K, the helper's branches over N * H, the conditional over N * H
    assert _launch("nested_conditional", {"N": 1, "H": 1, "K": 16, "V": 64}).env["BV"] == 64
    nested = _launch("nested_conditional", {"N": 1, "H": 1, "K": 128, "V": 64}).env
    assert (nested["BV"], nested["warps"]) == (16, 8)
    assert _launch("helper_tile", {"N": 256, "H": 8, "K": 16, "V": 128}).env["BV"] == 64
    small = _launch("helper_tile", {"N": 1, "H": 4, "K": 16, "V": 16}).env
    assert (small["BV"], small["warps"]) == (16, 2)
    assert _launch("conditional_tile", {"N": 1, "H": 4, "K": 16, "V": 128}).value_of("BV") == 16
    assert _launch("conditional_tile", {"N": 64, "H": 4, "K": 16, "V": 128}).value_of("BV") == 64
    assert _launch("heuristics_tile", {"N": 1, "H": 4, "K": 16, "V": 128}).value_of("BV") is None  # args["V"]: unknown
    launch = _launch("conditional_tile", {"N": 1, "H": 4, "K": 16, "V": 128})
    _, varied, _ = launch.tiles()
    assert launch.programs({"N": 1, "H": 4, "K": 16, "V": 128}, {"BV": 16}, varied) == 8 * 4
    assert launch.programs({"N": 1, "H": 4, "K": 16, "V": 128}, {"BV": 8}, varied) == 16 * 4
    meta = _launch("heuristics_tile", {"N": 1, "H": 4, "K": 16, "V": 128})
    _, mvaried, _ = meta.tiles()
    assert meta.programs({"N": 1, "H": 4, "K": 16, "V": 128}, {"BV": 32}, mvaried) == 4 * 4  # through META["BV"]


def test_a_tile_the_caller_passes_is_kept():
    src = EXAMPLES.joinpath("conditional_tile.before.py").read_text().replace(
        "def launch(q, x, s, decay=0.9):", "def launch(q, x, s, decay=0.9, BV=32):").replace(
        "    BV = min(triton.next_power_of_2(V), 16 if N * H < 64 else 64)\n", "")
    out = rewrite(src, RewriteOptions(shape=(("K", 16), ("V", 16))))
    assert all("BV=" not in (r.variant or "") for r in out)
    assert "BV kept: the caller passes it (BV is a parameter of launch)" in out[0].reason


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the module's source
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_case_rewrite_agrees_with_its_original_in_the_interpreter(case, tmp_path):
    import torch

    before = _load(EXAMPLES / f"{case}.before.py", f"_sk005_{case}_before")
    after = _load(EXAMPLES / f"{case}.after.py", f"_sk005_{case}_after")
    for seed in (0, 1):
        want = before.launch(*before.example_inputs(seed))
        got = after.launch(*after.example_inputs(seed))
        for w, g in zip(want, got):
            err = ((w.double() - g.double()).norm() / w.double().norm()).item()
            assert err < 1e-5, f"{case}: relative RMS {err:.2e}"


SHAPE = (("N", 256), ("H", 4), ("K", 16), ("V", 128))
SMALL = (("N", 1), ("H", 4), ("K", 16), ("V", 128))


def _ranking(device: DeviceProfile | None) -> list[str]:
    src = EXAMPLES.joinpath("conditional_tile.before.py").read_text()
    out = rewrite(src, RewriteOptions(shape=SHAPE, small_shape=SMALL, device=device, max_variants=6))
    return [r.variant for r in out]


def test_the_ranking_follows_the_device_sm_count(monkeypatch):
    # At N = 1 the original (BV = 16) launches 8 x 4 = 32 programs: under one wave on 132 SMs, not on 16.
    big = _ranking(DeviceProfile("big GPU", 132, 60 << 20, "test"))
    small = _ranking(DeviceProfile("small GPU", 16, 4 << 20, "test"))
    assert big != small
    plain = rewrite(EXAMPLES.joinpath("conditional_tile.before.py").read_text(),
                    RewriteOptions(shape=SHAPE, max_variants=6))
    assert small == [r.variant for r in plain]  # a device the original already fills: the large-batch ranking
    assert big[1].startswith("BV=8,")  # the batch-1 list's best: more programs (16 x 4) toward one wave
    assert "BV=8," not in small[1]
    # the same through SKEL_DEVICE_PROFILE, the way a user plans for a GPU they do not have
    monkeypatch.setenv("SKEL_DEVICE_PROFILE", json.dumps({"name": "small GPU", "sm_count": 16, "l2_bytes": 4 << 20}))
    assert device_profile().sm_count == 16 and device_profile().source == "SKEL_DEVICE_PROFILE"
    assert _ranking(None) == small
    monkeypatch.setenv("SKEL_DEVICE_PROFILE", json.dumps({"name": "big GPU", "sm_count": 132, "l2_bytes": 60 << 20}))
    assert _ranking(None) == big


def test_device_profile_errors_and_default(monkeypatch):
    monkeypatch.setenv("SKEL_DEVICE_PROFILE", "{not json")
    with pytest.raises(UsageError, match="SKEL_DEVICE_PROFILE"):
        device_profile()
    monkeypatch.delenv("SKEL_DEVICE_PROFILE")
    profile = device_profile()
    assert profile == ASSUMED or profile.source == "cuda"
    assert "assumed" in ASSUMED.describe()


def test_select_device_names_the_gpu(monkeypatch):
    assert select_device(None) is None and select_device("cpu") == "cpu" and select_device("cuda") == "cuda"
    for bad in ("gpu", "cuda:x", "cpu:0", "cuda:-1"):
        with pytest.raises(UsageError, match="--device"):
            select_device(bad)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with pytest.raises(UsageError, match="only 2 GPU"):
        select_device("cuda:2")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no such GPU"):
            select_device("cuda:1")
        import os

        assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"  # GPU 1 of the visible ones is the machine's GPU 5


def test_small_batch_is_a_bucket_of_its_own():
    from skel.pipeline.select import bucket_of

    assert bucket_of("N1-T1-H32") == "N1-T1-H32" and bucket_of("N8-T1-H32") == "N8-T1-H32"
    assert bucket_of("N32-T1-H32") == bucket_of("N256-T1-H32") == "T1-H32"
    assert bucket_of("N64-T8-H32") == "T8-H32"


def test_a_dispatch_splits_small_batch_first_and_keeps_the_original_where_nothing_won(tmp_path):
    """Winners at N = 1 and T = 1 (SK005), N = 8 (the original), the other T = 1 shapes (SK001), and the original
    at T = 3: the dispatch reads N and T, and the file passes the numerics gate at the ci shapes."""
    from skel.skeletons.library import load_library
    from skel.pipeline.candidates import enumerate_candidates
    from skel.pipeline.dispatch import build_dispatch
    from skel.pipeline.targets import bind_target
    from skel.validate.gate import validate

    kda = Path(__file__).resolve().parents[1] / "kernels" / "kda_decode" / "kernel.py"
    src = kda.read_text()
    cs = enumerate_candidates(src, ["SK001", "SK005"], load_library(), RewriteOptions(shape=(("K", 32), ("V", 64))), True)
    one = next(c for c in cs.candidates if c.skeletons == ("SK001",))
    two = next(c for c in cs.candidates if c.skeletons == ("SK005",))
    out = build_dispatch(src, [("N1-T1-K32", two.source), ("N8-T1-K32", src), ("T1-K32", one.source), ("T3-K32", src)],
                         bind_target(kda, src))
    body = out.split("def kda_decode(")[1]
    assert "    if N <= 8:\n        if N <= 4:\n            return kda_decode_skel_v1(" in body
    assert "        else:\n            return kda_decode_skel_v2(" in body
    assert "    else:\n        if T <= 2:\n            return kda_decode_skel_v3(" in body
    assert "        else:\n            return kda_decode_skel_v4(" in body
    path = tmp_path / "dispatch.py"
    path.write_text(out)
    result = validate("kda_decode", path, shapes="ci", device="cpu", seeds=(0,))
    assert result.accepted, result.reasons
