"""SK002 merge-v-tiles: the rewritten kernels compute what the originals compute.

Each target (the project's KDA and GDN decode kernels, fla-core 0.6.0's upstream KDA and
gated-delta-rule decode files, and a third kernel written here with other names, another
gate and a 2-D grid) is rewritten by every variant under test, imported from a temporary
file and run in Triton's interpreter against the original on tiny shapes (T = 1 and 3).
Also: the launch no longer splits V, applying twice changes nothing, unrelated code is
untouched, and each structural refusal says why.
"""
from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path

import pytest
import torch

from skel.pipeline.candidates import registry
from skel.rewriter.base import RewriteOptions
from skel.rewriter.sk002_merge_tiles import DEFAULT_PLANS, merge_tiles

ROOT = Path(__file__).resolve().parents[1]
_count = itertools.count()

# (P programs per head, NS sub-tiles, num_warps, prefetch): full merges, partial, and no prefetch
PLANS = [(1, 2, 4, True), (2, 1, 2, True), (2, 2, 2, True), (1, 1, 4, False)]


def _rewrite(source: str, plan) -> str:
    [r] = merge_tiles(source, RewriteOptions(extra=(("sk002_variants", [plan]),)))
    assert r.applied, r.reason
    assert r.safety == "unsafe" and dict(r.params)["programs_per_head"] == plan[0]
    return r.source


def _load(source: str, tmp_path: Path, stem: str):
    path = tmp_path / f"{stem}_{next(_count)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert torch.isfinite(a).all(), f"{what}: NaN/inf"
    err = (a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)
    assert err < 1e-5, f"{what}: relative error {err:.2e}"


def _kda_inputs(N, T, H, HV, K, V, seed, gate_per_k=True):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(q=r(N, T, H, K), k=r(N, T, H, K), v=r(N, T, HV, V),
                g=r(N, T, HV, K) if gate_per_k else r(N, T, HV), beta=r(N, T, HV),
                A_log=torch.rand(HV, generator=g) - 0.5,
                dt_bias=0.5 * (r(HV, K) if gate_per_k else r(HV)), state=0.1 * r(N, HV, K, V))


def _run_project(mod, entry: str, x: dict):
    state = x["state"].clone()
    args = [x[n] for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias")]
    o = getattr(mod, entry)(*args, state, None)
    return o, state


@pytest.mark.parametrize("family", ["kda", "gdn"])
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: "P{}NS{}W{}{}".format(*p[:3], "pf" if p[3] else ""))
def test_project_kernels_match_original(family, plan, tmp_path):
    path = ROOT / "kernels" / f"{family}_decode" / "kernel.py"
    src = path.read_text()
    orig = _load(src, tmp_path, f"{family}_orig")
    new = _load(_rewrite(src, plan), tmp_path, f"{family}_sk002")
    entry = f"{family}_decode"
    for T in (1, 3):
        x = _kda_inputs(2, T, 2, 4, 32, 64, seed=T, gate_per_k=family == "kda")
        o0, s0 = _run_project(orig, entry, x)
        o1, s1 = _run_project(new, entry, x)
        _close(o1, o0, f"{family} {plan} T={T} output")
        _close(s1, s0, f"{family} {plan} T={T} state")


class _GridSpy:
    """Wraps a JIT kernel to record the grid each launch uses."""

    def __init__(self, fn):
        self.fn, self.grids = fn, []

    def __getitem__(self, grid):
        self.grids.append(tuple(grid))
        return self.fn[grid]


@pytest.mark.parametrize("family,kernel", [("kda", "kda_decode_kernel"), ("gdn", "gdn_decode_fwd_kernel")])
def test_launch_no_longer_splits_v(family, kernel, tmp_path):
    src = (ROOT / "kernels" / f"{family}_decode" / "kernel.py").read_text()
    out = _rewrite(src, (1, 2, 4, True))
    assert "cdiv(V, BV)" not in out and re.search(r"\bi_v\b", out) is None and "NV = " not in out
    mod = _load(out, tmp_path, f"{family}_grid")
    spy = _GridSpy(getattr(mod, kernel))
    setattr(mod, kernel, spy)
    x = _kda_inputs(2, 1, 2, 4, 32, 64, seed=3, gate_per_k=family == "kda")
    _run_project(mod, f"{family}_decode", x)
    assert spy.grids == [(2 * 4,)], spy.grids  # one program per (sequence, head)


def test_unrelated_code_untouched_and_idempotent():
    src = (ROOT / "kernels" / "kda_decode" / "kernel.py").read_text()
    out = _rewrite(src, (1, 2, 4, True))
    head = src[: src.index("@triton.jit(do_not_specialize")]
    assert out.startswith(head)  # module docstring, imports and the _softplus helper as they were
    wrapper = src[src.index("def kda_decode("):]
    changed = [ln for ln in wrapper.splitlines() if ln not in out.splitlines()]
    # num_warps stays 4 in this variant: only the tile width and the grid change
    assert sorted(changed) == sorted(["    BV = 32", "    grid = (triton.cdiv(V, BV) * N * HV,)"]), changed
    again = merge_tiles(out, RewriteOptions())
    assert [r.status for r in again] == ["skipped"] and "already merged" in again[0].reason
    assert "SK002" in registry()


# ------------------------------------------------------------------ a third, foreign kernel

THIRD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def wkv_step(Q, Kp, Vp, W, U, S, Out, T, qk_scale, NH: tl.constexpr, DK: tl.constexpr,
             DV: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    bh = tl.program_id(0)
    vt = tl.program_id(1)
    rows = tl.arange(0, BLOCK_K)
    cols = tl.arange(0, BLOCK_V) + vt * BLOCK_V
    rmask = rows < DK
    cmask = cols < DV
    s_ptrs = S + bh * DK * DV + rows[:, None] * DV + cols[None, :]
    acc = tl.load(s_ptrs, mask=rmask[:, None] & cmask[None, :], other=0.0)
    bonus = tl.load(U + (bh % NH) * DK + rows, mask=rmask, other=0.0)
    for t in range(T):
        qv = tl.load(Q + (bh * T + t) * DK + rows, mask=rmask, other=0.0) * qk_scale
        kv = tl.load(Kp + (bh * T + t) * DK + rows, mask=rmask, other=0.0)
        wv = tl.load(W + (bh * T + t) * DK + rows, mask=rmask, other=0.0)
        decay = tl.exp2(-tl.sigmoid(wv) * 1.4426950408889634)  # a per-channel decay in (e^-1, 1)
        vv = tl.load(Vp + (bh * T + t) * DV + cols, mask=cmask, other=0.0)
        kv_outer = kv[:, None] * vv[None, :]
        out = tl.sum((acc + bonus[:, None] * kv_outer) * qv[:, None], axis=0)
        acc = acc * decay[:, None] + kv_outer
        tl.store(Out + (bh * T + t) * DV + cols, out, mask=cmask)
    tl.store(s_ptrs, acc, mask=rmask[:, None] & cmask[None, :])


def wkv_decode(q, k, v, w, u, s):
    """q, k, w: [B*NH, T, DK]; v: [B*NH, T, DV]; u: [NH, DK]; s: [B*NH, DK, DV] fp32 in place."""
    BH, T, DK = q.shape
    DV = v.shape[-1]
    out = torch.empty_like(v)
    wkv_step[(BH, triton.cdiv(DV, 16))](
        q, k, v, w, u, s, out, T, DK ** -0.5, NH=u.shape[0], DK=DK, DV=DV,
        BLOCK_K=triton.next_power_of_2(DK), BLOCK_V=16)
    return out
'''


def _third_inputs(T, seed, BH=4, NH=2, DK=16, DV=48):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return r(BH, T, DK), r(BH, T, DK), r(BH, T, DV), r(BH, T, DK), r(NH, DK), 0.1 * r(BH, DK, DV)


@pytest.mark.parametrize("plan", PLANS + [(3, 1, 1, True)], ids=lambda p: "P{}NS{}W{}{}".format(*p[:3], "pf" if p[3] else ""))
def test_third_kernel_matches_original(plan, tmp_path):
    out_src = _rewrite(THIRD, plan)
    if plan[0] == 1:
        assert "triton.cdiv(DV, 16)" not in out_src and "tl.program_id(1)" not in out_src
    orig, new = _load(THIRD, tmp_path, "wkv_orig"), _load(out_src, tmp_path, "wkv_sk002")
    for T in (1, 3):  # DV = 48 is not a multiple of the sub-tile width: masks must hold
        q, k, v, w, u, s = _third_inputs(T, seed=10 + T)
        s0, s1 = s.clone(), s.clone()
        o0, o1 = orig.wkv_decode(q, k, v, w, u, s0), new.wkv_decode(q, k, v, w, u, s1)
        _close(o1, o0, f"third {plan} T={T} output")
        _close(s1, s0, f"third {plan} T={T} state")


# ------------------------------------------------------------------ upstream fla-core files


def _fla(fla_corpus):
    if str(fla_corpus) not in sys.path:
        sys.path.insert(0, str(fla_corpus))
    pytest.importorskip("einops")
    pytest.importorskip("packaging")


def fla_kda_kwargs(x: dict, K: int) -> dict:
    """fused_recurrent_kda_fwd's arguments as the tests call it (gate, beta sigmoid and norms in kernel), but the state."""
    return dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                scale=K ** -0.5, output_final_state=True, inplace_final_state=False, use_qk_l2norm_in_kernel=True,
                use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)


def fla_gdn_kwargs(x: dict, K: int) -> dict:
    """fused_recurrent_gated_delta_rule_fwd's arguments as the tests call it, but the state."""
    return dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
                scale=K ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)


def check_fla_file(up, new, family: str, seed: int, label: str) -> None:
    """fla-core's KDA ("kda") or GDN ("gdn") entry of the original module against the rewritten one, at
    T = 1 and 3: outputs and final states."""
    kda = family == "kda"
    entry = "fused_recurrent_kda_fwd" if kda else "fused_recurrent_gated_delta_rule_fwd"
    for T in (1, 3):
        x = _kda_inputs(2, T, 2, 4, 32, 64 if kda else 32, seed=seed + T, gate_per_k=kda)
        kw = (fla_kda_kwargs if kda else fla_gdn_kwargs)(x, 32)
        o0, s0 = getattr(up, entry)(initial_state=x["state"].clone(), **kw)
        o1, s1 = getattr(new, entry)(initial_state=x["state"].clone(), **kw)
        _close(o1, o0, f"{label} T={T} output")
        _close(s1, s0, f"{label} T={T} state")


def test_upstream_kda_matches_original(fla_corpus, tmp_path):
    _fla(fla_corpus)
    import fla.ops.kda.fused_recurrent as up

    src = (fla_corpus / "fla/ops/kda/fused_recurrent.py").read_text()
    for plan in [(1, 2, 4, True), (2, 1, 2, True)]:
        new = _load(_rewrite(src, plan), tmp_path, "fla_kda_sk002")
        check_fla_file(up, new, "kda", 20, f"fla kda {plan}")


def test_upstream_gdn_matches_original(fla_corpus, tmp_path):
    _fla(fla_corpus)
    import fla.ops.gated_delta_rule.fused_recurrent as up

    src = (fla_corpus / "fla/ops/gated_delta_rule/fused_recurrent.py").read_text()
    for plan in [(1, 2, 4, True), (2, 1, 2, True)]:
        new = _load(_rewrite(src, plan), tmp_path, "fla_gdn_sk002")
        check_fla_file(up, new, "gdn", 30, f"fla gdn {plan}")


def test_other_fla_kernels_with_tuple_assigned_tiles_match_original(fla_corpus, tmp_path):
    """fla-core's comba and delta-rule files set ``BK, BV = ...`` and ``NK, NV = ...`` as tuples and flatten
    (NK, NV, sequence x head) into one program id; the delta rule's backward kernel is merged too (its
    per-tile partial gradients are summed on the host over the NV the rewritten BV gives)."""
    _fla(fla_corpus)
    import fla.ops.comba.fused_recurrent as comba
    import fla.ops.delta_rule.fused_recurrent as delta

    g = torch.Generator().manual_seed(41)
    r = lambda *sh: torch.randn(*sh, generator=g)  # noqa: E731
    N, T, H, K, V = 2, 3, 2, 16, 32
    q, k, v = r(N, T, H, K), r(N, T, H, K), r(N, T, H, V)
    k = k / k.norm(dim=-1, keepdim=True)
    beta, h0 = torch.sigmoid(r(N, T, H)), 0.1 * r(N, H, K, V)
    for plan in [(2, 1, 2, True), (1, 2, 4, True)]:
        new = _load(_rewrite((fla_corpus / "fla/ops/delta_rule/fused_recurrent.py").read_text(), plan), tmp_path, "fla_delta")
        o0, u0, s0 = delta.fused_recurrent_delta_rule_fwd(q, k, v, beta, 0.25, h0.clone(), True)
        o1, u1, s1 = new.fused_recurrent_delta_rule_fwd(q, k, v, beta, 0.25, h0.clone(), True)
        for name, a, b in (("output", o1, o0), ("u", u1, u0), ("state", s1, s0)):
            _close(a, b, f"delta rule {plan} {name}")
        do, dht = r(N, T, H, V), r(N, H, K, V)
        h0g = h0.clone().requires_grad_()  # the backward allocates dh0 only for a state that needs it
        grads0 = delta.fused_recurrent_delta_rule_bwd(q, k, v, beta, dht, do, 0.25, h0g)
        grads1 = new.fused_recurrent_delta_rule_bwd(q, k, v, beta, dht, do, 0.25, h0g)
        for name, a, b in zip(("dq", "dk", "dv", "db", "dh0"), grads1, grads0):
            _close(a, b, f"delta rule {plan} {name}")
        new = _load(_rewrite((fla_corpus / "fla/ops/comba/fused_recurrent.py").read_text(), plan), tmp_path, "fla_comba")
        p_, gk = r(N, T, H, K), -torch.rand(N, T, H, generator=g)
        kw = dict(q=q, k=k, v=v, p=p_, g=gk, beta=beta, scale=0.25, output_final_state=True,
                  use_qk_l2norm_in_kernel=True)
        o0, s0 = comba.fused_recurrent_comba_fwd(initial_state=h0.clone(), **kw)
        o1, s1 = new.fused_recurrent_comba_fwd(initial_state=h0.clone(), **kw)
        _close(o1, o0, f"comba {plan} output")
        _close(s1, s0, f"comba {plan} state")


def test_the_axis_with_the_most_repeated_work_is_merged_and_autotune_keeps_its_warps(fla_corpus):
    """fla-core's RWKV6 decode tiles both K and V (BK, BV = min(..., 32), min(..., 32)) and is autotuned over
    num_warps: the V tiles (which repeat the q, k, w loads) are merged, not the K tiles, and the launch gets
    no num_warps of its own (checked statically: the autotuner does not run in the interpreter)."""
    src = (fla_corpus / "fla/ops/rwkv6/fused_recurrent.py").read_text()
    [r] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [(2, 1, 2, True)]),)))
    assert r.applied and r.variant == "P=2,NS=1,num_warps=autotuned,prefetch"
    fwd_host = r.source[r.source.index("def fused_recurrent_rwkv6_fwd("):r.source.index("def fused_recurrent_rwkv6_bwd(")]
    assert "BK, BV = min(triton.next_power_of_2(K), 32), triton.next_power_of_2(triton.cdiv(V, 2))" in fwd_host
    assert "num_warps" not in fwd_host
    assert "# skel SK002: V tiles merged (P=2,NS=1,num_warps=autotuned,prefetch)" in r.source


def test_a_tile_width_written_at_the_launch_rewrites_the_grid_with_it(tmp_path):
    """``kernel[(triton.cdiv(V, 8), ...)](..., BV=8)``: no host variable carries the width, so the grid's
    count is rewritten with the new width (P programs per head), or dropped (P = 1)."""
    src = (ROOT / "kernels" / "gdn_decode" / "kernel.py").read_text()
    lit = (src.replace("    BV = 8\n", "").replace("BK=BK, BV=BV,", "BK=BK, BV=8,")
           .replace("gdn_decode_fwd_kernel[(triton.cdiv(V, BV), N * HV)]", "gdn_decode_fwd_kernel[(triton.cdiv(V, 8), N * HV)]"))
    assert "BV=8," in lit and "cdiv(V, 8)" in lit
    orig = _load(lit, tmp_path, "gdn_literal")
    x = _kda_inputs(2, 3, 2, 4, 32, 64, seed=5, gate_per_k=False)
    o0, s0 = _run_project(orig, "gdn_decode", x)
    for plan in [(4, 1, 1, True), (2, 2, 2, True), (1, 2, 4, True)]:
        out = _rewrite(lit, plan)
        assert "cdiv(V, 8)" not in out
        o1, s1 = _run_project(_load(out, tmp_path, "gdn_literal_sk002"), "gdn_decode", x)
        _close(o1, o0, f"literal BV {plan} output")
        _close(s1, s0, f"literal BV {plan} state")


def test_launch_edge_cases_are_refused_or_kept_consistent(fla_corpus):
    """Review findings, each once: a tile width bound other than by one assignment is refused; a count
    still used after the tile index goes skips the P=1 plans only; dropping the count keeps the other
    factors' parentheses; one autotuned kernel leaves the other kernels' warps to the plan; an autotuned
    kernel is not pruned by a warps budget it does not control."""
    import libcst as cst

    from skel.rewriter.tilemerge_axis import TileAxis
    from skel.rewriter.tilemerge_replicate import _without_count

    gdn = (ROOT / "kernels" / "gdn_decode" / "kernel.py").read_text()
    for src in (gdn.replace("    BV = 8\n", "    BV: int = 8\n"),
                gdn.replace("def gdn_decode(q, k,", "def gdn_decode(BV, q, k,").replace("    BV = 8\n", "")):
        [r] = merge_tiles(src, RewriteOptions(extra=(("sk002_variants", [(4, 1, 1, True)]),)))
        assert r.status == "skipped" and "changes the tile width only where one plain or tuple assignment" in r.reason

    delta = (fla_corpus / "fla/ops/delta_rule/fused_recurrent.py").read_text()
    odd = delta.replace("i_v, i_k, i_nh = pid % NV, (pid // NV) % NK, (pid // (NV * NK)).to(tl.int64)",
                        "i_v, i_k, i_nh = pid % NV, (pid % (NV * NK)) // NV, (pid // (NV * NK)).to(tl.int64)", 1)
    assert odd != delta
    one, two = merge_tiles(odd, RewriteOptions(extra=(("sk002_variants", [(1, 2, 4, True), (2, 1, 2, True)]),)))
    assert one.status == "skipped" and "still uses it" in one.reason and two.applied

    axis = TileAxis("i_v", "BV", "mod", None, "NV", "V", 1)
    assert cst.Module([]).code_for_node(_without_count(cst.parse_expression("((A + B) * NV * C)"), axis)) == "((A + B) * C)"

    tuned = delta.replace("@triton.heuristics({\n    'USE_INITIAL_STATE': lambda args: args['h0'] is not None,\n    'USE_FINAL_STATE_GRADIENT'",
                          "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['BK'])\n"
                          "@triton.heuristics({\n    'USE_INITIAL_STATE': lambda args: args['h0'] is not None,\n    'USE_FINAL_STATE_GRADIENT'", 1)
    assert tuned != delta
    [r] = merge_tiles(tuned, RewriteOptions(extra=(("sk002_variants", [(2, 1, 2, True)]),)))
    fwd = r.source[r.source.index("def fused_recurrent_delta_rule_fwd("):r.source.index("def fused_recurrent_delta_rule_bwd(")]
    assert r.applied and "num_warps=2" in fwd and "is autotuned" in " ".join(c.description for c in r.changes)

    rwkv = (fla_corpus / "fla/ops/rwkv6/fused_recurrent.py").read_text()
    assert merge_tiles(rwkv, RewriteOptions(shape=(("K", 256), ("V", 256))))[0].applied


# ------------------------------------------------------------------ refusals, with reasons


def _skip_reason(source: str) -> str:
    res = merge_tiles(source, RewriteOptions())
    assert [r.status for r in res] == ["skipped"], [r.reason for r in res]
    return res[0].reason


def test_skip_without_v_tile_axis():
    assert "no V-tile axis" in _skip_reason("import triton\n\n@triton.jit\ndef f(x):\n    pass\n")
    src = '''
import triton
import triton.language as tl

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + tl.load(y + offs, mask=offs < n), mask=offs < n)

def launch(x, y, out):
    add[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
'''
    # a 1-D elementwise tile has an axis, but nothing that its programs repeat
    assert "no repeated prologue to merge" in _skip_reason(src)


def test_skip_when_one_tile_covers_v():
    src = (ROOT / "kernels" / "kda_decode" / "kernel.py").read_text().replace("BV = 32", "BV = triton.next_power_of_2(V)")
    assert "one tile covers the dimension (NV = 1)" in _skip_reason(src)


def test_skip_when_tiles_communicate_through_memory():
    src = THIRD.replace("    tl.store(s_ptrs, acc,", "    tl.store(Out + bh, tl.sum(tl.sum(acc, 1), 0))\n    tl.store(s_ptrs, acc,")
    assert "communicate through memory" in _skip_reason(src)


def test_skip_when_nothing_is_repeated_per_tile():
    # every load in the loop is indexed by the V tile: merging removes no repeated work
    src = THIRD.replace("        qv = tl.load(Q + (bh * T + t) * DK + rows, mask=rmask, other=0.0) * qk_scale\n", "        qv = tl.sum(vt * acc, 1)\n")
    src = src.replace("        kv = tl.load(Kp + (bh * T + t) * DK + rows, mask=rmask, other=0.0)\n", "        kv = qv\n")
    src = src.replace("        wv = tl.load(W + (bh * T + t) * DK + rows, mask=rmask, other=0.0)\n", "        wv = kv * 0.5\n")
    assert "no repeated prologue to merge" in _skip_reason(src)


def test_skip_without_launch_site():
    src = THIRD[: THIRD.index("def wkv_decode")]
    assert "no launch of wkv_step in this file" in _skip_reason(src)


def test_default_plans_are_the_measured_winners():
    # the first default is the structure that won on the H200 (experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.md)
    assert (DEFAULT_PLANS[0].programs, DEFAULT_PLANS[0].subtiles, DEFAULT_PLANS[0].warps) == (2, 1, 2)
    res = merge_tiles((ROOT / "kernels" / "kda_decode" / "kernel.py").read_text(), RewriteOptions(max_variants=len(DEFAULT_PLANS)))
    assert len({r.variant for r in res}) == len(res) == len(DEFAULT_PLANS) and all(r.applied for r in res)
