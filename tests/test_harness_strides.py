"""Layouts read off strides the launcher passes as int arguments (``x.stride(0), x.stride(1)`` bound to
``stride_xb, stride_xh``), as serving stacks write their kernels: the launcher never unpacks the tensor,
the kernel moves along each axis through its stride by an index of known extent.

- combine: an axis that only a later access moves along (``lse + b*stride_lb + h*stride_lh`` first, then
  ``+ i*stride_ln`` in a loop over N), its stride-0 term absent from the first address: [N, B, H].
- pool: a buffer indexed by a slot loaded from another tensor times its slot stride, plus a head stride
  and a unit-stride column: [POOL, H, D], the slots distinct indices into it.
- unpacked: ``s_b, s_d, s_t = state.stride()`` (each name that axis's stride), the last axis walked by a
  loop to a local the launcher sets to a literal: [batch, dim, 4].
- graph-safe ints: ``hidden = int(x.shape[1])`` names a dim as ``x.shape[1]`` does.
- grid counts: ``grid = (bs, num_heads, s_q)`` of required int arguments, each axis of ``scores`` moved
  along by one program id alone: those arguments are its dims, passed as the dims' values (the launcher
  asserts ``scores.shape[1] == num_heads``).
- fixed elements: ``w + d*stride_w + 1``, ``+ 2`` (a width-3 filter) and ``state + base + stride_k`` (a
  bare stride added to the pointer, which no longer hides the pointer): [dim, 3] and [POOL, dim, 2].
- int bounds: ``offs < hidden`` and ``grid = (rows,)`` with ``rows``, ``hidden`` required int arguments
  and no tensor unpacked at all: [rows, hidden], the ints passed as those dims.
- several parts: ``y + half + offs`` beside ``y + offs`` (a gate and an up half) and ``f + 2*offs + j``
  (interleaved pairs): the axis is not one dim; refused, saying so, not taken as ``half``.
- unknown extent: an axis moved along by an index whose extent the code does not show: refused, and the
  refusal names the axis and the index.
Kernels of our own; the gate judges the first two with the inferred harness.
"""
from __future__ import annotations

import pytest

from skel.harness.infer import infer
from skel.harness.state import HarnessError
from test_harness_run import _judge

COMBINE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _combine_kernel(parts_ptr, lse_ptr, out_ptr,
                    stride_pn, stride_pb, stride_ph, stride_pd,
                    stride_ln, stride_lb, stride_lh,
                    stride_ob, stride_oh,
                    N: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    base = b * stride_lb + h * stride_lh
    m = tl.load(lse_ptr + base).to(tl.float32)
    for i in tl.static_range(1, N):
        m = tl.maximum(m, tl.load(lse_ptr + base + i * stride_ln).to(tl.float32))
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    s = 0.0
    for i in tl.static_range(N):
        w = tl.exp(tl.load(lse_ptr + base + i * stride_ln).to(tl.float32) - m)
        p = tl.load(parts_ptr + i * stride_pn + b * stride_pb + h * stride_ph + offs_d * stride_pd,
                    mask=mask_d, other=0.0)
        acc += p.to(tl.float32) * w
        s += w
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, (acc / s).to(out_ptr.dtype.element_ty), mask=mask_d)


def combine(parts: torch.Tensor, lse: torch.Tensor):
    N, B, H, D = parts.shape
    out = torch.empty((B, H, D), device=parts.device, dtype=parts.dtype)
    _combine_kernel[(B, H)](
        parts, lse, out,
        parts.stride(0), parts.stride(1), parts.stride(2), parts.stride(3),
        lse.stride(0), lse.stride(1), lse.stride(2),
        out.stride(0), out.stride(1),
        N=N, D=D, BLOCK_D=triton.next_power_of_2(D),
    )
    return out
'''

POOL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _gather_kv_kernel(kv_ptr, loc_ptr, out_ptr, stride_kv_s, stride_kv_h, stride_o_t, stride_o_h,
                      D: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    slot = tl.load(loc_ptr + t).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    v = tl.load(kv_ptr + slot * stride_kv_s + h * stride_kv_h + offs, mask=m, other=0.0)
    tl.store(out_ptr + t * stride_o_t + h * stride_o_h + offs, v * 2.0, mask=m)


def gather_kv(kv_buffer: torch.Tensor, loc: torch.Tensor, out: torch.Tensor):
    T, H, D = out.shape
    kv_stride_s = kv_buffer.stride(0)
    _gather_kv_kernel[(T, H)](
        kv_buffer, loc, out,
        kv_stride_s, kv_buffer.stride(1), out.stride(0), out.stride(1),
        D=D, BLOCK_D=triton.next_power_of_2(D),
    )
    return out
'''

UNPACKED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _state_update_kernel(state_ptr, x_ptr, stride_sb, stride_sd, stride_st, dim, state_len,
                         BLOCK: tl.constexpr):
    b = tl.program_id(0)
    d = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = d < dim
    for t in range(state_len):
        v = tl.load(state_ptr + b * stride_sb + d * stride_sd + t * stride_st, mask=m, other=0.0)
        v = v * 0.5 + tl.load(x_ptr + b * dim + d, mask=m, other=0.0)
        tl.store(state_ptr + b * stride_sb + d * stride_sd + t * stride_st, v, mask=m)


def state_update(x: torch.Tensor, state: torch.Tensor):
    batch, dim = x.shape
    state_len = 4
    stride_sb, stride_sd, stride_st = state.stride()
    _state_update_kernel[(batch, triton.cdiv(dim, 64))](state, x, stride_sb, stride_sd, stride_st, dim, state_len,
                                                        BLOCK=64)
    return state
'''

INT_DIMS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row_scale_kernel(out_ptr, x_ptr, w_ptr, stride_x, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < hidden
    x = tl.load(x_ptr + row * stride_x + offs, mask=m, other=0.0)
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    tl.store(out_ptr + row * hidden + offs, x * w, mask=m)


def row_scale(x: torch.Tensor, w: torch.Tensor):
    rows = int(x.shape[0])
    hidden = int(x.shape[1])
    out = torch.empty((rows, hidden), device=x.device, dtype=x.dtype)
    _row_scale_kernel[(rows,)](out, x, w, x.stride(0), hidden, BLOCK=triton.next_power_of_2(hidden))
    return out
'''

GRID_COUNTS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _window_mask_kernel(scores_ptr, scale_ptr, stride_sb, stride_sh, stride_sq, window, width,
                        BLOCK: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    q = tl.program_id(2)
    offs = tl.arange(0, BLOCK)
    m = offs < width
    s = tl.load(scale_ptr + b)
    p = scores_ptr + b * stride_sb + h * stride_sh + q * stride_sq + offs
    x = tl.load(p, mask=m, other=0.0)
    tl.store(p, tl.where(offs < window, x * s + q, x), mask=m)


def window_mask(scores: torch.Tensor, scale: torch.Tensor, bs: int, num_heads: int, s_q: int, window: int = 8):
    assert scores.shape[0] == bs and scores.shape[1] == num_heads and scores.shape[2] == s_q
    width = scores.shape[3]
    _window_mask_kernel[(bs, num_heads, s_q)](
        scores, scale, scores.stride(0), scores.stride(1), scores.stride(2), window, width,
        BLOCK=triton.next_power_of_2(width),
    )
    return scores
'''

FIXED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _short_conv_kernel(x_ptr, w_ptr, state_ptr, slots_ptr, out_ptr, stride_x, stride_w,
                       stride_slot, stride_d, stride_k, dim, BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m = d < dim
    slot = tl.load(slots_ptr + t)
    base = slot * stride_slot + d * stride_d
    s0 = tl.load(state_ptr + base, mask=m, other=0.0)
    s1 = tl.load(state_ptr + base + stride_k, mask=m, other=0.0)
    w0 = tl.load(w_ptr + d * stride_w, mask=m, other=0.0)
    w1 = tl.load(w_ptr + d * stride_w + 1, mask=m, other=0.0)
    w2 = tl.load(w_ptr + d * stride_w + 2, mask=m, other=0.0)
    x = tl.load(x_ptr + t * stride_x + d, mask=m, other=0.0)
    tl.store(out_ptr + t * stride_x + d, s0 * w0 + s1 * w1 + x * w2, mask=m)
    tl.store(state_ptr + base, s1, mask=m)
    tl.store(state_ptr + base + stride_k, x, mask=m)


def short_conv(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor, slots: torch.Tensor):
    tokens, dim = x.shape
    out = torch.empty_like(x)
    _short_conv_kernel[(tokens, triton.cdiv(dim, 64))](
        x, weight, state, slots, out, x.stride(0), weight.stride(0),
        state.stride(0), state.stride(1), state.stride(2), dim, BLOCK_D=64,
    )
    return out
'''

INT_BOUNDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row_gate_kernel(out_ptr, x_ptr, g_ptr, stride_x, stride_o, hidden, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < hidden
    x = tl.load(x_ptr + row * stride_x + offs, mask=m, other=0.0)
    g = tl.load(g_ptr + row)
    tl.store(out_ptr + row * stride_o + offs, x * tl.sigmoid(g), mask=m)


def row_gate(out: torch.Tensor, x: torch.Tensor, g: torch.Tensor, rows: int, hidden: int):
    _row_gate_kernel[(rows,)](out, x, g, x.stride(0), out.stride(0), hidden, BLOCK=triton.next_power_of_2(hidden))
    return out
'''

SEVERAL_PARTS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _halves_kernel(y_ptr, f_ptr, out_ptr, stride_y, stride_f, half, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < half
    a = tl.load(y_ptr + row * stride_y + offs, mask=m, other=0.0)
    b = tl.load(y_ptr + row * stride_y + half + offs, mask=m, other=0.0)
    f = tl.load(f_ptr + row * stride_f + offs[:, None] * 2 + tl.arange(0, 2)[None, :], mask=m[:, None], other=0.0)
    tl.store(out_ptr + row * half + offs, a * b + tl.sum(f, 1), mask=m)


def halves(y: torch.Tensor, f: torch.Tensor, out: torch.Tensor):
    n_rows, half = out.shape
    _halves_kernel[(n_rows,)](y, f, out, y.stride(0), f.stride(0), half, BLOCK=triton.next_power_of_2(half))
    return out
'''

UNKNOWN = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _tile_kernel(q_ptr, o_ptr, stride_qb, stride_qh, tiles_per_batch, D: tl.constexpr):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    offs = tl.arange(0, D)
    x = tl.load(q_ptr + (tile // tiles_per_batch) * stride_qb + h * stride_qh + offs)
    tl.store(o_ptr + tile, tl.sum(x))


def tile_sum(q: torch.Tensor, o: torch.Tensor, heads: int, tiles_per_batch: int, D: int = 64):
    _tile_kernel[(o.shape[0], heads)](q, o, q.stride(0), q.stride(1), tiles_per_batch, D=D)
    return o
'''


def _shapes(h):
    return {t.name: t.dims for t in h.tensors}


def _infer(tmp_path, source, name):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return infer(path, source)


def test_an_axis_only_a_later_access_moves_along(tmp_path):
    h = _infer(tmp_path, COMBINE, "combine")
    assert _shapes(h) == {"parts": ("N", "B", "H", "D"), "lse": ("N", "B", "H")}


def test_a_pool_indexed_by_slots_through_its_strides(tmp_path):
    h = _infer(tmp_path, POOL, "gather_kv")
    assert _shapes(h)["kv_buffer"] == ("POOL", "H", "D")
    assert next(t for t in h.tensors if t.name == "loc").values.startswith("slots")


def test_strides_unpacked_from_stride_and_a_literal_loop(tmp_path):
    h = _infer(tmp_path, UNPACKED, "state_update")
    assert _shapes(h) == {"x": ("batch", "dim"), "state": ("batch", "dim", "4")}


def test_dims_read_through_int(tmp_path):
    h = _infer(tmp_path, INT_DIMS, "row_scale")
    assert _shapes(h) == {"x": ("rows", "hidden"), "w": ("hidden",)}


def test_program_ids_over_int_arguments_are_those_dims(tmp_path):
    h = _infer(tmp_path, GRID_COUNTS, "window_mask")
    assert _shapes(h)["scores"] == ("bs", "num_heads", "s_q", "width")
    assert {v.name: v.code for v in h.values}["num_heads"] == "num_heads"
    assert next(d for d in h.dims if d.name == "num_heads").role != "tile"


def test_fixed_elements_along_an_axis_size_it(tmp_path):
    h = _infer(tmp_path, FIXED, "short_conv")
    assert _shapes(h)["weight"] == ("dim", "3") and _shapes(h)["state"] == ("POOL", "dim", "2")


def test_a_mask_bound_by_an_int_argument_is_that_dim(tmp_path):
    h = _infer(tmp_path, INT_BOUNDS, "row_gate")
    assert _shapes(h) == {"out": ("rows", "hidden"), "x": ("rows", "hidden"), "g": ("rows",)}
    assert {v.name: v.code for v in h.values}["hidden"] == "hidden"


@pytest.mark.parametrize("drop", ["y", "f"])
def test_an_axis_of_several_parts_is_refused_saying_so(drop, tmp_path):
    text = SEVERAL_PARTS
    if drop == "y":  # f alone: interleaved pairs
        text = text.replace("y_ptr + row * stride_y + half + offs", "y_ptr + row * stride_y + offs")
    with pytest.raises(HarnessError) as exc:
        _infer(tmp_path, text, "halves")
    assert "several parts" in str(exc.value) or "interleaved parts" in str(exc.value)
    assert ("'y'" if drop == "f" else "'f'") in str(exc.value)


def test_an_axis_of_unknown_extent_is_refused_naming_it(tmp_path):
    with pytest.raises(HarnessError) as exc:
        _infer(tmp_path, UNKNOWN, "tile_sum")
    assert "axis 0 of 'q'" in str(exc.value) and "tiles_per_batch" in str(exc.value)


GATE_CASES = {  # case: (source, launcher, mutant (old, new)): an identical copy accepted, the mutant rejected
    "an axis only a loop moves along": (  # a shard dropped
        COMBINE, "combine", ("    for i in tl.static_range(N):", "    for i in tl.static_range(N - 1):")),
    "a pool through its strides": (  # wrong index
        POOL, "gather_kv", ("h * stride_kv_h + offs, mask=m", "h * stride_kv_h + (offs // 2) * 2, mask=m")),
    "strides unpacked from stride()": (UNPACKED, "state_update", ("    m = d < dim\n", "    m = d < dim - 1\n")),
    "program ids over int arguments": (GRID_COUNTS, "window_mask", ("x * s + q, x)", "x * s + h, x)")),
    "fixed elements": (FIXED, "short_conv", ("w2 = tl.load(w_ptr + d * stride_w + 2,", "w2 = tl.load(w_ptr + d * stride_w + 1,")),
    "int bounds": (INT_BOUNDS, "row_gate", ("x * tl.sigmoid(g)", "x * tl.sigmoid(-g)")),  # sign
}


@pytest.mark.parametrize("case,mutated", [(c, m) for c in GATE_CASES for m in (False, True)])
def test_zero_config_gate_on_strided_layouts(case, mutated, tmp_path, monkeypatch):
    source, entry, mutation = GATE_CASES[case]
    r = _judge(tmp_path, monkeypatch, source, entry, entry, "float32", mutation if mutated else None)
    assert r.error is None, r.error
    assert r.accepted == (not mutated), r.reasons
