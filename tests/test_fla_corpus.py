"""Detectors on a real corpus: fla-core 0.6.0, fetched from the package registry at test time.

Every expectation below was checked by reading the file at that line (fla-core 0.6.0). The
corpus is profiled statically; nothing from it is imported or run.
"""
from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import pytest

from skel.miner.detect import evaluate, run_detectors
from skel.miner.triton_frontend import profile_source

KDA_DECODE = "fla/ops/kda/fused_recurrent.py"
KDA_DECODE_KERNEL = "fused_recurrent_kda_fwd_kernel"


@lru_cache(maxsize=None)
def _mine(root: str, rel: str):
    text = (Path(root) / rel).read_text(encoding="utf-8")
    profiles = profile_source(text, rel)
    return text, profiles, tuple(f for p in profiles for f in run_detectors(p, text))


@pytest.fixture(scope="module")
def mine(fla_corpus):
    return lambda rel: _mine(str(fla_corpus), rel)


def _one(findings, code, kind, line):
    rows = [f for f in findings if (f.skeleton, f.kind, f.line) == (code, kind, line)]
    assert rows, f"expected {code} {kind} at line {line}; got {[(f.skeleton, f.kind, f.line) for f in findings if f.skeleton == code]}"
    return rows[0]


def test_kda_decode_l2_norm_division_is_an_rsqrt_opportunity(mine):
    _, _, found = mine(KDA_DECODE)
    for line, var in ((157, "b_q"), (158, "b_k")):
        f = _one(found, "SK001", "opportunity", line)
        params = dict(f.params)
        assert f.kernel == KDA_DECODE_KERNEL and f.path == KDA_DECODE
        assert params["denominator"] == f"tl.sqrt(tl.sum({var} * {var}) + 1e-6)"
    # line 159 (b_q * scale) multiplies by a scalar: not a division, no SK001 finding
    assert not [f for f in found if f.skeleton == "SK001" and f.line == 159]


def test_kda_decode_v_split_is_a_tile_merge_opportunity(mine):
    _, _, found = mine(KDA_DECODE)
    f = _one(found, "SK002", "opportunity", 86)  # i_v = pid_rest % NV
    params = dict(f.params)
    assert (params["BV"], params["V"], params["NV"]) == (32, 128, 4)
    assert params["V_assumed"] is True  # the launch passes V from v.shape; 128 is the assumed head dim
    assert params["launch_line"] == 295
    # q/k loads and their norms are repeated by each of the four V-tile programs
    assert {152, 153, 157, 158} <= set(params["repeated_lines"])
    # the V load (line 154) depends on the tile, so it is not repeated work
    assert 154 not in params["repeated_lines"]


def test_kda_decode_conditions_all_hold_for_both_opportunities(mine):
    text, profiles, _ = mine(KDA_DECODE)
    kernel = next(p for p in profiles if p.name == KDA_DECODE_KERNEL)
    for code in ("SK001", "SK002", "SK003"):
        results = evaluate(code, kernel, text)
        assert all(r.holds for r in results), (code, results)
    # the decode already lists N and T in do_not_specialize: an instance, not an opportunity
    sk008 = {r.id: r for r in evaluate("SK008", kernel, text)}
    assert not sk008["shape-arg-specialized"].holds


def test_kda_decode_reloads_gate_parameters_in_the_time_loop(mine):
    _, _, found = mine(KDA_DECODE)
    assert dict(_one(found, "SK003", "opportunity", 163).params)["base"] == "A_log"
    assert dict(_one(found, "SK003", "opportunity", 166).params)["base"] == "dt_bias"
    # q/k/v pointers advance every step (p_q += H * K): never loop-invariant
    assert not [f for f in found if f.skeleton == "SK003" and f.line in (152, 153, 154)]


def test_kda_decode_instances(mine):
    _, _, found = mine(KDA_DECODE)
    assert dict(_one(found, "SK008", "instance", 34).params)["do_not_specialize"] == ("N", "T")
    _one(found, "SK009", "instance", 80)  # pid = tl.program_id(0).to(tl.int64), split by % and //
    assert dict(_one(found, "SK010", "instance", 89).params)["mapping"] == "i_h = i_hv // (HV // H)"
    assert dict(_one(found, "SK006", "instance", 154).params)["policy"] == "evict_first"
    _one(found, "SK011", "instance", 190)  # tl.sigmoid(b_beta) in the kernel


def test_exp2_with_log2e_folded_in_kernel_is_an_instance(mine):
    _, _, found = mine("fla/ops/attn/parallel.py")
    f = _one(found, "SK004", "instance", 128)  # b_p = exp2(b_s - b_mw[:, None])
    assert dict(f.params)["log2e"] == "line 113: b_s = tl.dot(b_q, b_k) * scale * RCP_LN2"


def test_exp2_on_gates_prescaled_by_host_is_an_instance_in_chunk_kernels(mine):
    _, _, found = mine("fla/ops/kda/chunk_bwd.py")
    f = _one(found, "SK004", "instance", 282)  # b_gk_exp = exp2(b_g)
    assert dict(f.params)["log2e"] == "upstream, line 498: scale=RCP_LN2,"
    _, _, found = mine("fla/ops/kda/chunk_intra.py")
    f = _one(found, "SK004", "instance", 165)  # exp2(b_g1 - b_gn1[None, :])
    assert dict(f.params)["log2e"].startswith("upstream, line 889: GATE_SHIFT=")


def test_known_instances_elsewhere(mine):
    _, _, found = mine("fla/ops/kda/backends/triton_ascend/fused_recurrent.py")
    _one(found, "SK001", "instance", 192)  # b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
    _, _, found = mine("fla/modules/norm/l2norm.py")
    _one(found, "SK001", "opportunity", 36)  # b_rstd = 1 / tl.sqrt(tl.sum(b_x * b_x) + eps)
    _, _, found = mine("fla/ops/gated_delta_rule/fused_recurrent.py")
    f = _one(found, "SK002", "opportunity", 68)  # BV = min(8, next_pow2(V)) when gv is None
    assert (dict(f.params)["BV"], dict(f.params)["NV"]) == (8, 16)


def test_known_misses(mine):
    """Things that look similar and must not fire."""
    # the exp2 helper itself has no log2(e): not an instance of the folding
    _, _, found = mine("fla/ops/utils/op.py")
    assert not [f for f in found if f.skeleton == "SK004"]
    # the ascend KDA decode already uses rsqrt: no SK001 opportunity there
    _, _, found = mine("fla/ops/kda/backends/triton_ascend/fused_recurrent.py")
    assert not [f for f in found if (f.skeleton, f.kind) == ("SK001", "opportunity")]
    # parallel attention stores an LSE for its backward pass and tiles queries: that is neither
    # a split-KV merge (no KV split) nor a split-KV opportunity (prefill grid)
    _, _, found = mine("fla/ops/attn/parallel.py")
    assert not [f for f in found if f.skeleton == "SK012"]
    # it already works in base 2: no exp -> exp2 opportunity
    assert not [f for f in found if (f.skeleton, f.kind) == ("SK004", "opportunity")]
    # the KDA decode's exp(b_gk) has an unscaled branch (b_gk = b_g): not foldable
    _, _, found = mine(KDA_DECODE)
    assert not [f for f in found if (f.skeleton, f.kind) == ("SK004", "opportunity")]
    # the KDA decode launches one flat grid axis with int64 ids: no SK009 opportunity
    assert not [f for f in found if (f.skeleton, f.kind) == ("SK009", "opportunity")]


def test_whole_corpus_runs_without_errors_and_fast(fla_corpus):
    files = sorted(p for p in fla_corpus.rglob("*.py") if "triton" in p.read_text(encoding="utf-8", errors="replace"))
    items = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        items.append((text, profile_source(text, str(path.relative_to(fla_corpus)))))
    kernels = sum(len(ps) for _, ps in items)
    start = time.perf_counter()
    total = 0
    for text, profiles in items:
        for p in profiles:
            total += len(run_detectors(p, text))
    elapsed = time.perf_counter() - start
    assert kernels > 400 and total > 0
    # generous bound for a loaded 2-core machine; measured about 2.5 s on one core
    assert elapsed < 30, f"detectors took {elapsed:.1f} s over {kernels} kernels"
