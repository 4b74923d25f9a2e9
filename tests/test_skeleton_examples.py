"""Every skeleton's before/after example kernels run in the interpreter and agree.

Convention for the example files: a module-level `example_inputs(seed)` returning the
positional arguments of `launch(...)`, which returns a tensor or a tuple of tensors.
Safe skeletons must agree to fp32 rounding; unsafe ones (rounding or reduction order
changes) within a small relative-RMS error.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from skel.skeletons.library import load_library

LIBRARY = load_library()


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit needs the module registered to read the source
    spec.loader.exec_module(module)
    return module


def _tensors(result):
    if isinstance(result, torch.Tensor):
        return (result,)
    return tuple(r for r in result if isinstance(r, torch.Tensor))


@pytest.mark.parametrize("skeleton", LIBRARY.skeletons, ids=lambda s: s.code)
def test_before_and_after_agree(skeleton):
    if not (skeleton.folder / "examples" / "before.py").exists():
        pytest.skip("no Python example (CUDA-only skeleton)")
    before = _load(skeleton.folder / "examples" / "before.py", f"_skel_example_{skeleton.code}_before")
    after = _load(skeleton.folder / "examples" / "after.py", f"_skel_example_{skeleton.code}_after")
    tol = 1e-6 if skeleton.safety == "safe" else 1e-4
    for seed in (0, 1):
        want = _tensors(before.launch(*before.example_inputs(seed)))
        got = _tensors(after.launch(*after.example_inputs(seed)))
        assert len(want) == len(got) > 0
        for w, g in zip(want, got):
            assert w.shape == g.shape
            if not torch.is_floating_point(w):
                assert torch.equal(w, g)
                continue
            w64, g64 = w.double(), g.double()
            assert torch.isfinite(g64).all(), f"{skeleton.code}: after.py produced NaN/inf"
            err = ((w64 - g64).norm() / w64.norm().clamp_min(1e-30)).item()
            assert err <= tol, f"{skeleton.code}: before/after differ, relative RMS {err:.2e} > {tol:.0e}"
