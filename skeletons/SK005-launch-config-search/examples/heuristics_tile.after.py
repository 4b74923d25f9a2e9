"""SK005 case: the V tile from a triton.heuristics lambda, read by the grid through its meta-parameters."""
import torch
import triton
import triton.language as tl


@triton.heuristics({"BV": lambda args: 16})
@triton.jit
def decay_update_kernel(q, x, s, o, decay, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                        BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k, mask_v = o_k < K, o_v < V
    mask_s = mask_k[:, None] & mask_v[None, :]
    p_s = s + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(p_s, mask=mask_s, other=0.0)
    b_q = tl.load(q + i_nh * K + o_k, mask=mask_k, other=0.0).to(tl.float32)
    b_x = tl.load(x + i_nh * V + o_v, mask=mask_v, other=0.0).to(tl.float32)
    b_s = b_s * decay + b_q[:, None] * b_x[None, :]
    tl.store(p_s, b_s, mask=mask_s)
    tl.store(o + i_nh * V + o_v, tl.sum(b_s * b_q[:, None], 0).to(o.dtype.element_ty), mask=mask_v)


def launch(q, x, s, decay=0.9):
    N, H, K = q.shape
    V = x.shape[-1]
    o = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(V, meta["BV"]), N * H)  # noqa: E731
    # skel SK005: launch config BV=16,num_warps=1 (searched; 8 fp32 tile elements/thread)
    decay_update_kernel[grid](q, x, s, o, decay, H=H, K=K, V=V, BK=triton.next_power_of_2(K), num_warps=1)
    return o, s


def example_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    N, H, K, V = 2, 2, 16, 16
    q = torch.randn(N, H, K, generator=g)
    x = torch.randn(N, H, V, generator=g)
    s = torch.randn(N, H, K, V, generator=g)
    return q, x, s
