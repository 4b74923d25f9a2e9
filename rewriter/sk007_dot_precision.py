"""SK007: explicit ``input_precision="tf32x3"`` on fp32 ``tl.dot`` calls in accumulation chains.

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

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions, register

CODE = "SK007"
SAFETY = "unsafe"
PRECISION = "tf32x3"


def _dot_results(kernel: cst.FunctionDef) -> set[str]:
    out: set[str] = set()
    for small, *_ in F.walk(kernel.body.body):
        name = F.single_target(small)
        if name and any(C.last_part(C.call_name(c)) == "dot" for c in C.calls_in(small)):
            out.add(name)
    return out


@register(CODE)
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
