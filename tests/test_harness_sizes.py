"""Layouts the launcher does not unpack, read off the kernel: tensors shaped by sizes the launcher computes
(a chunk size, a chunk count), addresses with offsets of unknown extent inside an axis, a pointer moved
by ``p = p + off``, an outermost index the grid does not show, a tensor allocated like another and one no
kernel reads. Kernels of our own, written like the chunk and state kernels of linear-attention
libraries; the gate judges them with the inferred harness."""
from __future__ import annotations

import pytest

from skel.harness.infer import infer
from skel.harness.writer import inferred_spec
from skel.validate.load import load_spec
from skel.validate.spec import Shape
from test_harness_run import _judge

CHUNKED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def chunk_sum_kernel(x, A, h, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    NT = tl.cdiv(T, BT)
    o_t = i_t * BT + tl.arange(0, BT)
    o_c = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    m_t = o_t < T
    b_x = tl.load(x + (i_b * T * H + i_h) * K + o_t[:, None] * (H * K) + o_k[None, :], mask=m_t[:, None], other=0.)
    b_a = tl.load(A + (i_b * T * H + i_h) * BT + o_t[:, None] * (H * BT) + o_c[None, :], mask=m_t[:, None],
                  other=0.)
    b_h = tl.sum(b_x.to(tl.float32) * tl.sum(b_a.to(tl.float32), 1)[:, None], 0)
    tl.store(h + ((i_b * NT + i_t) * H + i_h) * K + o_k, b_h.to(h.dtype.element_ty))


def chunk_sum(x: torch.Tensor, A: torch.Tensor, chunk_size: int = 16):
    B, T, H, K = x.shape
    BT = chunk_size
    NT = triton.cdiv(T, BT)
    h = x.new_empty(B, NT, H, K)
    chunk_sum_kernel[(NT, B * H)](x, A, h, T, H=H, K=K, BT=BT)
    return h
'''

SUB_BLOCKS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def last_row_kernel(g, dA, o, T, H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    i_t, i_i, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    b_g = tl.load(g + (i_b * T + min(i_t * BT + BT, T) - 1) * H + i_h)
    acc = tl.zeros([BC], dtype=tl.float32)
    for j in range(0, BC):
        p = dA + (i_b * T * H + i_h) * BT + (i_t * BT + tl.arange(0, BC)) * (H * BT) + i_i * BC + j
        acc += tl.load(p, mask=(i_t * BT + tl.arange(0, BC)) < T, other=0.).to(tl.float32)
    tl.store(o + ((i_b * T * H + i_h) + (i_t * BT + i_i * BC + tl.arange(0, BC)) * H),
             (acc * b_g).to(o.dtype.element_ty), mask=(i_t * BT + i_i * BC + tl.arange(0, BC)) < T)


def last_row(g: torch.Tensor, dA: torch.Tensor, chunk_size: int = 16):
    B, T, H = g.shape
    BT = chunk_size
    BC = min(8, BT)
    NT = triton.cdiv(T, BT)
    o = torch.empty_like(g)
    last_row_kernel[(NT, triton.cdiv(BT, BC), B * H)](g, dA, o, T, H=H, BT=BT, BC=BC)
    return o
'''

MOVED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gqa_state_kernel(q, dh0, T, HQ: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_nh = tl.program_id(0)
    i_n, i_hq = i_nh // HQ, i_nh % HQ
    q = q + (i_n * T * HQ + i_hq) * K
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    m_k = o_k < K
    m_v = o_v < V
    acc = tl.zeros([K], dtype=tl.float32)
    for t in range(0, T):
        acc += tl.load(q + t * HQ * K + o_k, mask=m_k, other=0.).to(tl.float32)
    b = acc[:, None] * (o_v[None, :] + 1).to(tl.float32)
    tl.store(dh0 + i_nh * K * V + o_k[:, None] * V + o_v[None, :], b, mask=m_k[:, None] & m_v[None, :])


def gqa_state(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, h0: torch.Tensor):
    B, T, H, K, V = *k.shape, v.shape[-1]
    HQ = q.shape[2]
    dh0 = torch.empty_like(h0, dtype=torch.float)
    gqa_state_kernel[(B * HQ,)](q, dh0, T, HQ=HQ, K=K, V=V)
    return dh0
'''

LEADING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, T, H: tl.constexpr, D: tl.constexpr):
    i_nh = tl.program_id(0)
    i_n, i_h = i_nh // H, i_nh % H
    o_d = tl.arange(0, D)
    m = o_d < D
    for t in range(0, T):
        b = tl.load(x + ((i_n * T + t) * H + i_h) * D + o_d, mask=m, other=0.)
        tl.store(x + ((i_n * T + t) * H + i_h) * D + o_d, b * 2, mask=m)


def rows(x: torch.Tensor, k: torch.Tensor):
    B, T, H, D = k.shape
    rows_kernel[(k.shape[0] * H,)](x, T, H=H, D=D)
'''


def _shapes(h):
    return {t.name: t.dims for t in h.tensors}


def test_a_chunk_size_and_count_shape_tensors(tmp_path):
    path = tmp_path / "chunk_sum.py"
    path.write_text(CHUNKED)
    h = infer(path, CHUNKED)
    assert _shapes(h) == {"x": ("B", "T", "H", "K"), "A": ("B", "T", "H", "BT")}
    assert h.written["h"][0] == ("B", "NT", "H", "K")
    assert {s.name: s.code for s in h.sizes} == {"BT": "16", "NT": "(-(-T // 16))"}
    assert "BT" not in {d.name for d in h.dims} and "NT" not in {d.name for d in h.dims}


def test_a_required_chunk_size_is_a_tile_dim(tmp_path):
    text = CHUNKED.replace("chunk_size: int = 16", "chunk_size: int")
    path = tmp_path / "chunk_sum.py"
    path.write_text(text)
    h = infer(path, text)
    assert _shapes(h)["A"] == ("B", "T", "H", "BT")
    assert {s.name: s.code for s in h.sizes}["BT"] == "chunk_size"
    tile = next(d for d in h.dims if d.name == "chunk_size")
    assert tile.role == "tile" and tile.pow2 and tile.ci[0] >= 16
    assert {v.name: v.code for v in h.values}["chunk_size"] == "chunk_size"


def test_the_spec_computes_the_sizes_per_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "chunk_sum.py"
    path.write_text(CHUNKED)
    spec_path, _ = inferred_spec(path, CHUNKED)
    spec = load_spec(spec_path)
    inputs = spec.make_inputs(Shape.of(B=2, T=40, H=3, K=8), "float32", 0, "cpu")
    assert tuple(inputs["A"].shape) == (2, 40, 3, 16)
    # x, A read once and h (B, NT = 3, H, K) written once, float32
    assert spec.bytes(Shape.of(B=2, T=40, H=3, K=8), "float32") == 4 * (2 * 40 * 3 * 8 + 2 * 40 * 3 * 16 + 2 * 3 * 3 * 8)


def test_offsets_inside_an_axis_and_a_clipped_row(tmp_path):
    """``i_i * BC + j`` (a sub-block and a loop inside the last axis of dA) and ``min(i_t * BT + BT, T) - 1``
    (the last row of a chunk) are offsets inside axes: dA is [B, T, H, BT], g [B, T, H]."""
    path = tmp_path / "last_row.py"
    path.write_text(SUB_BLOCKS)
    h = infer(path, SUB_BLOCKS)
    assert _shapes(h) == {"g": ("B", "T", "H"), "dA": ("B", "T", "H", "BT")}


@pytest.mark.parametrize("mutant", [None, "wrong index"])
def test_zero_config_gate_on_a_chunked_kernel(mutant, tmp_path, monkeypatch):
    # the chunk's rows of A read with columns doubled up
    mutation = ("+ o_c[None, :], mask=m_t[:, None]", "+ o_c[None, :] // 2, mask=m_t[:, None]")
    r = _judge(tmp_path, monkeypatch, CHUNKED, "chunk_sum", "chunk_sum", "float32", mutation if mutant else None)
    assert r.error is None, r.error
    assert r.accepted == (mutant is None), r.reasons


def test_a_moved_pointer_a_tensor_allocated_like_another_and_one_no_kernel_reads(tmp_path):
    """``q = q + (i_n * T * HQ + i_hq) * K`` moves q before the loads; ``dh0 = empty_like(h0)`` lays h0 out
    as the kernel indexes dh0; ``v`` is only read for ``v.shape[-1]``."""
    path = tmp_path / "gqa_state.py"
    path.write_text(MOVED)
    h = infer(path, MOVED)
    assert _shapes(h) == {"q": ("B", "T", "HQ", "K"), "k": ("B", "T", "H", "K"), "v": ("V",),
                          "h0": ("B", "HQ", "K", "V")}


def test_an_outermost_index_the_grid_does_not_show(tmp_path):
    path = tmp_path / "rows.py"
    path.write_text(LEADING)
    h = infer(path, LEADING)
    assert _shapes(h) == {"x": ("B", "T", "H", "D"), "k": ("B", "T", "H", "D")}
    assert any("outermost index" in n for n in h.notes)


@pytest.mark.parametrize("mutant", [None, "dropped term"])
def test_zero_config_gate_on_a_moved_pointer(mutant, tmp_path, monkeypatch):
    mutation = ("(o_v[None, :] + 1)", "(o_v[None, :] + 0)")
    r = _judge(tmp_path, monkeypatch, MOVED, "gqa_state", "gqa_state", "float32", mutation if mutant else None)
    assert r.error is None, r.error
    assert r.accepted == (mutant is None), r.reasons


STRIDED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def strided_kernel(x, y, s_b, s_t, s_c, y_b, y_t, T, C, BC: tl.constexpr):
    i_b = tl.program_id(0)
    o_c = tl.arange(0, BC)
    m = o_c < C
    for t in range(0, T):
        v = tl.load(x + i_b * s_b + t * s_t + o_c * s_c, mask=m, other=0.)
        tl.store(y + i_b * y_b + t * y_t + o_c, v * 3, mask=m)


def strided(x: torch.Tensor, k: torch.Tensor):
    B, T, C = k.shape
    y = torch.empty_like(k)
    strided_kernel[(B,)](x, y, x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1), T, C,
                         BC=triton.next_power_of_2(C))
    return y
'''

CHUNK_ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def chunk_rows_kernel(g, o, T, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    i_t, i_i, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    o_v = tl.arange(0, V)
    m_v = o_v < V
    b_g = tl.load(g + (i_b * T * H + i_h) * V + (i_t * BT + i_i * BC) * H * V + o_v, mask=m_v, other=0.)
    tl.store(o + ((i_b * H + i_h) * tl.cdiv(T, BT) + i_t) * V + o_v, b_g, mask=m_v)


def chunk_rows(g: torch.Tensor, k: torch.Tensor, chunk_size: int = 16):
    B, T, H, K = k.shape
    V = g.shape[-1]
    BT = chunk_size
    BC = min(8, BT)
    NT = triton.cdiv(T, BT)
    o = g.new_empty(B, H, NT, V)
    chunk_rows_kernel[(NT, triton.cdiv(BT, BC), B * H)](g, o, T, H=H, V=V, BT=BT, BC=BC)
    return o
'''


def test_own_strides_indexed_by_a_loop(tmp_path):
    """``x + i_b * x.stride(0) + t * x.stride(1) + o_c * x.stride(2)`` with ``t`` a loop over T: [B, T, C]."""
    path = tmp_path / "strided.py"
    path.write_text(STRIDED)
    h = infer(path, STRIDED)
    assert _shapes(h) == {"x": ("B", "T", "C"), "k": ("B", "T", "C")}


def test_an_axis_only_chunk_offsets_index(tmp_path):
    """g's rows are indexed only by ``(i_t * BT + i_i * BC) * H*V`` (a chunk's first row), between the head
    axis and the batch axis: g is [B, T, H, V]."""
    path = tmp_path / "chunk_rows.py"
    path.write_text(CHUNK_ROWS)
    h = infer(path, CHUNK_ROWS)
    assert _shapes(h) == {"g": ("B", "T", "H", "V"), "k": ("B", "T", "H", "K")}


MODES = '''
import torch
import triton
import triton.language as tl

_MODE_A: tl.constexpr = tl.constexpr(0)
_MODE_B: tl.constexpr = tl.constexpr(1)


@triton.jit
def row_scale_kernel(X, Y, W, n_cols, mode: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    m = offs < n_cols
    x = tl.load(X + row * n_cols + offs, mask=m, other=0.)
    w = tl.load(W + offs, mask=m, other=0.)
    if mode == _MODE_A:
        y = x * w
    else:
        y = x * (1.0 + w)
    tl.store(Y + row * n_cols + offs, y, mask=m)


def row_scale_backward(X, W, mode, BLOCK_SIZE, num_warps, in_place):
    n_rows, n_cols = X.shape
    if in_place is True:
        Y = X
    else:
        Y = torch.empty_like(X)
    row_scale_kernel[(n_rows,)](X, Y, W, n_cols, mode=mode, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return Y
'''


def test_required_arguments_read_off_their_use(tmp_path):
    """A mode the kernel compares with module constants (``tl.constexpr(0)``): the first; a tile one block
    of which covers a masked dim: the power of two at or above it; the launch's num_warps: 4; a flag
    tested ``is True``: False."""
    path = tmp_path / "row_scale.py"
    path.write_text(MODES)
    h = infer(path, MODES)
    assert {v.name: v.code for v in h.values} == {
        "mode": "0", "BLOCK_SIZE": "(1 << max(0, n_cols - 1).bit_length())", "num_warps": "4", "in_place": "False"}


@pytest.mark.parametrize("mutant", [None, "first mode"])
def test_zero_config_gate_on_a_mode_switch(mutant, tmp_path, monkeypatch):
    mutation = ("y = x * w\n", "y = x * w * 1.01\n")
    r = _judge(tmp_path, monkeypatch, MODES, "row_scale_backward", "row_scale_backward", "float32", mutation if mutant else None)
    assert r.error is None, r.error
    assert r.accepted == (mutant is None), r.reasons


ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_dot_kernel(o, do, delta, V: tl.constexpr, BV: tl.constexpr):
    i = tl.program_id(0)
    offs = tl.arange(0, BV)
    m = offs < V
    a = tl.load(o + i * V + offs, mask=m, other=0.).to(tl.float32)
    b = tl.load(do + i * V + offs, mask=m, other=0.).to(tl.float32)
    tl.store(delta + i, tl.sum(a * b))


def row_dot(o: torch.Tensor, do: torch.Tensor):
    V = o.shape[-1]
    delta = torch.empty_like(o[..., 0], dtype=torch.float)
    row_dot_kernel[(delta.numel(),)](o, do, delta, V=V, BV=triton.next_power_of_2(V))
    return delta
'''

GATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gate_kernel(g, y, T, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m = (o_t < T)[:, None] & (o_d < D)[None, :]
    p = i_h * D + o_t[:, None] * (H * D) + o_d[None, :]
    b = tl.load(g + p, mask=m, other=0.)
    tl.store(y + p, -tl.exp(b), mask=m)


def gate(g: torch.Tensor):
    H, K = g.shape[-2:]
    T = g.numel() // (H * K)
    y = torch.empty_like(g)
    gate_kernel[(triton.cdiv(T, 16), H)](g, y, T, H=H, D=K, BT=16, BD=triton.next_power_of_2(K))
    return y
'''


def test_rows_of_a_flattened_view_are_a_dim(tmp_path):
    """A grid of ``delta.numel()`` programs, one row of o and do each: the rows are a dim of their own."""
    path = tmp_path / "row_dot.py"
    path.write_text(ROWS)
    h = infer(path, ROWS)
    assert _shapes(h) == {"o": ("N", "V"), "do": ("N", "V")}
    assert next(d for d in h.dims if d.name == "N").role == "batch"


def test_rows_counted_by_a_numel_quotient_of_several_dims(tmp_path):
    """``T = g.numel() // (H * K)`` of g [..., H, K]: g is [T, H, K]."""
    path = tmp_path / "gate.py"
    path.write_text(GATE)
    assert _shapes(infer(path, GATE)) == {"g": ("T", "H", "K")}


@pytest.mark.parametrize("mutant", [None, "wrong operand"])
def test_zero_config_gate_on_rows(mutant, tmp_path, monkeypatch):
    mutation = ("tl.sum(a * b)", "tl.sum(a * a)")
    r = _judge(tmp_path, monkeypatch, ROWS, "row_dot", "row_dot", "float32", mutation if mutant else None)
    assert r.error is None, r.error
    assert r.accepted == (mutant is None), r.reasons
