"""Zero-config harnesses for kernels written the way Mamba-style state updates and serving stacks write
them (mamba-ssm's and vLLM's ``selective_state_update``, lmdeploy's reductions), on kernels of our own:

- program ids named by keyword (``tl.program_id(axis=2)``), each its own grid axis;
- shapes asserted as tuples (``assert A.shape == (nheads, dim, dstate)``) and ``_`` in an unpacking,
  which names no dim: the kernel's addressing sizes that axis (here the batch the grid runs over);
- an Optional bias whose strides are spread as ``*(b.stride(0), b.stride(1)) if b is not None else 0``
  (the positions after it bound right, and the bias required: ``*0`` fails before any kernel runs);
- a pointer copied before it is moved (``dst = state_ptr + ...`` then ``state_ptr += ...``);
- a local flag deciding a launch argument (``x.stride(0) if not is_packed else 0``);
- ``exp(A * dt)``: a rate times a step, drawn as a decay (A < 0 < dt), so that the state stays bounded
  and every term of the update shows in the output;
- ``torch.cuda.device(x.device.index)`` around the launch, which the CPU interpreter runs;
- ``*x.stride()`` of a tensor the launcher reshapes (``x = x.reshape(-1, hc, dim)``): a 3-D layout.
Each is judged through the gate on the CPU: an identical copy accepted, semantic mutants rejected.
"""
from __future__ import annotations

import pytest

from skel.harness.infer import infer
from skel.harness.state import HarnessError
from test_harness_run import _judge

STATE_UPDATE = '''
import torch
import triton
import triton.language as tl


@triton.heuristics({"HAS_BIAS": lambda args: args["bias_ptr"] is not None})
@triton.heuristics({"IS_PACKED": lambda args: args["offsets_ptr"] is not None})
@triton.jit
def _state_step_kernel(state_ptr, x_ptr, dt_ptr, bias_ptr, a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, offsets_ptr,
                       dim, dstate, group_ratio,
                       s_sb, s_sh, s_sd, s_sn,
                       s_xb, s_xh, s_xd,
                       s_tb, s_th, s_td,
                       s_bh, s_bd,
                       s_ah, s_ad, s_an,
                       s_Bb, s_Bg, s_Bn,
                       s_dh, s_dd,
                       s_ob, s_oh, s_od,
                       HAS_BIAS: tl.constexpr, IS_PACKED: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_b = tl.program_id(axis=1)
    pid_h = tl.program_id(axis=2)
    if IS_PACKED:
        row = tl.load(offsets_ptr + pid_b)
    else:
        row = pid_b
    dst_ptr = state_ptr + pid_b * s_sb + pid_h * s_sh
    state_ptr += pid_b * s_sb + pid_h * s_sh
    x_ptr += row * s_xb + pid_h * s_xh
    dt_ptr += row * s_tb + pid_h * s_th
    a_ptr += pid_h * s_ah
    b_ptr += row * s_Bb + (pid_h // group_ratio) * s_Bg
    c_ptr += row * s_Bb + (pid_h // group_ratio) * s_Bg
    out_ptr += row * s_ob + pid_h * s_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < dim) & (offs_n[None, :] < dstate)
    state = tl.load(state_ptr + offs_m[:, None] * s_sd + offs_n[None, :] * s_sn, mask=mask, other=0.0)
    x = tl.load(x_ptr + offs_m * s_xd, mask=offs_m < dim, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + offs_m * s_td, mask=offs_m < dim, other=0.0).to(tl.float32)
    if HAS_BIAS:
        dt += tl.load(bias_ptr + pid_h * s_bh + offs_m * s_bd, mask=offs_m < dim, other=0.0).to(tl.float32)
    A = tl.load(a_ptr + offs_m[:, None] * s_ad + offs_n[None, :] * s_an, mask=mask, other=0.0).to(tl.float32)
    dA = tl.exp(A * dt[:, None])
    B = tl.load(b_ptr + offs_n * s_Bn, mask=offs_n < dstate, other=0.0).to(tl.float32)
    C = tl.load(c_ptr + offs_n * s_Bn, mask=offs_n < dstate, other=0.0).to(tl.float32)
    D = tl.load(d_ptr + pid_h * s_dh + offs_m * s_dd, mask=offs_m < dim, other=0.0).to(tl.float32)
    state = state * dA + B[None, :] * dt[:, None] * x[:, None]
    tl.store(dst_ptr + offs_m[:, None] * s_sd + offs_n[None, :] * s_sn, state, mask=mask)
    out = tl.sum(state * C[None, :], axis=1)
    out += x * D
    tl.store(out_ptr + offs_m * s_od, out, mask=offs_m < dim)


def state_step(state, x, dt, A, B, C, D, dt_bias=None, offsets=None):
    """state [batch, nheads, dim, dstate] updated in place; x, dt [batch, nheads, dim]; A [nheads, dim, dstate];
    B, C [batch, ngroups, dstate]; D, dt_bias [nheads, dim]. Returns out [batch, nheads, dim]."""
    _, nheads, dim, dstate = state.shape
    batch = x.shape[0]
    assert x.shape == (batch, nheads, dim)
    assert dt.shape == x.shape
    assert A.shape == (nheads, dim, dstate)
    ngroups = B.shape[1]
    assert nheads % ngroups == 0
    assert B.shape == (batch, ngroups, dstate)
    assert C.shape == B.shape
    assert D.shape == (nheads, dim)
    is_packed = offsets is not None
    out = torch.empty_like(x)
    BLOCK_M = 16
    grid = (triton.cdiv(dim, BLOCK_M), batch, nheads)
    with torch.cuda.device(x.device.index):
        _state_step_kernel[grid](
            state, x, dt, dt_bias, A, B, C, D, out, offsets,
            dim, dstate, nheads // ngroups,
            *state.stride(),
            x.stride(0) if not is_packed else 0, x.stride(1), x.stride(2),
            dt.stride(0), dt.stride(1), dt.stride(2),
            *(dt_bias.stride(0), dt_bias.stride(1)) if dt_bias is not None else 0,
            A.stride(0), A.stride(1), A.stride(2),
            B.stride(0), B.stride(1), B.stride(2),
            D.stride(0), D.stride(1),
            out.stride(0), out.stride(1), out.stride(2),
            BLOCK_M=BLOCK_M, BLOCK_N=triton.next_power_of_2(dstate),
        )
    return out
'''

REDUCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _mix_kernel(x_ptr, w_ptr, out_ptr, s_xn, s_xh, s_xd, s_wn, s_wh, s_on, s_od,
                dim: tl.constexpr, hc: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    m = offs < dim
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for h in range(hc):
        w = tl.load(w_ptr + row * s_wn + h * s_wh).to(tl.float32)
        acc += w * tl.load(x_ptr + row * s_xn + h * s_xh + offs * s_xd, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * s_on + offs * s_od, acc, mask=m)


def mix_streams(x: torch.Tensor, w: torch.Tensor, hc: int) -> torch.Tensor:
    """x [..., hc, dim], w [..., hc] -> [..., dim]: the streams mixed by their weights."""
    dim = x.size(-1)
    out = torch.empty((*x.shape[:-2], dim), device=x.device, dtype=x.dtype)
    x = x.reshape(-1, hc, dim)
    w = w.reshape(-1, hc)
    out2 = out.reshape(-1, dim)
    rows = x.size(0)
    _mix_kernel[(rows, triton.cdiv(dim, 32))](x, w, out2, *x.stride(), *w.stride(), *out2.stride(), dim, hc, 32)
    return out
'''

PACKED_DECODE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _packed_step_kernel(qkv, a, b, A_log, dt_bias, o, pool, slots, scale, s_qkv, s_ab, s_pool,
                        H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                        BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_v[:, None] & mask_k[None, :]
    slot = tl.load(slots + i_n).to(tl.int64)
    p_o = o + (i_n * HV + i_hv) * V + o_v
    if slot < 0:
        tl.store(p_o, tl.zeros([BV], dtype=tl.float32).to(p_o.dtype.element_ty), mask=mask_v)
        return
    p_h = pool + slot * s_pool + i_hv * V * K + o_v[:, None] * K + o_k[None, :]
    b_h = tl.load(p_h, mask=mask_h, other=0).to(tl.float32)
    row = qkv + i_n * s_qkv
    b_q = tl.load(row + i_h * K + o_k, mask=mask_k, other=0).to(tl.float32) * scale
    b_k = tl.load(row + H * K + i_h * K + o_k, mask=mask_k, other=0).to(tl.float32)
    b_v = tl.load(row + 2 * H * K + i_hv * V + o_v, mask=mask_v, other=0).to(tl.float32)
    x = tl.load(a + i_n * s_ab + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv).to(tl.float32)
    g = -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
    beta = tl.sigmoid(tl.load(b + i_n * s_ab + i_hv).to(tl.float32))
    b_h *= tl.exp(g)
    b_v -= tl.sum(b_h * b_k[None, :], 1)
    b_v *= beta
    b_h += b_v[:, None] * b_k[None, :]
    tl.store(p_o, tl.sum(b_h * b_q[None, :], 1).to(p_o.dtype.element_ty), mask=mask_v)
    tl.store(p_h, b_h, mask=mask_h)


def packed_decode_step(qkv, a, b, A_log, dt_bias, scale, pool, out, slots):
    \"\"\"One decode step of a gated delta rule, serving-style: q, k and v packed in one row of ``qkv``
    [B, 2*H*K + HV*V], the state kept in a pool [POOL, HV, V, K] at the rows ``slots`` [B] name (-1: a
    padded request, skipped), ``out`` [B, HV, V] preallocated.\"\"\"
    if qkv.ndim != 2:
        raise ValueError("qkv must be 2-D")
    B = qkv.shape[0]
    HV, V, K = pool.shape[-3:]
    if a.shape != (B, HV) or b.shape != (B, HV):
        raise ValueError("a and b must be [B, HV]")
    width = qkv.shape[1]
    qk = width - HV * V
    if qk <= 0 or qk % 2 != 0:
        raise ValueError("bad packed width")
    q_width = qk // 2
    if q_width % K != 0:
        raise ValueError("q width must be a multiple of K")
    H = q_width // K
    if HV % H != 0:
        raise ValueError("HV must be a multiple of H")
    BV = min(triton.next_power_of_2(V), 32)
    grid = (triton.cdiv(V, BV), B * HV)
    _packed_step_kernel[grid](qkv, a, b, A_log, dt_bias, out, pool, slots, scale, qkv.stride(0), a.stride(0),
                              pool.stride(0), H=H, HV=HV, K=K, V=V, BK=triton.next_power_of_2(K), BV=BV)
    return out, pool
'''


def test_the_state_update_harness_reads_the_code(tmp_path):
    h = infer(tmp_path / "ssu.py", STATE_UPDATE)
    shapes = {t.name: t.dims for t in h.tensors}
    assert shapes == {"state": ("batch", "nheads", "dim", "dstate"), "x": ("batch", "nheads", "dim"),
                      "dt": ("batch", "nheads", "dim"), "A": ("nheads", "dim", "dstate"),
                      "B": ("batch", "ngroups", "dstate"), "C": ("batch", "ngroups", "dstate"),
                      "D": ("nheads", "dim"), "dt_bias": ("nheads", "dim")}, shapes
    regimes = {t.name: t.values for t in h.tensors}
    assert regimes["A"] == "log-decay" and regimes["dt"] == "positive" and regimes["dt_bias"] == "positive"
    assert "offsets" not in shapes  # Optional, off on the default path
    assert any("dt_bias: required" in n for n in h.notes), h.notes
    assert next(d for d in h.dims if d.name == "batch").role == "batch"
    assert h.inplace == ("state",) and h.outputs == ("out",)


def test_a_packed_width_is_computed_from_the_counts_it_splits_into(tmp_path):
    """``H = ((width - HV*V) // 2) // K`` passed to the kernel: H is the dim, the width 2*H*K + HV*V (a width
    drawn on its own fails the launcher's own checks); the pool and its padded slots are read as such."""
    h = infer(tmp_path / "packed.py", PACKED_DECODE)
    shapes = {t.name: t.dims for t in h.tensors}
    assert shapes["qkv"] == ("B", "width") and shapes["pool"] == ("POOL", "HV", "V", "K"), shapes
    width = next(s for s in h.sizes if s.name == "width")
    assert eval(width.code, {"H": 2, "K": 32, "HV": 4, "V": 16}) == 2 * 2 * 32 + 4 * 16, width.code
    assert "H" in {d.name for d in h.dims} and next(d for d in h.dims if d.name == "H").role == "heads"
    assert next(t for t in h.tensors if t.name == "slots").values == "slots-padded"


def test_a_reshaped_tensor_spread_by_its_strides(tmp_path):
    h = infer(tmp_path / "mix.py", REDUCE)
    shapes = {t.name: t.dims for t in h.tensors}
    assert len(shapes["x"]) == 3 and shapes["x"][1:] == ("hc", "dim"), shapes
    assert shapes["w"] == (shapes["x"][0], "hc"), shapes


GATE_CASES = {  # case: (source, launcher, dtype, mutant (old, new))
    "sign": (STATE_UPDATE, "state_step", "bfloat16", ("out += x * D", "out -= x * D")),
    "dropped term": (STATE_UPDATE, "state_step", "bfloat16",
                     ("state = state * dA + B[None, :] * dt[:, None] * x[:, None]", "state = state * dA")),
    "off-by-one mask": (STATE_UPDATE, "state_step", "bfloat16",
                        ("tl.store(out_ptr + offs_m * s_od, out, mask=offs_m < dim)",
                         "tl.store(out_ptr + offs_m * s_od, out, mask=offs_m < dim - 1)")),
    "wrong index": (STATE_UPDATE, "state_step", "bfloat16",
                    ("b_ptr += row * s_Bb + (pid_h // group_ratio)", "b_ptr += row * s_Bb + (pid_h % group_ratio)")),
    "reduce": (REDUCE, "mix_streams", "float32", ("acc += w *", "acc += 0.5 * w *")),
    "packed": (PACKED_DECODE, "packed_decode_step", "bfloat16", ("b_v *= beta", "b_v *= 1.0 - beta")),
    "packed wrong slice": (PACKED_DECODE, "packed_decode_step", "bfloat16",
                           ("row + H * K + i_h * K + o_k", "row + i_h * K + o_k")),
}


@pytest.mark.parametrize("case", list(GATE_CASES))
def test_zero_config_gate_on_a_state_update(case, tmp_path, monkeypatch):
    source, entry, dtype, mutation = GATE_CASES[case]
    for sub in ("copy", "mutant"):
        (tmp_path / sub).mkdir()
    copy = _judge(tmp_path / "copy", monkeypatch, source, entry, entry, dtype) \
        if case in ("sign", "reduce", "packed") else None
    if copy is not None:
        assert copy.error is None and copy.accepted, (copy.error, copy.reasons)
    mutant = _judge(tmp_path / "mutant", monkeypatch, source, entry, entry, dtype, mutation)
    assert mutant.error is None, mutant.error
    assert not mutant.accepted, mutant.reasons


ROTARY_BOUNDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rot_kernel(x_ptr, ang_ptr, out_ptr, hd, rot, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < rot // 2
    a = tl.load(ang_ptr + row * rot + 2 * offs, mask=m, other=0.0)
    x = tl.load(x_ptr + row * hd + offs, mask=offs < hd, other=0.0)
    tl.store(out_ptr + row * hd + offs, x * tl.cos(a), mask=offs < hd)


def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    batch, hd = x.shape
    rot = angles.shape[-1]
    assert angles.shape == (batch, rot)
    assert rot <= hd // 2 and rot % 2 == 0, "rot must be even and at most half the head"
    out = torch.empty_like(x)
    _rot_kernel[(batch,)](x, angles, out, hd, rot, BLOCK=triton.next_power_of_2(hd))
    return out
'''


def test_sizes_keep_the_launchers_bounds_between_dims(tmp_path):
    """``assert rot <= hd // 2 and rot % 2 == 0``: every shape the harness draws satisfies it (a drawn rot of
    the head's size would fail the original's own assert)."""
    h = infer(tmp_path / "rot.py", ROTARY_BOUNDS)
    dims = {d.name: d for d in h.dims}
    for i in range(2):
        assert dims["rot"].ci[i] <= dims["hd"].ci[i] // 2 and dims["rot"].ci[i] % 2 == 0, (dims["rot"], dims["hd"])
    assert dims["rot"].decode <= dims["hd"].decode // 2 and dims["rot"].decode % 2 == 0


UNSLOTTED_POOL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _gather_kernel(x_ptr, idx_ptr, out_ptr, stride_x, D: tl.constexpr):
    row = tl.load(idx_ptr + tl.program_id(0))
    offs = tl.arange(0, D)
    tl.store(out_ptr + tl.program_id(0) * D + offs, tl.load(x_ptr + row * stride_x + offs))


def gather_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    D = x.shape[-1]
    idx = torch.randperm(n, device=x.device)
    out = torch.empty((n, D), device=x.device, dtype=x.dtype)
    _gather_kernel[(n,)](x, idx, out, x.stride(0), D=D)
    return out
'''


def test_a_pool_with_no_slot_tensor_to_draw_is_refused_saying_why(tmp_path):
    """x is indexed by values loaded from a tensor the launcher makes itself: no slot tensor to draw, so the
    pool's size is unknown: refused with the reason, never a spec that fails on an undefined POOL."""
    with pytest.raises(HarnessError, match="x \\(_gather_kernel\\) is indexed by values the kernel loads from no tensor"):
        infer(tmp_path / "gather.py", UNSLOTTED_POOL)


GATE_PRODUCT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _gate_kernel(g, A, y, T, H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    o_d = tl.arange(0, BD)
    m = o_d < D
    b_g = tl.load(g + i_t * H * D + i_h * D + o_d, mask=m, other=0.0).to(tl.float32)
    b_a = tl.load(A + i_h).to(tl.float32)
    tl.store(y + i_t * H * D + i_h * D + o_d, -tl.exp(b_a) * tl.log(1.0 + tl.exp(b_g)), mask=m)


def kda_gate(g: torch.Tensor, A: torch.Tensor, head_dim: int) -> torch.Tensor:
    """g [..., H * head_dim] -> the log-decay gate [..., H, head_dim]."""
    lead = g.shape[:-1]
    g = g.view(-1, g.shape[-1])
    T = g.shape[0]
    HD = g.shape[1]
    H = A.numel()
    assert H * head_dim == HD
    y = torch.empty_like(g, dtype=torch.float32)
    _gate_kernel[(T, H)](g, A, y, T, H, head_dim, BD=triton.next_power_of_2(head_dim))
    return y.view(*lead, H, head_dim)
'''


def test_a_width_asserted_as_a_product_is_computed_from_its_factors(tmp_path, monkeypatch):
    """``assert H * head_dim == HD`` of a flattened row: HD is H * head_dim at every drawn shape, head_dim (a
    required int) a dim passed as itself; the gate runs the original (its assert holds) and tells a mutant."""
    h = infer(tmp_path / "gate.py", GATE_PRODUCT)
    hd = next(s for s in h.sizes if s.name == "HD")
    assert hd.code.replace(" ", "") == "(H*head_dim)", hd.code
    assert {v.name: v.code for v in h.values}["head_dim"] == "head_dim"
    for sub in ("copy", "mutant"):
        (tmp_path / sub).mkdir()
    copy = _judge(tmp_path / "copy", monkeypatch, GATE_PRODUCT, "kda_gate", "kda_gate", "float32")
    assert copy.error is None and copy.accepted, (copy.error, copy.reasons)
    mutant = _judge(tmp_path / "mutant", monkeypatch, GATE_PRODUCT, "kda_gate", "kda_gate", "float32",
                    ("tl.log(1.0 + tl.exp(b_g))", "tl.log(1.0 + tl.exp(-b_g))"))
    assert mutant.error is None and not mutant.accepted, mutant.reasons
