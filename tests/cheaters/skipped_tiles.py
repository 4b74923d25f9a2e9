"""Cheater: launches only the first half of the grid, so half of the V tiles of the output are
never written (and half of the state is never updated): "it was faster"."""
import torch
import triton

from skel.kernels.kda_decode.kernel import kda_decode_kernel


def kda_decode(q, k, v, g, beta, A_log, dt_bias, state, scale=None):
    N, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = K ** -0.5 if scale is None else scale
    o = torch.empty_like(v)
    programs = triton.cdiv(V, 32) * N * HV
    kda_decode_kernel[(programs // 2,)](
        q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
        H=H, HV=HV, K=K, V=V, BK=triton.next_power_of_2(K), BV=32,
        num_warps=4, num_stages=2,
    )
    return o
