"""SK001: division by the square root of a reduction -> multiply by rsqrt, scale folded in.

DESCRIPTION: ``x / tl.sqrt(R + eps)`` with ``R`` a reduction (tl.sum / tl.reduce / sum)
becomes ``x * tl.rsqrt(R + eps)``; ``1 / tl.sqrt(R)`` becomes ``tl.rsqrt(R)``. When the
quotient is then multiplied by a constant scale (a kernel parameter never reassigned, or a
literal) with nothing in between touching it, the scale joins the scalar factor:
``x * (tl.rsqrt(R + eps) * scale)`` and the separate multiply goes. When the division sits in
an ``if`` and the multiply follows the ``if``, the multiply moves into both branches
(folded in the ``if``, kept as it was in the ``else``), so the result is the same on both paths.

Unsafe: rsqrt is an approximation with different rounding from sqrt + divide.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions, register

CODE = "SK001"
SAFETY = "unsafe"
_SQRT = {"sqrt", "sqrt_rn"}


def _norm_sqrt(node: cst.CSTNode) -> cst.Call | None:
    """The sqrt call if ``node`` is ``tl.sqrt(<expression containing a reduction>)``."""
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) in _SQRT and len(node.args) == 1:
        if C.has_reduction(node.args[0].value):
            return node
    return None


def _is_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.value) == 1.0


def _norm_division(small: cst.BaseSmallStatement) -> tuple[str, cst.BinaryOperation] | None:
    """``X = E / sqrt(R)`` as a whole statement: (X, the division)."""
    name = F.single_target(small)
    if name and isinstance(small, cst.Assign):
        v = small.value
        if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Divide) and _norm_sqrt(v.right):
            return name, v
    return None


def _scale_of(small: cst.BaseSmallStatement, x: str, consts: set[str]) -> cst.BaseExpression | None:
    """S when ``small`` is ``x = x * S``, ``x = S * x`` or ``x *= S`` with S constant."""
    if F.single_target(small) != x:
        return None
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.MultiplyAssign):
        s = small.value
    elif isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation) and isinstance(
        small.value.operator, cst.Multiply
    ):
        left, right = small.value.left, small.value.right
        if isinstance(left, cst.Name) and left.value == x and not left.lpar:
            s = right
        elif isinstance(right, cst.Name) and right.value == x and not right.lpar:
            s = left
        else:
            return None
    else:
        return None
    if isinstance(s, (cst.Integer, cst.Float)) or (isinstance(s, cst.Name) and s.value in consts):
        return s
    return None


def _one_small(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


class _Plan:
    def __init__(self, src: C.Source, tl: str, consts: set[str], defs: dict) -> None:
        self.src, self.tl, self.consts, self.defs = src, tl, consts, defs
        self.fold: dict[cst.BinaryOperation, cst.BaseExpression] = {}  # division -> folded scale
        self.remove: set[cst.CSTNode] = set()  # multiply statements folded away
        self.to_else: dict[cst.If, list[cst.SimpleStatementLine]] = {}
        self.changes: list[Change] = []

    def block(self, body: list[cst.BaseStatement]) -> None:
        for i, stmt in enumerate(body):
            small = _one_small(stmt)
            found = _norm_division(small) if small is not None else None
            if found:
                self._fold_after(body, i, found, None)
            elif isinstance(stmt, cst.If) and not isinstance(stmt.orelse, cst.If):
                inner = list(stmt.body.body)
                for k, s in enumerate(inner):
                    f = _norm_division(_one_small(s)) if _one_small(s) is not None else None
                    if f and not any(f[0] in C.names_in(t) for t in inner[k + 1:]):
                        self._fold_after(body, i, f, stmt)
            for child in _child_blocks(stmt):
                self.block(child)

    def _fold_after(self, body, i, found, if_stmt: cst.If | None) -> None:
        x, division = found
        if F.value_dtype(division.right.args[0].value, self.defs) == "16bit":
            return  # the division itself is kept (see rewrite), so nothing is folded into it
        for later in body[i + 1:]:
            small = _one_small(later)
            s = _scale_of(small, x, self.consts) if small is not None else None
            if s is not None and later not in self.remove:
                self.fold[division] = s
                self.remove.add(later)
                if if_stmt is not None:
                    self.to_else.setdefault(if_stmt, []).append(later)
                where = "in the if-branch, kept in the else-branch" if if_stmt is not None else ""
                self.changes.append(Change(self.src.line(later), f"multiply of {x} by {C.code_of(s)} folded into "
                                           f"the rsqrt factor {where}".rstrip()))
                return
            if x in C.names_in(later) or (C.assigned_names(later) & self.consts):
                return  # the quotient is used (or the scale changes) before any multiply


def _child_blocks(stmt: cst.BaseStatement) -> list[list[cst.BaseStatement]]:
    out = []
    if isinstance(stmt, (cst.If, cst.For, cst.While, cst.With)):
        out.append(list(stmt.body.body))
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):
        out.extend(_child_blocks(orelse))
    elif isinstance(orelse, cst.Else):
        out.append(list(orelse.body.body))
    return out


def _rsqrt(tl: str, sqrt_call: cst.Call) -> cst.Call:
    return cst.Call(func=C.expr(f"{tl}.rsqrt"), args=[cst.Arg(sqrt_call.args[0].value)])


def _divisions(kernel: cst.FunctionDef) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            if isinstance(n.operator, cst.Divide) and _norm_sqrt(n.right):
                found.append(n)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            if isinstance(n.operator, cst.DivideAssign) and _norm_sqrt(n.value):
                found.append(n)

    kernel.visit(V())
    return found


def _already(kernels) -> str | None:
    for k in kernels:
        for call in C.calls_in(k):
            if C.last_part(C.call_name(call)) == "rsqrt" and call.args and C.has_reduction(call.args[0].value):
                return C.code_of(call)
    return None


@register(CODE)
def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    opened = C.open_kernels(CODE, SAFETY, source, options)
    if isinstance(opened, list):
        return opened
    src, ks = opened
    tl = C.triton_language_alias(src.module)
    edits: dict = {}
    changes: list[Change] = []
    kept16: list[str] = []
    n = 0
    for kernel in ks:
        defs = F.assignments(kernel)
        consts = {p.name.value for p in C.params(kernel)} - set(defs)
        plan = _Plan(src, tl, consts, defs)
        plan.block(list(kernel.body.body))
        changes.extend(plan.changes)
        for node in _divisions(kernel):
            sqrt_call = node.right if isinstance(node, cst.BinaryOperation) else node.value
            if F.value_dtype(sqrt_call.args[0].value, defs) == "16bit":
                kept16.append(f"line {src.line(node)}")
                continue
            edits[node] = _division_edit(node, sqrt_call, plan.fold.get(node), tl)
            n += 1
            changes.append(Change(src.line(node), f"{C.code_of(node)} -> multiply by {tl}.rsqrt(...)"))
        for stmt in plan.remove:
            edits[stmt] = lambda upd: cst.RemovalSentinel.REMOVE
        for if_stmt, moved in plan.to_else.items():
            edits[if_stmt] = _else_edit(moved)
    if not edits:
        if kept16:
            return C.skip(CODE, SAFETY, source, f"not applicable: the norm is computed in a 16-bit type ({', '.join(kept16)}); kept the division")
        done = _already(ks)
        if done:
            return C.skip(CODE, SAFETY, source, f"already applied: the norm already multiplies by {done}")
        return C.skip(CODE, SAFETY, source, "not applicable: no division by the square root of a reduction (tl.sum/tl.reduce) in any @triton.jit function")
    new = C.apply_edits(src.module, edits).code
    folded = len(changes) - n
    summary = f"{n} norm division(s) -> rsqrt multiply" + (f", {folded} scale multiply(ies) folded in" if folded else "")
    return [C.applied_result(CODE, source, new, changes, summary, SAFETY)]


def _division_edit(node, sqrt_call: cst.Call, scale, tl: str):
    def edit(upd):
        factor: cst.BaseExpression = _rsqrt(tl, sqrt_call)
        if scale is not None:
            factor = cst.BinaryOperation(factor, cst.Multiply(), scale)
        if isinstance(upd, cst.AugAssign):
            return upd.with_changes(operator=cst.MultiplyAssign(whitespace_before=upd.operator.whitespace_before,
                                                                whitespace_after=upd.operator.whitespace_after), value=factor)
        if _is_one(upd.left):
            return factor.with_changes(lpar=upd.lpar, rpar=upd.rpar)
        if scale is not None:
            factor = factor.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        op = upd.operator
        return upd.with_changes(operator=cst.Multiply(whitespace_before=op.whitespace_before,
                                                      whitespace_after=op.whitespace_after), right=factor)

    return edit


def _else_edit(moved: list[cst.SimpleStatementLine]):
    stmts = [m.with_changes(leading_lines=()) for m in moved]

    def edit(upd: cst.If):
        if isinstance(upd.orelse, cst.Else):
            body = upd.orelse.body
            return upd.with_changes(orelse=upd.orelse.with_changes(body=body.with_changes(body=[*body.body, *stmts])))
        return upd.with_changes(orelse=cst.Else(body=cst.IndentedBlock(body=stmts)))

    return edit
