"""Detector fixtures for SK011 (in-kernel-gate-fusion). Profiled statically, never run."""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def decay_scan(x, g, y, T, D: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_h = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        b_g = tl.load(g + (i * T + t) * D + o).to(tl.float32)
        b_h = b_h * tl.exp(b_g) + tl.load(x + (i * T + t) * D + o)
        tl.store(y + (i * T + t) * D + o, b_h)


def launch_decay_scan(x, g, A_log, dt_bias):
    N, T, D = x.shape
    y = torch.empty_like(x)
    # skel: SK011 opportunity
    g = -A_log.float().exp() * F.softplus(g.float() + dt_bias)
    decay_scan[(N,)](x, g, y, T, D=D)
    return y


def launch_decay_scan_keep_gate(x, g, A_log, dt_bias):
    N, T, D = x.shape
    y = torch.empty_like(x)
    # near-miss: the activated gate is returned as well, so it must be materialised
    # skel-ok: SK011
    g_act = -A_log.float().exp() * F.softplus(g.float() + dt_bias)
    decay_scan[(N,)](x, g_act, y, T, D=D)
    return y, g_act


@triton.jit
def decay_scan_fused(x, g, A_log, dt_bias, y, T, D: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_A = tl.load(A_log + i).to(tl.float32)
    b_bias = tl.load(dt_bias + o).to(tl.float32)
    b_h = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        b_g = tl.load(g + (i * T + t) * D + o).to(tl.float32) + b_bias
        # skel: SK011 instance
        b_gk = -tl.exp(b_A) * tl.where(b_g > 20.0, b_g, tl.log(1 + tl.exp(b_g))) * tl.sigmoid(b_g)
        b_h = b_h * tl.exp(b_gk) + tl.load(x + (i * T + t) * D + o)
        tl.store(y + (i * T + t) * D + o, b_h)


@triton.jit
def silu_rows(a, y, D: tl.constexpr):
    # near-miss: a SiLU activation of data, not a gate parameter
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_a = tl.load(a + i * D + o).to(tl.float32)
    # skel-ok: SK011
    tl.store(y + i * D + o, b_a * tl.sigmoid(b_a))
