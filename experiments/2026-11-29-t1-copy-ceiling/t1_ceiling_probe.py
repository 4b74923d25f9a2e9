"""Issue 5, T = 1 at small N: what is the ceiling, and does a persistent grid reach it? (H200)

At T = 1, N = 32 a KDA decode call moves ~134 MB in ~40 us. The accepted SK002 variant reached
83 % of the 1 GiB copy roofline there and a pure state copy through the same grid 87-89 %
(merge_tiles_probe.md). This probe measures, in the gate's timing method (CUDA graph of R launches
over rotated input sets, median over replays, variants interleaved):

- ceilings: torch's out-of-place copy of the state, torch's in-place elementwise pass over it,
  Triton in-place state copies through the per-head grid and through a persistent grid;
- KDA T = 1 decode (the suite's math, L2 norms by rsqrt) with P programs per head and W warps,
  as one program per tile (what SK002 emits today) and as a persistent grid of C * SMs programs
  looping over the tiles, optionally launched with programmatic dependent launch (PDL).

    python experiments/2026-11-29-t1-copy-ceiling/t1_ceiling_probe.py --set ceil --out $OUT   # on the GPU, one set per call:
        ceil (call 1), fuse (2), pipe (3), abl (4: stages left out, cache hints, register caps),
        order (5), pdl (6), warp (7), chunk (8), pref (9), held (10), defer (11), flat (12, with
        --min-calls 8); results in t1_ceiling_probe.md beside this script
    python experiments/2026-11-29-t1-copy-ceiling/t1_ceiling_probe.py --once abl_p2w4 --n 32   # five eager launches, for ncu (t1_ncu.sh)
    TRITON_INTERPRET=1 python experiments/2026-11-29-t1-copy-ceiling/t1_ceiling_probe.py --cpu-check   # numerics on a CPU
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing, merge_tiles_probe
import graph_timing as G  # noqa: E402

H = HV = 32
K = V = 128


@triton.jit
def _softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


@triton.jit
def _add2(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def kda_t1(q, k, v, g, beta, A_log, dt_bias, o, state, scale, NWORK, T,
           H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
           PERSIST: tl.constexpr, PDL: tl.constexpr, FUSE: tl.constexpr):
    """One (sequence, head, V tile) work item per loop iteration; the grid is NWORK programs or fewer."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    NV: tl.constexpr = V // BV
    o_k = tl.arange(0, K)
    start = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0) if PERSIST else NWORK
    for w in range(start, NWORK, step):
        w64 = w
        i_v = w64 % NV
        i_nh = w64 // NV
        i_n = i_nh // HV
        i_hv = i_nh % HV
        i_h = i_hv // (HV // H)
        o_v = i_v * BV + tl.arange(0, BV)
        p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
        b_s = tl.load(p_s)
        for t in range(0, T):
            b_q = tl.load(q + ((i_n * T + t) * H + i_h) * K + o_k).to(tl.float32)
            b_k = tl.load(k + ((i_n * T + t) * H + i_h) * K + o_k).to(tl.float32)
            b_v = tl.load(v + ((i_n * T + t) * HV + i_hv) * V + o_v).to(tl.float32)
            b_g = tl.load(g + ((i_n * T + t) * HV + i_hv) * K + o_k).to(tl.float32)
            b_beta = tl.sigmoid(tl.load(beta + (i_n * T + t) * HV + i_hv).to(tl.float32))
            b_A = tl.load(A_log + i_hv).to(tl.float32)
            b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
            b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
            b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
            b_gate = -tl.exp(b_A) * _softplus(b_g + b_bias)
            b_s = b_s * tl.exp(b_gate)[:, None]
            if FUSE == 0:  # as written: o reads the updated state (two dependent contractions)
                b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
                b_s = b_s + b_k[:, None] * b_delta[None, :]
                b_o = tl.sum(b_s * b_q[:, None], 0)
            else:  # o = q.S' = q.S + (q.k) delta: both contractions read the decayed state
                if FUSE == 1:
                    b_u = tl.sum(b_s * b_k[:, None], 0)
                    b_w = tl.sum(b_s * b_q[:, None], 0)
                else:  # one two-operand reduction
                    b_u, b_w = tl.reduce((b_s * b_k[:, None], b_s * b_q[:, None]), 0, _add2)
                b_delta = (b_v - b_u) * b_beta
                b_s = b_s + b_k[:, None] * b_delta[None, :]
                b_o = b_w + tl.sum(b_q * b_k) * b_delta
            tl.store(o + ((i_n * T + t) * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty))
        tl.store(p_s, b_s)


@triton.jit
def kda_t1_pipe(q, k, v, g, beta, A_log, dt_bias, o, state, scale, NWORK,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
                STAGES: tl.constexpr):
    """T = 1 only, persistent: the loop over work items is software-pipelined by Triton
    (tl.range(..., num_stages=STAGES)), so the next item's state load is in flight during this one's math."""
    NV: tl.constexpr = V // BV
    o_k = tl.arange(0, K)
    for w64 in tl.range(tl.program_id(0).to(tl.int64), NWORK, tl.num_programs(0), num_stages=STAGES):
        i_v = w64 % NV
        i_nh = w64 // NV
        i_n = i_nh // HV
        i_hv = i_nh % HV
        i_h = i_hv // (HV // H)
        o_v = i_v * BV + tl.arange(0, BV)
        p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
        b_s = tl.load(p_s)
        b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v).to(tl.float32)
        b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
        b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_s = b_s * tl.exp(-tl.exp(b_A) * _softplus(b_g + b_bias))[:, None]
        b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
        b_s = b_s + b_k[:, None] * b_delta[None, :]
        tl.store(o + (i_n * HV + i_hv) * V + o_v, tl.sum(b_s * b_q[:, None], 0).to(o.dtype.element_ty))
        tl.store(p_s, b_s)


@triton.jit
def kda_abl(q, k, v, g, beta, A_log, dt_bias, o, state, scale,
            H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
            MODE: tl.constexpr, HINT: tl.constexpr, ORDER: tl.constexpr = 0, FUSE: tl.constexpr = 0,
            PDL: tl.constexpr = 0, L2D: tl.constexpr = 0, PREF: tl.constexpr = 0):
    """Call 4 ablations of the T = 1 step, one program per (sequence, head, V tile).
    MODE 0: the full step; 1: no contractions (the decayed state is stored, o = v);
    2: no gate or norm arithmetic (decay by g itself, raw q, k); 3: no q/k/v/g/beta loads (constants);
    4: every program loads sequence 0's q/k/v/g/beta (cache hits: the loads and layout work, not their DRAM trips);
    5: the full step with the L2 norms deferred (raw q, k contracted, their scalars applied to the [BV] results).
    HINT: the state is loaded evict_first and stored streaming (.cs).
    ORDER 1: a barrier after the state load, so the compiler cannot issue it after the small loads
    (it hoists them, and the norms that wait on them, above the state load to shorten live ranges)."""
    if PDL:  # let the next launch start its programs now; wait for the previous launch's writes
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    NV: tl.constexpr = V // BV
    w = tl.program_id(0).to(tl.int64)
    i_v = w % NV
    i_nh = w // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    if HINT:
        b_s = tl.load(p_s, eviction_policy="evict_first")
    else:
        b_s = tl.load(p_s)
    if ORDER == 1:
        tl.debug_barrier()
    if PREF > 0:  # ask L2 for the tile of the program PREF places ahead (no registers held for it)
        w2 = tl.minimum(w + PREF, tl.num_programs(0) - 1)
        LPR: tl.constexpr = BV // 32  # 128-byte lines per tile row
        o_l = tl.arange(0, K * LPR)
        p_l = state + (w2 // NV) * K * V + (o_l // LPR) * V + (w2 % NV) * BV + (o_l % LPR) * 32
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [p_l], dtype=tl.int32,
                                  is_pure=False, pack=1)
    if MODE == 3:
        b_q = tl.full([K], 0.01, tl.float32)
        b_k = tl.full([K], 0.02, tl.float32)
        b_v = tl.full([BV], 0.5, tl.float32)
        b_g = tl.full([K], -0.1, tl.float32)
        b_beta = 0.5
    elif MODE == 4:
        b_q = tl.load(q + o_k).to(tl.float32)
        b_k = tl.load(k + o_k).to(tl.float32)
        b_v = tl.load(v + o_v).to(tl.float32)
        b_g = tl.load(g + o_k).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta).to(tl.float32))
    elif L2D:  # K-vectors loaded straight into the state's layout: [K, BV] broadcast loads, reduced to [K]
        z = tl.zeros([K, BV], tl.int32)
        b_q = tl.max(tl.load(q + (i_n * H + i_h) * K + o_k[:, None] + z).to(tl.float32), 1)
        b_k = tl.max(tl.load(k + (i_n * H + i_h) * K + o_k[:, None] + z).to(tl.float32), 1)
        b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v).to(tl.float32)
        b_g = tl.max(tl.load(g + (i_n * HV + i_hv) * K + o_k[:, None] + z).to(tl.float32), 1)
        b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
    else:
        b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v).to(tl.float32)
        b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
    if MODE == 2 or MODE == 3:
        b_decay = tl.exp(b_g)
    elif MODE == 5:  # norms deferred: raw q, k into the contractions, their scalars applied to [BV] results
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
        b_rq = tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale
        b_rk = tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_decay = tl.exp(-tl.exp(b_A) * _softplus(b_g + b_bias))
    else:
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
        b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_decay = tl.exp(-tl.exp(b_A) * _softplus(b_g + b_bias))
    b_s = b_s * b_decay[:, None]
    if MODE == 1:
        b_o = b_v
    elif MODE == 5:
        b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0) * b_rk) * b_beta
        if FUSE:
            b_w = tl.sum(b_s * b_q[:, None], 0)
            b_s = b_s + b_k[:, None] * (b_delta * b_rk)[None, :]
            b_o = (b_w + tl.sum(b_q * b_k) * b_rk * b_delta) * b_rq
        else:
            b_s = b_s + b_k[:, None] * (b_delta * b_rk)[None, :]
            b_o = tl.sum(b_s * b_q[:, None], 0) * b_rq
    elif FUSE:  # both contractions read the decayed state: o = q.S + (q.k) delta
        b_w = tl.sum(b_s * b_q[:, None], 0)
        b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
        b_s = b_s + b_k[:, None] * b_delta[None, :]
        b_o = b_w + tl.sum(b_q * b_k) * b_delta
    else:
        b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
        b_s = b_s + b_k[:, None] * b_delta[None, :]
        b_o = tl.sum(b_s * b_q[:, None], 0)
    tl.store(o + (i_n * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty))
    if HINT:
        tl.store(p_s, b_s, cache_modifier=".cs")
    else:
        tl.store(p_s, b_s)


@triton.jit
def kda_chunk(q, k, v, g, beta, A_log, dt_bias, o, state, scale,
              H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
              BC: tl.constexpr, STAGES: tl.constexpr):
    """T = 1, one program per (sequence, head, V tile) that walks its tile in BC-column chunks through a
    loop Triton software-pipelines (STAGES chunk loads in flight through shared memory, not registers):
    the V columns of the delta rule are independent, so each chunk is decayed, contracted, updated and
    stored on its own, and the state bytes in flight per SM are bounded by shared memory, not registers."""
    w = tl.program_id(0).to(tl.int64)
    NV: tl.constexpr = V // BV
    i_v = w % NV
    i_nh = w // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32)
    b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
    b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k).to(tl.float32)
    b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
    b_A = tl.load(A_log + i_hv).to(tl.float32)
    b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
    b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
    b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
    b_decay = tl.exp(-tl.exp(b_A) * _softplus(b_g + b_bias))
    base = state + i_nh * K * V + i_v * BV
    for c in tl.range(0, BV // BC, num_stages=STAGES):
        p_s = base + o_k[:, None] * V + c * BC + o_c[None, :]
        b_s = tl.load(p_s) * b_decay[:, None]
        o_v = i_v * BV + c * BC + o_c
        b_delta = (tl.load(v + (i_n * HV + i_hv) * V + o_v).to(tl.float32) - tl.sum(b_s * b_k[:, None], 0)) * b_beta
        b_s = b_s + b_k[:, None] * b_delta[None, :]
        tl.store(o + (i_n * HV + i_hv) * V + o_v, tl.sum(b_s * b_q[:, None], 0).to(o.dtype.element_ty))
        tl.store(p_s, b_s)


@triton.jit
def state_copy(state, NWORK, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, PERSIST: tl.constexpr,
               PDL: tl.constexpr = 0, L2D: tl.constexpr = 0, PREF: tl.constexpr = 0):
    """Ceiling: read each state tile and write it back (+0.5), in place, no other work."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    NV: tl.constexpr = V // BV
    o_k = tl.arange(0, K)
    start = tl.program_id(0).to(tl.int64)
    step = tl.num_programs(0) if PERSIST else NWORK
    for w in range(start, NWORK, step):
        w64 = w
        o_v = (w64 % NV) * BV + tl.arange(0, BV)
        p_s = state + (w64 // NV) * K * V + o_k[:, None] * V + o_v[None, :]
        tl.store(p_s, tl.load(p_s) + 0.5)


@triton.jit
def flat_copy(state, BLOCK: tl.constexpr):
    """Call 12's control: the in-place copy as torch's elementwise kernels cut it, BLOCK consecutive
    elements per program whatever the tile structure (no program holds a K x BV column block)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(state + offs, tl.load(state + offs) + 0.5)


@triton.jit
def state_copy_swz(state, NH, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    """Call 12: the per-tile copy with the V tile as the slow grid index, so programs launched together
    read the same column half of many heads instead of both halves of one head's rows."""
    NV: tl.constexpr = V // BV
    w = tl.program_id(0).to(tl.int64)
    o_k = tl.arange(0, K)
    o_v = (w // NH) * BV + tl.arange(0, BV)
    p_s = state + (w % NH) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_s, tl.load(p_s) + 0.5)


@triton.jit
def state_copy_held(state, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr):
    """Call 10's control: the in-place copy, but the whole tile is held in registers until a reduction
    across it is done (as the KDA step must), so registers, not the copy, bound the bytes in flight."""
    NV: tl.constexpr = V // BV
    w = tl.program_id(0).to(tl.int64)
    o_k = tl.arange(0, K)
    o_v = (w % NV) * BV + tl.arange(0, BV)
    p_s = state + (w // NV) * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(p_s)
    tl.store(p_s, b_s + 0.5 + tl.sum(b_s, 0)[None, :] * 0.0)


def inputs(N, T, device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*shape, dtype=torch.bfloat16, s=1.0):
        return (torch.randn(*shape, generator=gen) * s).to(dtype).to(device)

    return dict(q=rnd(N, T, H, K), k=rnd(N, T, H, K), v=rnd(N, T, HV, V), g=rnd(N, T, HV, K),
                beta=rnd(N, T, HV), A_log=rnd(HV, dtype=torch.float32, s=0.5),
                dt_bias=rnd(HV, K, dtype=torch.float32, s=0.5),
                state=rnd(N, HV, K, V, dtype=torch.float32, s=0.1), dst=None)


def sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 8


def _step(x):
    """(o, the operands every probe KDA kernel takes first): o is allocated once per input set."""
    o = x.setdefault("o", torch.empty_like(x["v"]))
    return o, (x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], o, x["state"], K ** -0.5)


def kda_call(P, W, C=0, pdl=False, fuse=0):
    """C = 0: one program per work item; C > 0: a persistent grid of C programs per SM."""
    def call(x):
        N, T = x["q"].shape[:2]
        nwork = N * HV * P
        grid = (min(nwork, C * sms()),) if C else (nwork,)
        o, ops = _step(x)
        kw = {"launch_pdl": True} if pdl else {}
        kda_t1[grid](*ops, nwork, T, H=H, HV=HV, K=K, V=V, BV=V // P, PERSIST=bool(C), PDL=pdl, FUSE=fuse,
                     num_warps=W, num_stages=1, **kw)
        return o
    return call


def pipe_call(P, W, C, stages):
    def call(x):
        N, T = x["q"].shape[:2]
        assert T == 1, "the pipelined probe kernel is T = 1 only"
        nwork = N * HV * P
        o, ops = _step(x)
        kda_t1_pipe[(min(nwork, C * sms()),)](*ops, nwork, H=H, HV=HV, K=K, V=V, BV=V // P, STAGES=stages, num_warps=W)
        return o
    return call


def abl_call(P, W, mode=0, hint=False, maxnreg=None, order=0, fuse=0, pdl=0, pref=0):
    def call(x):
        N, T = x["q"].shape[:2]
        assert T == 1, "the ablation kernel is T = 1 only"
        o, ops = _step(x)
        kw = {"maxnreg": maxnreg} if maxnreg else {}
        if pdl:
            kw["launch_pdl"] = True
        kda_abl[(N * HV * P,)](*ops, H=H, HV=HV, K=K, V=V, BV=V // P, MODE=mode, HINT=hint, ORDER=order, FUSE=fuse, PDL=pdl, PREF=pref,
                               num_warps=W, num_stages=1, **kw)
        return o
    return call


def chunk_call(P, W, BC, stages):
    def call(x):
        N, T = x["q"].shape[:2]
        assert T == 1, "the chunked probe kernel is T = 1 only"
        o, ops = _step(x)
        kda_chunk[(N * HV * P,)](*ops, H=H, HV=HV, K=K, V=V, BV=V // P, BC=BC, STAGES=stages, num_warps=W)
        return o
    return call


def copy_call(P, W, C=0, pdl=0):
    def call(x):
        N = x["state"].shape[0]
        nwork = N * HV * P
        grid = (min(nwork, C * sms()),) if C else (nwork,)
        kw = {"launch_pdl": True} if pdl else {}
        state_copy[grid](x["state"], nwork, K=K, V=V, BV=V // P, PERSIST=bool(C), PDL=pdl, num_warps=W, num_stages=1,
                         **kw)
    return call


def held_call(P, W):
    def call(x):
        N = x["state"].shape[0]
        state_copy_held[(N * HV * P,)](x["state"], K=K, V=V, BV=V // P, num_warps=W, num_stages=1)
    return call


def flat_call(block, W):
    def call(x):
        n = x["state"].numel()
        flat_copy[(n // block,)](x["state"], BLOCK=block, num_warps=W, num_stages=1)
    return call


def swz_call(P, W):
    def call(x):
        nh = x["state"].shape[0] * HV
        state_copy_swz[(nh * P,)](x["state"], nh, K=K, V=V, BV=V // P, num_warps=W, num_stages=1)
    return call


def torch_copy(x):
    if x["dst"] is None:
        x["dst"] = torch.empty_like(x["state"])
    x["dst"].copy_(x["state"])


def torch_inplace(x):
    x["state"].add_(0.5)


# Call 1 (--set ceil): copy ceilings, per-tile grids, persistent grids (C programs per SM), PDL.
CEIL = {
    "torch_copy": torch_copy,
    "torch_inplace": torch_inplace,
    "cpy_p1w4": copy_call(1, 4), "cpy_p2w2": copy_call(2, 2), "cpy_p2w4": copy_call(2, 4),
    "cpy_p2w2_c4": copy_call(2, 2, 4), "cpy_p2w2_c8": copy_call(2, 2, 8), "cpy_p4w2_c8": copy_call(4, 2, 8),
    "cpy_p1w4_c4": copy_call(1, 4, 4),
    "kda_p2w2": kda_call(2, 2), "kda_p2w4": kda_call(2, 4), "kda_p1w4": kda_call(1, 4), "kda_p4w2": kda_call(4, 2),
    "kda_p2w2_c4": kda_call(2, 2, 4), "kda_p2w2_c8": kda_call(2, 2, 8),
    "kda_p2w4_c4": kda_call(2, 4, 4), "kda_p4w2_c8": kda_call(4, 2, 8), "kda_p4w2_c16": kda_call(4, 2, 16),
    "kda_p1w4_c4": kda_call(1, 4, 4),
    "kda_p2w2_pdl": kda_call(2, 2, 0, True), "kda_p2w2_c4_pdl": kda_call(2, 2, 4, True),
}
# Call 2 (--set fuse): the two state contractions of a step made independent (_f1: two sums over the
# decayed state, o = q.S + (q.k) delta; _f2: one two-operand reduction), over more tile shapes.
FUSED = {"cpy_p2w2": copy_call(2, 2)}
for _p, _w in ((2, 2), (2, 4), (4, 2), (4, 4), (8, 2), (4, 1)):
    for _f in (0, 1, 2):
        FUSED[f"kda_p{_p}w{_w}" + ("", "_f1", "_f2")[_f]] = kda_call(_p, _w, fuse=_f)
# Call 3 (--set pipe): persistent grids whose loop over work items Triton software-pipelines.
PIPE = {"cpy_p2w2": copy_call(2, 2), "kda_p2w2": kda_call(2, 2), "kda_p4w2": kda_call(4, 2),
        "pipe_p2w2_c2_s2": pipe_call(2, 2, 2, 2), "pipe_p2w2_c4_s2": pipe_call(2, 2, 4, 2),
        "pipe_p4w2_c4_s2": pipe_call(4, 2, 4, 2), "pipe_p4w2_c8_s2": pipe_call(4, 2, 8, 2),
        "pipe_p4w4_c4_s2": pipe_call(4, 4, 4, 2), "pipe_p4w2_c4_s1": pipe_call(4, 2, 4, 1)}
# Call 4 (--set abl): what costs the KDA step its last points at N = 32: each stage left out (_m1 no
# contractions, _m2 no gate/norm arithmetic, _m3 no small loads), cache hints on the state (_h), and
# register caps (_r{R}, maxnreg) that let more programs, so more state bytes, be in flight per SM.
ABL = {"cpy_p2w4": copy_call(2, 4), "cpy_p4w4": copy_call(4, 4)}
for _p, _w, _caps in ((2, 4, (96,)), (4, 2, (128, 96)), (4, 4, (72,)), (8, 2, (80,)), (8, 4, ())):
    ABL[f"abl_p{_p}w{_w}"] = abl_call(_p, _w)
    for _r in _caps:
        ABL[f"abl_p{_p}w{_w}_r{_r}"] = abl_call(_p, _w, maxnreg=_r)
for _p, _w in ((2, 4), (4, 2)):
    for _m in (1, 2, 3):
        ABL[f"abl_p{_p}w{_w}_m{_m}"] = abl_call(_p, _w, mode=_m)
    ABL[f"abl_p{_p}w{_w}_h"] = abl_call(_p, _w, hint=True)
# Call 5 (--set order): a barrier right after the state load (_o1) keeps it ahead of the small loads.
ORDER = {"cpy_p2w4": copy_call(2, 4)}
for _p, _w in ((2, 4), (4, 2), (4, 4), (8, 4)):
    ORDER[f"abl_p{_p}w{_w}"] = abl_call(_p, _w)
    ORDER[f"abl_p{_p}w{_w}_o1"] = abl_call(_p, _w, order=1)
    ORDER[f"abl_p{_p}w{_w}_o1f1"] = abl_call(_p, _w, order=1, fuse=1)
# Call 6 (--set pdl): programmatic dependent launch with the trigger at the top (_pdl): the next launch's
# programs are scheduled while this one drains, then wait (griddepcontrol.wait) for its writes.
PDLSET = {"cpy_p2w4": copy_call(2, 4), "cpy_p2w4_pdl": copy_call(2, 4, pdl=1), "torch_inplace": torch_inplace}
for _p, _w in ((2, 4), (4, 2), (4, 4)):
    PDLSET[f"abl_p{_p}w{_w}"] = abl_call(_p, _w)
    PDLSET[f"abl_p{_p}w{_w}_pdl"] = abl_call(_p, _w, pdl=1)
# Call 7 (--set warp): single-warp programs (no barriers across warps), and _m4 (every program reads
# the same q/k/v/g/beta: cache hits) against _m3 (no such loads) to split the small loads' cost.
WARP = {"cpy_p2w4": copy_call(2, 4)}
for _p, _w in ((2, 4), (4, 2)):
    for _m in (0, 3, 4):
        WARP[f"abl_p{_p}w{_w}" + ("", "", "", "_m3", "_m4")[_m]] = abl_call(_p, _w, mode=_m)
for _p, _w in ((8, 1), (16, 1), (8, 2), (16, 2)):
    WARP[f"abl_p{_p}w{_w}"] = abl_call(_p, _w)
# Call 8 (--set chunk): each program walks its V tile in column chunks, the chunk loads pipelined through
# shared memory (kda_chunk): state bytes in flight bounded by shared memory instead of registers.
CHUNK = {"cpy_p2w4": copy_call(2, 4), "abl_p2w4": abl_call(2, 4)}
for _p, _w, _bc, _st in ((1, 4, 32, 4), (1, 4, 32, 2), (2, 4, 16, 4), (2, 4, 32, 2), (2, 2, 16, 4), (4, 2, 16, 2),
                         (1, 8, 32, 4), (2, 4, 16, 2)):
    CHUNK[f"chk_p{_p}w{_w}_c{_bc}_s{_st}"] = chunk_call(_p, _w, _bc, _st)
# Call 9 (--set pref): each program also asks L2 (prefetch.global.L2) for the state tile of the program
# _d{D} places ahead, so more state bytes are in flight than registers hold.
PREFSET = {"cpy_p2w4": copy_call(2, 4), "abl_p2w4": abl_call(2, 4), "abl_p4w2": abl_call(4, 2)}
for _p, _w, _ds in ((2, 4, (264, 528, 1056)), (4, 2, (396, 792, 1584))):
    for _d in _ds:
        PREFSET[f"abl_p{_p}w{_w}_d{_d}"] = abl_call(_p, _w, pref=_d)
# Call 10 (--set held): copies that hold their tile in registers until a reduction over it is done
# (_held), against the free copy and the KDA step: does a register-bound copy lose the same ~3 us?
HELD = {"cpy_p2w4": copy_call(2, 4), "abl_p2w4": abl_call(2, 4), "abl_p4w2": abl_call(4, 2)}
for _p, _w in ((2, 4), (2, 2), (1, 4), (4, 2), (4, 4)):
    HELD[f"held_p{_p}w{_w}"] = held_call(_p, _w)
# Call 11 (--set defer): the L2 norms taken off the chain (_m5: raw q, k contracted, the norm scalars
# applied to [BV] vectors afterwards), alone and with independent contractions (_m5f1).
DEFER = {"cpy_p2w4": copy_call(2, 4)}
for _p, _w in ((2, 4), (4, 2), (2, 2), (4, 1)):
    DEFER[f"abl_p{_p}w{_w}"] = abl_call(_p, _w)
    DEFER[f"abl_p{_p}w{_w}_d5"] = abl_call(_p, _w, mode=5)
    DEFER[f"abl_p{_p}w{_w}_d5f1"] = abl_call(_p, _w, mode=5, fuse=1)
# Call 12 (--set flat --min-calls 8): is the step's grid the ceiling? Torch's in-place pass and Triton
# flat copies of BLOCK consecutive elements (4 to 64 KB per program) against in-place copies through
# per-(sequence, head, V tile) grids of every tile shape SK002 plans (P programs per head, W warps), and
# the P = 2 grid with the V tile as the slow index (_swz).
FLAT = {"torch_inplace": torch_inplace}
for _b, _w in ((1024, 4), (2048, 4), (4096, 4), (8192, 4), (8192, 8), (16384, 8)):
    FLAT[f"flat_b{_b}w{_w}"] = flat_call(_b, _w)
for _p, _w in ((1, 4), (1, 8), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1)):
    FLAT[f"cpy_p{_p}w{_w}"] = copy_call(_p, _w)
FLAT["held_p2w2"] = held_call(2, 2)
FLAT["cpy_p2w2_swz"] = swz_call(2, 2)
SETS = {"ceil": (CEIL, [(32, 1), (64, 1), (256, 1)]), "fuse": (FUSED, [(32, 1), (64, 1), (256, 1), (64, 8)]),
        "pipe": (PIPE, [(32, 1), (64, 1)]), "abl": (ABL, [(32, 1), (64, 1), (256, 1)]),
        "order": (ORDER, [(32, 1), (64, 1), (256, 1)]),
        "pdl": (PDLSET, [(32, 1), (64, 1), (256, 1)]), "warp": (WARP, [(32, 1), (64, 1), (256, 1)]),
        "chunk": (CHUNK, [(32, 1), (64, 1), (256, 1)]), "pref": (PREFSET, [(32, 1), (64, 1), (256, 1)]),
        "held": (HELD, [(32, 1), (64, 1), (256, 1)]), "defer": (DEFER, [(32, 1), (64, 1), (256, 1)]),
        "flat": (FLAT, [(32, 1), (64, 1), (256, 1)])}
VARIANTS = {**CEIL, **FUSED, **PIPE, **ABL, **ORDER, **PDLSET, **WARP, **CHUNK, **PREFSET, **HELD, **DEFER, **FLAT}


def reference(x, T):
    """float64 KDA decode, as kernels/kda_decode/reference.py computes it."""
    f = {n: t.double().cpu() for n, t in x.items() if t is not None and n not in ("o", "dst")}
    S = f["state"].clone()
    N = S.shape[0]
    out = torch.zeros(N, T, HV, V, dtype=torch.float64)
    for t in range(T):
        for hv in range(HV):
            h = hv // (HV // H)
            qq = f["q"][:, t, h]
            kk = f["k"][:, t, h]
            qq = qq / torch.sqrt((qq * qq).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
            kk = kk / torch.sqrt((kk * kk).sum(-1, keepdim=True) + 1e-6)
            gate = -torch.exp(f["A_log"][hv]) * torch.nn.functional.softplus(f["g"][:, t, hv] + f["dt_bias"][hv])
            s = S[:, hv] * torch.exp(gate)[:, :, None]
            delta = (f["v"][:, t, hv] - torch.einsum("nk,nkv->nv", kk, s)) * torch.sigmoid(f["beta"][:, t, hv])[:, None]
            s = s + kk[:, :, None] * delta[:, None, :]
            out[:, t, hv] = torch.einsum("nk,nkv->nv", qq, s)
            S[:, hv] = s
    return out, S


def rel(a, b):
    return float((a.double().cpu() - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-30))


def check(device, variants=None) -> int:
    bad = 0
    for name, fn in (variants or VARIANTS).items():
        if not name.startswith(("kda", "pipe", "abl", "chk")) or "_m" in name or (device == "cpu" and "pdl" in name):
            continue
        if device == "cpu" and name not in ("kda_p2w2", "kda_p2w2_f1", "kda_p4w2_f2", "pipe_p4w2_c4_s2", "abl_p4w2_o1f1",
                                           "chk_p2w4_c16_s4")[-int(os.environ.get("PROBE_ONLY_LAST", 6)):]:
            continue  # the interpreter is slow; one of each kind (the two-operand reduce is the slowest)
        for N, T in ((2, 1), (1, 2)) if not name.startswith(("pipe", "abl", "chk")) else ((2, 1), (3, 1)):
            x = inputs(N, T, device, 7)
            ref_o, ref_s = reference(x, T)
            o = fn(x)
            eo, es = rel(o, ref_o), rel(x["state"], ref_s)
            ok = eo < 6e-3 and es < 1e-4
            bad += not ok
            print(f"{name:18s} N={N} T={T}: o {eo:.1e} state {es:.1e} {'ok' if ok else 'FAIL'}", flush=True)
    return bad


def roof_bytes(N, T) -> int:
    # state read + write, q, k (bf16), v, g, o (bf16), beta (bf16)
    return 2 * N * HV * K * V * 4 + 2 * N * T * (2 * H * K + HV * V + HV * K + HV * V + HV)


def time_shape(N, T, names, reps, min_calls=0):
    R = G.rotation(N * HV * K * V * 4)
    return G.median_us(torch, {n: VARIANTS[n] for n in names}, lambda i: inputs(N, T, "cuda", 100 + i), R, reps,
                       min_calls), G.graph_calls(R, min_calls)


def gpu(out_dir, reps, set_name, min_calls=0) -> int:
    bad = check("cuda", SETS[set_name][0])
    bw = G.copy_bandwidth(torch)
    best = G.copy_bandwidth(torch, best=True)
    variants, shapes = SETS[set_name]
    head = G.header(torch, triton, bw, reps, f"SMs {sms()}, best copy {best / 1e12:.3f} TB/s, calls per graph >= "
                                            f"{min_calls or 'R'}, ")
    print(head, flush=True)
    rows = {}
    for N, T in shapes:
        med, R = time_shape(N, T, list(variants), reps, min_calls)
        for n, us in med.items():
            pct = roof_bytes(N, T) / bw / (us * 1e-6) * 100
            rows.setdefault(n, {})[f"N{N}T{T}"] = (us, pct)
            print(f"N={N} T={T} calls/graph={R} {n:18s} {us:8.1f} us {pct:5.1f} % of the median copy, "
                  f"{roof_bytes(N, T) / best / (us * 1e-6) * 100:5.1f} % of the best", flush=True)
    text = G.table("T = 1 ceiling probe", head, rows, [f"N{N}T{T}" for N, T in shapes], [f"N{N} T{T}" for N, T in shapes])
    print(text)
    G.save(out_dir, "t1_ceiling_probe", head, rows, text)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--set", default="fuse", choices=sorted(SETS), help="the variant set: one per probe call (see the module docstring)")
    ap.add_argument("--min-calls", type=int, default=0,
                    help="calls per CUDA graph, the input sets cycled (the gate uses 8; 0: one call per set, calls 1-11)")
    ap.add_argument("--cpu-check", action="store_true")
    ap.add_argument("--once", default="", help="run this variant 5 times eagerly at N = --n, T = 1 (for ncu)")
    ap.add_argument("--n", type=int, default=32)
    a = ap.parse_args()
    if a.once:
        x = inputs(a.n, 1, "cuda", 3)
        for _ in range(5):
            VARIANTS[a.once](x)
        torch.cuda.synchronize()
        return 0
    if a.cpu_check:
        return 1 if check("cpu") else 0
    return gpu(a.out, a.reps, a.set, a.min_calls)


if __name__ == "__main__":
    sys.exit(main())
