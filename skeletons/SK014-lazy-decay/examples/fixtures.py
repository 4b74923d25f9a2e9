"""Detector fixtures for SK014 (lazy-decay). Profiled statically, never run."""
import triton
import triton.language as tl


@triton.jit
def decayed_every_step(x, g, s, o, T, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    h = tl.load(s + i * D * D + r[:, None] * D + r[None, :])
    for t in range(0, T):
        b_x = tl.load(x + (i * T + t) * D + r)
        b_g = tl.load(g + (i * T + t) * D + r)
        # skel: SK014 opportunity
        h *= tl.exp(b_g)[:, None]
        b_u = tl.sum(h * b_x[:, None], 0)
        h += b_x[:, None] * b_u[None, :]
        tl.store(o + (i * T + t) * D + r, tl.sum(h * b_x[:, None], 0))
    tl.store(s + i * D * D + r[:, None] * D + r[None, :], h)


@triton.jit
def decayed_then_clamped(x, g, s, o, T, D: tl.constexpr):
    # near-miss: the state goes through tl.where, which a deferred scaling does not commute with
    i = tl.program_id(0)
    r = tl.arange(0, D)
    h = tl.load(s + i * D * D + r[:, None] * D + r[None, :])
    for t in range(0, T):
        b_x = tl.load(x + (i * T + t) * D + r)
        b_g = tl.load(g + (i * T + t) * D + r)
        # skel-ok: SK014
        h *= tl.exp(b_g)[:, None]
        h = tl.where(h > 1.0, 1.0, h)
        tl.store(o + (i * T + t) * D + r, tl.sum(h * b_x[:, None], 0))
    tl.store(s + i * D * D + r[:, None] * D + r[None, :], h)


@triton.jit
def decayed_on_odd_steps(x, g, s, o, T, D: tl.constexpr):
    # near-miss: the gate runs under a runtime condition
    i = tl.program_id(0)
    r = tl.arange(0, D)
    h = tl.load(s + i * D * D + r[:, None] * D + r[None, :])
    for t in range(0, T):
        b_x = tl.load(x + (i * T + t) * D + r)
        if t % 2 == 1:
            # skel-ok: SK014
            h *= tl.exp(tl.load(g + i))
        tl.store(o + (i * T + t) * D + r, tl.sum(h * b_x[:, None], 0))
    tl.store(s + i * D * D + r[:, None] * D + r[None, :], h)


@triton.jit
def decay_carried_as_factor(x, g, s, o, T, D: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, D)
    h = tl.load(s + i * D * D + r[:, None] * D + r[None, :])
    f = tl.full([D], 1.0, tl.float32)
    for t in range(0, T):
        b_x = tl.load(x + (i * T + t) * D + r)
        b_g = tl.load(g + (i * T + t) * D + r)
        f = f * tl.exp(b_g)
        tl.store(o + (i * T + t) * D + r, tl.sum(h * (b_x * f)[:, None], 0))
    # skel: SK014 instance
    h = h * f[:, None]
    tl.store(s + i * D * D + r[:, None] * D + r[None, :], h)
