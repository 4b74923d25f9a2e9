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
