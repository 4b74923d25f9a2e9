"""SK011 in-kernel-gate-fusion: compute the gate activation inside the kernel that uses it.

Recurrent kernels consume gates (``g``, ``beta``, ``dt``) after an elementwise activation
(``-exp(A_log) * softplus(g + dt_bias)``, ``sigmoid(beta)``, ``logsigmoid``). Done on the host,
that is an extra launch and a round trip of the gate tensor through memory. Opportunity: the
function that launches the kernel applies such an activation with torch and passes the
result to the kernel, which loads it. Instance: the kernel applies the activation itself to a
value it loads from a gate parameter.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.sk010_gva_head_mapping import _enclosing_function
from skel.miner.detectors.text import find_calls

CODE = "SK011"
GATE_PARAM = re.compile(r"^(g|gk|gv|gi|ge|g_\w+|\w*gate\w*|beta|beta_\w+|A|A_log|a_log|dt|dt_\w+|alpha|decay\w*|forget\w*|lambda\w*)$", re.I)
KERNEL_ACT = ("softplus", "tl.sigmoid", "sigmoid", "logsigmoid", "log_sigmoid", "tl.math.sigmoid", "fast_sigmoid")
ACT_TEXT = re.compile(r"(?<![\w\.])(?:tl\.)?(?:softplus|sigmoid|logsigmoid|log_sigmoid)\s*\(")
HOST_ACT = re.compile(
    r"^\s*([A-Za-z_]\w*)\s*=\s*.*(?:F\.softplus|torch\.nn\.functional\.softplus|F\.logsigmoid|torch\.sigmoid|F\.sigmoid|"
    r"\.sigmoid\(\)|\.softplus\(|torch\.exp\(\s*A_log|A_log\.(?:float\(\)\.)?exp\(\))"
)


def _gate_params(ctx: Ctx) -> set[str]:
    return {p.name for p in ctx.p.params if GATE_PARAM.match(p.name) and not p.constexpr}


def _kernel_sites(ctx: Ctx) -> list[tuple[int, str, str]]:
    """(line, activation call, gate parameter) for activations of loaded gate values."""
    gates = _gate_params(ctx)
    out = []
    if not gates:
        return out
    lines = {m.line for m in ctx.p.math if m.op in ("softplus", "sigmoid", "logsigmoid", "log_sigmoid")}
    # helper activations (fla's ``softplus`` is a jit function) may not be typed as math ops
    lines |= {a.line for a in ctx.assigns if ACT_TEXT.search(a.rhs)}
    for line in sorted(lines):
        stmt = ctx.statement(line)
        for name, arg in find_calls(stmt, KERNEL_ACT):
            names = set(re.findall(r"[A-Za-z_]\w*", arg))
            for a in ctx.closure(arg, line, depth=5):
                names |= set(re.findall(r"[A-Za-z_]\w*", a.rhs))
            hit = sorted(names & gates)
            if hit:
                out.append((line, f"{name}({arg})", hit[0]))
                break
    return out


def _host_sites(ctx: Ctx) -> list[tuple[int, int, str, str]]:
    """(line, launch line, variable, text) for host activations passed to the kernel's launch."""
    cache = ctx.cache.setdefault(CODE, {})
    if "host" in cache:
        return cache["host"]
    out = []
    for site in ctx.p.launches:
        start = _enclosing_function(ctx, site.line)
        if start is None:
            continue
        for ln in range(start, site.line):
            m = HOST_ACT.match(ctx.text(ln))
            if not m:
                continue
            var = m.group(1)
            params = [p for p, v in site.args if re.search(rf"\b{re.escape(var)}\b", v)]
            if params:
                out.append((ln, site.line, var, params[0]))
    cache["host"] = out
    return out


def _loaded(ctx: Ctx, param: str) -> bool:
    pat = re.compile(rf"\b{re.escape(param)}\b")
    if any(pat.search(m.pointer) for m in ctx.p.memops if m.kind == "load"):
        return True
    return any(pat.search(a.rhs) and any(t in m.pointer for m in ctx.p.memops for t in a.targets) for a in ctx.assigns)


def host_gate_activation(ctx: Ctx) -> Check:
    rows = _host_sites(ctx)
    if not rows:
        return no("the launching code applies no gate activation (softplus, sigmoid, logsigmoid, exp(A_log)) before the launch")
    return yes("; ".join(f"line {ln}: {ctx.text(ln)} -> parameter {p}" for ln, _, _, p in rows[:3]))


def kernel_loads_gate(ctx: Ctx) -> Check:
    rows = [r for r in _host_sites(ctx) if _loaded(ctx, r[3])]
    if not rows:
        return no("the kernel does not load the host-activated tensor elementwise")
    return yes("; ".join(f"parameter {p} is loaded in the kernel" for _, _, _, p in rows[:3]))


CONDITIONS = {
    "host-gate-activation": host_gate_activation,
    "kernel-loads-gate": kernel_loads_gate,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(ln, ln, activation=ctx.text(ln), parameter=p, launch_line=ll)
        for ln, ll, _, p in _host_sites(ctx)
        if _loaded(ctx, p)
    ]


def instances(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ln, activation=act, gate=g) for ln, act, g in _kernel_sites(ctx)]
