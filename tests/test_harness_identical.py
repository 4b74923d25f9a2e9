"""Zero-config gate on identical copies (issue 15): classes of launcher the inferred harness mishandled,
each on a small kernel written here. The identical copy must be accepted and a semantic mutant still
rejected, with the original kernel as the only oracle.

- sized-by-default: an input allocated like ``v.new_empty(B, T, H, BT)`` with ``BT = chunk_size`` (an int
  parameter defaulting to 16): the tensor must be drawn with that size, not 1 (the kernel read past it).
- dot-dtypes: two inputs loaded uncast into one ``tl.dot`` are drawn in one dtype (a float32 guessed from an
  allocation of the same shape made the original fail "Both operands must be same dtype").
- device-branch: a launcher that sets a local only under device checks (``if x.device.type == "cuda"``, as
  Liger's dyt backward sets NUM_SMS) cannot run on the CPU interpreter: the gate's refusal names the lines
  that assign it and their conditions.
- packed operands (Liger's int8 x int2 matmul): a dim asserted a multiple of another (``a.shape[1] ==
  b.shape[0] * 2``) is derived from it, a ``tl.static_assert(K % (2 * BLOCK_K) == 0)`` over the autotune
  configs keeps K a multiple, bit-unpacked values are drawn as uint8 bits and a tl.dot partner of an int8 cast
  as int8.
- out of bounds: a load or store outside every tensor of the launch is an error naming the access and its
  line (the interpreter read neighbouring memory, or the worker died of SIGSEGV: fla-core path_attn's default
  path, return_h=True, stores h as [NT, H, K, K] into an allocation like w).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from skel.harness.infer import infer
from test_harness_run import _judge


CHUNK_SIZED = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _chunk_mix_kernel(A, v, dv, dA, T, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    o_a = tl.arange(0, BT)
    o_v = tl.arange(0, V)
    p_A = A + ((i_b * T + o_t[:, None]) * H + i_h) * BT + o_a[None, :]
    b_A = tl.load(p_A, mask=m_t[:, None], other=0.0).to(tl.float32)
    b_A = tl.where(o_a[None, :] <= o_t[:, None] - i_t * BT, b_A, 0.0)
    m_s = (i_t * BT + o_a) < T
    b_v = tl.load(v + ((i_b * T + i_t * BT + o_a[:, None]) * H + i_h) * V + o_v[None, :], mask=m_s[:, None],
                  other=0.0).to(tl.float32)
    b_o = tl.sum(b_A[:, :, None] * b_v[None, :, :], 1)
    tl.store(dv + ((i_b * T + o_t[:, None]) * H + i_h) * V + o_v[None, :], b_o.to(dv.dtype.element_ty),
             mask=m_t[:, None])
    p_dA = dA + ((i_b * T + o_t[:, None]) * H + i_h) * BT + o_a[None, :]
    tl.store(p_dA, b_A * 0.5, mask=m_t[:, None])


def chunk_mix(A: torch.Tensor, v: torch.Tensor, chunk_size: int = 16):
    B, T, H, V = v.shape
    BT = chunk_size
    dv = torch.empty_like(v)
    dA = v.new_empty(B, T, H, BT, dtype=torch.float)
    _chunk_mix_kernel[(triton.cdiv(T, BT), B * H)](A, v, dv, dA, T, H=H, V=V, BT=BT)
    return dv, dA
'''


def test_a_size_fixed_by_a_default_is_that_size(tmp_path):
    h = infer(tmp_path / "mix.py", CHUNK_SIZED)
    assert {t.name: t.dims for t in h.tensors} == {"A": ("B", "T", "H", "16"), "v": ("B", "T", "H", "V")}
    sizes = {s.name: s.code for s in h.sizes}  # the size may be named (BT, computed as 16) or written 16
    dims, dtype = h.written["dA"]
    assert tuple(sizes.get(d, d) for d in dims) == ("B", "T", "H", "16") and dtype == "float32"


@pytest.mark.parametrize("mutated", [False, True])
def test_an_input_sized_by_a_default_chunk_runs_in_bounds(mutated, tmp_path, monkeypatch):
    result = _judge(tmp_path, monkeypatch, CHUNK_SIZED, "mix", "chunk_mix", "bfloat16",
                    ("o_a[None, :] <= o_t[:, None]", "o_a[None, :] < o_t[:, None]") if mutated else None)
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted != mutated, result.reasons


DOT_DTYPES = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _attn_dv_kernel(do, v, p, dv, dp, T, V: tl.constexpr, BT: tl.constexpr):
    i_b = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_v = tl.arange(0, V)
    m_t = o_t < T
    b_do = tl.load(do + (i_b * T + o_t[:, None]) * V + o_v[None, :], mask=m_t[:, None], other=0.0)
    b_v = tl.load(v + (i_b * V + o_v[None, :]) * T + o_t[:, None], mask=m_t[:, None], other=0.0)  # [B, V, T]
    b_p = tl.load(p + (i_b * T + o_t[:, None]) * BT + o_t[None, :], mask=m_t[:, None], other=0.0).to(tl.float32)
    b_dp = tl.dot(b_do, tl.trans(b_v))
    tl.store(dp + (i_b * T + o_t[:, None]) * BT + o_t[None, :], b_dp * b_p, mask=m_t[:, None])
    b_dv = tl.dot(tl.trans(b_p), b_do.to(tl.float32))
    tl.store(dv + (i_b * T + o_t[:, None]) * V + o_v[None, :], b_dv, mask=m_t[:, None])


def attn_dv(do: torch.Tensor, v: torch.Tensor, p: torch.Tensor):
    B, T, V = do.shape
    assert T <= 16
    dv = torch.empty(B, T, V, dtype=torch.float32, device=do.device)
    dp = torch.empty(B, T, 16, dtype=torch.float32, device=do.device)
    _attn_dv_kernel[(B,)](do, v, p, dv, dp, T, V=V, BT=16)
    return dv, dp
'''


def test_dot_operands_as_loaded_share_a_dtype(tmp_path):
    """``do`` has the shape of the float32 ``dv`` the launcher allocates, which alone would make it float32;
    but the kernel takes ``tl.dot(b_do, trans(b_v))`` of both as loaded, and Triton refuses a float32
    operand beside a bfloat16 one: do is drawn in the spec's dtype like v. ``p`` is cast before its dot
    and keeps the float32 of ``dp``'s shape."""
    h = infer(tmp_path / "attn_dv.py", DOT_DTYPES)
    assert {t.name: t.dtype for t in h.tensors} == {"do": "work", "v": "work", "p": "float32"}
    assert "tl.dot of the two as loaded" in next(t.why for t in h.tensors if t.name == "do")


@pytest.mark.parametrize("mutated", [False, True])
def test_dot_operands_run_in_one_dtype(mutated, tmp_path, monkeypatch):
    result = _judge(tmp_path, monkeypatch, DOT_DTYPES, "attn_dv", "attn_dv", "bfloat16",
                    ("b_dp * b_p", "b_dp * b_p + 0.5") if mutated else None)
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted != mutated, result.reasons


DEVICE_BRANCH = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _partial_sum_kernel(x, part, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(pid, n_rows, tl.num_programs(0)):
        acc += tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(part + pid * n_cols + cols, acc, mask=cols < n_cols)


def column_sum(x: torch.Tensor):
    n_rows, n_cols = x.shape
    if x.device.type == "cuda":
        n_sm = torch.cuda.get_device_properties(x.device).multi_processor_count
    elif x.device.type == "xpu":
        n_sm = torch.xpu.get_device_properties(x.device).gpu_subslice_count
    part = torch.empty(n_sm, n_cols, dtype=torch.float32, device=x.device)
    _partial_sum_kernel[(n_sm,)](x, part, n_rows, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return part.sum(0)
'''


def test_a_local_set_only_under_device_checks_is_named_with_its_lines(tmp_path, monkeypatch):
    """The launcher sets ``n_sm`` only when the tensors are on a CUDA or XPU device: on the CPU interpreter
    the original cannot run, and the gate says so with the lines that assign it and their conditions (the
    bare UnboundLocalError named neither)."""
    result = _judge(tmp_path, monkeypatch, DEVICE_BRANCH, "colsum", "column_sum", "float32")
    assert not result.accepted
    assert "column_sum assigns n_sm only at line 19 under `x.device.type == 'cuda'`; line 21 under" \
           " `x.device.type == 'xpu'`, and none of them ran here (a device check is false on the CPU" in result.error
    assert "judge this launcher on a GPU" in result.error and "colsum.py:22" in result.error


def test_an_unbound_local_names_the_branches_that_assign_it(tmp_path):
    from skel.validate.numerics import describe_exception

    path = tmp_path / "pick.py"
    path.write_text("def pick(flag):\n    if flag:\n        k = 1\n    else:\n        if flag is None:\n"
                    "            k = 2\n    return k\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(UnboundLocalError) as info:
        namespace["pick"](0)
    text = describe_exception(info.value, path)
    assert text.endswith("(pick.py:7): pick assigns k only at line 3 under `flag`; line 6 under `flag is None`,"
                         " and none of them ran here"), text


PACKED = '''\
import torch
import triton
import triton.language as tl


def get_configs():
    return [triton.Config({"BLOCK_K": 16}, num_warps=1), triton.Config({"BLOCK_K": 32}, num_warps=1)]


@triton.autotune(configs=get_configs(), key=["K"])
@triton.jit
def _packed_matmul_kernel(a, b, c, M, N, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr):
    tl.static_assert(K % (2 * BLOCK_K) == 0, "K must be a multiple of 2 * BLOCK_K")
    o_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = tl.arange(0, BLOCK_N)
    o_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    for i in range(2):
        for j in range(K // (2 * BLOCK_K)):
            b_a = tl.load(a + o_m[:, None] * K + i * (K // 2) + j * BLOCK_K + o_k[None, :],
                          mask=(o_m < M)[:, None], other=0)
            b_p = tl.load(b + (j * BLOCK_K + o_k)[:, None] * N + o_n[None, :], mask=(o_n < N)[None, :], other=0)
            b_w = ((b_p >> (4 * i)) & 15).to(tl.int8) - 8
            acc += tl.dot(b_a, b_w, out_dtype=tl.int32)
    tl.store(c + o_m[:, None] * N + o_n[None, :], acc, mask=(o_m < M)[:, None] & (o_n < N)[None, :])


def packed_matmul(a, b):
    assert a.shape[1] == b.shape[0] * 2, "b packs two 4-bit weights per byte"
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.int32)
    grid = lambda META: (triton.cdiv(M, 16),)
    _packed_matmul_kernel[grid](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=triton.next_power_of_2(N))
    return c
'''


def test_a_packed_operand_is_sized_and_typed_from_the_code(tmp_path):
    """``assert a.shape[1] == b.shape[0] * 2``: b's first dim is K/2 (K kept even); the kernel asserts
    ``K % (2 * BLOCK_K) == 0`` over autotune configs a function returns (BLOCK_K 16 and 32): K a multiple
    of 64; b's values are unpacked with >> and &: uint8 bits; a meets ``b_w``, cast to int8, in tl.dot: int8."""
    h = infer(tmp_path / "packed.py", PACKED)
    assert {t.name: (t.dims, t.dtype, t.values) for t in h.tensors} == {
        "a": (("M", "K"), "int8", "normal"), "b": (("K/2", "N"), "uint8", "bits")}
    assert [d.name for d in h.dims] == ["M", "K", "N"]
    assert {d.name: d.ci for d in h.dims}["K"] == (64, 128)
    assert any(n.startswith("K kept a multiple of 64: _packed_matmul_kernel asserts K % (2 * BLOCK_K) == 0")
               for n in h.notes), h.notes


@pytest.mark.parametrize("mutated", [False, True])
def test_a_packed_operand_runs(mutated, tmp_path, monkeypatch):
    result = _judge(tmp_path, monkeypatch, PACKED, "packed", "packed_matmul", "bfloat16",
                    ("& 15).to(tl.int8) - 8", "& 15).to(tl.int8) - 7") if mutated else None)
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted != mutated, result.reasons


PAST_THE_END = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _gather_rows_kernel(x, y, n_cols, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    b_x = tl.load(x + row * STRIDE + cols, mask=cols < n_cols, other=0.0)
    tl.store(y + row * n_cols + cols, b_x * 2, mask=cols < n_cols)


def gather_rows(x: torch.Tensor, stride: int = 4096):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    _gather_rows_kernel[(n_rows,)](x, y, n_cols, STRIDE=stride, BLOCK=triton.next_power_of_2(n_cols))
    return y
'''


def test_an_access_past_every_tensor_is_named_not_a_crash(tmp_path, monkeypatch):
    """The launcher's default stride (4096) walks rows far past x at interpreter sizes: the interpreter read
    whatever lay there (garbage outputs, or SIGSEGV on a store); the refusal now names the access, its line
    and the nearest tensor below the address."""
    result = _judge(tmp_path, monkeypatch, PAST_THE_END, "rows", "gather_rows", "float32")
    assert not result.accepted
    assert "OutOfBounds" in result.error and "a load at rows.py:10 touches" in result.error, result.error
    assert re.search(r"bytes past the end of '[xy]' \(\[2, 64\] float32, the nearest tensor below it\)", result.error), \
        result.error


TWICE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _double_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m) * 2, mask=m)


def double(x: torch.Tensor):
    n = x.numel()
    y = torch.empty_like(x)
    _double_kernel[(triton.cdiv(n, 64),)](x, y, n, BLOCK=64)
    return y, y, x
'''


def test_a_tensor_returned_twice_keeps_every_position(tmp_path):
    """``return dX, dX, dW`` (Liger's fused add-rms-norm backward: dR is dX): three values come back, the
    repeat compared once, so the outputs name three positions."""
    h = infer(tmp_path / "double.py", TWICE)
    assert h.outputs == ("y", "_y_1", "_x")
