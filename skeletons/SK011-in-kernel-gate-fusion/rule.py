"""SK011-in-kernel-gate-fusion: compute the gate activation inside the kernel that uses it.

Conditions (detector):
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
from skel.miner.detectors.helpers import enclosing_function as _enclosing_function
from skel.miner.detectors.text import find_calls
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

GATE_PARAM = re.compile(r"^(g|gk|gv|gi|ge|g_\w+|\w*gate\w*|beta|beta_\w+|A|A_log|a_log|dt|dt_\w+|alpha|decay\w*|forget\w*|lambda\w*)$")
KERNEL_ACT = ("softplus", "tl.sigmoid", "sigmoid", "logsigmoid", "log_sigmoid", "tl.math.sigmoid", "fast_sigmoid")
EXPRESSIBLE = {
    "softplus", "sigmoid", "logsigmoid", "exp", "log", "log1p", "expm1", "neg", "float", "to", "abs", "tanh",
    "unsqueeze", "view", "reshape", "contiguous", "add", "mul", "sub", "clamp", "minimum", "maximum",
}
ACT_TEXT = re.compile(r"(?<![\w\.])(?:tl\.)?(?:softplus|sigmoid|logsigmoid|log_sigmoid)\s*\(")
HOST_ACT = re.compile(
    r"^\s*([A-Za-z_]\w*)\s*=\s*.*(?:F\.softplus|torch\.nn\.functional\.softplus|F\.logsigmoid|torch\.sigmoid|F\.sigmoid|"
    r"\.sigmoid\(\)|\.softplus\(|torch\.exp\(\s*A_log|A_log\.(?:float\(\)\.)?exp\(\))"
)
HOST_ACT_NEEDS = ("softplus", "sigmoid", "A_log")  # every HOST_ACT match holds one of these


def _gate_params(ctx: Ctx) -> set[str]:
    """Gate-named parameters the kernel reads as tensors (through a load, directly or via a pointer
    variable built from them): a scalar such as SwiGLU's ``gate_multiplier`` only scales a value
    and is not a gate tensor that the host could have activated."""
    named = {p.name for p in ctx.p.params if GATE_PARAM.match(p.name) and not p.constexpr}
    if not named:
        return named
    addr = {n for m in ctx.p.memops if m.kind == "load" for n in re.findall(r"[A-Za-z_]\w*", m.pointer)}
    for a in ctx.assigns:  # p_g = g + bos * HV + i_hv; tl.load(p_g)
        if set(a.targets) & addr:
            addr |= set(re.findall(r"[A-Za-z_]\w*", a.rhs))
    return named & addr


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
        for ln, m in ctx.file.lines_matching(f"{CODE}:host", HOST_ACT.match, start, site.line, needs=HOST_ACT_NEEDS):
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


def _used_elsewhere(ctx: Ctx, var: str, ln: int, launch_line: int) -> str | None:
    """A use of ``var`` in the launching function other than the launch (returned, saved...)."""
    start = _enclosing_function(ctx, launch_line) or ln
    pat = re.compile(rf"\b{re.escape(var)}\b")
    lines = ctx._lines
    indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
    end = launch_line
    for i in range(launch_line + 1, len(lines) + 1):
        raw = lines[i - 1]
        if raw.strip() and len(raw) - len(raw.lstrip()) <= indent:
            break
        end = i
    site_lines = set()
    for site in ctx.p.launches:
        if site.line == launch_line:
            site_lines = set(range(site.line, site.line + ctx.statement(site.line).count("\n") + 1))
    launch_end = launch_line + _statement_lines(ctx, launch_line) - 1
    for i in list(range(ln + 1, launch_line)) + list(range(launch_end + 1, end + 1)):
        if i in site_lines:
            continue
        t = ctx.text(i)
        if pat.search(t) and not re.match(rf"^{re.escape(var)}\s*=", t):
            return f"line {i}: {t}"
    return None


def _statement_lines(ctx: Ctx, line: int) -> int:
    from skel.miner.detectors.base import _count_continuation

    return max(1, _count_continuation(ctx._lines, line, ctx.p.language))


def _expressible(text: str) -> str | None:
    """The first host call in ``text`` with no Triton equivalent, or None."""
    rhs = text.split("=", 1)[1] if "=" in text else text
    for call in re.findall(r"([A-Za-z_][\w\.]*)\s*\(", rhs):
        leaf = call.split(".")[-1]
        if leaf not in EXPRESSIBLE:
            return call
    return None


def host_precomputes_elementwise_input(ctx: Ctx) -> Check:
    rows = _host_sites(ctx)
    if not rows:
        return no("no kernel input is produced by an elementwise activation (softplus, sigmoid, logsigmoid, exp(A_log)) before the launch")
    return yes("; ".join(f"line {ln}: {ctx.text(ln)} -> parameter {p}" for ln, _, _, p in rows[:3]))


def precomputed_input_used_once(ctx: Ctx) -> Check:
    rows = _host_sites(ctx)
    if not rows:
        return no("no precomputed kernel input")
    used = [(var, u) for ln, ll, var, _ in rows if (u := _used_elsewhere(ctx, var, ln, ll))]
    if len(used) == len(rows):
        return no(f"{used[0][0]} is also used outside the launch ({used[0][1]})")
    return yes("; ".join(f"{var} is consumed only by the launch at line {ll}" for ln, ll, var, _ in rows if not _used_elsewhere(ctx, var, ln, ll)))


def elementwise_op_expressible_in_kernel(ctx: Ctx) -> Check:
    rows = _host_sites(ctx)
    bad = [(ln, c) for ln, _, _, _ in rows if (c := _expressible(ctx.text(ln)))]
    if not rows:
        return no("no precomputed kernel input")
    if len(bad) == len(rows):
        return no(f"line {bad[0][0]}: {bad[0][1]}(...) has no Triton equivalent the kernel could use")
    return yes("every op in the host expression (exp, log, sigmoid, softplus, adds, multiplies) exists in Triton")


CONDITIONS = {
    "host-precomputes-elementwise-input": host_precomputes_elementwise_input,
    "precomputed-input-used-once": precomputed_input_used_once,
    "elementwise-op-expressible-in-kernel": elementwise_op_expressible_in_kernel,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(ln, ln, activation=ctx.text(ln), parameter=p, launch_line=ll)
        for ln, ll, var, p in _host_sites(ctx)
        if _loaded(ctx, p) and not _used_elsewhere(ctx, var, ln, ll) and not _expressible(ctx.text(ln))
    ]


def instances(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ln, activation=act, gate=g) for ln, act, g in _kernel_sites(ctx)]


class InKernelGateFusion(Rule):
    """Compute the decay gate and sigmoid(beta) inside the decode kernel instead of separate elementwise kernels."""

    SAFETY = "unsafe"  # of the method docs.md describes (no automatic rewrite)
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
