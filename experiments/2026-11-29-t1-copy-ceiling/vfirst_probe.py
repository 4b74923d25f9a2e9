"""Issue 5, T = 1, N = 32: is the state's layout what keeps the KDA step under 90 % of the copy roofline? (H200)

The suite's and fla-core's KDA decode keep the state K-major, ``[N, HV, K, V]`` (V contiguous). A program
that owns V columns must hold all K rows of them, because both contractions reduce over K: its tile is
128 rows of 512 / P bytes, 512 bytes apart, and the reductions cross the rows. Copies through such grids
read 85-92 % of the 1 GiB copy at N = 32, where torch's elementwise pass and a Triton copy of 4 KB
contiguous blocks read 94 % (t1_ceiling_probe.md, call 12). SGLang keeps its KDA/GDN decode state V-major,
``[slots, HV, V, K]`` (K contiguous; sglang 0.5.23, kernels/ops/attention/fla/fused_recurrent.py, the
packed decode kernels): a program's rows are then whole contiguous 512-byte rows, its tile one contiguous
block, and the reductions over K stay inside a row.

This probe writes the same KDA step (rsqrt norms, per-channel gate, delta rule, token loop with a runtime T
and its operands loaded one step ahead, as SK002 emits) for both layouts and times, in one process:

  kf_p{P}w{W}   K-major state, P programs per (sequence, head), W warps (kf_p2w2 is SK002's T = 1 plan)
  vf_p{P}w{W}   V-major state, the same step with the tile transposed
  kcpy_* / vcpy_*  in-place copies of the state through the same grids, no math

Method: t1_ceiling_probe's (graphs of >= 8 calls over rotated input sets, interleaved, median of --reps),
with the roofline against both the median and the best (the gate's denominator) of 20 copies of 1 GiB.

    python experiments/2026-11-29-t1-copy-ceiling/vfirst_probe.py --out $OUT                      # GPU
    TRITON_INTERPRET=1 python experiments/2026-11-29-t1-copy-ceiling/vfirst_probe.py --cpu-check  # numerics on a CPU
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing, merge_tiles_probe
sys.path.insert(0, str(Path(__file__).resolve().parent))  # t1_ceiling_probe
import graph_timing as G  # noqa: E402
import t1_ceiling_probe as C  # noqa: E402
from t1_ceiling_probe import H, HV, K, V, _softplus, rel, roof_bytes


@triton.jit(do_not_specialize=["T"])
def kda_step(q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
             H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
             VFIRST: tl.constexpr):
    """T KDA decode steps of one (sequence, head, V tile); the state tile stays in registers across them.
    VFIRST: the state is [N, HV, V, K] and the tile [BV, K]; else [N, HV, K, V] and the tile [K, BV]."""
    NV: tl.constexpr = V // BV
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    if VFIRST:
        p_s = state + i_nh * K * V + o_v[:, None] * K + o_k[None, :]
    else:
        p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(p_s)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_k = k + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * HV + i_hv) * V + o_v
    p_g = g + (i_n * T * HV + i_hv) * K + o_k
    p_b = beta + i_n * T * HV + i_hv
    p_o = o + (i_n * T * HV + i_hv) * V + o_v
    b_A = tl.exp(tl.load(A_log + i_hv).to(tl.float32))
    b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
    n_q = tl.load(p_q, mask=(o_k < K) & (T > 0)).to(tl.float32)
    n_k = tl.load(p_k, mask=(o_k < K) & (T > 0)).to(tl.float32)
    n_v = tl.load(p_v, mask=(o_v < V) & (T > 0)).to(tl.float32)
    n_g = tl.load(p_g, mask=(o_k < K) & (T > 0)).to(tl.float32)
    n_b = tl.load(p_b, mask=T > 0).to(tl.float32)
    for t in range(0, T):
        b_q, b_k, b_v, b_g, b_b = n_q, n_k, n_v, n_g, n_b
        more = t + 1 < T
        n_q = tl.load(p_q + (t + 1) * H * K, mask=(o_k < K) & more).to(tl.float32)
        n_k = tl.load(p_k + (t + 1) * H * K, mask=(o_k < K) & more).to(tl.float32)
        n_v = tl.load(p_v + (t + 1) * HV * V, mask=(o_v < V) & more).to(tl.float32)
        n_g = tl.load(p_g + (t + 1) * HV * K, mask=(o_k < K) & more).to(tl.float32)
        n_b = tl.load(p_b + (t + 1) * HV, mask=more).to(tl.float32)
        b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_decay = tl.exp(-b_A * _softplus(b_g + b_bias))
        b_beta = tl.sigmoid(b_b)
        if VFIRST:
            b_s = b_s * b_decay[None, :]
            b_delta = (b_v - tl.sum(b_s * b_k[None, :], 1)) * b_beta
            b_s = b_s + b_delta[:, None] * b_k[None, :]
            b_o = tl.sum(b_s * b_q[None, :], 1)
        else:
            b_s = b_s * b_decay[:, None]
            b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
            b_s = b_s + b_k[:, None] * b_delta[None, :]
            b_o = tl.sum(b_s * b_q[:, None], 0)
        tl.store(p_o + t * HV * V, b_o.to(o.dtype.element_ty))
    tl.store(p_s, b_s)


@triton.jit
def state_copy(state, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, VFIRST: tl.constexpr):
    """The in-place copy through the step's grid (+0.5, no other work)."""
    NV: tl.constexpr = V // BV
    pid = tl.program_id(0).to(tl.int64)
    o_k = tl.arange(0, K)
    o_v = (pid % NV) * BV + tl.arange(0, BV)
    if VFIRST:
        p_s = state + (pid // NV) * K * V + o_v[:, None] * K + o_k[None, :]
    else:
        p_s = state + (pid // NV) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_s, tl.load(p_s) + 0.5)


def inputs(N, T, device, seed, vfirst):
    """t1_ceiling_probe's inputs, the state transposed to [N, HV, V, K] for the V-major step."""
    x = C.inputs(N, T, device, seed)
    del x["dst"]
    if vfirst:
        x["state"] = x["state"].transpose(-1, -2).contiguous()
    x["o"] = torch.empty_like(x["v"])
    return x


def step_call(P, W, vfirst):
    def call(x):
        N, T = x["q"].shape[:2]
        kda_step[(N * HV * P,)](x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], x["o"],
                                x["state"], K ** -0.5, T, H=H, HV=HV, K=K, V=V, BV=V // P, VFIRST=vfirst,
                                num_warps=W, num_stages=1)
        return x["o"]
    return call


def copy_call(P, W, vfirst):
    def call(x):
        N = x["state"].shape[0]
        state_copy[(N * HV * P,)](x["state"], K=K, V=V, BV=V // P, VFIRST=vfirst, num_warps=W, num_stages=1)
    return call


STEPS = {}
for _vf, _tag in ((False, "kf"), (True, "vf")):
    for _p, _w in ((1, 4), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1), (8, 2), (16, 1)):
        STEPS[f"{_tag}_p{_p}w{_w}"] = (step_call(_p, _w, _vf), _vf)
COPIES = {}
for _vf, _tag in ((False, "kcpy"), (True, "vcpy")):
    for _p, _w in ((2, 2), (4, 1), (8, 1)):
        COPIES[f"{_tag}_p{_p}w{_w}"] = (copy_call(_p, _w, _vf), _vf)
VARIANTS = {**STEPS, **COPIES}


def reference(x, T, vfirst):
    """t1_ceiling_probe's float64 KDA decode, on the K-major view of the state."""
    k_major = dict(x, state=x["state"].transpose(-1, -2)) if vfirst else x
    out, S = C.reference(k_major, T)
    return out, (S.transpose(-1, -2) if vfirst else S)


def check(device, names) -> int:
    bad = 0
    for name in names:
        fn, vf = STEPS[name]
        for N, T in ((2, 1), (1, 3)):
            x = inputs(N, T, device, 7, vf)
            ref_o, ref_s = reference(x, T, vf)
            o = fn(x)
            eo, es = rel(o, ref_o), rel(x["state"], ref_s)
            ok = eo < 6e-3 and es < 1e-4
            bad += not ok
            print(f"{name:10s} N={N} T={T}: o {eo:.1e} state {es:.1e} {'ok' if ok else 'FAIL'}", flush=True)
    return bad


def gpu(out_dir, reps, shapes) -> int:
    bad = check("cuda", list(STEPS))
    med_bw, best_bw = G.copy_bandwidth(torch), G.copy_bandwidth(torch, best=True)
    head = G.header(torch, triton, med_bw, reps, f"best copy {best_bw / 1e12:.3f} TB/s, graphs of >= 8 calls, ")
    print(head, flush=True)
    rows = {}
    for N, T in shapes:
        R = G.rotation(N * HV * K * V * 4)
        for vf in (False, True):
            calls = {n: fn for n, (fn, f) in VARIANTS.items() if f == vf and (T == 1 or n in STEPS)}
            med = G.median_us(torch, calls, lambda i: inputs(N, T, "cuda", 100 + i, vf), R, reps, min_calls=8)
            for n, us in med.items():
                pct = roof_bytes(N, T) / best_bw / (us * 1e-6) * 100
                rows.setdefault(n, {})[f"N{N}T{T}"] = (us, pct)
                print(f"N={N} T={T} {n:10s} {us:8.1f} us {pct:5.1f} % of the best copy "
                      f"({roof_bytes(N, T) / med_bw / (us * 1e-6) * 100:5.1f} % of the median)", flush=True)
    cols = [f"N{N}T{T}" for N, T in shapes]
    text = G.table("KDA step, K-major against V-major state (% of the best of 20 copies)", head, rows, cols,
                   [f"N{N} T{T}" for N, T in shapes])
    print(text)
    G.save(out_dir, "vfirst_probe", head, rows, text)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--cpu-check", action="store_true")
    a = ap.parse_args()
    if a.cpu_check:
        return 1 if check("cpu", ["kf_p2w2", "vf_p2w2", "vf_p8w1"]) else 0
    return gpu(a.out, a.reps, [(32, 1), (64, 1), (256, 1), (64, 8)])


if __name__ == "__main__":
    sys.exit(main())
