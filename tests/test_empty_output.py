"""SK015 empty-output: a zero fill the kernel overwrites is dropped, and only then.

fla-core 0.6.0's KDA decode wrapper (``out = torch.zeros_like(v)``) is rewritten and run in the
interpreter against the original; accumulators, read-before-write kernels and buffers the host
reads before the launch are refused with the reason; a kernel that leaves part of the buffer
unwritten is rewritten (static analysis cannot see it) but the gate's poisoned allocations show
the unwritten elements as NaN.
"""
from __future__ import annotations

import pytest
import torch

from skel.rewriter.base import APPLIED, SKIPPED, RewriteOptions
from skel.skeletons.library import load_library

rewrite = load_library().get("SK015").rule.rewrite.raw  # the codemod alone
from skel.validate.numerics import poisoned_allocations

from test_merge_tiles import _close, _fla, _kda_inputs, _load, fla_kda_kwargs
from test_rewrites import assert_contract

BASE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, o, N, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    KERNEL_BODY


def rows(x):
    N, D = x.shape
    o = ALLOC
    HOST_LINE
    rows_kernel[(N,)](x, o, N, D=D)
    return o
'''


def _src(body="tl.store(o + i * D + r, tl.load(x + i * D + r) * 2.0)", alloc="torch.zeros_like(x)", host="pass"):
    return BASE.replace("KERNEL_BODY", body).replace("ALLOC", alloc).replace("HOST_LINE", host)


def test_upstream_kda_wrapper_drops_its_zero_fill(fla_corpus, tmp_path):
    _fla(fla_corpus)
    import fla.ops.kda.fused_recurrent as up

    src = (fla_corpus / "fla/ops/kda/fused_recurrent.py").read_text()
    [r] = rewrite(src, RewriteOptions())
    assert_contract(src, r)
    assert "out = torch.empty_like(v)" in r.source and "torch.zeros_like(v)" not in r.source
    new = _load(r.source, tmp_path, "fla_kda_sk015")
    x = _kda_inputs(2, 3, 2, 4, 32, 64, seed=5)
    kw = fla_kda_kwargs(x, 32)
    o0, s0 = up.fused_recurrent_kda_fwd(initial_state=x["state"].clone(), **kw)
    with poisoned_allocations():  # as the gate runs it: anything left unwritten would be NaN
        o1, s1 = new.fused_recurrent_kda_fwd(initial_state=x["state"].clone(), **kw)
    _close(o1, o0, "output")
    _close(s1, s0, "state")


@pytest.mark.parametrize("src,why", [
    (_src(body="tl.atomic_add(o + r, tl.load(x + i * D + r))"), "reads or accumulates into o"),
    (_src(body="tl.store(o + i * D + r, tl.load(o + i * D + r) + 1.0)"), "reads or accumulates into o"),
    (_src(host="o += 1"), "read on line"),
    (_src(body="b = tl.load(x + i * D + r)"), "never stores to o"),
])
def test_refusals_say_why(src, why):
    [r] = rewrite(src, RewriteOptions())
    assert r.status == SKIPPED and why in r.reason, r.reason


def test_metadata_and_none_tests_are_not_reads():
    [r] = rewrite(_src(host="assert o.shape == x.shape and o is not None"), RewriteOptions())
    assert r.status == APPLIED and "o = torch.empty_like(x)" in r.source, r.reason


def test_a_partial_writer_is_caught_by_the_poisoned_allocations(tmp_path):
    """Half the rows are written: the static conditions hold (only stores), the gate's poison shows it."""
    src = _src(body="tl.store(o + i * D + r, tl.load(x + i * D + r) * 2.0, mask=i < N // 2)")
    [r] = rewrite(src, RewriteOptions())
    assert r.status == APPLIED
    x = torch.randn(6, 16)
    base, new = _load(src, tmp_path, "half_base"), _load(r.source, tmp_path, "half_new")
    want = base.rows(x)
    with poisoned_allocations():
        got = new.rows(x)
    assert torch.isnan(got[3:]).all() and torch.equal(got[:3], want[:3])


# ------------------------------------------------------------------ review cases (session 4)

TWO = '''
import torch
import triton
import triton.language as tl


@triton.jit
def k_store(x, o, N, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    tl.store(o + i * D + r, tl.load(x + i * D + r) * 2.0)


@triton.jit
def k_read(x, o, N, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    KERNEL_READ


@triton.jit
def _acc(p, v):
    tl.atomic_add(p, v)


def f(x, run=True):
    N, D = x.shape
    HOST
'''


@pytest.mark.parametrize("read,host,why", [
    ("tl.store(o + i * D + r, tl.load(i * D + r + o) + 1.0)", "o = torch.zeros_like(x)\n    k_read[(N,)](x, o, N, D=D)\n    return o",
     "reads or accumulates into o"),  # the parameter is not the leftmost operand
    ("_acc(o + i * D + r, tl.load(x + i * D + r))\n    tl.store(o + r, r * 0.0)",
     "o = torch.zeros_like(x)\n    k_read[(N,)](x, o, N, D=D)\n    return o", "helper _acc"),
    ("pass", "o = torch.zeros_like(x)\n    if run:\n        k_store[(N,)](x, o, N, D=D)\n    return o", "under a condition"),
    ("pass", "bufs = torch.zeros(1, N, D)\n    k_store[(N,)](x, *bufs, N, D=D)\n    return bufs", "not as one argument"),
])
def test_review_refusals(read, host, why):
    [r] = rewrite(TWO.replace("KERNEL_READ", read).replace("HOST", host), RewriteOptions())
    assert r.status == SKIPPED and why in r.reason, r.reason


def test_only_the_allocation_that_reaches_the_launch_changes_and_nested_functions_are_their_own_hosts():
    host = ("o = torch.zeros_like(x)\n    k_store[(N,)](x, o, N, D=D)\n    y = o.clone()\n    o = torch.zeros_like(x)\n"
            "    o[0] += 1.0\n\n    def g():\n        o = torch.zeros_like(x)\n        k_read[(N,)](x, o, N, D=D)\n"
            "        return o\n    return y, o, g()")
    src = TWO.replace("KERNEL_READ", "tl.store(o + i * D + r, tl.load(o + i * D + r) + 1.0)").replace("HOST", host)
    [r] = rewrite(src, RewriteOptions())
    assert r.status == APPLIED and len(r.changes) == 1, r.reason
    body = r.source.split("def f(")[1]
    assert body.count("torch.empty_like(x)") == 1 and body.count("torch.zeros_like(x)") == 2


@pytest.mark.parametrize("body,why", [
    ("flag = tl.load(x + i * D)\n    if flag == 0:\n        return\n    tl.store(o + i * D + r, r * 1.0)", "returns early"),
    ("tl.store(o + i * D + r, r * 1.0, mask=r <= i)", "two index ranges compared"),  # a triangle
    ("tl.store(o + i * D + r, r * 1.0, mask=tl.load(x + i * D + r) > 0)", "masked by loaded data"),
    ("if i > 2:\n        tl.store(o + i * D + r, r * 1.0)", "runtime condition"),
    ("p = tl.make_block_ptr(o, (N, D), (D, 1), (i, 0), (1, D), (1, 0))\n    tl.store(p, tl.zeros([1, D], tl.float32) + 1.0)",
     "block pointer"),
])
def test_partial_writers_are_refused(body, why):
    src = _src(body=body).replace("def rows_kernel(x, o, N, D: tl.constexpr):",
                                  "def rows_kernel(x, o, N, D: tl.constexpr):")
    [r] = rewrite(src, RewriteOptions())
    assert r.status == SKIPPED and why in r.reason, r.reason


def test_an_empty_token_range_return_is_not_a_partial_write():
    body = "T = N - i\n    if T == 0:\n        return\n    for t in range(0, T):\n        tl.store(o + i * D + r, r * 1.0)"
    [r] = rewrite(_src(body=body), RewriteOptions())
    assert r.status == APPLIED, r.reason


def test_an_autotune_that_resets_the_buffer_keeps_the_zeros():
    src = _src().replace("@triton.jit\ndef rows_kernel", "@triton.autotune(configs=[triton.Config({}, num_warps=1)], key=['N'],"
                         " reset_to_zero=['o'])\n@triton.jit\ndef rows_kernel")
    [r] = rewrite(src, RewriteOptions())
    assert r.status == SKIPPED and "resets o to zero" in r.reason, r.reason
