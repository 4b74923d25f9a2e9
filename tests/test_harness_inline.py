"""A tensor the kernel reaches only through a same-file ``@triton.jit`` helper (the gate weight of a norm
read by ``_load_row``, the output written by ``_store_row``): the helper is inlined for reading the
kernel's facts, so its loads and stores are the kernel's, in the kernel's names. Kernels of our own,
written the way quantisation and norm libraries split their kernels into helpers."""
from __future__ import annotations

import ast

import pytest

from skel.harness.infer import HarnessError, infer
from skel.harness.inline import inline
from skel.harness.launchers import jit_functions
from test_harness_run import _judge

HELPERS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _load_row(base, cols, n_cols):
    """One row of ``base`` (masked past n_cols), as fp32."""
    mask = cols < n_cols
    x = tl.load(base + cols, mask=mask, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _store_row(base, cols, n_cols, value):
    tl.store(base + cols, value, mask=cols < n_cols)


@triton.jit
def _scaled(x, w_ptr, cols, n_cols, eps: tl.constexpr):
    w = _load_row(w_ptr, cols, n_cols)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 0) / n_cols + eps)
    return x * rstd * w


@triton.jit
def _looping(x_ptr, n):
    acc = 0.0
    for i in range(n):
        acc += tl.load(x_ptr + i)
    return acc


@triton.jit
def gated_norm_kernel(X, W, Y, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = _load_row(X + row * stride, cols, n_cols)
    y = _scaled(x, W, cols, n_cols, eps=1e-6)
    _store_row(Y + row * stride, cols, n_cols, y.to(Y.dtype.element_ty))


def gated_norm(x: torch.Tensor, weight: torch.Tensor):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    gated_norm_kernel[(n_rows,)](x, weight, y, x.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y
'''


def test_helpers_are_inlined_in_the_kernels_names():
    tree = ast.parse(HELPERS)
    jit = jit_functions(tree)
    read = inline(jit["gated_norm_kernel"], jit)
    text = ast.unparse(read)
    assert "tl.load(W + cols" in text, text  # _scaled's helper call, two levels down
    assert "tl.store(Y + row * stride + cols" in text, text
    assert "_load_row(" not in text and "_store_row(" not in text and "_scaled(" not in text
    assert all(getattr(n, "lineno", read.lineno) <= read.end_lineno for n in ast.walk(read)), "lines stay the kernel's"
    looping = inline(jit["_looping"], jit)
    assert looping is jit["_looping"], "no helper called: the kernel itself"
    calls_loop = ast.parse("def k(x_ptr, n):\n    return _looping(x_ptr, n)\n").body[0]
    assert "_looping(" in ast.unparse(inline(calls_loop, jit)), "a helper with a loop stays a call"


def test_a_tensor_read_and_written_only_through_helpers_has_a_shape(tmp_path):
    path = tmp_path / "gated_norm.py"
    path.write_text(HELPERS)
    h = infer(path, HELPERS)
    assert {t.name: t.dims for t in h.tensors} == {"x": ("n_rows", "n_cols"), "weight": ("n_cols",)}


def test_without_inlining_the_weight_is_not_indexed(tmp_path, monkeypatch):
    import skel.harness.infer as infer_module

    monkeypatch.setattr(infer_module, "inline", lambda fn, jit: fn)
    path = tmp_path / "gated_norm.py"
    path.write_text(HELPERS)
    with pytest.raises(HarnessError, match="not indexed"):
        infer(path, HELPERS)


@pytest.mark.parametrize("mutant", [None, "wrong epsilon", "dropped weight"])
def test_zero_config_gate_through_helpers(mutant, tmp_path, monkeypatch):
    mutation = {None: None, "wrong epsilon": ("eps=1e-6", "eps=1e-1"),
                "dropped weight": ("return x * rstd * w", "return x * rstd")}[mutant]
    r = _judge(tmp_path, monkeypatch, HELPERS, "gated_norm", "gated_norm", "float32", mutation)
    assert r.error is None, r.error
    assert r.accepted == (mutant is None), r.reasons


def test_a_helper_that_would_grow_without_bound_stays_a_call():
    """``y = x * x`` forty times over: written out, the value doubles at each line; the helper stays a call."""
    body = "\n".join(["    y0 = tl.load(p)"] + [f"    y{i + 1} = y{i} * y{i}" for i in range(40)] + ["    return y40"])
    jit = {name: fn for fn in ast.parse(f"def grow(p):\n{body}\n\ndef k(p):\n    return grow(p)\n").body
           for name in [fn.name]}
    assert "grow(" in ast.unparse(inline(jit["k"], jit))
