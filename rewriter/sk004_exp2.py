"""SK004: exp(x) -> exp2(x * log2(e)), the constant folded into an existing constant multiplier.

DESCRIPTION: every natural exponential in a ``@triton.jit`` function -- ``tl.exp``,
``tl.math.exp``, or a helper ``exp`` (imported, e.g. ``from fla.ops.utils.op import exp``,
or defined in the file as a jit function returning ``tl.exp`` of its argument) -- becomes
``tl.math.exp2(x * 1.4426950408889634)``. When ``x`` is ``a * c`` with ``c`` a literal, the
product ``c * log2(e)`` is folded into one literal; with ``c`` a never-reassigned kernel
parameter (a scale), the multiplier becomes ``(c * 1.44...)`` so there is still one multiply
per element. Helper exps that upcast their argument get an explicit ``.to(tl.float32)`` before
the multiply unless the argument is already known to be fp32.

Unsafe: exp2 of a rounded product differs from exp in the last bits.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions, register

CODE = "SK004"
SAFETY = "unsafe"
LOG2E = 1.4426950408889634
LOG2E_TEXT = repr(LOG2E)


def _helper_exps(module: cst.Module, tl: str) -> tuple[set[str], set[cst.FunctionDef]]:
    """Bare names that are exponentials: imported ``exp`` (any alias) and jit helpers in the
    file whose body is ``return tl.exp(<param>[.to(...)])``."""
    names: set[str] = set()
    defs: set[cst.FunctionDef] = set()
    for small, *_ in F.walk(module.body):
        if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                if C.code_of(alias.name) == "exp":
                    names.add(alias.asname.name.value if alias.asname else "exp")
    for func in C.kernels(module):
        body = func.body.body
        stmt = body[0] if len(body) == 1 else None
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Return) and small.value is not None and _is_tl_exp(small.value, tl):
            names.add(func.name.value)
            defs.add(func)
    return names, defs


def _is_tl_exp(node: cst.CSTNode, tl: str) -> bool:
    name = C.call_name(node)
    return name in {f"{tl}.exp", f"{tl}.math.exp", "triton.language.exp", "triton.language.math.exp"}


def _constant(node: cst.BaseExpression, consts: set[str]) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) or (isinstance(node, cst.Name) and node.value in consts)


def _mul(left: cst.BaseExpression, right: cst.BaseExpression) -> cst.BinaryOperation:
    return cst.BinaryOperation(left, cst.Multiply(), right)


def _scaled(arg: cst.BaseExpression, consts: set[str]) -> tuple[cst.BaseExpression, str]:
    """``arg * log2(e)`` with the constant folded where ``arg`` already multiplies by one."""
    if isinstance(arg, cst.BinaryOperation) and isinstance(arg.operator, cst.Multiply) and not arg.lpar:
        for side, other in (("right", "left"), ("left", "right")):
            c = getattr(arg, side)
            if _constant(c, consts):
                if isinstance(c, (cst.Integer, cst.Float)) and not c.lpar:
                    folded: cst.BaseExpression = cst.Float(repr(float(c.value) * LOG2E))
                    how = f"log2(e) folded into the literal {c.value}"
                else:
                    folded = _mul(c, cst.Float(LOG2E_TEXT)).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    how = f"log2(e) folded into the constant multiplier {C.code_of(c)}"
                return arg.with_changes(**{side: folded}), how
    inner = arg
    if isinstance(arg, (cst.BinaryOperation, cst.BooleanOperation, cst.IfExp, cst.Comparison)) and not arg.lpar:
        inner = arg.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return _mul(inner, cst.Float(LOG2E_TEXT)), "times log2(e)"


def _upcast(arg: cst.BaseExpression, tl: str) -> cst.BaseExpression:
    if not isinstance(arg, (cst.Name, cst.Call, cst.Subscript, cst.Attribute)) and not arg.lpar:
        arg = arg.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(arg, cst.Name("to")), args=[cst.Arg(C.expr(f"{tl}.float32"))])


@register(CODE)
def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    tl = C.triton_language_alias(src.module)
    helpers, helper_defs = _helper_exps(src.module, tl)
    ks = [k for k in C.kernels(src.module, options) if k not in helper_defs]
    if not ks:
        return C.skip(CODE, SAFETY, source, "not applicable: no @triton.jit function (other than exp helpers)")
    edits: dict = {}
    changes: list[Change] = []
    for kernel in ks:
        defs = F.assignments(kernel)
        consts = {p.name.value for p in C.params(kernel)} - set(defs)
        for call in C.calls_in(kernel):
            is_helper = C.call_name(call) in helpers
            if not (is_helper or _is_tl_exp(call, tl)) or len(call.args) != 1 or call.args[0].keyword:
                continue
            edits[call] = _edit(call, tl, consts, is_helper and F.value_dtype(call.args[0].value, defs) != "fp32")
            _, how = _scaled(call.args[0].value, consts)
            changes.append(Change(src.line(call), f"{C.code_of(call)} -> {tl}.math.exp2(...), {how}"))
    if not edits:
        if any(C.last_part(C.call_name(c)) == "exp2" and LOG2E_TEXT[:8] in C.code_of(c) for k in ks for c in C.calls_in(k)):
            return C.skip(CODE, SAFETY, source, "already applied: exponentials are exp2 of a log2(e)-scaled argument")
        return C.skip(CODE, SAFETY, source, "not applicable: no natural exponential (tl.exp, tl.math.exp or an exp helper) "
                       "in any @triton.jit function")
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"{len(edits)} exp call(s) -> exp2 with log2(e) folded", SAFETY)]


def _edit(call: cst.Call, tl: str, consts: set[str], upcast: bool):
    def edit(upd: cst.Call) -> cst.Call:
        arg = upd.args[0].value
        if upcast:
            arg = _upcast(arg, tl)
        scaled, _ = _scaled(arg, consts)
        return upd.with_changes(func=C.expr(f"{tl}.math.exp2"), args=[upd.args[0].with_changes(value=scaled)])

    return edit
