"""The kernels/ targets: each kernel matches its float64 reference in the interpreter, the
references agree with independent formulations, and the specs keep their promises."""
from __future__ import annotations

import pytest
import torch

from skel.validate.load import families, load_module, load_spec, resolve_target
from skel.validate.numerics import compare
from skel.validate.spec import Shape

FAMILIES = ("kda_decode", "gdn_decode", "state_merge", "dsa_indexer")


def _target(family):
    ref = resolve_target(family)
    return load_spec(ref.spec), load_module(ref.kernel, f"test_{family}")


def test_every_family_is_found():
    assert set(FAMILIES) <= set(families())


@pytest.mark.parametrize("family", FAMILIES)
def test_kernel_matches_reference_on_ci_shapes(family):
    spec, module = _target(family)
    launcher = getattr(module, spec.entry)
    for shape in spec.shapes("ci"):
        inputs = spec.make_inputs(shape, spec.dtypes[0], 0, "cpu")
        ref = spec.reference(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        args = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        ret = launcher(**args)
        outs = dict(zip(spec.outputs, (ret,) if isinstance(ret, torch.Tensor) else ret))
        outs.update({name: args[name] for name in spec.inplace})
        for name, got in outs.items():
            if name in spec.checks:
                assert spec.checks[name](got, ref, inputs) is None, (family, shape.label, name)
                continue
            assert torch.isfinite(got).all()
            tol = spec.tolerance(str(got.dtype).removeprefix("torch."))
            cmp = compare(got, ref[name], tol)
            assert cmp.passed, f"{family} {shape.label} {name}: {cmp.detail}"


@pytest.mark.parametrize("family", FAMILIES)
def test_spec_shape_sets(family):
    spec, _ = _target(family)
    assert spec.shapes("ci") and spec.shapes("decode")
    for shape in spec.shapes("ci") + spec.shapes("decode"):
        assert Shape.parse(shape.label) == shape
        assert spec.bytes(shape, spec.dtypes[0]) > 0 and spec.flops(shape, spec.dtypes[0]) > 0
    # The interpreter costs ~12 ms per program instance: ci shapes stay small.
    for shape in spec.shapes("ci"):
        assert spec.bytes(shape, spec.dtypes[0]) < 1 << 20, shape.label


def test_decode_shapes_are_the_serving_grid():
    spec, _ = _target("kda_decode")
    labels = {s.label for s in spec.shapes("decode")}
    for n in (1, 8, 32, 64, 128, 256):
        for t in (1, 2, 4, 8):
            assert f"N{n}-T{t}-H32-HV32-K128-V128" in labels


def test_kda_roofline_bytes_match_the_measured_facts():
    # FACTS.md: 88.6 us at N=64, T=1 is 72 % of a 4.25 TB/s copy roofline.
    spec, _ = _target("kda_decode")
    nbytes = spec.bytes(Shape.of(N=64, T=1, H=32, HV=32, K=128, V=128), "bfloat16")
    assert 2 * 64 * 32 * 128 * 128 * 4 < nbytes < 1.05 * 2 * 64 * 32 * 128 * 128 * 4
    assert nbytes / 4.25e12 / 88.6e-6 == pytest.approx(0.72, abs=0.02)


@pytest.mark.parametrize("family", FAMILIES)
def test_inputs_are_fresh_per_seed_and_reproducible(family):
    spec, _ = _target(family)
    shape = spec.shapes("ci")[0]
    a = spec.make_inputs(shape, spec.dtypes[0], 0, "cpu")
    b = spec.make_inputs(shape, spec.dtypes[0], 0, "cpu")
    c = spec.make_inputs(shape, spec.dtypes[0], 1, "cpu")
    for name, value in a.items():
        if isinstance(value, torch.Tensor) and value.numel() > 4:
            assert torch.equal(value, b[name]), name
            assert not torch.equal(value, c[name]), name


def test_kda_inputs_have_serving_value_ranges():
    spec, _ = _target("kda_decode")
    x = spec.make_inputs(Shape.of(N=4, T=2, H=2, HV=4, K=64, V=64), "bfloat16", 3, "cpu")
    norms = x["q"].float().norm(dim=-1)
    assert norms.min() < 0.9 * norms.max()  # unnormalised, varying magnitudes
    decay = -torch.exp(x["A_log"])[:, None] * torch.nn.functional.softplus(x["g"].float() + x["dt_bias"])
    assert (decay < 0).all() and decay.min() > -20  # log-space decay, never a growth
    assert x["state"].dtype == torch.float32 and x["q"].dtype == torch.bfloat16


def _ref(family):
    spec, _ = _target(family)
    return spec.reference


def test_kda_reference_multi_token_equals_single_steps():
    spec, _ = _target("kda_decode")
    x = spec.make_inputs(Shape.of(N=2, T=3, H=1, HV=2, K=16, V=8), "float32", 0, "cpu")
    full = spec.reference(**x)
    state = x["state"].clone()
    for t in range(3):
        step = {k: (v[:, t:t + 1] if k in ("q", "k", "v", "g", "beta") else v) for k, v in x.items()}
        step["state"] = state.float()
        out = spec.reference(**step)
        assert torch.allclose(out["o"][:, 0], full["o"][:, t], atol=1e-5)
        state = out["state"]
    assert torch.allclose(state, full["state"], atol=1e-5)
    assert torch.equal(x["state"], spec.make_inputs(Shape.of(N=2, T=3, H=1, HV=2, K=16, V=8), "float32", 0, "cpu")["state"])


def test_gdn_reference_is_kda_with_a_channel_constant_gate():
    kda = _ref("kda_decode")
    gdn, _ = _target("gdn_decode")
    x = gdn.make_inputs(Shape.of(N=2, T=2, H=1, HV=2, K=16, V=8), "float32", 0, "cpu")
    K = 16
    # softplus(a + dt_bias) per head equals softplus(g + dt_bias_k) with g = a and a constant bias
    out_gdn = gdn.reference(**x)
    out_kda = kda(x["q"], x["k"], x["v"], x["a"][..., None].expand(-1, -1, -1, K), x["b"], x["A_log"],
                  x["dt_bias"][:, None].expand(-1, K), x["state"])
    assert torch.allclose(out_gdn["o"], out_kda["o"], atol=1e-12)
    assert torch.allclose(out_gdn["state"], out_kda["state"], atol=1e-12)


def test_kda_reference_gva_maps_value_heads_to_key_heads():
    spec, _ = _target("kda_decode")
    x = spec.make_inputs(Shape.of(N=1, T=1, H=2, HV=4, K=8, V=4), "float32", 0, "cpu")
    out = spec.reference(**x)
    # value heads 0,1 read key head 0; value heads 2,3 read key head 1
    x2 = dict(x)
    x2["q"] = x["q"].repeat_interleave(2, dim=2)
    x2["k"] = x["k"].repeat_interleave(2, dim=2)
    assert torch.allclose(spec.reference(**x2)["o"], out["o"], atol=1e-12)


def test_state_merge_reference_and_transitions():
    spec, _ = _target("state_merge")
    x = spec.make_inputs(Shape.of(N=1, HV=1, C=3, K=16, V=8), "float32", 0, "cpu")
    out = spec.reference(**x)["states"]
    S = x["state"].double()
    for i in range(3):
        S = x["trans"][:, :, i].double() @ S + x["local"][:, :, i].double()
        assert torch.allclose(out[:, :, i], S)
    # delta-rule transitions are contractions with eigenvalues near 1: errors persist.
    sv = torch.linalg.svdvals(x["trans"][0, 0, 0].double())
    assert sv.max() <= 1 + 1e-5 and sv.max() > 0.99


def test_dsa_topk_check_accepts_ties_and_rejects_wrong_tokens():
    from skel.kernels.dsa_indexer.spec import check_indices

    scores = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.5]], dtype=torch.float64)
    ref = {"scores": scores}
    assert check_indices(torch.tensor([[0, 2]]), ref, {"topk": 2}) is None
    assert check_indices(torch.tensor([[0, 3]]), ref, {"topk": 2}) is None  # the tie, other pick
    assert "below" in check_indices(torch.tensor([[0, 1]]), ref, {"topk": 2})
    assert "twice" in check_indices(torch.tensor([[0, 0]]), ref, {"topk": 2})
    assert "outside" in check_indices(torch.tensor([[0, 7]]), ref, {"topk": 2})
    assert "shape" in check_indices(torch.tensor([[0]]), ref, {"topk": 2})
