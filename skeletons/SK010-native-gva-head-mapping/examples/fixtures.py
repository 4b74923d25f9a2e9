"""Detector fixtures for SK010 (native-gva-head-mapping). Profiled statically, never run."""
import torch
import triton
import triton.language as tl


@triton.jit
def decode_same_heads(q, v, o, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_n, i_hv = tl.program_id(0), tl.program_id(1)
    b_q = tl.load(q + (i_n * HV + i_hv) * K + tl.arange(0, K)).to(tl.float32)
    b_v = tl.load(v + (i_n * HV + i_hv) * V + tl.arange(0, V)).to(tl.float32)
    tl.store(o + (i_n * HV + i_hv) * V + tl.arange(0, V), b_v * tl.sum(b_q))


def launch_same_heads(q, v):
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    # skel: SK010 opportunity
    q = q.repeat_interleave(HV // H, dim=1)
    o = torch.empty_like(v)
    decode_same_heads[(N, HV)](q, v, o, HV=HV, K=K, V=V)
    return o


@triton.jit
def decode_mapped_heads(q, v, o, H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    i_n, i_hv = tl.program_id(0), tl.program_id(1)
    # skel: SK010 instance
    i_h = i_hv // (HV // H)
    b_q = tl.load(q + (i_n * H + i_h) * K + tl.arange(0, K)).to(tl.float32)
    b_v = tl.load(v + (i_n * HV + i_hv) * V + tl.arange(0, V)).to(tl.float32)
    tl.store(o + (i_n * HV + i_hv) * V + tl.arange(0, V), b_v * tl.sum(b_q))


def launch_mapped_heads(q, v):
    N, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    o = torch.empty_like(v)
    decode_mapped_heads[(N, HV)](q, v, o, H=H, HV=HV, K=K, V=V)
    return o


@triton.jit
def accumulate_per_head_grad(dq, v, HV: tl.constexpr, K: tl.constexpr):
    i_n, i_hv = tl.program_id(0), tl.program_id(1)
    p = dq + (i_n * HV + i_hv) * K + tl.arange(0, K)
    tl.store(p, tl.load(p) + tl.load(v + (i_n * HV + i_hv) * K + tl.arange(0, K)))


def launch_per_head_grad(dq, v):
    N, H, K = dq.shape
    HV = v.shape[1]
    # near-miss: the expanded tensor is written per value head, so the copies are needed
    # skel-ok: SK010
    dq_full = dq.repeat_interleave(HV // H, dim=1)
    accumulate_per_head_grad[(N, HV)](dq_full, v, HV=HV, K=K)
    return dq_full.view(N, H, HV // H, K).sum(2)
