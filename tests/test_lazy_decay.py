"""SK014 lazy-decay: the rewritten kernels compute what the originals compute.

The project's KDA (per-row gate) and GDN (scalar gate) decode kernels and fla-core 0.6.0's
upstream KDA and gated-delta-rule files are rewritten alone and on top of SK002's merged tiles,
imported from a temporary file and run in Triton's interpreter against the originals at T = 1
and T = 3, also with gates strong enough that the running factor must be flushed. Refusals
say why; applying twice changes nothing; unrelated lines are untouched.
"""
from __future__ import annotations

import pytest
import torch

from skel.rewriter.base import APPLIED, SKIPPED, RewriteOptions
from skel.rewriter.sk002_merge_tiles import merge_tiles
from skel.skeletons.library import load_library

lazy = load_library().get("SK014").rule.rewrite.raw  # the codemod alone

from test_merge_tiles import ROOT, _close, _fla, _kda_inputs, _load, _run_project, check_fla_file
from test_rewrites import assert_contract


def _lazy(source: str) -> str:
    [r] = lazy(source, RewriteOptions())
    assert_contract(source, r, slack=3)
    return r.source


def _same_as_original(base, new, state: torch.Tensor, out_shape, launch, what: str = "") -> None:
    """``launch(module, state, out)`` for the original and the rewritten module, each on its own copy of
    ``state`` and a zeroed output; the outputs and final states must agree."""
    outs = []
    for mod in (base, new):
        s, o = state.clone(), torch.zeros(out_shape)
        launch(mod, s, o)
        outs.append((o, s))
    _close(outs[1][0], outs[0][0], f"{what} output".strip())
    _close(outs[1][1], outs[0][1], f"{what} state".strip())


def _sk002(source: str, plan=(4, 1, 1, True)) -> str:
    [r] = merge_tiles(source, RewriteOptions(extra=(("sk002_variants", [plan]),)))
    assert r.applied, r.reason
    return r.source


@pytest.mark.parametrize("family,entry", [("kda", "kda_decode"), ("gdn", "gdn_decode")])
@pytest.mark.parametrize("plan", [None, (4, 1, 1, True), (1, 2, 4, True)], ids=["alone", "on_sk002", "on_sk002_two_subtiles"])
def test_project_kernels_match_original(family, entry, plan, tmp_path):
    src = (ROOT / "kernels" / f"{family}_decode" / "kernel.py").read_text()
    new_src = _lazy(_sk002(src, plan) if plan else src)
    assert "_decay = " in new_src or "_rdecay = " in new_src
    base, new = _load(src, tmp_path, f"{family}_base"), _load(new_src, tmp_path, f"{family}_lazy")
    for T, strong in ((1, False), (3, False), (4, True)):
        x = _kda_inputs(2, T, 2, 4, 16, 32, seed=T, gate_per_k=family == "kda")
        if strong:  # gates of e^-40 and less per step: the factor leaves [1e-20, 1e20] and is flushed
            x["A_log"] = torch.full_like(x["A_log"], 4.5)
            x["dt_bias"] = x["dt_bias"].abs() + 1.0
        o0, s0 = _run_project(base, entry, x)
        o1, s1 = _run_project(new, entry, x)
        _close(o1, o0, f"{family} T={T} strong={strong} output")
        _close(s1, s0, f"{family} T={T} strong={strong} state")


def test_scalar_and_row_gates_get_their_factor_shapes():
    gdn = _lazy((ROOT / "kernels/gdn_decode/kernel.py").read_text())
    assert "h_decay = tl.full([], 1.0, tl.float32)" in gdn
    # a scalar factor scales the contractions' vector operands (ready before the reduction) and divides
    # the [BV] delta of the update
    assert "tl.sum(h * (k * h_decay)[:, None], 0)" in gdn and "tl.sum(h * (q * h_decay)[:, None], 0)" in gdn
    assert "h += k[:, None] * (v / h_decay)[None, :]" in gdn and "h = h * h_decay\n" in gdn
    kda = _lazy((ROOT / "kernels/kda_decode/kernel.py").read_text())
    assert "b_s_rdecay = tl.full([BK], 1.0, tl.float32)" in kda
    assert "tl.sum(b_s * (b_k * b_s_rdecay)[:, None], 0)" in kda
    assert "b_s = b_s * b_s_rdecay[:, None]\n    tl.store(p_s, b_s" in kda


def test_upstream_kda_matches_original(fla_corpus, tmp_path):
    _fla(fla_corpus)
    import fla.ops.kda.fused_recurrent as up

    src = (fla_corpus / "fla/ops/kda/fused_recurrent.py").read_text()
    for label, new_src in (("alone", _lazy(src)), ("on_sk002", _lazy(_sk002(src, (2, 1, 2, True))))):
        check_fla_file(up, _load(new_src, tmp_path, f"fla_kda_{label}"), "kda", 40, f"fla kda {label}")


def test_upstream_gdn_matches_original(fla_corpus, tmp_path):
    _fla(fla_corpus)
    import fla.ops.gated_delta_rule.fused_recurrent as up

    src = (fla_corpus / "fla/ops/gated_delta_rule/fused_recurrent.py").read_text()
    check_fla_file(up, _load(_lazy(src), tmp_path, "fla_gdn_lazy"), "gdn", 50, "fla gdn")


KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def step(x, g, s, o, T, D: tl.constexpr, USE: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    h = tl.load(s + i * D * D + r[:, None] * D + r[None, :])
    for t in range(T):
        b_x = tl.load(x + (i * T + t) * D + r)
        b_g = tl.load(g + (i * T + t) * D + r)
        h *= tl.exp(b_g)[:, None]
        BODY
        tl.store(o + (i * T + t) * D + r, tl.sum(h * b_x[:, None], 0))
    tl.store(s + i * D * D + r[:, None] * D + r[None, :], h)
'''


@pytest.mark.parametrize("body,why", [
    ("h = tl.where(h > 0, h, 0.0)", "outside contractions, rank-1 updates and stores"),
    ("b_x = b_x + tl.sum(h, 1)", "outside contractions, rank-1 updates and stores"),
    ("h -= b_x[:, None] * b_x[None, :]", "outside contractions, rank-1 updates and stores"),
])
def test_refuses_a_state_read_the_factor_does_not_commute_with(body, why):
    [r] = lazy(KERNEL.replace("BODY", body), RewriteOptions())
    assert r.status == SKIPPED and why in r.reason and "state h" in r.reason, r.reason


def test_refuses_a_gate_under_a_runtime_condition_and_says_so():
    src = KERNEL.replace("        h *= tl.exp(b_g)[:, None]\n", "        if t > 0:\n            h *= tl.exp(b_g)[:, None]\n")
    [r] = lazy(src.replace("BODY", "pass"), RewriteOptions())
    assert r.status == SKIPPED and "runtime condition (t > 0)" in r.reason, r.reason


def test_without_a_decayed_state_nothing_applies():
    src = KERNEL.replace("        h *= tl.exp(b_g)[:, None]\n", "").replace("BODY", "pass")
    [r] = lazy(src, RewriteOptions())
    assert r.status == SKIPPED and r.reason.startswith("not applicable: no token loop"), r.reason


def test_constexpr_branches_get_their_own_factor(tmp_path):
    src = KERNEL.replace("        h *= tl.exp(b_g)[:, None]\n",
                         "        if USE:\n            h *= tl.exp(b_g)[:, None]\n").replace("BODY", "h += b_x[:, None] * b_g[None, :]")
    [r] = lazy(src, RewriteOptions())
    assert r.status == APPLIED, r.reason
    assert "if USE:\n        h = h * h_rdecay[:, None]" in r.source
    base, new = _load(src, tmp_path, "use_base"), _load(r.source, tmp_path, "use_lazy")
    gen = torch.Generator().manual_seed(0)
    for use in (True, False):
        x, g = torch.randn(3, 2, 16, generator=gen), -torch.rand(3, 2, 16, generator=gen)
        s0 = torch.randn(3, 16, 16, generator=gen)
        _same_as_original(base, new, s0, (3, 2, 16),
                          lambda mod, s, o: mod.step[(3,)](x, g, s, o, 2, D=16, USE=use), f"USE={use}")


TWO_AXES = KERNEL.replace("        h *= tl.exp(b_g)[:, None]\n",
                          "        h *= tl.exp(b_g)[:, None]\n        h *= tl.exp(b_x)[None, :]\n")


def test_row_and_column_gates_match_original(tmp_path):
    src = TWO_AXES.replace("BODY", "b_u = tl.sum(h * b_g[:, None], axis=0)\n        h += b_x[:, None] * b_u[None, :]")
    [r] = lazy(src, RewriteOptions())
    assert r.status == APPLIED and "h_rdecay" in r.source and "h_cdecay" in r.source, r.reason
    base, new = _load(src, tmp_path, "two_base"), _load(r.source, tmp_path, "two_lazy")
    gen = torch.Generator().manual_seed(1)
    x, g = -torch.rand(3, 3, 16, generator=gen), -torch.rand(3, 3, 16, generator=gen)
    s0 = torch.randn(3, 16, 16, generator=gen)
    _same_as_original(base, new, s0, (3, 3, 16), lambda mod, s, o: mod.step[(3,)](x, g, s, o, 3, D=16, USE=True))


def test_a_sum_across_the_other_axis_with_a_column_factor_is_refused():
    """sum_j S_ij u_i with S = r H s^T: s_j varies along the summed axis, so it cannot scale the result."""
    [r] = lazy(TWO_AXES.replace("BODY", "b_x = tl.sum(h * b_x[:, None], 1)"), RewriteOptions())
    assert r.status == SKIPPED and "b_x = tl.sum(h * b_x[:, None], 1)" in r.reason, r.reason


# ------------------------------------------------------------------ review cases (session 4)

CASE = '''
import triton
import triton.language as tl


@triton.jit
def step(x, y, g, gv, s, o, T, D: tl.constexpr):
    r = tl.arange(0, D)
    h = tl.load(s + r[:, None] * D + r[None, :])
    for t in range(T):
        b_x = tl.load(x + t * D + r)
        b_y = tl.load(y + t * D + r)
        b_g = tl.load(g + t * D + r)
        b_gv = tl.load(gv + t * D + r)
        b_gs = tl.load(g + t * D)
BODY
        tl.store(o + t * D + r, tl.sum(h * b_x[:, None], 0))
    tl.store(s + r[:, None] * D + r[None, :], h)
'''
RANK1 = "h += b_x[:, None] * b_y[None, :]"


def _case(body: str) -> str:
    return CASE.replace("BODY", "\n".join("        " + ln for ln in body.splitlines()))


@pytest.mark.parametrize("body", [
    "h *= tl.exp(b_g)[:, None]\nb_y = tl.sum(h * b_x[None, :], 0)\n" + RANK1,  # sums a column vector over rows
    "h *= tl.exp(b_g)[:, None] * tl.exp(b_gv)\n" + RANK1,  # a second, implicit-column gate operand
    "h *= tl.exp(b_g[:, None] + b_gv)\n" + RANK1,
    "h *= tl.full([D, D], 0.5, tl.float32)\n" + RANK1,  # a tile, not a scalar
    "h *= tl.sigmoid(tl.sum(h, 0))[None, :]\n" + RANK1,  # the gate reads the state
    "h *= tl.exp(b_g)[:, None]\nh += b_x[None, :] * b_gs",  # not an outer product
    "h *= tl.exp(b_g)[:, None]\nh += b_x[None, :] * b_y",
    "h *= tl.exp(b_g)[:, None]\nif t == 1: h = tl.minimum(h, 0.05)\n" + RANK1,  # one-line if body
])
def test_review_cases_are_refused(body):
    [r] = lazy(_case(body), RewriteOptions())
    assert r.status == SKIPPED, r.source


@pytest.mark.parametrize("body,T,gates", [
    ("h *= tl.exp(b_g)[:, None]\nh *= tl.exp(b_gv)[None, :]\n" + RANK1, 50, -1.0),  # two factors: product bounded
    ("h *= tl.exp(b_g)[:, None]\nh *= tl.exp(b_gs)\n" + RANK1, 50, -1.0),
    ("h *= tl.exp(b_gv)[None, :]\n" + RANK1, 3, None),
    ("h = tl.exp(b_gs) * h\nh = b_x[:, None] * b_y[None, :] + h", 3, None),
])
def test_review_cases_match_the_original(body, T, gates, tmp_path):
    src = _case(body)
    [r] = lazy(src, RewriteOptions())
    assert r.status == APPLIED, r.reason
    base, new = _load(src, tmp_path, "case_base"), _load(r.source, tmp_path, "case_lazy")
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(T, 16, generator=gen), torch.randn(T, 16, generator=gen)
    g, gv = (torch.full((T, 16), gates), torch.full((T, 16), gates)) if gates else (
        -torch.rand(T, 16, generator=gen), -torch.rand(T, 16, generator=gen))
    s0 = torch.randn(16, 16, generator=gen)
    _same_as_original(base, new, s0, (T, 16), lambda mod, s, o: mod.step[(1,)](x, y, g, gv, s, o, T, D=16))
