"""Defects found by the third held-out set (benchmarks/mining_labels/heldout3.csv: xformers, causal-conv1d,
torchao), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

from skel.miner.mine import analyze


def mine(text: str, language: str = "triton", path: str = "k.py"):
    profiles, findings, err = analyze(path, text, language)
    assert err is None, err
    return profiles, findings


def kinds(findings, kernel: str, code: str) -> set[str]:
    return {f.kind for f in findings if f.kernel == kernel and f.skeleton == code}


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
