"""Probe: how close to the measured floor can a KDA decode step get at N = 1, T = 1, and what costs the rest?

    python experiments/2026-12-02-n1-latency-chain/probe.py [--out DIR]

Issue 16 asks every decode target within 1.1x of the floor (the best in-place copy of the state's bytes,
validate/floor.py) at N = 1, T = 1. Launch changes took kernels/kda_decode from 1.76x to 1.55x. This probe
times, the way the gate does (CUDA graph over input sets rotated past L2, one process), one KDA step
(N=1, H=HV=32, K=V=128, state 2 MiB fp32 in place) in three forms over a grid of launches:

- ``chain``: the kernel's own order: decay, k @ S, delta, update, then q @ S' (two reductions in sequence);
- ``reassoc``: o = (D S)^T q + delta (k . q): the two reductions over the same tile are independent
  (same maths; rounding differs), so the dependent chain holds one reduction instead of two;
- ``tile-layout`` (and ``+reassoc``): every vector loaded as a [K, 1] or [1, BV] tile of the state's own
  layout and reduced with keep_dims, so no value changes layout between the loads and the stores;
- ``gate-only`` / ``no-norms``: parts of the chain (timing only: not the same maths), to see what costs;
- ``gdn-chain`` / ``gdn-gate-only``: the gated delta rule's step (one scalar decay per head), and that
  decay alone (timing only);
- ``bytes``: the same loads and stores through the same grid with no reduction (state scaled, o = v):
  what this grid and these bytes cost with no dependent chain: the ceiling for any kernel of this layout.

Prints a table (us, x of floor) and writes results.json. An experiment, not a benchmark of the product.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch
import triton
import triton.language as tl

from skel.validate.bench import capture_graph, replay_time_us, rotation_sets
from skel.validate.floor import copy_floor_us

MODES = {"chain": 0, "reassoc": 1, "bytes": 2, "gate-only": 3, "no-norms": 4, "tile-layout": 5,
         "tile-layout+reassoc": 6, "gdn-chain": 7, "gdn-gate-only": 8}


@triton.jit
def _step(q, k, v, g, beta, A_log, dt_bias, o, state, scale,
          H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
          MODE: tl.constexpr):
    pid = tl.program_id(0)
    NV: tl.constexpr = V // BV
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    p_s = state + i_nh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(p_s)
    b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v).to(tl.float32)
    if MODE == 2:
        tl.store(o + (i_n * HV + i_hv) * V + o_v, b_v.to(o.dtype.element_ty))
        tl.store(p_s, b_s * scale)
    elif MODE >= 5:  # every operand loaded as a tile of the state's own 2-D layout: no layout conversion
        c_k = o_k[:, None]
        c_v = o_v[None, :]
        t_q = tl.load(q + (i_n * H + i_h) * K + c_k).to(tl.float32)  # [K, 1]
        t_k = tl.load(k + (i_n * H + i_h) * K + c_k).to(tl.float32)
        t_g = tl.load(g + (i_n * HV + i_hv) * K + c_k).to(tl.float32)
        t_bias = tl.load(dt_bias + i_hv * K + c_k).to(tl.float32)
        t_v = tl.load(v + (i_n * HV + i_hv) * V + c_v).to(tl.float32)  # [1, BV]
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
        t_q = t_q / tl.sqrt(tl.sum(t_q * t_q, 0, keep_dims=True) + 1e-6) * scale
        t_k = t_k / tl.sqrt(tl.sum(t_k * t_k, 0, keep_dims=True) + 1e-6)
        x = t_g + t_bias
        b_s = b_s * tl.exp(-tl.exp(b_A) * tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x))))
        if MODE == 5:
            t_delta = (t_v - tl.sum(b_s * t_k, 0, keep_dims=True)) * b_beta  # [1, BV]
            b_s = b_s + t_k * t_delta
            t_o = tl.sum(b_s * t_q, 0, keep_dims=True)
        else:
            t_delta = (t_v - tl.sum(b_s * t_k, 0, keep_dims=True)) * b_beta
            t_o = tl.sum(b_s * t_q, 0, keep_dims=True) + t_delta * tl.sum(t_k * t_q, 0, keep_dims=True)
            b_s = b_s + t_k * t_delta
        tl.store(o + (i_n * HV + i_hv) * V + c_v, t_o.to(o.dtype.element_ty))
        tl.store(p_s, b_s)
    elif MODE >= 7:  # GDN: one scalar decay per head (8: that decay only, no reduction)
        x = tl.load(g + (i_n * HV + i_hv) * K).to(tl.float32) + tl.load(dt_bias + i_hv * K).to(tl.float32)
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_s = b_s * tl.exp(-tl.exp(b_A) * tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x))))
        if MODE == 8:
            tl.store(o + (i_n * HV + i_hv) * V + o_v, b_v.to(o.dtype.element_ty))
        else:
            b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32)
            b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
            b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6) * scale
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
            b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
            b_s = b_s + b_k[:, None] * b_delta[None, :]
            tl.store(o + (i_n * HV + i_hv) * V + o_v, tl.sum(b_s * b_q[:, None], 0).to(o.dtype.element_ty))
        tl.store(p_s, b_s)
    elif MODE == 3:  # the gate's chain only: decay the state, no reduction
        b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        x = b_g + b_bias
        b_gate = -tl.exp(b_A) * tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))
        tl.store(o + (i_n * HV + i_hv) * V + o_v, b_v.to(o.dtype.element_ty))
        tl.store(p_s, b_s * tl.exp(b_gate)[:, None])
    else:
        b_q = tl.load(q + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_k = tl.load(k + (i_n * H + i_h) * K + o_k).to(tl.float32)
        b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k).to(tl.float32)
        b_bias = tl.load(dt_bias + i_hv * K + o_k).to(tl.float32)
        b_A = tl.load(A_log + i_hv).to(tl.float32)
        b_beta = tl.sigmoid(tl.load(beta + i_n * HV + i_hv).to(tl.float32))
        if MODE != 4:  # 4: the chain without the two l2 norms (not the same maths: timing only)
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6) * scale
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
        x = b_g + b_bias
        b_gate = -tl.exp(b_A) * tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))
        b_s = b_s * tl.exp(b_gate)[:, None]
        if MODE != 1:
            b_delta = (b_v - tl.sum(b_s * b_k[:, None], 0)) * b_beta
            b_s = b_s + b_k[:, None] * b_delta[None, :]
            b_o = tl.sum(b_s * b_q[:, None], 0)
        else:
            r_k = tl.sum(b_s * b_k[:, None], 0)
            r_q = tl.sum(b_s * b_q[:, None], 0)
            b_delta = (b_v - r_k) * b_beta
            b_o = r_q + b_delta * tl.sum(b_k * b_q)
            b_s = b_s + b_k[:, None] * b_delta[None, :]
        tl.store(o + (i_n * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty))
        tl.store(p_s, b_s)


def inputs(N, H, HV, K, V, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def r(*shape, dtype=torch.bfloat16, s=1.0):
        return (torch.randn(*shape, generator=gen, device="cuda") * s).to(dtype)

    return dict(q=r(N, H, K), k=r(N, H, K), v=r(N, HV, V), g=r(N, HV, K), beta=r(N, HV),
                A_log=r(HV, dtype=torch.float32, s=0.1), dt_bias=r(HV, K, dtype=torch.float32, s=0.1),
                o=torch.empty(N, HV, V, device="cuda", dtype=torch.bfloat16),
                state=r(N, HV, K, V, dtype=torch.float32, s=0.05))


def timed(fn, arg_sets, samples=21, min_sample_us=300.0) -> tuple[float, float]:
    graph, _, calls = capture_graph(fn, arg_sets, max(40, len(arg_sets)))
    graph.replay()
    torch.cuda.synchronize()
    one = replay_time_us(graph, 1)
    reps = max(1, math.ceil(min_sample_us / max(one, 1e-3)))
    times = [replay_time_us(graph, reps) / (reps * calls) for _ in range(samples)]
    return statistics.median(times), min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated forms to time")
    args = ap.parse_args(argv)
    N, H, HV, K, V = 1, args.heads, args.heads, 128, 128
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 60 << 20)
    state_bytes = N * HV * K * V * 4
    nbytes = 2 * state_bytes + 2 * (2 * N * H * K + 2 * N * HV * V + N * HV * K)  # state r+w, q k v o g
    sets = rotation_sets(nbytes, l2, 64)
    arg_sets = [inputs(N, H, HV, K, V, seed) for seed in range(sets)]
    floor, where = copy_floor_us(nbytes, l2)
    ref_in = {n: t.clone() for n, t in arg_sets[0].items()}
    rows = []
    ref_out = None
    from skel.kernels.kda_decode.kernel import kda_decode  # the suite's target, its own launch

    def original(q, k, v, g, beta, A_log, dt_bias, state, o=None):
        return kda_decode(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None], A_log, dt_bias, state)

    med, best = timed(original, [{n: t for n, t in a.items() if n != "o"} for a in arg_sets])
    rows.append(dict(form="kernels/kda_decode (its launch: BV=32, 4 warps)", BV=32, warps=4, stages=2,
                     median_us=med, min_us=best, x_floor=med / floor))
    for mode, m in ((n, MODES[n]) for n in args.modes.split(",")):
        for BV in (8, 16, 32):
            for warps in (1, 2, 4):
                def fn(q, k, v, g, beta, A_log, dt_bias, o, state, BV=BV, warps=warps, m=m):
                    _step[(N * HV * (V // BV),)](q, k, v, g, beta, A_log, dt_bias, o, state, K ** -0.5,
                                                 H=H, HV=HV, K=K, V=V, BV=BV, MODE=m, num_warps=warps)
                    return o
                err = None
                if m in (1, 5, 6):  # numerics against the chain form at BV=32, 4 warps, on a copy
                    one = {n: t.clone() for n, t in ref_in.items()}
                    fn(**one)
                    if ref_out is None:
                        ref = {n: t.clone() for n, t in ref_in.items()}
                        _step[(N * HV * (V // 32),)](ref["q"], ref["k"], ref["v"], ref["g"], ref["beta"], ref["A_log"],
                                                     ref["dt_bias"], ref["o"], ref["state"], K ** -0.5, H=H, HV=HV,
                                                     K=K, V=V, BV=32, MODE=0, num_warps=4)
                        ref_out = (ref["o"].float(), ref["state"])
                    err = max((one["o"].float() - ref_out[0]).abs().max().item(),
                              (one["state"] - ref_out[1]).abs().max().item())
                med, best = timed(fn, arg_sets)
                rows.append(dict(form=mode, BV=BV, warps=warps, stages=None, median_us=med, min_us=best,
                                 x_floor=med / floor, max_abs_err_vs_chain=err))
    gpu = torch.cuda.get_device_name(0)
    meta = dict(gpu=gpu, sms=props.multi_processor_count, l2_bytes=l2, torch=torch.__version__,
                triton=triton.__version__, python=sys.version.split()[0],
                date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                shape=dict(N=N, T=1, H=H, HV=HV, K=K, V=V), bytes=nbytes, rotation_sets=sets,
                floor_us=floor, floor_grid=where)
    print(f"{gpu}, floor {floor:.2f} us ({where}), {nbytes / 2**20:.2f} MiB moved, {sets} sets rotated")
    print("| form | BV | warps | median us | min us | x of floor | max abs err vs chain |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        e = r.get("max_abs_err_vs_chain")
        print(f"| {r['form']} | {r['BV']} | {r['warps']} | {r['median_us']:.2f} | {r['min_us']:.2f} | "
              f"{r['x_floor']:.2f}x | {'' if e is None else f'{e:.1e}'} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
