"""Detector fixtures for SK007 (explicit-dot-precision). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def chunk_state_fp32(q, k, v, o, NT, BT: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_n = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    b_h = tl.zeros([K, V], dtype=tl.float32)
    for i_t in range(0, NT):
        b_q = tl.load(q + ((i_n * NT + i_t) * BT + o_t[:, None]) * K + o_k[None, :]).to(tl.float32)
        b_k = tl.load(k + ((i_n * NT + i_t) * BT + o_t[None, :]) * K + o_k[:, None]).to(tl.float32)
        b_v = tl.load(v + ((i_n * NT + i_t) * BT + o_t[:, None]) * V + o_v[None, :]).to(tl.float32)
        # skel-ok: SK007
        b_o = tl.dot(b_q, b_h)
        tl.store(o + ((i_n * NT + i_t) * BT + o_t[:, None]) * V + o_v[None, :], b_o)
        # skel: SK007 opportunity
        b_h += tl.dot(b_k, b_v)


@triton.jit
def chunk_state_tf32x3(q, k, v, o, NT, BT: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_n = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    b_h = tl.zeros([K, V], dtype=tl.float32)
    for i_t in range(0, NT):
        b_q = tl.load(q + ((i_n * NT + i_t) * BT + o_t[:, None]) * K + o_k[None, :]).to(tl.float32)
        b_k = tl.load(k + ((i_n * NT + i_t) * BT + o_t[None, :]) * K + o_k[:, None]).to(tl.float32)
        b_v = tl.load(v + ((i_n * NT + i_t) * BT + o_t[:, None]) * V + o_v[None, :]).to(tl.float32)
        # skel: SK007 instance
        b_o = tl.dot(b_q, b_h, input_precision="tf32x3")
        tl.store(o + ((i_n * NT + i_t) * BT + o_t[:, None]) * V + o_v[None, :], b_o)
        # skel: SK007 instance
        b_h += tl.dot(b_k, b_v, input_precision="ieee")


@triton.jit
def chunk_state_bf16(q, k, v, o, NT, BT: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    # near-miss: 16-bit operands are not rounded to TF32
    i_n = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    b_h = tl.zeros([K, V], dtype=tl.float32)
    for i_t in range(0, NT):
        b_k = tl.load(k + ((i_n * NT + i_t) * BT + o_t[None, :]) * K + o_k[:, None]).to(tl.bfloat16)
        b_v = tl.load(v + ((i_n * NT + i_t) * BT + o_t[:, None]) * V + o_v[None, :]).to(tl.bfloat16)
        # skel-ok: SK007
        b_h += tl.dot(b_k, b_v)
    tl.store(o + i_n * K * V + o_k[:, None] * V + o_v[None, :], b_h)


@triton.jit
def single_fp32_product(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    # near-miss: one fp32 dot whose result is stored, not chained
    o_m = tl.arange(0, M)
    o_n = tl.arange(0, N)
    o_k = tl.arange(0, K)
    b_a = tl.load(a + o_m[:, None] * K + o_k[None, :]).to(tl.float32)
    b_b = tl.load(b + o_k[:, None] * N + o_n[None, :]).to(tl.float32)
    # skel-ok: SK007
    b_c = tl.dot(b_a, b_b)
    tl.store(c + o_m[:, None] * N + o_n[None, :], b_c)


@triton.jit
def explicit_tf32(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    # near-miss: TF32 chosen explicitly is neither the default nor the skeleton's choice
    o_m = tl.arange(0, M)
    o_n = tl.arange(0, N)
    o_k = tl.arange(0, K)
    b_a = tl.load(a + o_m[:, None] * K + o_k[None, :]).to(tl.float32)
    b_b = tl.load(b + o_k[:, None] * N + o_n[None, :]).to(tl.float32)
    # skel-ok: SK007
    b_c = tl.dot(b_a, b_b, input_precision="tf32")
    tl.store(c + o_m[:, None] * N + o_n[None, :], b_c)


@triton.jit
def carried_state_chain(state, trans, local, C, K: tl.constexpr, V: tl.constexpr):
    # Loads carry no dtype cast, but the dot's result is its own operand: fp32 from step two on.
    i_n = tl.program_id(0)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    b_s = tl.load(state + i_n * K * V + o_k[:, None] * V + o_v[None, :])
    for i_c in range(0, C):
        b_m = tl.load(trans + (i_n * C + i_c) * K * K + o_k[:, None] * K + o_k[None, :])
        b_l = tl.load(local + (i_n * C + i_c) * K * V + o_k[:, None] * V + o_v[None, :])
        # skel: SK007 opportunity
        b_s = tl.dot(b_m, b_s) + b_l
    tl.store(state + i_n * K * V + o_k[:, None] * V + o_v[None, :], b_s)


@triton.jit
def carried_bf16_chain(state, trans, C, K: tl.constexpr, V: tl.constexpr):
    i_n = tl.program_id(0)
    o_k = tl.arange(0, K)
    o_v = tl.arange(0, V)
    b_s = tl.load(state + i_n * K * V + o_k[:, None] * V + o_v[None, :]).to(tl.bfloat16)
    for i_c in range(0, C):
        b_m = tl.load(trans + (i_n * C + i_c) * K * K + o_k[:, None] * K + o_k[None, :]).to(tl.bfloat16)
        # skel-ok: SK007
        b_s = tl.dot(b_m, b_s).to(tl.bfloat16)
    tl.store(state + i_n * K * V + o_k[:, None] * V + o_v[None, :], b_s)
