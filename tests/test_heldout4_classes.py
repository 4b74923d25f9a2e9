"""Defects found by the fourth held-out set (benchmarks/mining_labels/heldout4.csv: sageattention,
gemlite, bitsandbytes), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

import re

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


WEIGHT_SIZES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def pack_rows_kernel(W_in_ptr, W_out_ptr, num_rows, num_cols, PACK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for r in range(PACK):
        v = tl.load(W_in_ptr + (row * PACK + r) * num_cols + cols, mask=cols < num_cols)
        acc = acc | (v << (r * 4))
    tl.store(W_out_ptr + row * num_cols + cols, acc, mask=cols < num_cols)


@triton.jit
def quant_kernel(x_ptr, y_ptr, s_ptr, M, N, BLOCK: tl.constexpr):
    """Quantise ``x`` block by block.

    Args:
        M (int): rows of the weight matrix.
        N (int): columns of the weight matrix.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask)
    s = tl.max(tl.abs(x)) / 448.0
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], x / s, mask=mask)
    tl.store(s_ptr + pid_m * tl.cdiv(N, BLOCK) + pid_n, s)


@triton.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + m * K + offs_k, mask=offs_k < K)
        w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=(offs_n[:, None] < N) & (offs_k[None, :] < K))
        acc += tl.sum(w * x[None, :], 1)
    tl.store(y_ptr + m * N + offs_n, acc, mask=(offs_n < N) & (m < M))


@triton.jit
def wy_kernel(k_ptr, w_ptr, o_ptr, T, BT: tl.constexpr, K: tl.constexpr):
    i_t = tl.program_id(0)
    offs = i_t * BT + tl.arange(0, BT)
    cols = tl.arange(0, K)
    k = tl.load(k_ptr + offs[:, None] * K + cols[None, :], mask=offs[:, None] < T)
    w = tl.load(w_ptr + offs[:, None] * K + cols[None, :], mask=offs[:, None] < T)
    tl.store(o_ptr + offs[:, None] * K + cols[None, :], k * w, mask=offs[:, None] < T)


def pack(W_q, pack=8):
    num_input_rows, num_cols = W_q.shape
    num_rows = num_input_rows // pack
    out = torch.empty((num_rows, num_cols), dtype=torch.int32, device=W_q.device)
    pack_rows_kernel[(num_rows, triton.cdiv(num_cols, 64))](W_q, out, num_rows, num_cols, pack, BLOCK=64)
    return out


def quant(x, block=128):
    M, N = x.size()
    y = torch.empty_like(x)
    s = x.new_empty(triton.cdiv(M, block), triton.cdiv(N, block))
    quant_kernel[(triton.cdiv(M, block), triton.cdiv(N, block))](x, y, s, M, N, BLOCK=block)
    return y, s


def linear(X, weight):
    N, K = weight.shape
    M = X.numel() // K
    y = X.new_empty(M, N)
    gemv_kernel[(M, triton.cdiv(N, 64))](X, weight, y, M, N, K, BLOCK_N=64, BLOCK_K=64)
    return y


def wy(k, w, chunk_size=64):
    B, T, K = w.shape
    o = torch.empty_like(k)
    wy_kernel[(triton.cdiv(T, chunk_size),)](k, w, o, T, BT=chunk_size, K=K)
    return o
'''


def test_a_weights_sizes_are_not_per_call_sizes():
    """A weight's sizes are fixed per model: Triton compiles once per weight shape, and
    ``do_not_specialize`` would only cost the divisibility facts. The evidence is what the code
    shows, not the parameter's name (num_rows, M and N are per-call sizes elsewhere): every tensor
    the kernel touches is a weight (a packing kernel), the docstring calls the size a weight's, or
    the launch passes it from a weight's shape. A size computed from an activation as well
    (``M = X.numel() // K``), and a lone lowercase ``w`` (the WY factor of a delta rule, per call),
    stay per-call sizes."""
    from skel.miner.detect import evaluate
    from skel.skeletons.library import load_library

    profiles, fs = mine(WEIGHT_SIZES)
    by_name = {p.name: p for p in profiles}
    for name, evidence in (("pack_rows_kernel", "every tensor the kernel touches is a weight"),
                           ("quant_kernel", "the docstring says so")):
        assert "opportunity" not in kinds(fs, name, "SK008"), name
        why = {r.id: r for r in evaluate(load_library().get("SK008"), by_name[name], WEIGHT_SIZES)}
        assert not why["has-runtime-shape-arg"].holds and evidence in why["has-runtime-shape-arg"].detail, why
    gemv = [dict(f.params)["param"] for f in fs if f.kernel == "gemv_kernel" and f.skeleton == "SK008"]
    assert gemv == ["M"], gemv  # N comes from the weight; M from X and the weight together
    assert "opportunity" in kinds(fs, "wy_kernel", "SK008")


TILE_BY_ROLE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def dequant_kernel(a_ptr, absmax_ptr, out_ptr, n, QUANT_BLOCK: tl.constexpr, SPLIT_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * SPLIT_SIZE + tl.arange(0, SPLIT_SIZE)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0)
    scale = tl.load(absmax_ptr + offs // QUANT_BLOCK, mask=mask, other=1.0)
    tl.store(out_ptr + offs, a.to(tl.float32) * scale, mask=mask)


def dequantize(A, absmax, blocksize):
    n = A.numel()
    out = torch.empty(n, dtype=torch.float32, device=A.device)
    SPLIT_SIZE = 256
    grid = (triton.cdiv(n, SPLIT_SIZE),)
    dequant_kernel[grid](A, absmax, out, n, blocksize, SPLIT_SIZE)
    return out
'''


def test_a_tile_is_what_the_grid_divides_by_and_the_callers_block_is_not_searched():
    """``SPLIT_SIZE = 256; grid = (cdiv(n, SPLIT_SIZE),)`` passed by position is a tile whatever its name;
    ``QUANT_BLOCK=blocksize``, a parameter of the launching function, is the caller's quantisation
    block (it indexes the scales): the detector proposes SPLIT_SIZE only, and the rewrite varies it."""
    from skel.rewriter.base import RewriteOptions
    from skel.rewriter.launch_search import rewrite

    _, fs = mine(TILE_BY_ROLE)
    hits = [dict(f.params) for f in fs if f.kernel == "dequant_kernel" and f.skeleton == "SK005"]
    assert hits == [{"SPLIT_SIZE": 256}], hits
    done = [r for r in rewrite(TILE_BY_ROLE, RewriteOptions(kernel="dequant_kernel", shape=(("n", 1 << 20),)))
            if r.status == "applied"]
    assert done and all("SPLIT_SIZE" in dict(r.params) for r in done), [r.reason for r in done]
    assert all(", blocksize, SPLIT_SIZE" in r.source for r in done), "the caller's argument stays as it is"
    assert all(re.search(r"SPLIT_SIZE = (?!256)\d+", r.source) for r in done), "the tile is set where the code decides it"
