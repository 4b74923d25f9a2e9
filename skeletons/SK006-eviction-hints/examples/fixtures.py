"""Detector fixtures for SK006 (eviction-hints). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def decode_v_tiles(q, v, o, w, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * H + i_h) * V + o_v
    p_o = o + (i_n * T * H + i_h) * V + o_v
    # skel-ok: SK006
    b_w = tl.load(w + i_h * K + o_k)
    for _ in range(0, T):
        # q does not depend on the V tile: the other V-tile programs read the same bytes
        # skel: SK006 opportunity
        b_q = tl.load(p_q).to(tl.float32)
        # v is read once by exactly this program
        # skel: SK006 opportunity
        b_v = tl.load(p_v).to(tl.float32)
        # skel: SK006 instance
        tl.store(p_o, b_v * tl.sum(b_q * b_w), eviction_policy="evict_first")
        p_q += H * K
        p_v += H * V
        p_o += H * V


@triton.jit
def decode_hinted(q, v, o, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * H + i_h) * V + o_v
    p_o = o + (i_n * T * H + i_h) * V + o_v
    for _ in range(0, T):
        # skel: SK006 instance
        b_q = tl.load(p_q, eviction_policy="evict_last").to(tl.float32)
        # skel: SK006 instance
        b_v = tl.load(p_v, eviction_policy="evict_first").to(tl.float32)
        # skel: SK006 instance
        tl.store(p_o, b_v * tl.sum(b_q), eviction_policy="evict_first")
        p_q += H * K
        p_v += H * V
        p_o += H * V


def decode(q, v, o, w, T, H, K, V, hinted=False):
    # the launch says which programs are siblings: the BV tiles of one (sequence, head)
    BK, BV = triton.next_power_of_2(K), 32
    N = q.shape[0]
    grid = (triton.cdiv(V, BV), N * H)
    if hinted:
        decode_hinted[grid](q, v, o, T, H=H, K=K, V=V, BK=BK, BV=BV)
    else:
        decode_v_tiles[grid](q, v, o, w, T, H=H, K=K, V=V, BK=BK, BV=BV)


@triton.jit
def elementwise_no_loop(x, y, n, BLOCK: tl.constexpr):
    # near-miss: every address depends on the only program id and nothing loops
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # skel-ok: SK006
    b_x = tl.load(x + o, mask=o < n)
    # skel-ok: SK006
    tl.store(y + o, b_x * 2, mask=o < n)
