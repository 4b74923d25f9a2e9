"""Issue 5, T = 1 at N = 32: does the KDA step reach the copy roofline with explicit layouts? (H200)

t1_ceiling_probe.md found every Triton structure of the KDA decode step 3 us per call behind a state
copy at N = 32 and read it as each program's serial chain: Triton lays the [K, BV] state tile out with
warps along K, so the two contractions, both L2 norms and the [K]-vector layout conversions each go
through shared memory and a barrier (17 bar.sync in the P = 2 / 4-warp step). Gluon (triton's
explicit-layout dialect, triton.experimental.gluon, in triton 3.6) lets the kernel say where every
element lives: here lanes and registers along K, warps along V, so every reduction over K is in-thread
adds and lane shuffles (0 barriers, 0 shared memory), and the [K] vectors are loaded straight into the
state's slice layout.

Variants: `gl_b{BV}_k{TK}_w{W}` (BV columns per program, TK lanes along K, W warps along V; the
remaining lanes along V, 4 columns per lane), with the same math as the suite's KDA step (rsqrt norms,
gate and beta in kernel) and a T loop keeping the state in registers; `gcp_*` the same grid as a pure
copy; `cpy_p2w4` / `abl_p2w4` are t1_ceiling_probe's Triton copy and best Triton step, for reference.

    python experiments/2026-11-29-t1-copy-ceiling/t1_gluon_probe.py --out $OUT          # on the GPU
    python experiments/2026-11-29-t1-copy-ceiling/t1_gluon_probe.py --compile-only      # any machine: compile for sm_90, count barriers
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing, merge_tiles_probe
sys.path.insert(0, str(Path(__file__).resolve().parent))  # t1_ceiling_probe
import graph_timing as G  # noqa: E402
import t1_ceiling_probe as P  # noqa: E402

H, HV, K, V = P.H, P.HV, P.K, P.V


@gluon.jit
def kda_gl(q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
           H: gl.constexpr, HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BV: gl.constexpr,
           TK: gl.constexpr, W: gl.constexpr, COPY: gl.constexpr):
    TV: gl.constexpr = 32 // TK
    L: gl.constexpr = gl.BlockedLayout([K // TK, 4], [TK, TV], [1, W], [1, 0])
    LK: gl.constexpr = gl.SliceLayout(1, L)
    LV: gl.constexpr = gl.SliceLayout(0, L)
    NV: gl.constexpr = V // BV
    w = gl.program_id(0).to(gl.int64)
    i_v = w % NV
    i_nh = w // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = gl.arange(0, K, layout=LK)
    o_v = i_v * BV + gl.arange(0, BV, layout=LV)
    p_s = state + i_nh * K * V + gl.expand_dims(o_k, 1) * V + gl.expand_dims(o_v, 0)
    b_s = gl.load(p_s)
    if COPY:
        gl.store(p_s, b_s + 0.5)
    else:
        b_bias = gl.load(dt_bias + i_hv * K + o_k)
        b_A = gl.exp(gl.load(A_log + i_hv))
        for t in range(T):
            b_q = gl.load(q + ((i_n * T + t) * H + i_h) * K + o_k).to(gl.float32)
            b_k = gl.load(k + ((i_n * T + t) * H + i_h) * K + o_k).to(gl.float32)
            b_g = gl.load(g + ((i_n * T + t) * HV + i_hv) * K + o_k).to(gl.float32)
            b_v = gl.load(v + ((i_n * T + t) * HV + i_hv) * V + o_v).to(gl.float32)
            b_b = gl.load(beta + (i_n * T + t) * HV + i_hv).to(gl.float32)
            b_beta = 1.0 / (1.0 + gl.exp(-b_b))
            b_q = b_q * (gl.rsqrt(gl.sum(b_q * b_q, 0) + 1e-6) * scale)
            b_k = b_k * gl.rsqrt(gl.sum(b_k * b_k, 0) + 1e-6)
            x = b_g + b_bias
            b_decay = gl.exp(-b_A * gl.where(x > 20.0, x, gl.log(1.0 + gl.exp(x))))
            b_s = b_s * gl.expand_dims(b_decay, 1)
            b_delta = (b_v - gl.sum(b_s * gl.expand_dims(b_k, 1), 0)) * b_beta
            b_s = b_s + gl.expand_dims(b_k, 1) * gl.expand_dims(b_delta, 0)
            b_o = gl.sum(b_s * gl.expand_dims(b_q, 1), 0)
            gl.store(o + ((i_n * T + t) * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty))
        gl.store(p_s, b_s)


def gl_call(BV, TK, W, copy=False):
    assert (32 // TK) * 4 * W == BV, f"BV = {BV} is not (32 / TK) lanes x 4 columns x {W} warps"

    def call(x):
        N, T = x["q"].shape[:2]
        o, ops = P._step(x)
        kda_gl[(N * HV * (V // BV),)](*ops, T, H=H, HV=HV, K=K, V=V, BV=BV, TK=TK, W=W, COPY=copy,
                                      num_warps=W)
        return o
    return call


PLANS = [(64, 8, 4), (64, 4, 2), (32, 8, 2), (32, 4, 1), (128, 8, 8), (128, 4, 4), (64, 16, 8), (32, 16, 4)]
VARIANTS = {"cpy_p2w4": P.copy_call(2, 4), "abl_p2w4": P.abl_call(2, 4), "kda_p4w1": P.kda_call(4, 1),
            "kda_p2w2": P.kda_call(2, 2)}
VARIANTS.update({f"gcp_b{b}_k{t}_w{w}": gl_call(b, t, w, copy=True) for b, t, w in PLANS[:4]})
VARIANTS.update({f"gl_b{b}_k{t}_w{w}": gl_call(b, t, w) for b, t, w in PLANS})
SHAPES = [(32, 1), (64, 1), (256, 1), (64, 8)]
T1_ONLY = ("cpy", "gcp", "abl")


def compile_only() -> int:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    sig = {n: "*bf16" for n in ("q", "k", "v", "g", "beta")}
    sig.update({"A_log": "*fp32", "dt_bias": "*fp32", "o": "*bf16", "state": "*fp32", "scale": "fp32", "T": "i32"})
    for b, t, w in PLANS:
        sig.update({n: "constexpr" for n in ("H", "HV", "K", "V", "BV", "TK", "W", "COPY")})
        const = dict(H=H, HV=HV, K=K, V=V, BV=b, TK=t, W=w, COPY=False)
        src = GluonASTSource(kda_gl, sig, const, attrs={(i,): [["tt.divisibility", 16]] for i in range(9)})
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": 1})
        ptx = c.asm["ptx"]
        print(f"gl_b{b}_k{t}_w{w}: bar.sync {len(re.findall(r'bar[.]sync', ptx))}, "
              f"st.shared {len(re.findall(r'st[.]shared', ptx))}, shfl {len(re.findall(r'shfl', ptx))}")
    return 0


def check() -> int:
    bad = 0
    for name, fn in VARIANTS.items():
        if not name.startswith(("gl_", "abl")):
            continue
        for N, T in ((2, 1), (3, 2)) if name.startswith("gl_") else ((2, 1),):
            x = P.inputs(N, T, "cuda", 7)
            ref_o, ref_s = P.reference(x, T)
            o = fn(x)
            eo, es = P.rel(o, ref_o), P.rel(x["state"], ref_s)
            ok = eo < 6e-3 and es < 1e-4
            bad += not ok
            print(f"{name:18s} N={N} T={T}: o {eo:.1e} state {es:.1e} {'ok' if ok else 'FAIL'}", flush=True)
    return bad


def gpu(out_dir, reps) -> int:
    bad = check()
    bw = G.copy_bandwidth(torch)
    head = G.header(torch, triton, bw, reps)
    print(head, flush=True)
    rows = {}
    for N, T in SHAPES:
        names = [n for n in VARIANTS if T == 1 or not n.startswith(T1_ONLY)]
        R = G.rotation(N * HV * K * V * 4)
        med = G.median_us(torch, {n: VARIANTS[n] for n in names}, lambda i: P.inputs(N, T, "cuda", 100 + i), R, reps)
        for n, us in med.items():
            pct = P.roof_bytes(N, T) / bw / (us * 1e-6) * 100
            rows.setdefault(n, {})[f"N{N}T{T}"] = (us, pct)
            print(f"N={N} T={T} R={R} {n:18s} {us:8.1f} us {pct:5.1f} %", flush=True)
    text = G.table("Gluon T = 1 probe", head, rows, [f"N{N}T{T}" for N, T in SHAPES])
    print(text)
    G.save(out_dir, "t1_gluon_probe", head, rows, text)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()
    return compile_only() if a.compile_only else gpu(a.out, a.reps)


if __name__ == "__main__":
    sys.exit(main())
