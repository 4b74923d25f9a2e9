"""Defects found by the fourth held-out set (benchmarks/mining_labels/heldout4.csv: sageattention,
gemlite, bitsandbytes), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

from conftest import finding_kinds as kinds, mine_text as mine


BASE2_SOFTMAX_SCALE_FROM_CALLER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _inner(acc, l_i, m_i, q, q_scale, K_ptrs, K_scale_ptr, V_ptrs, n_kv, stride_n, BLOCK_N: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(0, n_kv, BLOCK_N):
        k = tl.load(K_ptrs, mask=offs_n[None, :] < n_kv - start_n)
        k_scale = tl.load(K_scale_ptr)
        qk = tl.dot(q, k).to(tl.float32) * q_scale * k_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V_ptrs, mask=offs_n[:, None] < n_kv - start_n)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_ij
        K_ptrs += BLOCK_N * stride_n
        V_ptrs += BLOCK_N * stride_n
        K_scale_ptr += 1
    return acc, l_i


@triton.jit
def attn_kernel(Q, K, V, Q_scale, K_scale, Out, n_kv, stride_n, D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * stride_n + offs_d[None, :])
    q_scale = tl.load(Q_scale + start_m)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    K_ptrs = K + tl.arange(0, BLOCK_N)[None, :] * stride_n + offs_d[:, None]
    V_ptrs = V + tl.arange(0, BLOCK_N)[:, None] * stride_n + offs_d[None, :]
    acc, l_i = _inner(acc, l_i, m_i, q, q_scale, K_ptrs, K_scale, V_ptrs, n_kv, stride_n, BLOCK_N)
    tl.store(Out + offs_m[:, None] * stride_n + offs_d[None, :], acc / l_i[:, None])


@triton.jit
def powers_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(X + offs, mask=offs < n)
    top = tl.max(bits, 0)
    tl.store(Y + offs, tl.exp2(bits - top), mask=offs < n)


@triton.jit
def shift_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, tl.exp2(e * 0.5), mask=offs < n)


def forward(q, k, v, q_scale, k_scale):
    o = torch.empty_like(q)
    attn_kernel[(triton.cdiv(q.shape[0], 128),)](q, k, v, q_scale, k_scale, o, k.shape[0], q.stride(0), D=q.shape[1],
                                                 BLOCK_M=128, BLOCK_N=64)
    return o
'''


def test_a_base2_online_softmax_whose_scale_comes_from_the_caller_is_an_exp2_instance():
    """sageattention folds log2(e) into q_scale in another module: the attention file has exp2 of logits
    minus their running max and no log2(e) anywhere. A max-subtracted exp2 whose logits are scaled is a
    softmax computed in base 2, the skeleton's end state; exp2 of unscaled values minus their maximum
    (a power of two) or of scaled values with no maximum subtracted is not."""
    _, fs = mine(BASE2_SOFTMAX_SCALE_FROM_CALLER)
    assert kinds(fs, "_inner", "SK004") == {"instance"}
    assert kinds(fs, "attn_kernel", "SK004") == {"instance"}, "the helper's finding counts for its caller"
    assert not kinds(fs, "powers_kernel", "SK004"), "exp2(bits - max(bits)): no scale, a genuine base-2 value"
    assert not kinds(fs, "shift_kernel", "SK004"), "no max subtracted: nothing says the base is a softmax's"


INLINE_HEAD_MAPPING = '''
import triton
import triton.language as tl


@triton.jit
def inline_gqa_kernel(Q, K, O, num_kv_groups, stride_h, stride_kh, D: tl.constexpr):
    off_h = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, D)
    K_ptrs = K + (off_h // num_kv_groups) * stride_kh + d
    q = tl.load(Q + off_h * stride_h + d)
    tl.store(O + off_h * stride_h + d, q * tl.load(K_ptrs))


@triton.jit
def inline_split_kernel(X, Y, n_groups, stride_h, stride_g, D: tl.constexpr):
    off_hg = tl.program_id(1)
    d = tl.arange(0, D)
    X_ptrs = X + (off_hg // n_groups) * stride_h + (off_hg % n_groups) * stride_g + d
    tl.store(Y + off_hg * D + d, tl.load(X_ptrs))


@triton.jit
def inline_count_kernel(X, Y, H, num_kv_groups, D: tl.constexpr):
    row = tl.program_id(0)
    d = tl.arange(0, D)
    n_kv = H // num_kv_groups
    Y_ptrs = Y + row * n_kv * D + d
    tl.store(Y_ptrs, tl.load(X + row * D + d))
'''


def test_a_head_mapping_written_inside_a_pointer_expression_is_an_instance():
    """``K_ptrs = K + (off_h // num_kv_groups) * stride_kh``: the key head is computed inside the address,
    never assigned to a head-named variable; it is the mapping all the same. A div/mod split of one axis
    and a head count divided by the group size (a shape) stay no mapping."""
    _, fs = mine(INLINE_HEAD_MAPPING)
    assert kinds(fs, "inline_gqa_kernel", "SK010") == {"instance"}
    assert not kinds(fs, "inline_split_kernel", "SK010"), "off_hg // n and off_hg % n split one axis"
    assert not kinds(fs, "inline_count_kernel", "SK010"), "H // num_kv_groups divides a shape, not a program id"


PER_TILE_SCALE_THROUGH_A_POINTER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scaled_kernel(X, S, Y, L, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    s_offset = off_h * tl.cdiv(L, BLOCK_M)
    S_ptr = S + s_offset + start_m
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    ptrs = off_h * L * D + offs_m[:, None] * D + d[None, :]
    x = tl.load(X + ptrs, mask=offs_m[:, None] < L)
    tl.store(Y + ptrs, x * tl.load(S_ptr), mask=offs_m[:, None] < L)


@triton.jit
def _times_scale(x, S_ptr):
    return x * tl.load(S_ptr)


@triton.jit
def helper_scaled_kernel(X, S, Y, L, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    S_ptr = S + off_h * tl.cdiv(L, BLOCK_M) + start_m
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    ptrs = off_h * L * D + offs_m[:, None] * D + d[None, :]
    x = tl.load(X + ptrs, mask=offs_m[:, None] < L)
    tl.store(Y + ptrs, _times_scale(x, S_ptr), mask=offs_m[:, None] < L)


@triton.jit
def flat_kernel(X, Y, L, cu_seqlens, D: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0)
    NM = tl.cdiv(L, BLOCK_M)
    i_m, i_n = pid % NM, pid // NM
    bos = tl.load(cu_seqlens + i_n)
    offs_m = bos + i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    ptrs = offs_m[:, None] * D + d[None, :]
    tl.store(Y + ptrs, tl.load(X + ptrs, mask=offs_m[:, None] < L), mask=offs_m[:, None] < L)


@triton.jit
def plain_kernel(X, Y, L, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    base = off_h * tl.cdiv(L, BLOCK_M)
    offs_m = (start_m + base - base) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    ptrs = off_h * L * D + offs_m[:, None] * D + d[None, :]
    tl.store(Y + ptrs, tl.load(X + ptrs, mask=offs_m[:, None] < L), mask=offs_m[:, None] < L)


def run(x, s):
    y = torch.empty_like(x)
    H, L, D = x.shape
    scaled_kernel[(triton.cdiv(L, 128), H)](x, s, y, L, H=H, D=D, BLOCK_M=128, num_warps=8)
    helper_scaled_kernel[(triton.cdiv(L, 128), H)](x, s, y, L, H=H, D=D, BLOCK_M=128, num_warps=8)
    flat_kernel[(triton.cdiv(L, 128) * H,)](x, y, L, s, D=D, BLOCK_M=128, num_warps=8)
    plain_kernel[(triton.cdiv(L, 128), H)](x, y, L, H=H, D=D, BLOCK_M=128, num_warps=8)
    return y
'''


def test_a_per_tile_tensor_addressed_through_a_pointer_variable_keeps_its_tile_out_of_the_search():
    """``s_offset = off_h * tl.cdiv(L, BLOCK_M); S_ptr = S + s_offset + start_m; tl.load(S_ptr)``: one scale
    per BLOCK_M tile, reached through a pointer variable (sageattention's Q_scale). The search may still
    change num_warps, never BLOCK_M; a tile count that enters lane offsets is no layout."""
    _, fs = mine(PER_TILE_SCALE_THROUGH_A_POINTER)
    hits = [dict(f.params) for f in fs if f.kernel == "scaled_kernel" and f.skeleton == "SK005"]
    assert hits and all("BLOCK_M" not in h for h in hits), hits
    assert any(h.get("num_warps") == 8 for h in hits), hits
    helped = [dict(f.params) for f in fs if f.kernel == "helper_scaled_kernel" and f.skeleton == "SK005"]
    assert helped and all("BLOCK_M" not in h for h in helped), f"S_ptr is read by the jit helper: {helped}"
    for name in ("plain_kernel", "flat_kernel"):  # a count inside lane offsets, or one that splits a flat pid
        plain = [dict(f.params) for f in fs if f.kernel == name and f.skeleton == "SK005"]
        assert plain and any("BLOCK_M" in h for h in plain), (name, plain)
