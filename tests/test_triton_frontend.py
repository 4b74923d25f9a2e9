"""Triton frontend: profiles of real (fla-core 0.6.0) and small synthetic kernels."""
from __future__ import annotations

import textwrap

import pytest

from skel.miner import dataflow
from skel.catalog.records import KernelProfile
from skel.miner.triton_frontend import profile_source
from skel.miner.triton_launch import launch_values, symbol_values

KDA = "fla/ops/kda/fused_recurrent.py"


def profiles(src: str, path: str = "k.py") -> list[KernelProfile]:
    return profile_source(textwrap.dedent(src), path)


def one(src: str) -> KernelProfile:
    (p,) = [p for p in profiles(src) if p.kind == "kernel"]
    return p


@pytest.fixture(scope="module")
def kda(fla_corpus) -> KernelProfile:
    path = fla_corpus / KDA
    (p,) = profile_source(path.read_text(), str(path))
    return p


# ------------------------------------------------------------------ the real KDA decode kernel
def test_kda_kernel_signature_and_tuning(kda):
    assert kda.name == "fused_recurrent_kda_fwd_kernel" and (kda.line, kda.end_line) == (35, 232)
    assert kda.kind == "kernel" and kda.language == "triton"
    assert {"BV", "BK", "K", "V", "HV"} <= set(kda.constexprs)
    assert "N" not in kda.constexprs  # N: tl.int64
    assert kda.tune.do_not_specialize == ("N", "T")
    assert "USE_INITIAL_STATE" in kda.tune.heuristics and "HAS_BIAS" in kda.tune.heuristics
    assert kda.tune.autotune == ()
    assert "tl.float32" in kda.dtypes and "tl.int64" in kda.dtypes


def test_kda_program_axis_roles(kda):
    (axis,) = kda.program_axes
    assert axis.axis == 0 and axis.var == "pid" and axis.line == 80
    roles = dict(axis.roles)
    assert roles["i_v"] == "v-tile"  # pid_rest % NV with NV = tl.cdiv(V, BV)
    assert roles["i_k"] == "k-tile"
    assert roles["i_hv"] == "head" and roles["i_n"] == "sequence"
    assert {"i_v", "i_nh", "i_n", "i_hv", "i_h"} <= set(axis.derived)
    assert "o_v" not in axis.derived  # tl.arange offsets are not program-id arithmetic
    assert dict(kda.symbols)["NV"] == "tl.cdiv(V, BV)"


def test_kda_time_loop_and_invariant_loads(kda):
    (loop,) = kda.loops
    assert (loop.line, loop.var, loop.kind, loop.is_time_loop) == (151, "i_t", "tl.range", True)
    hoistable = dataflow.loop_invariant_loads(kda, loop)
    assert [(m.line, m.pointer) for m in hoistable] == [(163, "A_log + i_hv"), (166, "dt_bias + i_hv * K + o_k")]
    by_line = {m.line: m for m in kda.memops}
    assert not by_line[152].loop_invariant  # p_q advances by H * K per token
    assert by_line[163].loop_invariant and by_line[163].guards == ("USE_GATE_IN_KERNEL",)
    assert by_line[152].eviction_policy == "evict_last" and by_line[154].eviction_policy == "evict_first"
    assert by_line[152].masked and not by_line[163].masked
    assert by_line[152].target == "b_q"
    assert by_line[200].kind == "store" and by_line[200].loop_line == 151
    assert by_line[186].guards == ("IS_BETA_HEADWISE",) and by_line[188].guards == ("not IS_BETA_HEADWISE",)


def test_kda_norm_division_and_math(kda):
    divs = [m for m in kda.math if m.op == "div"]
    assert [d.line for d in divs] == [157, 158]
    d = dict(divs[0].detail)
    assert d["denominator"] == "tl.sqrt(tl.sum(b_q * b_q) + 1e-6)"
    assert d["denominator_calls"] == "tl.sqrt,tl.sum" and d["denominator_dtype"] == "fp32"
    assert divs[0].guards == ("USE_QK_L2NORM_IN_KERNEL",) and divs[0].loop_line == 151
    exps = [m for m in kda.math if m.op == "exp"]
    assert exps and all(dict(m.detail)["via"] == "fla.ops.utils.op" for m in exps)
    assert {m.op for m in kda.math} >= {"sqrt", "sigmoid", "softplus", "exp"}
    sums = [r for r in kda.reductions if r.line == 157]
    assert sums and sums[0].op == "sum" and sums[0].dtype == "fp32"


def test_kda_launch_site(kda):
    (site,) = kda.launches
    assert site.line == 295
    assert site.grid == "(triton.cdiv(V, BV) * N * HV, )"
    assert site.grid_dims == ("triton.cdiv(V, BV) * N * HV",)
    values = dict(site.constexpr_values)
    assert values["BV"] == 32 and values["BK"] == "triton.next_power_of_2(K)"
    assert site.num_warps == 4 and site.num_stages == 2
    assert dict(site.args)["o"] == "out" and dict(site.args)["h0"] == "initial_state"
    assert launch_values(site, {"K": 128, "V": 128})["BK"] == 128
    env = symbol_values(kda, {"K": 128, "V": 128})
    assert (env["BV"], env["NV"], env["NK"]) == (32, 4, 1)  # four V-tile programs per head


def test_kda_work_repeated_by_each_v_tile(kda):
    free = set(dataflow.independent_of_axis(kda, "v-tile"))
    # q/k loads and their L2 norms, the gate and its inputs: identical in all NV programs
    assert {("b_q", 157), ("b_k", 158), ("b_g", 160), ("b_A", 163), ("b_gk", 172)} <= free
    # anything touching o_v (the tile's columns) depends on the tile id
    assert not {("b_v", 154), ("b_o", 199), ("o_v", 103), ("b_beta", 186)} & free
    assert dataflow.depends_on(kda, "b_o", "v-tile")
    assert dataflow.depends_on(kda, "b_o@199", "pid:0")
    assert not dataflow.depends_on(kda, "b_q@157", "i_v")
    assert dataflow.independent_of_axis(kda, "no-such-role") == []


def test_profile_json_round_trip(kda):
    import json

    back = KernelProfile.from_json(json.loads(json.dumps(kda.to_json())))
    assert back == kda


# ------------------------------------------------------------------ synthetic kernels
HEADER = """
import triton
import triton.language as tl
"""


def test_recognises_decorator_forms_and_ignores_plain_functions():
    src = HEADER + """
from triton import jit

@triton.jit
def a(x): pass

@jit
def b(x): pass

@triton.jit(do_not_specialize=["T"])
def c(x, T): pass

def plain(x): pass
"""
    names = [p.name for p in profiles(src)]
    assert names == ["a", "b", "c"]
    assert all(p.kind == "device-function" for p in profiles(src))
    numba = "from numba import jit\n@jit\ndef f(x): return x\n"
    assert profiles(numba) == []
    assert profiles("x = 1\n") == []


def test_syntax_error_propagates():
    with pytest.raises(SyntaxError):
        profiles("@triton.jit\ndef k(:\n")


def test_autotune_comprehension_heuristics_and_grid_lambda():
    src = HEADER + """
@triton.heuristics({'EVEN_K': lambda args: args['K'] % args['BK'] == 0})
@triton.autotune(
    configs=[triton.Config({'BV': bv}, num_warps=w, num_stages=s)
             for bv in [16, 32] for w in [1, 2, 4] for s in (2, 3)],
    key=['K', 'V'],
)
@triton.jit
def kern(x, y, V: tl.constexpr, K: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    o_v = i_v * BV + tl.arange(0, BV)
    b = tl.load(x + i_nh * V + o_v, mask=o_v < V)
    tl.store(y + i_nh * V + o_v, b, mask=o_v < V)

def launch(x, y, N, V, K):
    grid = lambda meta: (triton.cdiv(V, meta['BV']), N)
    kern[grid](x, y, V=V, K=K, BK=64)
"""
    p = one(src)
    assert len(p.tune.autotune) == 12
    assert dict(p.tune.autotune[0]) == {"BV": 16, "num_warps": 1, "num_stages": 2}
    assert p.tune.autotune_keys == ("K", "V") and p.tune.heuristics == ("EVEN_K",)
    (site,) = p.launches
    assert site.grid_dims == ("triton.cdiv(V, meta['BV'])", "N")
    assert dict(site.constexpr_values) == {"V": "V", "K": "K", "BK": 64}
    roles = {v: r for ax in p.program_axes for v, r in ax.roles}
    assert roles["i_v"] == "v-tile"  # grid dim 0 is cdiv(V, BV)
    assert roles["i_nh"] == "sequence-head"
    assert [ax.axis for ax in p.program_axes] == [0, 1]


def test_tuple_augmented_assign_and_constexpr_branches():
    src = HEADER + """
@triton.jit
def kern(x, y, T, FLAG: tl.constexpr, B: tl.constexpr):
    i_b, i_h = tl.program_id(0), tl.program_id(1)
    if FLAG:
        p = x + i_b * B
    else:
        p = y + i_h
    acc = tl.zeros([B], dtype=tl.float32)
    for t in range(T):
        if FLAG:
            a = tl.load(p)
        else:
            a = tl.load(p + 1)
        acc += a
        acc *= 0.5
    tl.store(y + i_b, acc)
"""
    p = one(src)
    loads = {m.line: m for m in p.memops if m.kind == "load"}
    # the FLAG arm only sees the FLAG definition of p (depends on i_b, not i_h)
    flag_load = next(m for m in loads.values() if m.guards == ("FLAG",))
    other_load = next(m for m in loads.values() if m.guards == ("not FLAG",))
    g = dataflow.Graph(p.dataflow)
    assert "pid:0" in g.ancestors([flag_load.node]) and "pid:1" not in g.ancestors([flag_load.node])
    assert "pid:1" in g.ancestors([other_load.node]) and "pid:0" not in g.ancestors([other_load.node])
    assert all(m.loop_invariant for m in loads.values())  # p never changes inside the loop
    acc_nodes = [n for n in g.nodes if n.startswith("acc@")]
    assert len(acc_nodes) == 3  # zeros, +=, *=
    (loop,) = p.loops
    assert loop.is_time_loop and loop.var == "t"
    store_anc = g.ancestors(["store@" + str(max(m.line for m in p.memops))])
    assert any(n.startswith("load@") for n in store_anc)


def test_block_pointers_descriptors_and_dots():
    src = HEADER + """
@triton.jit
def kern(a, b, c, M, N, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    p_a = tl.make_block_ptr(a, (M, K), (K, 1), (pid_m * BM, 0), (BM, BK), (1, 0))
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(p_a, boundary_check=(0, 1), cache_modifier=".cg")
        y = tl.load(b + k * N + pid_n * BN + tl.arange(0, BN)[None, :] + tl.arange(0, BK)[:, None])
        acc = tl.dot(x.to(tl.float32), y.to(tl.bfloat16), acc, input_precision="ieee")
        acc += tl.dot(x, y, allow_tf32=False)
        p_a = tl.advance(p_a, (0, BK))
    desc = tl.make_tensor_descriptor(c, [M, N], [N, 1], [BM, BN])
    desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))
    r = acc.sum(1) / tl.sum(acc, axis=1)
    m = tl.max(acc, 0)
"""
    p = one(src)
    x_load = next(m for m in p.memops if m.target == "x")
    assert x_load.block_ptr and x_load.masked and x_load.cache_modifier == ".cg" and not x_load.loop_invariant
    y_load = next(m for m in p.memops if m.target == "y")
    assert not y_load.block_ptr and not y_load.masked and not y_load.loop_invariant  # depends on k
    store = next(m for m in p.memops if m.kind == "store")
    assert store.block_ptr and store.pointer == "desc"
    d1, d2 = p.dots
    assert d1.input_precision == "ieee" and d1.operand_dtypes == ("fp32", "bf16") and d1.loop_line == p.loops[0].line
    assert d2.allow_tf32 is False and d2.input_precision is None
    ops = sorted((r.op, r.axis) for r in p.reductions)
    assert ops == [("max", "0"), ("sum", "1"), ("sum", "1")]
    div = next(m for m in p.math if m.op == "div")
    assert dict(div.detail)["denominator_calls"] == "tl.sum"
    assert {"tl.float32", "tl.bfloat16", "tl.float16"} <= set(p.dtypes)


def test_time_loop_rules():
    src = HEADER + """
@triton.jit
def kern(x, y, L, H: tl.constexpr, D: tl.constexpr, BK: tl.constexpr):
    i_nh = tl.program_id(0)
    p = x + i_nh * D + tl.arange(0, D)
    # not a time loop: iterates over the feature dimension
    for i_k in range(0, D, BK):
        tl.load(x + i_k)
    # a time loop by its body: the pointer moves H * D elements per step
    for i in range(L):
        b = tl.load(p)
        p += H * D
    j = 0
    while j < L:
        j += 1
"""
    p = one(src)
    by_var = {l.var: l for l in p.loops}
    assert not by_var["i_k"].is_time_loop
    assert by_var["i"].is_time_loop
    w = by_var[""]
    assert w.kind == "while" and not w.is_time_loop


def test_loop_invariance_nested_and_carried():
    src = HEADER + """
@triton.jit
def kern(x, w, T, N: tl.constexpr):
    i = tl.program_id(0)
    base = x + i * N
    for t in range(T):
        s = tl.load(w + i)          # invariant in both loops
        off = t * N
        for j in range(4):
            v = tl.load(base + off + j)   # varies with j (inner) and t (outer)
            u = tl.load(w + off)          # varies with t only
"""
    p = one(src)
    outer, inner = sorted(p.loops, key=lambda l: l.depth)
    assert [m.target for m in dataflow.loop_invariant_loads(p, outer)] == ["s"]
    assert [m.target for m in dataflow.loop_invariant_loads(p, inner)] == ["u"]
    u = next(m for m in p.memops if m.target == "u")
    assert u.loop_line == inner.line and u.loop_invariant  # w + off does not change with j
    v = next(m for m in p.memops if m.target == "v")
    assert not v.loop_invariant


def test_flat_grid_with_helper_unflatten_and_head_modulo():
    src = HEADER + """
from fla.ops.utils.op import unflatten_program_id, exp2

@triton.jit
def kern(x, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, HV: tl.constexpr):
    i_k, i_v, i_nh = unflatten_program_id(tl.cdiv(K, BK), tl.cdiv(V, BV))
    i_n, i_hv = i_nh // HV, i_nh % HV
    b = exp2(tl.load(x + i_hv) * 1.4426950408889634)
"""
    p = one(src)
    roles = {v: r for ax in p.program_axes for v, r in ax.roles}
    assert roles["i_k"] == "k-tile" and roles["i_v"] == "v-tile" and roles["i_hv"] == "head"
    (e,) = [m for m in p.math if m.op == "exp2"]
    assert dict(e.detail)["via"] == "fla.ops.utils.op" and "1.4426950408889634" in dict(e.detail)["argument"]


def test_launch_value_resolution_through_branches():
    src = HEADER + """
@triton.jit
def kern(x, BV: tl.constexpr, BK: tl.constexpr, NW: tl.constexpr):
    tl.program_id(0)

def launch(x, K, V, small):
    BK = max(triton.next_power_of_2(K), 16)
    BV = min(32, triton.next_power_of_2(V))
    if small:
        nw = 2
    else:
        nw = 4
    NW = 1
    kern[(1,)](x, BV, BK, NW, num_warps=nw)
"""
    (site,) = one(src).launches
    vals = dict(site.constexpr_values)
    assert vals == {"BV": "min(32, triton.next_power_of_2(V))", "BK": "max(triton.next_power_of_2(K), 16)", "NW": 1}
    assert site.num_warps == "2 | 4"
    assert launch_values(site, {"K": 8, "V": 128}) == {"BV": 32, "BK": 16, "NW": 1}


def test_paged_decode_kv_loop_and_named_grid_roles():
    src = HEADER + """
@triton.jit
def attn(Q, K, kv_indptr, Out, stride_b, BLOCK_N: tl.constexpr, D: tl.constexpr):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    split_id = tl.program_id(2)
    start = tl.load(kv_indptr + cur_batch)
    cur_batch_seq_len = tl.load(kv_indptr + cur_batch + 1) - start
    q = tl.load(Q + cur_batch * stride_b + cur_head * D + tl.arange(0, D))
    for start_n in range(0, cur_batch_seq_len, BLOCK_N):
        k = tl.load(K + start + start_n + tl.arange(0, BLOCK_N))
    for d in tl.static_range(4):
        q = q * 2

def launch(q, k, indptr, out, batch, head_num, splits):
    attn[(batch, head_num, splits)](q, k, indptr, out, q.stride(0), BLOCK_N=64, D=128)
"""
    p = one(src)
    kv, unrolled = p.loops
    assert kv.is_time_loop and kv.var == "start_n"  # bound: a sequence length loaded per batch
    assert unrolled.kind == "static_range" and not unrolled.is_time_loop
    roles = {v: r for ax in p.program_axes for v, r in ax.roles}
    assert roles == {"cur_batch": "batch", "cur_head": "head", "split_id": "split"}
    free = dataflow.independent_of_axis(p, "head")
    assert ("k", 14) in free and ("cur_batch_seq_len", 11) in free  # K rows are shared by all heads here
    assert ("q", 12) not in free and ("q", 16) not in free
