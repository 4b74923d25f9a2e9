"""Detector fixtures for SK015 (empty-output). Profiled statically, never run."""
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, o, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    tl.store(o + i * D + r, tl.load(x + i * D + r) * 2.0)


def rows(x):
    N, D = x.shape
    # skel: SK015 opportunity
    o = torch.zeros_like(x)
    assert o.shape == x.shape
    rows_kernel[(N,)](x, o, D=D)
    return o


def rows_preallocated(x):
    N, D = x.shape
    # skel: SK015 instance
    o = torch.empty_like(x)
    rows_kernel[(N,)](x, o, D=D)
    return o


@triton.jit
def accumulate_kernel(x, o, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    tl.atomic_add(o + r, tl.load(x + i * D + r))


def column_sums(x):
    # near-miss: the kernel accumulates into the zeros
    N, D = x.shape
    # skel-ok: SK015
    o = torch.zeros(D, device=x.device)
    accumulate_kernel[(N,)](x, o, D=D)
    return o


@triton.jit
def bump_kernel(o, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    tl.store(o + i * D + r, tl.load(o + i * D + r) + 1.0)


def bumped(x):
    # near-miss: the kernel reads the buffer before writing it
    N, D = x.shape
    # skel-ok: SK015
    o = x.new_zeros(N, D)
    bump_kernel[(N,)](o, D=D)
    return o


@triton.jit
def skip_rows_kernel(x, flags, o, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    if tl.load(flags + i) == 0:
        return
    tl.store(o + i * D + r, tl.load(x + i * D + r))


def masked_rows(x, flags):
    # near-miss: rows whose flag is 0 are left to the zeros
    N, D = x.shape
    # skel-ok: SK015
    o = torch.zeros_like(x)
    skip_rows_kernel[(N,)](x, flags, o, D=D)
    return o
