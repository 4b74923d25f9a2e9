"""SK007-explicit-dot-precision: choose ``input_precision`` for fp32 ``tl.dot`` in accumulations.

Conditions (detector):
Triton rounds fp32 dot operands to TF32 by default; in a recurrence or an accumulation over
many blocks the error compounds. Opportunity: a ``tl.dot`` with the default precision, fp32
operands, whose result accumulates (``acc += tl.dot(...)``, ``tl.dot(a, b, acc)``, or a value
carried across loop iterations). Instance: ``input_precision="tf32x3"`` / ``"ieee"`` (or
``allow_tf32=False``) given explicitly. A dot on bf16/fp16 operands is not affected.

Rewrite:
SK007: explicit ``input_precision="tf32x3"`` on fp32 ``tl.dot`` calls in accumulation chains.

DESCRIPTION: a ``tl.dot`` with no ``input_precision``/``allow_tf32`` runs fp32 operands
through TF32 tensor cores (10-bit mantissa), and in a chain of dots (a loop accumulating into
the same tile, an ``acc`` argument, or an operand that is itself a dot result) that error
compounds with the chain length. ``tf32x3`` (split-precision TF32, three MMAs) keeps close to
fp32 accuracy on the same tensor cores. The rewrite adds the keyword only where both operands
are statically fp32 (cast with ``.to(tl.float32)``, created as float32, or dot/reduction
results; one fp32 operand makes both fp32, since tl.dot needs matching dtypes); 16-bit operands are already exact on tensor cores and are left alone.

Unsafe: it changes the precision (here: upward) and the speed; accepted on accuracy.
"""
from __future__ import annotations

import re

import libcst as cst

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import split_args as _split_args
from skel.miner.detectors.text import find_calls
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "unsafe"


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton",)
F32 = re.compile(r"tl\.float32|\bfp32\b|float32")
HALF = re.compile(r"tl\.(?:bfloat16|float16|float8\w*)|\bbf16\b|\bfp16\b|element_ty|\.dtype\b")


def _default(d) -> bool:
    return d.input_precision is None and d.allow_tf32 is None


def _operands(ctx: Ctx, d) -> list[str]:
    cache = ctx.cache.setdefault(CODE, {}).setdefault("ops", {})
    if d.line not in cache:
        cache[d.line] = _parse_operands(ctx, d)
    return cache[d.line]


def _parse_operands(ctx: Ctx, d) -> list[str]:
    stmt = ctx.statement(d.line)
    calls = find_calls(stmt, ("tl.dot",))
    if not calls:
        return []
    parts = _split_args(calls[0][1])
    return [p for p in parts[:2] if "=" not in p.split("(")[0]]


def _fp32(ctx: Ctx, d) -> bool:
    cache = ctx.cache.setdefault(CODE, {}).setdefault("fp32", {})
    if d.line not in cache:
        cache[d.line] = _operands_fp32(ctx, d)
    return cache[d.line]


def _operands_fp32(ctx: Ctx, d) -> bool:
    dts = [t.lower() for t in d.operand_dtypes]
    if dts and all(t in ("fp32", "float32", "tl.float32") for t in dts):
        return True
    if any(t in ("bf16", "fp16", "bfloat16", "float16", "fp8") for t in dts):
        return False
    ops = _operands(ctx, d)
    if len(ops) < 2:
        return False
    res = _result_var(ctx, d)
    if res in [o.strip() for o in ops[:2]] and not any(HALF.search(o) for o in ops) and _carried(ctx, res, d):
        # The dot's own result comes back as an operand (S = tl.dot(M, S) + L): tl.dot returns
        # fp32, and both operands must share a dtype, so from the second step on both are fp32.
        return True
    for op in ops:
        if re.search(r"\.to\((?:tl\.)?(?:bfloat16|float16)|\.to\([^)]*element_ty", op):
            return False
        if F32.search(op):
            continue
        chain = [a.rhs for a in ctx.closure(op, d.line, depth=3)]
        last = chain[0] if chain else ""
        if not last or HALF.search(last) or not (F32.search(last) or any(F32.search(c) for c in chain[1:2])):
            return False
    return True


def _carried(ctx: Ctx, var: str, d) -> bool:
    """``var`` reaches the dot at ``d`` from the previous iteration of its loop: nothing assigns it
    between the loop head and the dot (``b_v = tl.load(...)`` then ``b_v = tl.dot(A, b_v)`` is a
    fresh load each step, not a chain)."""
    if d.loop_line is None:
        return True  # a dot outside loops: its own result cannot come back, keep the old reading
    return not any(var in a.targets and d.loop_line < a.line < d.line for a in ctx.assigns)


def _result_var(ctx: Ctx, d) -> str | None:
    a = next((a for a in ctx.assigns if a.line == d.line), None)
    if a and a.targets:
        return a.targets[0]
    calls = find_calls(ctx.statement(d.line), ("tl.dot",))
    if calls:
        args = [p for p in _split_args(calls[0][1]) if "=" not in p.split("(")[0]]
        if len(args) >= 3 and re.fullmatch(r"[A-Za-z_]\w*", args[2]):
            return args[2]
    return None


def _chain(ctx: Ctx, d) -> str | None:
    """Where the dot's result is carried into a tl.dot (itself in a loop, or another one)."""
    cache = ctx.cache.setdefault(CODE, {}).setdefault("chain", {})
    if d.line not in cache:
        cache[d.line] = _find_chain(ctx, d)
    return cache[d.line]


def _find_chain(ctx: Ctx, d) -> str | None:
    var = _result_var(ctx, d)
    if not var:
        return None
    pat = re.compile(rf"\b{re.escape(var)}\b")
    for d2 in ctx.p.dots:
        ops = _operands(ctx, d2)
        if d2.line == d.line:
            if d.loop_line is not None and any(pat.search(o) for o in ops) and _carried(ctx, var, d):
                return f"line {d.line}: {var} feeds the same tl.dot on the next iteration of the loop at line {d.loop_line}"
            continue
        later = d2.line > d.line or (d.loop_line is not None and d2.loop_line == d.loop_line)
        if not later:
            continue
        if any(pat.search(o) for o in ops):
            return f"line {d.line}: {var} -> tl.dot at line {d2.line}"
        for o in ops:
            if any(pat.search(a.rhs) or var in a.targets for a in ctx.closure(o, d2.line, depth=3)):
                return f"line {d.line}: {var} -> (through {o}) tl.dot at line {d2.line}"
    return None


def _sites(ctx: Ctx):
    return [d for d in ctx.p.dots if _default(d) and _fp32(ctx, d) and _chain(ctx, d)]


def dot_default_precision(ctx: Ctx) -> Check:
    rows = [d for d in ctx.p.dots if _default(d)]
    if not rows:
        return no("every tl.dot already sets input_precision" if ctx.p.dots else "no tl.dot in the kernel")
    return yes("; ".join(f"line {d.line}: {d.text}" for d in rows[:3]))


def dot_operands_fp32(ctx: Ctx) -> Check:
    rows = [d for d in ctx.p.dots if _default(d) and _fp32(ctx, d)]
    if not rows:
        return no("the default-precision dots take bf16/fp16 (or unknown) operands; TF32 does not apply")
    return yes("; ".join(f"line {d.line}: both operands are float32" for d in rows[:3]))


def dot_result_feeds_next_dot(ctx: Ctx) -> Check:
    rows = _sites(ctx)
    if not rows:
        return no("no fp32 default-precision dot result is carried into another tl.dot")
    return yes("; ".join(_chain(ctx, d) for d in rows[:3]))


CONDITIONS = {
    "dot-default-precision": dot_default_precision,
    "dot-operands-fp32": dot_operands_fp32,
    "dot-result-feeds-next-dot": dot_result_feeds_next_dot,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(d.line, d.line, dot=d.text, chain=_chain(ctx, d)) for d in _sites(ctx)]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for d in ctx.p.dots:
        prec = (d.input_precision or "").strip("'\"")
        if prec in ("tf32x3", "ieee") or d.allow_tf32 is False:
            out.append(Hit.at(d.line, d.line, input_precision=prec or "ieee (allow_tf32=False)", dot=d.text))
    return out


# ---------------------------------------------------------------- rewrite

PRECISION = "tf32x3"


def _dot_results(kernel: cst.FunctionDef) -> set[str]:
    out: set[str] = set()
    for small, *_ in F.walk(kernel.body.body):
        name = F.single_target(small)
        if name and any(C.last_part(C.call_name(c)) == "dot" for c in C.calls_in(small)):
            out.add(name)
    return out


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = C.kernels(src.module, options)
    edits: dict = {}
    changes: list[Change] = []
    explicit, kept = 0, []
    for kernel in ks:
        defs = F.assignments(kernel)
        deps = F.dependencies(kernel)
        dotted = _dot_results(kernel)
        for small, _line, chain, loops in F.walk(kernel.body.body):
            for call in C.calls_in(small):
                if C.last_part(C.call_name(call)) != "dot":
                    continue
                if C.kwarg(call, "input_precision") or C.kwarg(call, "allow_tf32"):
                    explicit += 1
                    continue
                operands = [a.value for a in call.args if a.keyword is None][:2]
                kinds = [F.value_dtype(o, defs) for o in operands]
                line = src.line(call)
                if len(operands) == 2 and "fp32" in kinds and "16bit" not in kinds:
                    kinds = ["fp32", "fp32"]  # tl.dot requires both operands to have the same dtype
                if len(operands) < 2 or kinds != ["fp32", "fp32"]:
                    kept.append(f"line {line}: operands are {'/'.join(kinds) or '?'}, not both fp32")
                    continue
                target = F.single_target(small)
                in_chain = bool(loops) or len([a for a in call.args if a.keyword is None]) > 2 or C.kwarg(call, "acc") \
                    or isinstance(small, cst.AugAssign) \
                    or (target is not None and target in C.names_in(small.value) and isinstance(small, cst.Assign)) \
                    or any(F.depends_on(C.names_in(o), dotted, deps, chain) for o in operands)
                if not in_chain:
                    kept.append(f"line {line}: a single dot, not part of an accumulation chain")
                    continue
                edits[call] = lambda upd: upd.with_changes(args=[*upd.args, cst.Arg(
                    cst.SimpleString(f'"{PRECISION}"'), keyword=cst.Name("input_precision"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])
                changes.append(Change(line, f"{C.code_of(call)}: input_precision=\"{PRECISION}\" (fp32 operands in an "
                                      "accumulation chain)"))
    if not edits:
        if explicit:
            rest = f" (left alone: {'; '.join(kept)})" if kept else ""
            return C.skip(CODE, SAFETY, source, f"already applied: {explicit} tl.dot call(s) state their input precision{rest}")
        if not explicit and not kept:
            return C.skip(CODE, SAFETY, source, "not applicable: no tl.dot in any @triton.jit function")
        return C.skip(CODE, SAFETY, source, "not applicable: " + "; ".join(kept))
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"{len(edits)} fp32 dot(s) -> {PRECISION}", SAFETY)]


class ExplicitDotPrecision(Rule):
    """Pin tl.dot on fp32 operands to tf32x3 (or ieee) where chained products accumulate TF32 error."""

    SAFETY = SAFETY
    LANGUAGES = LANGUAGES
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
