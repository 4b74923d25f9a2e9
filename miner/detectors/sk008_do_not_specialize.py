"""SK008 do-not-specialize-shape-args: stop recompiling when a per-call size changes.

Triton specializes plain integer arguments (== 1, divisible by 16), so a sequence length or
batch size that changes between calls (T = 1 in decode, T = 7 in speculative decode, N from
the batch) makes a new compilation. Opportunity: the kernel takes such a size as a plain
(non-constexpr) integer and does not list it in ``do_not_specialize``. Instance:
``@triton.jit(do_not_specialize=[...])`` naming one. Head counts and head dims (H, K, V)
are fixed per model and are not candidates.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK008"
LANGUAGES = ("triton",)
VARYING = re.compile(
    r"^(T|N|B|L|NT|S|seq_?len\w*|seqlen\w*|max_seq\w*|num_tokens|n_tokens|total_tokens|num_seqs|n_seqs|batch\w*|"
    r"n_rows|num_rows|M|n_ctx|N_CTX|ctx_len|kv_len|q_len|token_num|num_reqs)$"
)
SCALAR_ANN = re.compile(r"^(tl\.)?(int32|int64|uint32|uint64|int)$")


def _varying(ctx: Ctx):
    """Plain integer parameters that name a per-call size."""
    out = []
    for p in ctx.p.params:
        if p.constexpr or not VARYING.match(p.name):
            continue
        if p.annotation and not SCALAR_ANN.match(p.annotation.strip()):
            continue
        out.append(p)
    return out


def _jit_line(ctx: Ctx) -> int:
    from skel.miner.detectors.sk005_launch_config_search import decorator_line

    return decorator_line(ctx, "triton.jit") or ctx.p.line


def _specialized(ctx: Ctx):
    listed = set(ctx.p.tune.do_not_specialize)
    return [p for p in _varying(ctx) if p.name not in listed]


def _address_uses(ctx: Ctx, name: str) -> list:
    """Assignments that build a pointer (a loaded/stored pointer variable or a pointer parameter
    plus offsets) from ``name``."""
    pointer_vars = {re.match(r"\s*\(?\s*(\w+)", m.pointer).group(1) for m in ctx.p.memops if re.match(r"\s*\(?\s*\w+", m.pointer)}
    pat = re.compile(rf"\b{re.escape(name)}\b")
    return [a for a in ctx.assigns if pat.search(a.rhs) and set(a.targets) & pointer_vars]


def _critical(ctx: Ctx, name: str) -> str | None:
    """An address term where ``name`` multiplies an index with no constexpr factor in the same
    product: then its divisibility by 16 is what proves the loads aligned."""
    from skel.miner.detectors.sk004_exp2_log2e import _terms

    consts = {p.name for p in ctx.p.params if p.constexpr}
    pat = re.compile(rf"\b{re.escape(name)}\b")
    for a in _address_uses(ctx, name):
        for term in _terms(a.rhs, "+-"):
            if pat.search(term) and "*" in term and not (set(re.findall(r"[A-Za-z_]\w*", term)) & consts):
                return f"line {a.line}: {', '.join(a.targets)} = {a.rhs}"
    return None


def has_runtime_shape_arg(ctx: Ctx) -> Check:
    rows = _varying(ctx)
    if not rows:
        return no("no plain integer parameter names a per-call size (T, N, seq_len, ...); all are constexpr or absent")
    return yes(", ".join(f"{p.name}{': ' + p.annotation if p.annotation else ''}" for p in rows) + " vary between calls")


def shape_arg_specialized(ctx: Ctx) -> Check:
    rows = _specialized(ctx)
    if not rows:
        return no("every per-call size is already in do_not_specialize" if _varying(ctx) else "no per-call size parameter")
    listed = sorted(ctx.p.tune.do_not_specialize)
    return yes(f"{', '.join(p.name for p in rows)} specialised on every value class (do_not_specialize: {listed or 'none'})")


def shape_arg_not_divisibility_critical(ctx: Ctx) -> Check:
    rows = [(p.name, _critical(ctx, p.name)) for p in _specialized(ctx)]
    good = [n for n, c in rows if not c]
    if not good:
        if rows:
            return no(f"{rows[0][0]} is a stride in an address ({rows[0][1]}); its divisibility by 16 helps vectorise the loads")
        return no("no specialised per-call size")
    return yes(f"{', '.join(good)} only bound loops or offset rows scaled by a constexpr")


CONDITIONS = {
    "has-runtime-shape-arg": has_runtime_shape_arg,
    "shape-arg-specialized": shape_arg_specialized,
    "shape-arg-not-divisibility-critical": shape_arg_not_divisibility_critical,
}


def candidates(ctx: Ctx) -> list[Hit]:
    listed = sorted(ctx.p.tune.do_not_specialize)
    rows = [p.name for p in _specialized(ctx) if not _critical(ctx, p.name)]
    return [Hit.at(ln, ln, param=name, listed=listed) for name in rows for ln in [_param_line(ctx, name)]]


def _param_line(ctx: Ctx, name: str) -> int:
    """The signature line that declares ``name`` (the def line for one-line signatures)."""
    pat = re.compile(rf"(?:^|[(,])\s*{re.escape(name)}\s*[:,)=]")
    for ln in range(ctx.p.line, min(ctx.p.end_line, ctx.p.line + 200) + 1):
        t = ctx.text(ln)
        if pat.search(t):
            return ln
        if t.endswith(":") and ln > ctx.p.line and not t.startswith("def"):
            break
    return ctx.p.line


def instances(ctx: Ctx) -> list[Hit]:
    names = list(ctx.p.tune.do_not_specialize)
    if not names:
        return []
    line = _jit_line(ctx)
    return [Hit.at(line, line, do_not_specialize=names)]
