"""Detector fixtures for SK008 (do-not-specialize-shape-args). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def recurrent_decode(
    x,
    y,
    # skel: SK008 opportunity
    T,
    # skel-ok: SK008
    H,
    D: tl.constexpr,
):
    i_n, i_h = tl.program_id(0), tl.program_id(1)
    o = tl.arange(0, D)
    p_x = x + (i_n * T * H + i_h) * D + o
    b_s = tl.zeros([D], dtype=tl.float32)
    for _ in range(0, T):
        b_s += tl.load(p_x)
        p_x += H * D
    tl.store(y + (i_n * H + i_h) * D + o, b_s)


# skel: SK008 instance
@triton.jit(do_not_specialize=["T"])
def recurrent_decode_unspecialized(
    x,
    y,
    # skel-ok: SK008
    T,
    H,
    D: tl.constexpr,
):
    i_n, i_h = tl.program_id(0), tl.program_id(1)
    o = tl.arange(0, D)
    p_x = x + (i_n * T * H + i_h) * D + o
    b_s = tl.zeros([D], dtype=tl.float32)
    for _ in range(0, T):
        b_s += tl.load(p_x)
        p_x += H * D
    tl.store(y + (i_n * H + i_h) * D + o, b_s)


@triton.jit
def constexpr_length(
    x,
    y,
    # near-miss: a constexpr length is a compile-time choice, not a runtime argument
    # skel-ok: SK008
    T: tl.constexpr,
    D: tl.constexpr,
):
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_s = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        b_s += tl.load(x + (i * T + t) * D + o)
    tl.store(y + i * D + o, b_s)


@triton.jit
def row_stride_length(
    x,
    y,
    # near-miss: N is the row stride of x; its divisibility by 16 lets the loads vectorise
    # skel-ok: SK008
    N,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0)
    o = tl.arange(0, BLOCK)
    p_x = x + i * N + o
    tl.store(y + i * BLOCK + o, tl.load(p_x, mask=o < N))
