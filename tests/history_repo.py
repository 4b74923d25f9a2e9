"""A small kernel repository built commit by commit for the history-mining tests.

One file, ``ops/kernels.py``, with five Triton kernels (never imported: only mined).
The commits replace a division by a square-root norm with rsqrt in three kernels
(two commits), switch exp to exp2 with log2(e) folded into the scale in two kernels
(two commits), and add noise: a pure reformat, a consistent rename of locals, a move
of independent statements, and a commit that touches no kernel file.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

HEADER = '''import triton
import triton.language as tl
'''

L2Q = '''

@triton.jit
def l2norm_q_kernel(q, o, D: tl.constexpr):
    i_n = tl.program_id(0)
    o_d = tl.arange(0, D)
    b_q = tl.load(q + i_n * D + o_d).to(tl.float32)
    b_q = b_q {q_op}
    tl.store(o + i_n * D + o_d, b_q)
'''

L2K = '''

@triton.jit
def l2norm_k_kernel(k, o, D: tl.constexpr):
    i_n = tl.program_id(0)
    o_d = tl.arange(0, D)
    b_k = tl.load(k + i_n * D + o_d).to(tl.float32)
    b_k = b_k {k_op}
    tl.store(o + i_n * D + o_d, b_k)
'''

RMS = '''

@triton.jit
def rmsnorm_kernel(x, w, o, eps, D: tl.constexpr):
    {rms_head}
    b_{x} = tl.load(x + i_row * D + o_d).to(tl.float32)
    b_w = tl.load(w + o_d).to(tl.float32)
    b_{x} = b_{x} {rms_op}(tl.sum(b_{x} * b_{x}) / D + eps)
    tl.store(o + i_row * D + o_d, b_{x} * b_w)
'''

ATTN = '''

@triton.jit
def attn_fwd_kernel(q, k, v, o, scale, T, D: tl.constexpr):
    i_n = tl.program_id(0)
    o_d = tl.arange(0, D)
    b_q = tl.load(q + i_n * D + o_d).to(tl.float32)
{attn_pre}    b_m = tl.zeros([1], dtype=tl.float32) - float("inf")
    b_l = tl.zeros([1], dtype=tl.float32)
    b_acc = tl.zeros([D], dtype=tl.float32)
    for t in range(T):
        b_k = tl.load(k + t * D + o_d).to(tl.float32)
        b_v = tl.load(v + t * D + o_d).to(tl.float32)
        b_s = tl.sum(b_q * b_k) * {attn_scale}
        b_m_new = tl.maximum(b_m, b_s)
        b_r = {exp}(b_m - b_m_new)
        b_p = {exp}(b_s - b_m_new)
        b_l = b_l * b_r + b_p
        b_acc = b_acc * b_r + b_p * b_v
        b_m = b_m_new
    tl.store(o + i_n * D + o_d, b_acc / b_l)
'''

DECODE = '''

@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, sm_scale, seq_len, HEAD: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, HEAD)
    q = tl.load(q_ptr + pid * HEAD + offs).to(tl.float32)
{dec_pre}    m_i = tl.zeros([1], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([HEAD], dtype=tl.float32)
    for j in range(seq_len):
        kj = tl.load(k_ptr + j * HEAD + offs).to(tl.float32)
        vj = tl.load(v_ptr + j * HEAD + offs).to(tl.float32)
        s = tl.sum(q * kj) * {dec_scale}
        m_new = tl.maximum(m_i, s)
        alpha = {exp}(m_i - m_new)
        p = {exp}(s - m_new)
        l_i = l_i * alpha + p
        acc = acc * alpha + p * vj
        m_i = m_new
    tl.store(out_ptr + pid * HEAD + offs, acc / l_i)
'''

DIV_Q = "/ tl.sqrt(tl.sum(b_q * b_q) + 1e-6)"
DIV_K = "/ tl.sqrt(tl.sum(b_k * b_k) + 1e-5)"
LOG2E = "1.4426950408889634"

INITIAL = {
    "q_op": DIV_Q, "k_op": DIV_K, "x": "x",
    "rms_head": "i_row = tl.program_id(0)\n    o_d = tl.arange(0, D)",
    "rms_op": "/ tl.sqrt",
    "attn_pre": "", "attn_scale": "scale", "dec_pre": "", "dec_scale": "sm_scale",
    "exp_attn": "tl.exp", "exp_dec": "tl.exp",
}


def render(state: dict, messy: bool = False) -> str:
    text = HEADER + L2Q.format(**state) + L2K.format(**state) + RMS.format(**state)
    text += ATTN.format(**state, exp=state["exp_attn"]) + DECODE.format(**state, exp=state["exp_dec"])
    if messy:  # same syntax tree, different text: spacing, comments, parentheses, line breaks
        text = text.replace("i_n * D + o_d", "i_n*D  +  o_d").replace("b_l = b_l * b_r + b_p", "b_l = (b_l * b_r) + b_p  # running sum")
        text = text.replace("tl.store(o + i_n * D + o_d, b_acc / b_l)", "tl.store(\n        o + i_n * D + o_d,\n        b_acc / b_l,\n    )")
    return text


# (message, state changes, messy) -- applied in order; None state means "touch README only".
STEPS = [
    ("initial kernels", {}, False),
    ("style: reformat kernels", {}, True),
    ("l2norm: multiply by rsqrt instead of dividing by sqrt (8% faster)",
     {"q_op": "* tl.rsqrt(tl.sum(b_q * b_q) + 1e-6)", "k_op": "* tl.rsqrt(tl.sum(b_k * b_k) + 1e-5)"}, True),
    ("rename rmsnorm locals", {"x": "v"}, True),
    ("move independent statements", {"rms_head": "o_d = tl.arange(0, D)\n    i_row = tl.program_id(0)"}, True),
    ("docs: README", None, True),
    ("perf: rsqrt in rmsnorm", {"rms_op": "* tl.rsqrt"}, True),
    ("attention: exp2 with log2(e) folded into the scale, faster softmax",
     {"attn_pre": f"    qk_scale = scale * {LOG2E}\n", "attn_scale": "qk_scale", "exp_attn": "tl.math.exp2"}, True),
    ("decode: same exp2 trick",
     {"dec_pre": f"    qs = sm_scale * {LOG2E}\n", "dec_scale": "qs", "exp_dec": "tl.math.exp2"}, True),
]


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True).stdout


def build(repo: Path, steps=STEPS) -> list[str]:
    """Create the repository; return the commit ids, one per step."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "ops").mkdir(exist_ok=True)
    state = dict(INITIAL)
    shas = []
    for n, (message, change, messy) in enumerate(steps):
        if change is None:
            (repo / "README.md").write_text(f"kernels, revision {n}\n")
        else:
            state.update(change)
            (repo / "ops" / "kernels.py").write_text(render(state, messy))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message, date=f"2024-01-{n + 1:02d}T12:00:00+00:00")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return shas
