"""Context-parallel state merge: chain fp32 recurrent states across C consecutive chunks.

Each chunk (e.g. the slice of a long sequence one rank processed) summarises its effect on
the recurrent state as an affine map: a transition ``M_i`` [K, K] and the state it builds from
zero, ``L_i`` [K, V]. Merging walks the chain::

    S_0 = state;  S_{i+1} = M_i @ S_i + L_i;  states[i] = S_{i+1}

The matmuls run through ``tl.dot`` at its default precision, which is TF32 on NVIDIA GPUs:
the rounding error compounds along the chain.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def state_merge_kernel(
    state,  # [N*HV, K, V] fp32 initial states
    trans,  # [N*HV, C, K, K] fp32 chunk transitions
    local,  # [N*HV, C, K, V] fp32 chunk-local states
    states,  # [N*HV, C, K, V] fp32 output: the state after each chunk
    C,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1).to(tl.int64)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk = rk < K
    mv = rv < V
    m_kv = mk[:, None] & mv[None, :]
    m_kk = mk[:, None] & mk[None, :]

    b_s = tl.load(state + i_nh * K * V + rk[:, None] * V + rv[None, :], mask=m_kv, other=0.0)
    p_m = trans + i_nh * C * K * K + rk[:, None] * K + rk[None, :]
    p_l = local + i_nh * C * K * V + rk[:, None] * V + rv[None, :]
    p_out = states + i_nh * C * K * V + rk[:, None] * V + rv[None, :]
    for _ in range(0, C):
        b_m = tl.load(p_m, mask=m_kk, other=0.0)
        b_l = tl.load(p_l, mask=m_kv, other=0.0)
        b_s = tl.dot(b_m, b_s) + b_l
        tl.store(p_out, b_s, mask=m_kv)
        p_m += K * K
        p_l += K * V
        p_out += K * V


def state_merge(state, trans, local):
    """Merge a chain of C chunk summaries.

    state: [N, HV, K, V] fp32; trans: [N, HV, C, K, K] fp32; local: [N, HV, C, K, V] fp32.
    Returns states: [N, HV, C, K, V] fp32, states[:, :, i] = trans_i @ S_i + local_i.
    """
    N, HV, K, V = state.shape
    C = trans.shape[2]
    BK = max(16, triton.next_power_of_2(K))
    BV = 32
    states = torch.empty_like(local)
    state_merge_kernel[(triton.cdiv(V, BV), N * HV)](
        state, trans, local, states, C,
        K=K, V=V, BK=BK, BV=BV,
        num_warps=8, num_stages=1,
    )
    return states
