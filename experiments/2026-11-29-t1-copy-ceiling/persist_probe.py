"""Issue 5: does a persistent grid that loads the next state tile during this tile's steps beat the
per-tile grid? (KDA and GDN decode, H200)

Why: at T = 8 the accepted SK002 variants are neither memory- nor issue-bound (GDN N = 64: 126 us
against ~65 us of state traffic and ~48 us of instruction issue). Every program of a wave loads its
state, runs its T steps, then stores: the programs resident on an SM start together and stay in
phase, so the SM alternates between waiting for memory and computing. A persistent program that
issues the load of its next tile (into registers, no shared memory) before the current tile's steps
overlaps the two. At T = 1 the same structure moves each tile's serial chain off the memory's
critical path, which t1_ceiling_probe.md found to cost ~3 us per call at N = 32.

Variants (both families, one source): `tile_p{P}w{W}`: one program per (sequence, head, V tile of
V/P), the token loop's operands loaded one step ahead (what SK002 emits); `pers_p{P}w{W}_c{C}`: C x SMs
programs, each walking tiles pid, pid + G, ..., the next tile's state loaded before this tile's steps;
`cpy_p2w4`: t1_ceiling_probe's in-place state copy (T = 1 only).

    python experiments/2026-11-29-t1-copy-ceiling/persist_probe.py --out $OUT                      # GPU
    TRITON_INTERPRET=1 python experiments/2026-11-29-t1-copy-ceiling/persist_probe.py --cpu-check  # numerics on a CPU
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-11-29-sk002-merged-structure"))  # graph_timing, merge_tiles_probe
import graph_timing as G  # noqa: E402
import merge_tiles_probe as M  # noqa: E402


@triton.jit
def _softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


@triton.jit
def _steps(b_s, q, k, v, g, beta, A_log, dt_bias, o, scale, T, i_n, i_hv, o_k, o_v,
           H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, GDN: tl.constexpr,
           LAZY: tl.constexpr = False):
    """T decode steps of one [K, BV] state tile held in registers; each step's operands are loaded
    one step ahead. LAZY: the decay is not applied to the tile each step; the tile holds
    H = S / c (c the running product of the decays, per K row) and the [K] vectors absorb c:
    S'^T k = H^T (c k), S = C (H + (k / c) delta^T), o = H^T (c q); the tile is scaled by c once at
    the end, or early when min(c) would fall under 1e-20 (then that step runs as written)."""
    i_h = i_hv // (HV // H)
    p_q = q + (i_n * T * H + i_h) * K + o_k
    p_k = k + (i_n * T * H + i_h) * K + o_k
    p_v = v + (i_n * T * HV + i_hv) * V + o_v
    p_o = o + (i_n * T * HV + i_hv) * V + o_v
    p_b = beta + i_n * T * HV + i_hv
    b_A = tl.exp(tl.load(A_log + i_hv))
    if GDN:
        p_g = g + i_n * T * HV + i_hv
        b_bias = tl.load(dt_bias + i_hv)
    else:
        p_g = g + (i_n * T * HV + i_hv) * K + o_k
        b_bias = tl.load(dt_bias + i_hv * K + o_k)
    n_q = tl.load(p_q).to(tl.float32)
    n_k = tl.load(p_k).to(tl.float32)
    n_v = tl.load(p_v).to(tl.float32)
    n_g = tl.load(p_g).to(tl.float32)
    n_b = tl.load(p_b).to(tl.float32)
    if GDN:  # LAZY: the running decay (GDN: one for all rows; KDA: per K row)
        b_c = tl.full([], 1.0, tl.float32)
    else:
        b_c = tl.full([K], 1.0, tl.float32)
    for t in range(T):
        b_q, b_k, b_v, b_g, b_b = n_q, n_k, n_v, n_g, n_b
        nxt = t + 1 < T
        GK: tl.constexpr = 1 if GDN else K
        n_q = tl.load(p_q + (t + 1) * H * K, mask=nxt, other=0.0).to(tl.float32)
        n_k = tl.load(p_k + (t + 1) * H * K, mask=nxt, other=0.0).to(tl.float32)
        n_v = tl.load(p_v + (t + 1) * HV * V, mask=nxt, other=0.0).to(tl.float32)
        n_g = tl.load(p_g + (t + 1) * HV * GK, mask=nxt, other=0.0).to(tl.float32)
        n_b = tl.load(p_b + (t + 1) * HV, mask=nxt, other=0.0).to(tl.float32)
        b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_beta = tl.sigmoid(b_b)
        b_decay = tl.exp(-b_A * _softplus(b_g + b_bias))
        if LAZY:
            b_c = b_c * b_decay
            if GDN:
                if b_c < 1e-20:  # flush: this step decays the tile as written
                    b_s = b_s * b_c
                    b_c = b_c * 0.0 + 1.0
            else:
                if tl.min(b_c) < 1e-20:
                    b_s = b_s * b_c[:, None]
                    b_c = b_c * 0.0 + 1.0
            b_kc = b_k * b_c
            b_delta = (b_v - tl.sum(b_s * b_kc[:, None], 0)) * b_beta
            b_s = b_s + (b_k / b_c)[:, None] * b_delta[None, :]
            b_o = tl.sum(b_s * (b_q * b_c)[:, None], 0)
        else:
            if GDN:
                b_s = b_s * b_decay
            else:
                b_s = b_s * b_decay[:, None]
            b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
            b_s = b_s + b_k[:, None] * b_delta[None, :]
            b_o = tl.sum(b_s * b_q[:, None], 0)
        tl.store(p_o + t * HV * V, b_o.to(o.dtype.element_ty))
    if LAZY:
        if GDN:
            b_s = b_s * b_c
        else:
            b_s = b_s * b_c[:, None]
    return b_s


@triton.jit
def dec_tile(q, k, v, g, beta, A_log, dt_bias, o, state, scale, T,
             H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
             GDN: tl.constexpr, LAZY: tl.constexpr = False):
    NV: tl.constexpr = V // BV
    w = tl.program_id(0).to(tl.int64)
    i_nh = w // NV
    o_k = tl.arange(0, K)
    o_v = (w % NV) * BV + tl.arange(0, BV)
    p_s = state + i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(p_s)
    b_s = _steps(b_s, q, k, v, g, beta, A_log, dt_bias, o, scale, T, i_nh // HV, i_nh % HV, o_k, o_v,
                 H, HV, K, V, GDN, LAZY)
    tl.store(p_s, b_s)


dec_tile_rt = triton.jit(do_not_specialize=["T"])(dec_tile.fn)  # T a runtime value even when 1


@triton.jit
def dec_pers(q, k, v, g, beta, A_log, dt_bias, o, state, scale, T, NWORK,
             H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
             GDN: tl.constexpr):
    NV: tl.constexpr = V // BV
    G = tl.num_programs(0)
    o_k = tl.arange(0, K)
    o_b = tl.arange(0, BV)
    w = tl.program_id(0).to(tl.int64)
    b_nx = tl.load(state + (w // NV) * K * V + o_k[:, None] * V + ((w % NV) * BV + o_b)[None, :],
                   mask=w < NWORK, other=0.0)
    while w < NWORK:
        b_s = b_nx
        wn = w + G
        b_nx = tl.load(state + (wn // NV) * K * V + o_k[:, None] * V + ((wn % NV) * BV + o_b)[None, :],
                       mask=wn < NWORK, other=0.0)
        i_nh = w // NV
        o_v = (w % NV) * BV + o_b
        b_s = _steps(b_s, q, k, v, g, beta, A_log, dt_bias, o, scale, T, i_nh // HV, i_nh % HV, o_k, o_v,
                     H, HV, K, V, GDN)
        tl.store(state + i_nh * K * V + o_k[:, None] * V + o_v[None, :], b_s)
        w = wn


def sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4


def _ops(x, scale):
    return (x.q, x.k, x.v, x.g, x.beta, x.A_log, x.dt_bias, x.o, x.h, scale)


def tile_call(P, W, lazy=False, rt=False):
    def call(x, gdn):
        N, T, H, K = x.q.shape
        HV, V = x.v.shape[2:]
        (dec_tile_rt if rt else dec_tile)[(N * HV * P,)](*_ops(x, K ** -0.5), T, H=H, HV=HV, K=K, V=V, BV=V // P, GDN=gdn, LAZY=lazy,
                                num_warps=W, num_stages=1)
        return x.o
    return call


def pers_call(P, W, C):
    def call(x, gdn):
        N, T, H, K = x.q.shape
        HV, V = x.v.shape[2:]
        nwork = N * HV * P
        dec_pers[(min(nwork, C * sms()),)](*_ops(x, K ** -0.5), T, nwork, H=H, HV=HV, K=K, V=V, BV=V // P,
                                           GDN=gdn, num_warps=W, num_stages=1)
        return x.o
    return call


def copy_call(x, gdn):
    import t1_ceiling_probe as P
    P.copy_call(2, 4)({"state": x.h})


VARIANTS = {"cpy_p2w4": copy_call, "tile_p2w2": tile_call(2, 2), "tile_p4w1": tile_call(4, 1),
            "tile_p8w1": tile_call(8, 1), "tile_p4w2": tile_call(4, 2),
            "lazy_p2w2": tile_call(2, 2, True), "lazy_p4w1": tile_call(4, 1, True), "lazy_p8w1": tile_call(8, 1, True)}
# _rt: T not specialized (SK002's outputs mark it do_not_specialize): at T = 1 the token loop stays a loop
VARIANTS.update({f"{n}_rt": tile_call(p, w, lz, True) for n, p, w, lz in (
    ("tile_p2w2", 2, 2, False), ("tile_p4w1", 4, 1, False), ("tile_p2w4", 2, 4, False),
    ("lazy_p2w2", 2, 2, True), ("lazy_p4w1", 4, 1, True), ("lazy_p2w4", 2, 4, True))})
# P = 2 / 2 warps and P = 4 / 1 warp spill with two tiles in registers (255 registers + 370-530 B of
# stack for sm_90); these fit (213-222 registers: 9 one-warp or 4 two-warp programs per SM)
for _p, _w, _cs in ((8, 1, (4, 8, 9)), (4, 2, (2, 4))):
    VARIANTS.update({f"pers_p{_p}w{_w}_c{c}": pers_call(_p, _w, c) for c in _cs})
SHAPES = [(32, 1), (64, 1), (64, 8), (256, 8)]
FAMILIES = ("gdn", "kda")


def shape(family, N, T):
    return M.family_shape(family, (N, T, 32, 32, 128, 128))


def check(device, names) -> int:
    bad = 0
    for fam in FAMILIES:
        for name in names:
            if name.startswith("cpy"):
                continue
            for N, T in ((2, 1), (3, 3)):
                x = M.make_inputs(torch, *shape(fam, N, T), device, 7, False, fam)
                ref_o, ref_s = M.reference(torch, x, 128 ** -0.5)
                VARIANTS[name](x, fam == "gdn")
                eo, es = M.rel_rms(torch, x.o, ref_o), M.rel_rms(torch, x.h, ref_s)
                ok = eo < 6e-3 and es < 1e-4
                bad += not ok
                print(f"{fam} {name:18s} N={N} T={T}: o {eo:.1e} state {es:.1e} {'ok' if ok else 'FAIL'}", flush=True)
    return bad


def gpu(out_dir, reps, only) -> int:
    names = [n for n in VARIANTS if not only or n in only]
    bad = check("cuda", names)
    bw = G.copy_bandwidth(torch)
    head = G.header(torch, triton, bw, reps, f"SMs {sms()}, ")
    print(head, flush=True)
    rows = {}
    for fam in FAMILIES:
        for N, T in SHAPES:
            shp = shape(fam, N, T)
            R = G.rotation(N * 32 * 128 * 128 * 4)
            calls = {n: (lambda x, fn=VARIANTS[n]: fn(x, fam == "gdn")) for n in names if T == 1 or not n.startswith("cpy")}
            med = G.median_us(torch, calls, lambda i: M.make_inputs(torch, *shp, "cuda", 100 + i, False, fam), R, reps)
            for n, us in med.items():
                pct = M.roofline_bytes(fam, *shp) / bw / (us * 1e-6) * 100
                rows.setdefault(f"{fam} {n}", {})[f"N{N}T{T}"] = (us, pct)
                print(f"{fam} N={N} T={T} R={R} {n:18s} {us:8.1f} us {pct:5.1f} %", flush=True)
    text = G.table("persistent-grid probe", head, rows, [f"N{N}T{T}" for N, T in SHAPES])
    print(text)
    G.save(out_dir, "persist_probe", head, rows, text)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--cpu-check", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    a = ap.parse_args()
    if a.cpu_check:
        return 1 if check("cpu", ["tile_p2w2", "pers_p8w1_c8", "lazy_p4w1", "lazy_p2w2_rt"]) else 0
    return gpu(a.out, a.reps, [n for n in a.only.split(",") if n])


if __name__ == "__main__":
    sys.exit(main())
