"""Defects found by the third held-out set (benchmarks/mining_labels/heldout3.csv: xformers, causal-conv1d,
torchao), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

from conftest import finding_kinds as kinds, mine_text as mine

from skel.miner.detect import evaluate
from skel.skeletons.library import load_library


FLAT_HEAD_GROUP_SPLIT = '''
import triton
import triton.language as tl


@triton.jit
def split_kernel(X, Y, n_groups, stride_h, stride_g, D: tl.constexpr):
    row = tl.program_id(0)
    group_head_idx = tl.program_id(1)
    group_idx = group_head_idx % n_groups
    head_idx = group_head_idx // n_groups
    offs = row * D + head_idx * stride_h + group_idx * stride_g + tl.arange(0, D)
    tl.store(Y + offs, tl.load(X + offs))


@triton.jit
def gqa_kernel(Q, K, O, kv_group_num, stride_h, D: tl.constexpr):
    cur_head = tl.program_id(1)
    cur_kv_head = cur_head // kv_group_num
    d = tl.arange(0, D)
    q = tl.load(Q + cur_head * stride_h + d)
    k = tl.load(K + cur_kv_head * stride_h + d)
    tl.store(O + cur_head * stride_h + d, q * k)


@triton.jit
def gqa_rank_kernel(Q, K, O, kv_group_num, stride_h, D: tl.constexpr):
    cur_head = tl.program_id(1)
    cur_kv_head = cur_head // kv_group_num
    slot = cur_head % 4
    d = tl.arange(0, D)
    k = tl.load(K + cur_kv_head * stride_h + d)
    tl.store(O + cur_head * stride_h + slot + d, k)
'''


def test_a_flat_axis_split_by_div_and_mod_of_one_divisor_is_no_head_mapping():
    _, fs = mine(FLAT_HEAD_GROUP_SPLIT)
    assert not kinds(fs, "split_kernel", "SK010"), "head = i // n; group = i % n splits one axis; it maps no head"
    assert kinds(fs, "gqa_kernel", "SK010") == {"instance"}
    assert kinds(fs, "gqa_rank_kernel", "SK010") == {"instance"}, "a modulo by another divisor is no split"


TEMPLATE_RECURSIVE_BUTTERFLY = r'''
template <typename T>
__device__ inline T lane_xor(T v, int offset) { return __shfl_xor_sync(uint32_t(-1), v, offset); }

template <int N>
struct Butterfly {
    template <typename T>
    static __device__ inline T sum(T x) {
        x = x + lane_xor(x, N / 2);
        return Butterfly<N / 2>::sum(x);
    }
};

template <>
struct Butterfly<1> {
    template <typename T>
    static __device__ inline T sum(T x) { return x; }
};

template <int N>
struct Unrolled {
    template <typename T>
    static __device__ inline T total(const T* v) { return v[N - 1] + Unrolled<N - 1>::total(v) + expf(0.f); }
};

__global__ void row_sum(const float* x, float* out, int n) {
    float acc = 0.f;
    for (int i = threadIdx.x; i < n; i += 8) { acc += x[blockIdx.x * n + i]; }
    acc = Butterfly<8>::sum(acc);
    if (threadIdx.x == 0) { out[blockIdx.x] = acc; }
}

__global__ void reg_sum(const float* x, float* out) {
    float v[4] = {x[0], x[1], x[2], x[3]};
    out[blockIdx.x] = Unrolled<4>::total(v);
}
'''


def test_a_butterfly_unrolled_by_template_recursion_over_a_shuffle_wrapper_is_a_warp_reduction():
    _, fs = mine(TEMPLATE_RECURSIVE_BUTTERFLY, "cuda", "k.cu")
    assert kinds(fs, "Butterfly::sum", "SK013") == {"instance"}
    assert kinds(fs, "row_sum", "SK013") == {"instance"}, "the helper's finding counts for its caller"
    assert not kinds(fs, "Unrolled::total", "SK013"), "recursion without a lane exchange is no warp reduction"
    assert not kinds(fs, "reg_sum", "SK013")


KERNELS_BOUND_TO_FIELDS = '''
from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Impls:
    scale: object
    copy: object


def build():
    @triton.jit
    def _scale_kernel(x_ptr, y_ptr, s_ptr, BLOCK_SIZE: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + offs).to(tl.float32)
        s = tl.max(tl.abs(x)) / 448.0
        tl.store(y_ptr + offs, x / s)
        tl.store(s_ptr + pid, s)

    @triton.jit
    def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    return Impls(scale=_scale_kernel, copy=_copy_kernel)


IMPLS = build()


def quantize(x, block_size=128):
    y = torch.empty_like(x)
    s = x.new_empty(x.numel() // block_size)
    IMPLS.scale[(triton.cdiv(x.numel(), block_size),)](x, y, s, BLOCK_SIZE=block_size)
    return y, s


def copy(x):
    y = torch.empty_like(x)
    IMPLS.copy[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
'''


def test_a_launch_through_a_field_bound_to_the_kernel_is_the_kernels_launch():
    profiles, fs = mine(KERNELS_BOUND_TO_FIELDS)
    launched = {p.name: [s.line for s in p.launches] for p in profiles}
    assert launched["_scale_kernel"] == [39] and launched["_copy_kernel"] == [45]
    assert kinds(fs, "_scale_kernel", "SK015") == {"instance"}, "y = torch.empty_like(x), fully stored"
    # BLOCK = 256 only partitions the copy, but the search rewrites direct launches only: held back, with why
    copy = next(p for p in profiles if p.name == "_copy_kernel")
    assert copy.launches[0].via == "field IMPLS.copy" and kinds(fs, "_copy_kernel", "SK005") == set()
    why = {r.id: r for r in evaluate(load_library().get("SK005"), copy, KERNELS_BOUND_TO_FIELDS)}["launched-directly"]
    assert not why.holds and "through field IMPLS.copy" in why.detail


TILE_FROM_A_VARIABLE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def amax_kernel(x_ptr, s_ptr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE))
    tl.store(s_ptr + pid, tl.max(tl.abs(x)))


def amax(x):
    block_size = 128
    s = x.new_empty(x.numel() // block_size)
    amax_kernel[(triton.cdiv(x.numel(), block_size),)](x, s, BLOCK_SIZE=block_size)
    return s


def amax_rows(x, s):
    block_size = 128
    amax_kernel[(triton.cdiv(x.numel(), block_size),)](x, s, BLOCK_SIZE=block_size)
    return s


def amax_given(x, s, block_size=128):
    amax_kernel[(triton.cdiv(x.numel(), block_size),)](x, s, BLOCK_SIZE=block_size)
    return s
'''


def test_a_tile_passed_as_a_variable_that_sizes_a_buffer_is_no_search_opportunity():
    _, fs = mine(TILE_FROM_A_VARIABLE)
    hits = [f for f in fs if f.kernel == "amax_kernel" and f.skeleton == "SK005"]
    lines = {f.line for f in hits}
    launch = [i for i, t in enumerate(TILE_FROM_A_VARIABLE.splitlines(), 1) if "amax_kernel[" in t]
    assert launch[0] not in lines, "block_size also sizes s = x.new_empty(numel // block_size)"
    assert launch[1] in lines, "where no buffer of this function is sized by it, the tile only partitions the work"
    assert launch[2] not in lines, "block_size is amax_given's parameter: the caller decides it (the rewrite keeps it)"


PER_TILE_SCALES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def dequant_kernel(x_ptr, s_ptr, y_ptr, M, N, BLOCK_SIZE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    n = tl.cdiv(N, BLOCK_SIZE)
    offs_m = pid_m * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    offs_n = pid_n * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    s = tl.load(s_ptr + pid_m * n + pid_n)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


@triton.jit
def scale_kernel(x_ptr, y_ptr, M, N, BLOCK_SIZE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    n = tl.cdiv(N, BLOCK_SIZE)
    offs_m = pid_m * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    offs_n = (pid_n % n) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def dequant(x, s):
    block_size = 128
    y = torch.empty_like(x)
    M, N = x.shape
    grid = (triton.cdiv(M, block_size), triton.cdiv(N, block_size))
    dequant_kernel[grid](x, s, y, M, N, BLOCK_SIZE=block_size)
    scale_kernel[grid](x, y, M, N, BLOCK_SIZE=block_size)
    return y
'''


def test_a_tile_that_indexes_a_per_tile_tensor_in_the_kernel_is_no_search_opportunity():
    _, fs = mine(PER_TILE_SCALES)
    assert not kinds(fs, "dequant_kernel", "SK005"), "s_ptr + pid_m * cdiv(N, BLOCK_SIZE) + pid_n: one scale per tile"
    assert kinds(fs, "scale_kernel", "SK005") == {"opportunity"}, "a tile count inside lane offsets is no layout"


SAME_SHORT_NAME_HELPERS = r'''
struct WarpSum {
    static __device__ float sum(float x) {
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
        return x;
    }
    static __device__ float twice(float x) { return sum(x) + sum(x); }
};
struct Scale {
    static __device__ float sum(float x) { return x * 2.0f; }
};
__global__ void by_warp(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = WarpSum::sum(i < n ? in[i] : 0.f);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}
__global__ void by_scale(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = Scale::sum(i < n ? in[i] : 0.f);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}
__global__ void by_sibling(const float* in, float* out) {
    out[blockIdx.x] = WarpSum::twice(in[threadIdx.x]);
}
'''


def test_helpers_sharing_a_short_name_pass_findings_only_to_their_own_callers():
    """``WarpSum::sum`` shuffles, ``Scale::sum`` does not: a call qualified by one owner reaches that
    owner's helper only (it reached whichever came first), and a member's unqualified call of a sibling
    (``sum(x)`` in ``WarpSum::twice``) is the sibling."""
    _, fs = mine(SAME_SHORT_NAME_HELPERS, "cuda", "k.cu")
    assert kinds(fs, "WarpSum::sum", "SK013") == {"instance"}
    assert kinds(fs, "by_warp", "SK013") == {"instance"}
    assert kinds(fs, "by_scale", "SK013") == set(), "Scale::sum does not shuffle"
    assert kinds(fs, "by_sibling", "SK013") == {"instance"}, "WarpSum::twice calls its sibling sum"
