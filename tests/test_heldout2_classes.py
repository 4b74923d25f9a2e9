"""Defects found by the second held-out set (benchmarks/mining_labels/heldout2.csv: unsloth, flag-gems,
nvidia-cutlass), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

from skel.miner.mine import analyze


def mine(text: str, language: str = "triton", path: str = "k.py"):
    profiles, findings, err = analyze(path, text, language)
    assert err is None, err
    return profiles, findings


def kinds(findings, kernel: str, code: str) -> set[str]:
    return {f.kind for f in findings if f.kernel == kernel and f.skeleton == code}


RMS_TYPED_EPS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rms_kernel(Y, X, stride, n_cols: tl.constexpr, eps: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=0).to(tl.float32)
    var = tl.sum(x * x, axis=0) * (1.0 / n_cols)
    eps32 = tl.full((), eps, tl.float32)
    tl.store(Y + row * stride + cols, x * tl.math.rsqrt(var + eps32), mask=cols < n_cols)


@triton.jit
def div_kernel(Y, X, stride, n_cols: tl.constexpr, eps: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    tl.store(Y + row * stride + cols, x / tl.sqrt(var + tl.full((), eps, tl.float32)), mask=cols < n_cols)


@triton.jit
def vec_kernel(Y, X, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols, mask=cols < n_cols, other=0).to(tl.float32)
    tl.store(Y + cols, x * tl.math.rsqrt(x + tl.full((BLOCK,), 1.0, tl.float32)), mask=cols < n_cols)
'''


def test_an_eps_made_by_tl_full_of_an_empty_shape_is_a_scalar():
    _, fs = mine(RMS_TYPED_EPS)
    assert kinds(fs, "rms_kernel", "SK001") == {"instance"}
    assert kinds(fs, "div_kernel", "SK001") == {"opportunity"}
    assert not kinds(fs, "vec_kernel", "SK001"), "tl.full of a block shape is a vector: no norm"
