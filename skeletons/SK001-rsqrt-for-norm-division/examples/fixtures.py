"""Detector fixtures for SK001 (rsqrt-for-norm-division). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def l2norm_rows(x, y, D: tl.constexpr, BD: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    # skel: SK001 opportunity
    b_y = b_x / tl.sqrt(tl.sum(b_x * b_x) + 1e-6)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def rms_rows_through_variables(x, y, D: tl.constexpr, BD: tl.constexpr, eps):
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    b_var = tl.sum(b_x * b_x, axis=0) / D
    b_std = tl.sqrt(b_var + eps)
    # skel: SK001 opportunity
    b_y = b_x / b_std
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def reciprocal_norm(x, y, D: tl.constexpr, BD: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    # skel: SK001 opportunity
    b_rstd = 1 / tl.sqrt(tl.sum(b_x * b_x) + 1e-5)
    tl.store(y + i * D + o, b_x * b_rstd, mask=o < D)


@triton.jit
def already_rsqrt(x, y, D: tl.constexpr, BD: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    # skel: SK001 instance
    b_y = b_x * tl.rsqrt(tl.sum(b_x * b_x) + 1e-6)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def sqrt_of_scalar_parameter(x, y, scale, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: the square root of a scalar parameter is not a reduction
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    # skel-ok: SK001
    b_y = b_x / tl.sqrt(scale)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def sqrt_of_loaded_value(x, v, y, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: elementwise division by the square root of a loaded tensor
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    b_v = tl.load(v + i * D + o, mask=o < D, other=1).to(tl.float32)
    # skel-ok: SK001
    b_y = b_x / tl.sqrt(b_v + 1e-8)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def norm_in_half_precision(x, y, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: the norm is computed in bf16, where rsqrt's error is not hidden
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.bfloat16)
    # skel-ok: SK001
    b_y = b_x / tl.sqrt(tl.sum(b_x * b_x) + 1e-6)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def division_by_a_sum(x, y, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: softmax-style division by a sum, no square root
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.exp(tl.load(x + i * D + o, mask=o < D, other=float("-inf")).to(tl.float32))
    # skel-ok: SK001
    b_y = b_x / tl.sum(b_x)
    tl.store(y + i * D + o, b_y, mask=o < D)


@triton.jit
def rsqrt_of_parameter(x, y, eps, D: tl.constexpr, BD: tl.constexpr):
    # near-miss: rsqrt of a scalar is not the norm skeleton applied
    i = tl.program_id(0)
    o = tl.arange(0, BD)
    b_x = tl.load(x + i * D + o, mask=o < D, other=0).to(tl.float32)
    # skel-ok: SK001
    b_y = b_x * tl.rsqrt(eps)
    tl.store(y + i * D + o, b_y, mask=o < D)
