"""Phase-A probe for SK002 (merge V tiles): which merged KDA-decode structure wins on the GPU.

One run builds several hand-written merged variants of a KDA decode step (one program per
(sequence, head), prologue once per token), checks each against a float64 torch reference,
and times them against upstream fla-core 0.6.0 ``fused_recurrent_kda`` with CUDA-graph replay
over rotated input sets (state > 120 MB per replay, so L2 never holds it), with the copy
bandwidth measured in the same process.

Problem (the issue's H200 setting): H = HV = 32, K = V = 128, bf16 q/k/v/g/beta, raw gate
(``-exp(A_log) * softplus(g + dt_bias)``) and sigmoid(beta) in the kernel, L2 norm of q and k in
the kernel, fp32 state [N, HV, K, V] (or V-first [N, HV, V, K]) updated in place.

Variants are generated as source text (one @triton.jit function each) into a temporary module,
because Triton reads a kernel's source from its file. Knobs:
  ns      sub-tiles of the V dimension, each its own register variable (1 = one [K, V] tile)
  warps   num_warps
  mode    "res"  all sub-tiles loaded before the token loop, kept in registers, stored after it
          "str"  T = 1 only: sub-tiles streamed (load j+depth, update j, store j)
  pf      prefetch the next token's q/k/g/v/beta at the top of each iteration
  rsqrt   L2 norms as rsqrt multiplies (SK001 composed) instead of divisions
  vfirst  state stored V-first ([V, K], K contiguous): reductions over K run along lanes

Usage (GPU):  python3 experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.py --out $OUT
       (CPU):  TRITON_INTERPRET=1 python experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.py --cpu-check
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, asdict

import graph_timing as G


@dataclass(frozen=True)
class Variant:
    name: str
    ns: int = 1
    warps: int = 4
    mode: str = "res"  # res | str
    depth: int = 1  # streaming prefetch depth (sub-tiles loaded ahead)
    pf: bool = False
    rsqrt: bool = False
    vfirst: bool = False
    stages: int = 1
    prediction: str = ""
    progs: int = 1  # programs per (sequence, head): 1 = fully merged, 2 = two halves of V, ...
    maxnreg: int = 0  # register cap per thread (0: the compiler's choice)
    family: str = "kda"  # kda (gate per K channel) | gdn (one scalar gate per head)
    ev: bool = False  # state loads/stores with evict_first (streamed once per call)


# call 1 (2026-11-29): the first sweep of structures
SET_A1 = [
    Variant("m1w4", 1, 4, prediction="T1 ~86us (= FACTS BV128/w4); T8 2x over upstream"),
    Variant("m1w8", 1, 8, prediction="T1 slow like FACTS BV128/w8 (~150us)?; T8 ~ m1w4"),
    Variant("m2w4", 2, 4, prediction="between m1w4 and m4w4"),
    Variant("m4w4", 4, 4, prediction="T8 1.1-1.4x (FACTS probe); T1 ~ upstream"),
    Variant("m4w8", 4, 8, prediction="T8 better latency hiding than m4w4"),
    Variant("m8w4", 8, 4, prediction="more reductions/barriers: slower at T8 than m4w4"),
    Variant("m4w4pf", 4, 4, pf=True, prediction="T8 -20% vs m4w4 (input latency hidden)"),
    Variant("m1w4pf", 1, 4, pf=True, prediction="T8 best K-first variant"),
    Variant("m1w8pf", 1, 8, pf=True, prediction="T8 close to m1w4pf"),
    Variant("m1w4rs", 1, 4, rsqrt=True, prediction="~ m1w4 (division done once now)"),
    Variant("m4w4rs", 4, 4, rsqrt=True, prediction="~ m4w4"),
    Variant("vf1w4", 1, 4, vfirst=True, prediction="V-first layout: warp-level K reductions; T8 1.3x over m1w4"),
    Variant("vf1w8", 1, 8, vfirst=True, prediction="~ vf1w4"),
    Variant("vf4w4pf", 4, 4, vfirst=True, pf=True, prediction="~ vf1w4"),
    Variant("s4w4d1", 4, 4, "str", 1, prediction="T1 only: ~90% roofline (fewer live regs, more CTAs/SM)"),
    Variant("s4w2d1", 4, 2, "str", 1, prediction="T1 only: ~ s4w4d1"),
    Variant("s8w2d2", 8, 2, "str", 2, prediction="T1 only: ~ s4w4d1"),
    Variant("s8w4d2", 8, 4, "str", 2, prediction="T1 only"),
    Variant("s2w4d1", 2, 4, "str", 1, prediction="T1 only"),
    # ceilings, not candidates: the state read and written back, nothing else (no numerics check)
    Variant("cpy1w4", 1, 4, "cpy", prediction="ceiling of one-program-per-head access"),
    Variant("cpy1w8", 1, 8, "cpy", prediction="ceiling"),
    Variant("cpy4w2", 4, 2, "cpy", prediction="ceiling"),
]

# call 2: around the winners of call 1 (prefetched inputs, 2 sub-tiles), partial merges for
# T = 1 tails, register caps, and the same structures on gated-delta-rule decode
SET_A2 = [
    Variant("m1w4pf", 1, 4, pf=True, prediction="re-run of call 1: 74.7us T1N64, 201.5us T8N64"),
    Variant("m4w4pf", 4, 4, pf=True, prediction="re-run of call 1: 200.9us T8N64"),
    Variant("m2w4pf", 2, 4, pf=True, prediction="best T8 (m2w4 beat m1w4/m4w4 by 8%): ~185us T8N64"),
    Variant("m2w4pfr168", 2, 4, pf=True, maxnreg=168, prediction="3 CTAs/SM if no spill: T1 +5%"),
    Variant("m1w8pfr128", 1, 8, pf=True, maxnreg=128, prediction="2 CTAs/SM at 8 warps: ~ m1w4pf"),
    Variant("p2m1w4pf", 1, 4, pf=True, progs=2, prediction="T1: 2x CTAs, shorter tail: 90% at N64"),
    Variant("p2m2w4pf", 2, 4, pf=True, progs=2, prediction="~ p2m1w4pf"),
    Variant("p2m1w2pf", 1, 2, pf=True, progs=2, prediction="spills? (128 state regs at 2 warps)"),
    Variant("p4m1w2pf", 1, 2, pf=True, progs=4, prediction="upstream tiling + up-front loads: T1 ~85%"),
    Variant("p4m1w4pf", 1, 4, pf=True, progs=4, prediction="~ p4m1w2pf"),
    Variant("p8m1w2pf", 1, 2, pf=True, progs=8, prediction="like up_bv16w2 + up-front loads"),
    Variant("m1w4pfev", 1, 4, pf=True, ev=True, prediction="+2% T1 (less L2 pollution)"),
    Variant("p2m1w4pfev", 1, 4, pf=True, progs=2, ev=True, prediction="+2% T1"),
    Variant("cpy_p1w4ev", 1, 4, "cpy", ev=True, prediction="ceiling with evict_first"),
    Variant("cpy_p1w4", 1, 4, "cpy", prediction="ceiling, 1 program per head (call 1: 90% N64)"),
    Variant("cpy_p2w4", 1, 4, "cpy", progs=2, prediction="ceiling, 2 per head"),
    Variant("cpy_p4w2", 1, 2, "cpy", progs=4, prediction="ceiling, 4 per head"),
    Variant("cpy_p8w1", 1, 1, "cpy", progs=8, prediction="ceiling, 8 per head"),
    Variant("gdn_m1w4pf", 1, 4, pf=True, family="gdn", prediction="GDN T8N64 >= 1.5x over upstream GDN"),
    Variant("gdn_m2w4pf", 2, 4, pf=True, family="gdn", prediction="GDN"),
    Variant("gdn_m4w4pf", 4, 4, pf=True, family="gdn", prediction="GDN"),
    Variant("gdn_p2m1w4pf", 1, 4, pf=True, progs=2, family="gdn", prediction="GDN T1"),
    Variant("gdn_p4m1w2pf", 1, 2, pf=True, progs=4, family="gdn", prediction="GDN T1"),
]

SETS = {"a1": SET_A1, "a2": SET_A2}


# ----------------------------------------------------------------------------------------------
# source generation


def _kernel_source(var: Variant) -> str:
    """Source of one merged KDA-decode kernel for ``var`` (state updated in place in ``h``)."""
    ns, vf = var.ns, var.vfirst
    L: list[str] = []
    a = L.append
    a(f'@triton.jit(do_not_specialize=["T"])')
    a(f"def {var.name}(q, k, v, g, beta, A_log, dt_bias, o, h, scale, T,")
    a("        H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,")
    a("        BK: tl.constexpr, BV: tl.constexpr, P: tl.constexpr):")
    a("    pid = tl.program_id(0).to(tl.int64)")
    a("    i_nh = pid // P")
    a("    c0 = (pid % P) * (V // P)  # first V column of this program")
    a("    i_n = i_nh // HV")
    a("    i_hv = i_nh % HV")
    a("    i_h = i_hv // (HV // H)")
    a("    bos = i_n * T")
    a("    o_k = tl.arange(0, BK)")
    a("    o_v = c0 + tl.arange(0, BV)")
    a("    mask_k = o_k < K")
    if vf:
        a("    mask_h = (o_v[:, None] < V) & mask_k[None, :]")
        a("    p_h = h + i_nh * K * V + o_v[:, None] * K + o_k[None, :]")
        step = "BV * K"
        kb, vb = "[None, :]", "[:, None]"
        red = 1
    else:
        a("    mask_h = mask_k[:, None] & (o_v[None, :] < V)")
        a("    p_h = h + i_nh * K * V + o_k[:, None] * V + o_v[None, :]")
        step = "BV"
        kb, vb = "[:, None]", "[None, :]"
        red = 0

    hint = ", eviction_policy='evict_first'" if var.ev else ""

    def load_h(j: int) -> str:
        return f"    b_h{j} = tl.load(p_h + {j} * {step}, mask=mask_h, other=0{hint})"

    def store_h(j: int, ind: str = "    ") -> str:
        return f"{ind}tl.store(p_h + {j} * {step}, b_h{j}, mask=mask_h{hint})"

    if var.mode == "cpy":
        for j in range(ns):
            a(load_h(j))
        for j in range(ns):
            a(store_h(j))
        return "\n".join(L) + "\n"
    if var.mode == "res":
        for j in range(ns):
            a(load_h(j))
    else:
        for j in range(min(var.depth, ns)):
            a(load_h(j))
    a("    b_nA = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))")
    gdn = var.family == "gdn"
    if gdn:  # one gate value per head and token
        a("    b_bias = tl.load(dt_bias + i_hv).to(tl.float32)")
    else:
        a("    b_bias = tl.load(dt_bias + i_hv * K + o_k, mask=mask_k, other=0).to(tl.float32)")
    a("    p_q = q + (bos * H + i_h) * K + o_k")
    a("    p_k = k + (bos * H + i_h) * K + o_k")
    if gdn:
        a("    p_g = g + bos * HV + i_hv")
    else:
        a("    p_g = g + (bos * HV + i_hv) * K + o_k")
    a("    p_b = beta + bos * HV + i_hv")
    a("    p_v = v + (bos * HV + i_hv) * V + o_v")
    a("    p_o = o + (bos * HV + i_hv) * V + o_v")

    def loads(ind: str, dst: str, off: str, nxt: str) -> None:
        mk = f"mask_k & {nxt}" if nxt else "mask_k"
        a(f"{ind}{dst}q = tl.load(p_q{off}, mask={mk}, other=0).to(tl.float32)")
        a(f"{ind}{dst}k = tl.load(p_k{off}, mask={mk}, other=0).to(tl.float32)")
        if gdn:
            a(f"{ind}{dst}g = tl.load(p_g{off}).to(tl.float32)")
        else:
            a(f"{ind}{dst}g = tl.load(p_g{off}, mask={mk}, other=0).to(tl.float32)")
        if nxt:
            a(f"{ind}{dst}b = tl.load(p_b{off}, mask={nxt}, other=0).to(tl.float32)")
        else:
            a(f"{ind}{dst}b = tl.load(p_b{off}).to(tl.float32)")
        if var.mode == "res":
            for j in range(ns):
                m = f", mask={nxt}, other=0" if nxt else ""
                a(f"{ind}{dst}v{j} = tl.load(p_v{off} + {j} * BV{m}).to(tl.float32)")

    def prologue(ind: str) -> None:
        if var.rsqrt:
            a(f"{ind}b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)")
            a(f"{ind}b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)")
        else:
            a(f"{ind}b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)")
            a(f"{ind}b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)")
            a(f"{ind}b_q = b_q * scale")
        a(f"{ind}b_x = b_g + b_bias")
        a(f"{ind}b_sp = tl.where(b_x > 20.0, b_x, tl.log(1.0 + tl.exp(b_x)))")
        a(f"{ind}b_d = tl.exp(b_nA * b_sp)")
        a(f"{ind}b_beta = tl.sigmoid(b_b)")

    def tile_update(ind: str, js: list[int]) -> None:
        # statement-major: each statement for every sub-tile before the next statement
        for j in js:
            a(f"{ind}b_h{j} *= b_d" + ("" if gdn else kb))
        for j in js:
            a(f"{ind}b_v{j} = (b_v{j} - tl.sum(b_h{j} * b_k{kb}, {red})) * b_beta")
        for j in js:
            if vf:
                a(f"{ind}b_h{j} += b_v{j}{vb} * b_k{kb}")
            else:
                a(f"{ind}b_h{j} += b_k{kb} * b_v{j}{vb}")
        for j in js:
            a(f"{ind}b_o{j} = tl.sum(b_h{j} * b_q{kb}, {red})")
        for j in js:
            a(f"{ind}tl.store(p_o + {j} * BV, b_o{j}.to(p_o.dtype.element_ty))")

    if var.mode == "res":
        if var.pf:
            loads("    ", "c_", "", "")
        a("    for i_t in range(0, T):")
        ind = "        "
        if var.pf:
            a(f"{ind}b_q = c_q")
            a(f"{ind}b_k = c_k")
            a(f"{ind}b_g = c_g")
            a(f"{ind}b_b = c_b")
            for j in range(ns):
                a(f"{ind}b_v{j} = c_v{j}")
            a(f"{ind}nxt = i_t + 1 < T")
            mk = "mask_k & nxt"
            a(f"{ind}c_q = tl.load(p_q + H * K, mask={mk}, other=0).to(tl.float32)")
            a(f"{ind}c_k = tl.load(p_k + H * K, mask={mk}, other=0).to(tl.float32)")
            if gdn:
                a(f"{ind}c_g = tl.load(p_g + HV, mask=nxt, other=0).to(tl.float32)")
            else:
                a(f"{ind}c_g = tl.load(p_g + HV * K, mask={mk}, other=0).to(tl.float32)")
            a(f"{ind}c_b = tl.load(p_b + HV, mask=nxt, other=0).to(tl.float32)")
            for j in range(ns):
                a(f"{ind}c_v{j} = tl.load(p_v + HV * V + {j} * BV, mask=nxt, other=0).to(tl.float32)")
        else:
            loads(ind, "b_", "", "")
        prologue(ind)
        tile_update(ind, list(range(ns)))
        a(f"{ind}p_q += H * K")
        a(f"{ind}p_k += H * K")
        a(f"{ind}p_g += " + ("HV" if gdn else "HV * K"))
        a(f"{ind}p_b += HV")
        a(f"{ind}p_v += HV * V")
        a(f"{ind}p_o += HV * V")
        for j in range(ns):
            a(store_h(j))
    else:  # streaming, T == 1
        ind = "    "
        a(f"{ind}b_q = tl.load(p_q, mask=mask_k, other=0).to(tl.float32)")
        a(f"{ind}b_k = tl.load(p_k, mask=mask_k, other=0).to(tl.float32)")
        a(f"{ind}b_g = tl.load(p_g" + (")" if gdn else ", mask=mask_k, other=0)") + ".to(tl.float32)")
        a(f"{ind}b_b = tl.load(p_b).to(tl.float32)")
        for j in range(ns):
            a(f"{ind}b_v{j} = tl.load(p_v + {j} * BV).to(tl.float32)")
        prologue(ind)
        for j in range(ns):
            if j + var.depth < ns:
                a(load_h(j + var.depth))
            tile_update(ind, [j])
            a(store_h(j))
    return "\n".join(L) + "\n"


def build_module(variants: list[Variant], where: str):
    src = ["import triton", "import triton.language as tl", ""]
    for var in variants:
        src.append(_kernel_source(var))
    path = os.path.join(where, "merge_tiles_probe_kernels.py")
    with open(path, "w") as f:
        f.write("\n\n".join(src))
    spec = importlib.util.spec_from_file_location("merge_tiles_probe_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, path


# ----------------------------------------------------------------------------------------------
# problem, reference, launchers


@dataclass
class Inputs:
    q: object
    k: object
    v: object
    g: object
    beta: object
    A_log: object
    dt_bias: object
    h: object  # fp32 state, [N, HV, K, V] or [N, HV, V, K] when vfirst
    o: object
    vfirst: bool


def make_inputs(torch, N, T, H, HV, K, V, device, seed, vfirst=False, family="kda") -> Inputs:
    gen = torch.Generator(device=device).manual_seed(seed)

    def rnd(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)

    q, k = rnd(N, T, H, K), rnd(N, T, H, K)
    v = rnd(N, T, HV, V)
    g = rnd(N, T, HV) if family == "gdn" else rnd(N, T, HV, K)
    beta = rnd(N, T, HV)
    A_log = (torch.rand(HV, generator=gen, device=device) * 2 - 1).float()
    dt_bias = rnd(HV if family == "gdn" else HV * K, scale=0.5, dtype=torch.float32)
    shape = (N, HV, V, K) if vfirst else (N, HV, K, V)
    h = rnd(*shape, scale=0.1, dtype=torch.float32)
    o = torch.full((N, T, HV, V), float("nan"), device=device, dtype=torch.bfloat16)
    return Inputs(q, k, v, g, beta, A_log, dt_bias, h, o, vfirst)


def reference(torch, x: Inputs, scale: float):
    """float64 KDA decode: returns (o [N,T,HV,V], final state in x.h's layout)."""
    d = torch.float64
    N, T, H, K = x.q.shape
    HV, V = x.v.shape[2], x.v.shape[3]
    rep = HV // H
    q = x.q.to(d).repeat_interleave(rep, dim=2)
    k = x.k.to(d).repeat_interleave(rep, dim=2)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * scale
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if x.g.ndim == 3:  # gated delta rule: one gate per head, broadcast over K
        gx = (x.g.to(d) + x.dt_bias.to(d)).unsqueeze(-1).expand(N, T, HV, K)
    else:
        gx = x.g.to(d) + x.dt_bias.to(d).view(HV, K)
    decay = torch.exp(-torch.exp(x.A_log.to(d)).view(HV, 1) * torch.nn.functional.softplus(gx))
    beta = torch.sigmoid(x.beta.to(d))
    h = x.h.to(d)
    if x.vfirst:
        h = h.transpose(-1, -2)
    h = h.clone()  # [N, HV, K, V]
    o = torch.empty(N, T, HV, V, dtype=d, device=x.q.device)
    for t in range(T):
        h = h * decay[:, t, :, :, None]
        kt = k[:, t]
        vt = (x.v[:, t].to(d) - torch.einsum("nhkv,nhk->nhv", h, kt)) * beta[:, t, :, None]
        h = h + kt[..., None] * vt[..., None, :]
        o[:, t] = torch.einsum("nhkv,nhk->nhv", h, q[:, t])
    if x.vfirst:
        h = h.transpose(-1, -2)
    return o, h


def launch_probe(mod, var: Variant, x: Inputs, scale: float):
    N, T, H, K = x.q.shape
    HV, V = x.v.shape[2], x.v.shape[3]
    BV = V // (var.ns * var.progs)
    fn = getattr(mod, var.name)
    extra = {"maxnreg": var.maxnreg} if var.maxnreg else {}
    return fn[(N * HV * var.progs,)](
        x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias, x.o, x.h, scale, T,
        H=H, HV=HV, K=K, V=V, BK=K, BV=BV, P=var.progs, num_warps=var.warps,
        num_stages=var.stages, **extra)


def launch_upstream_gdn(fg, x: Inputs, scale: float, BV=8, warps=1, stages=3):
    """fla-core 0.6.0 gated-delta-rule decode kernel as its wrapper launches it, but with the
    state updated in place (h0 = ht; each program reads its tile before writing it)."""
    N, T, H, K = x.q.shape
    HV, V = x.v.shape[2], x.v.shape[3]
    grid = (-(-V // BV) * N * HV,)
    fg.fused_recurrent_gated_delta_rule_fwd_kernel[grid](
        q=x.q, k=x.k, v=x.v, g=x.g, gk=None, gv=None, beta=x.beta, A_log=x.A_log,
        dt_bias=x.dt_bias, o=x.o, h0=x.h, ht=x.h, cu_seqlens=None, scale=scale, T=T, H=H, HV=HV,
        K=K, V=V, BK=K, BV=BV, IS_BETA_HEADWISE=True, USE_QK_L2NORM_IN_KERNEL=True,
        STATE_V_FIRST=False, APPLY_BETA_SIGMOID=True, ALLOW_NEG_EIGVAL=False,
        num_warps=warps, num_stages=stages)


def launch_upstream(fr, x: Inputs, scale: float, BV=None, warps=4, stages=2):
    """fla-core 0.6.0 fused_recurrent_kda forward, state in place; BV=None is the file as shipped."""
    if BV is None:
        fr.fused_recurrent_kda_fwd(
            q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, A_log=x.A_log, dt_bias=x.dt_bias,
            initial_state=x.h, scale=scale, inplace_final_state=True, state_v_first=x.vfirst,
            use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
            use_beta_sigmoid_in_kernel=True, out=x.o)
        return
    N, T, H, K = x.q.shape
    HV, V = x.v.shape[2], x.v.shape[3]
    grid = (-(-V // BV) * N * HV,)
    fr.fused_recurrent_kda_fwd_kernel[grid](
        q=x.q, k=x.k, v=x.v, g=x.g, beta=x.beta, A_log=x.A_log, dt_bias=x.dt_bias, o=x.o,
        h0=x.h, ht=x.h, cu_seqlens=None, ssm_state_indices=None, num_accepted_tokens=None,
        lower_bound=None, scale=scale, N=N, T=T, H=H, HV=HV, K=K, V=V, BK=K, BV=BV,
        stride_init_state_token=x.h.stride(0), stride_final_state_token=x.h.stride(0),
        stride_indices_seq=1, stride_indices_tok=1, IS_BETA_HEADWISE=False,
        USE_QK_L2NORM_IN_KERNEL=True, INPLACE_FINAL_STATE=True, USE_GATE_IN_KERNEL=True,
        APPLY_BETA_SIGMOID=True, ALLOW_NEG_EIGVAL=False, STATE_V_FIRST=x.vfirst,
        num_warps=warps, num_stages=stages)


@dataclass(frozen=True)
class Runner:
    name: str
    family: str
    vfirst: bool
    t1_only: bool
    ceiling: bool
    prediction: str
    call: object  # (Inputs) -> None


def runners(mod, fr, fg, scale, variants, set_name) -> list[Runner]:
    out = []
    if fr is not None:
        out.append(Runner("upstream", "kda", False, False, False, "T1 88.6us@N64 (FACTS)",
                          lambda x: launch_upstream(fr, x, scale)))
        out.append(Runner("up_bv16w2", "kda", False, False, False, "T1 78.9us@N64 (FACTS)",
                          lambda x: launch_upstream(fr, x, scale, BV=16, warps=2)))
        if set_name == "a1":
            out.append(Runner("up_vfirst", "kda", True, False, False, "layout only: ~ upstream",
                              lambda x: launch_upstream(fr, x, scale)))
    if fg is not None and any(v.family == "gdn" for v in variants):
        out.append(Runner("gdn_upstream", "gdn", False, False, False, "T8N64 211.6us (FACTS)",
                          lambda x: launch_upstream_gdn(fg, x, scale)))
        out.append(Runner("gdn_up_bv16w1", "gdn", False, False, False, "FACTS: 1.22x T1, 1.33x T8",
                          lambda x: launch_upstream_gdn(fg, x, scale, BV=16, warps=1)))
    for var in variants:
        out.append(Runner(var.name, var.family, var.vfirst, var.mode in ("str", "cpy"), var.mode == "cpy", var.prediction,
                          (lambda vv: (lambda x: launch_probe(mod, vv, x, scale)))(var)))
    return out


def rel_rms(torch, a, b) -> float:
    a, b = a.double(), b.double()
    return float(torch.sqrt(((a - b) ** 2).mean()) / torch.sqrt((b ** 2).mean()).clamp_min(1e-30))


def check(torch, r: Runner, shape, device, seed, scale):
    N, T, H, HV, K, V = family_shape(r.family, shape)
    x = make_inputs(torch, N, T, H, HV, K, V, device, seed, r.vfirst, r.family)
    inputs_before = [t.clone() for t in (x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias)]
    o_ref, h_ref = reference(torch, x, scale)
    bad = []
    try:
        r.call(x)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as e:  # a variant that does not compile fails its check, the run goes on
        return False, float("nan"), float("nan"), f"{type(e).__name__}: {str(e)[:300]}"
    if not torch.isfinite(x.o.float()).all():
        bad.append("o has NaN/inf (unwritten or overflow)")
    if not torch.isfinite(x.h).all():
        bad.append("state has NaN/inf")
    for t0, t1 in zip(inputs_before, (x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias)):
        if not torch.equal(t0, t1):
            bad.append("an input was modified")
    eo, eh = rel_rms(torch, x.o, o_ref), rel_rms(torch, x.h, h_ref)
    ok = not bad and eo < 6e-3 and eh < 1e-4  # o is bf16; the state stays fp32
    return ok, eo, eh, "; ".join(bad)


# ----------------------------------------------------------------------------------------------
# timing


def family_shape(family, shape):
    """The issue's shapes: KDA has H = HV = 32; the gated-delta-rule decode H = 16, HV = 32."""
    N, T, H, HV, K, V = shape
    return (N, T, max(1, H // 2), HV, K, V) if family == "gdn" else shape


def roofline_bytes(family, N, T, H, HV, K, V) -> int:
    state = 2 * N * HV * K * V * 4
    gk = 1 if family == "gdn" else K
    io = 2 * N * T * H * K * 2 + N * T * HV * gk * 2 + 2 * N * T * HV * V * 2 + N * T * HV * 2
    return state + io + HV * 4 + HV * gk * 4


def time_shape(torch, rs: list[Runner], shape0, reps: int):
    """Median us per call for each runner; all runners interleaved replay by replay."""
    N, T, H, HV, K, V = shape0
    state_bytes = N * HV * K * V * 4
    R = max(2, math.ceil(240e6 / state_bytes))  # rotate sets: >120 MB of state per replay
    graphs, alive = {}, []
    for r in rs:
        if r.t1_only and T != 1:
            continue
        shp = family_shape(r.family, shape0)
        sets = [make_inputs(torch, *shp, "cuda", 1000 + i, r.vfirst, r.family) for i in range(R)]
        graphs[r.name] = G.capture(torch, r.call, sets)
        alive.append(sets)
    out = {}
    for n, ts in G.interleaved_us(torch, graphs, reps, R).items():
        out[n] = {"p50": ts[len(ts) // 2], "p20": ts[len(ts) // 5], "p80": ts[(4 * len(ts)) // 5]}
    del graphs, alive
    torch.cuda.empty_cache()
    return out, R


# ----------------------------------------------------------------------------------------------
# main


def import_upstream():
    try:
        import fla.ops.gated_delta_rule.fused_recurrent as fg
        import fla.ops.kda.fused_recurrent as fr  # fla-core 0.6.0, pure Python

        return fr, fg, ""
    except Exception as e:  # reported, the merged variants are still measured
        return None, None, f"{type(e).__name__}: {e}"


def cpu_check(set_name: str) -> int:
    import torch

    variants = SETS[set_name]
    where = tempfile.mkdtemp(prefix="mtp_")
    mod, _ = build_module(variants, where)
    fr, fg, why = import_upstream()
    scale = 32 ** -0.5
    rs = runners(mod, fr, fg, scale, variants, set_name)
    fails = 0
    for r in rs:
        if r.ceiling:
            continue
        for T in ((1,) if r.t1_only else (1, 3)):
            shape = (2, T, 4, 4, 32, 32)
            ok, eo, eh, why_bad = check(torch, r, shape, "cpu", 7 + T, scale)
            fails += not ok
            print(f"{r.name:12s} T={T} ok={ok} err_o={eo:.2e} err_h={eh:.2e} {why_bad}")
    if fr is None:
        print("upstream not importable:", why)
    return 1 if fails else 0


def gpu_main(out_dir: str, reps: int, only: str | None, set_name: str) -> int:
    import torch
    import triton

    variants = SETS[set_name]
    os.makedirs(out_dir, exist_ok=True)
    where = tempfile.mkdtemp(prefix="mtp_")
    mod, src_path = build_module(variants, where)
    fr, fg, why = import_upstream()
    H, HV, K, V = 32, 32, 128, 128
    scale = K ** -0.5
    rs = runners(mod, fr, fg, scale, variants, set_name)
    if only:
        keep = set(only.split(","))
        rs = [r for r in rs if r.name in keep]
    info = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "upstream_import_error": why,
        "command": " ".join(sys.argv), "reps": reps, "set": set_name,
    }
    print(json.dumps(info), flush=True)
    # numerics first: every variant on fresh inputs at two small shapes and one odd one
    checks = {}
    for r in rs:
        res = []
        if r.ceiling:
            checks[r.name] = res
            continue
        for shape, seed in (((4, 1, H, HV, K, V), 1), ((3, 5, 16, HV, K, V), 2), ((33, 1, H, HV, K, V), 3)):
            if r.t1_only and shape[1] != 1:
                continue
            t0 = time.time()
            ok, eo, eh, bad = check(torch, r, shape, "cuda", seed, scale)
            res.append({"shape": shape, "ok": ok, "err_o": eo, "err_h": eh, "bad": bad,
                        "s": round(time.time() - t0, 2)})
        checks[r.name] = res
        print(r.name, "check", [(c["shape"][:2], c["ok"], f"{c['err_o']:.1e}/{c['err_h']:.1e}") for c in res],
              flush=True)
    good = [r for r in rs if all(c["ok"] for c in checks[r.name])]
    regs = {}
    for var in variants:
        if var.name not in {r.name for r in good}:
            continue
        xs = make_inputs(torch, *family_shape(var.family, (2, 1, H, HV, K, V)), "cuda", 5,
                         var.vfirst, var.family)
        ck = launch_probe(mod, var, xs, scale)
        regs[var.name] = (getattr(ck, "n_regs", None), getattr(ck, "n_spills", None))
    info["regs_spills"] = regs
    print("regs/spills", regs, flush=True)
    bw = G.copy_bandwidth(torch)
    info["copy_bw_TBps"] = bw / 1e12
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    results = []
    for T in (1, 4, 8):
        for N in (32, 64, 256):
            shape = (N, T, H, HV, K, V)
            t0 = time.time()
            times, R = time_shape(torch, good, shape, reps)
            fam = {r.name: r.family for r in good}
            for name, t in times.items():
                roof_us = roofline_bytes(fam[name], *family_shape(fam[name], shape)) / bw * 1e6
                results.append({"T": T, "N": N, "variant": name, "rot": R, "roof_us": roof_us,
                                "pct_roof": 100 * roof_us / t["p50"], **t})
            print(f"T={T} N={N} timed {len(times)} in {time.time() - t0:.1f}s", flush=True)
    with open(os.path.join(out_dir, "merge_tiles_probe.json"), "w") as f:
        json.dump({"info": info, "checks": checks, "results": results,
                   "variants": [asdict(v) for v in variants]}, f, indent=1)
    with open(src_path) as f, open(os.path.join(out_dir, "merge_tiles_probe_kernels.py"), "w") as g:
        g.write(f.read())
    # compact table: us (and % roofline) per variant and shape, speedup vs upstream
    base = {(r["T"], r["N"], "kda"): r["p50"] for r in results if r["variant"] == "upstream"}
    base.update({(r["T"], r["N"], "gdn"): r["p50"] for r in results if r["variant"] == "gdn_upstream"})
    fam = {r.name: r.family for r in good}
    names = [r.name for r in good]
    cols = [(T, N) for T in (1, 4, 8) for N in (32, 64, 256)]
    print("\nvariant      " + " ".join(f"T{T}N{N:<3d}      " for T, N in cols))
    for n in names:
        cells = []
        for T, N in cols:
            m = [r for r in results if r["variant"] == n and r["T"] == T and r["N"] == N]
            if not m:
                cells.append(" " * 15)
                continue
            r = m[0]
            sp = base.get((T, N, fam[n]), float("nan")) / r["p50"]
            cells.append(f"{r['p50']:6.1f}/{r['pct_roof']:3.0f}%/{sp:4.2f}")
        print(f"{n:12s} " + " ".join(cells))
    failed = [r.name for r in rs if r not in good]
    print("failed numerics:", failed, "| us/%roof/xupstream | copy", f"{bw / 1e12:.3f} TB/s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-check", action="store_true", help="numerics only, Triton interpreter, tiny shapes")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/merge_tiles_probe"))
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--only", default=None, help="comma-separated runner names")
    ap.add_argument("--set", default="a2", choices=sorted(SETS), help="variant set (a1: call 1)")
    a = ap.parse_args()
    return cpu_check(a.set) if a.cpu_check else gpu_main(a.out, a.reps, a.only, a.set)


if __name__ == "__main__":
    sys.exit(main())
