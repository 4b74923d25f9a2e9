"""SK001-rsqrt-for-norm-division: ``x / sqrt(sum(x*x) + eps)`` -> ``x * rsqrt(sum(x*x) + eps)``.

Conditions (detector):
Opportunity: a division whose denominator is a square root (directly, or through a variable
holding one) of a sum reduction computed in float32. Instance: an rsqrt of a reduction.
A division by the square root of anything that is not a reduction (a scalar parameter, a
loaded value) is a near-miss: there is no per-row scalar to hoist into one rsqrt.

Rewrite:
SK001: division by the square root of a reduction -> multiply by rsqrt, scale folded in.

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

import ast
import re

import libcst as cst

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.text import divisions, find_calls
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "unsafe"


# ---------------------------------------------------------------- conditions


SQRT = ("tl.sqrt", "tl.math.sqrt", "tl.sqrt_rn", "libdevice.sqrt", "tldevice.sqrt", "sqrt", "sqrtf", "__fsqrt_rn", "__fsqrt_rz", "hsqrt")
RSQRT = ("tl.rsqrt", "tl.math.rsqrt", "libdevice.rsqrt", "tldevice.rsqrt", "rsqrt", "rsqrtf", "__frsqrt_rn", "hrsqrt")
REDUCE_CALL = re.compile(r"(?<![\w\.])(?:tl\.sum|tl\.reduce|tl\.cumsum|torch\.sum|\w*[Rr]educe\w*|\w*[Ww]arp[Ss]um\w*|\w*[Bb]lock[Ss]um\w*)\s*\(")
HALF = re.compile(r"tl\.(?:bfloat16|float16)|__half|__nv_bfloat16|\bhalf\b|\.half\(\)|\.bfloat16\(\)")
F32 = re.compile(r"tl\.float32|\bfloat\b|\.float\(\)|\bfloat32\b|tl\.float64|\bdouble\b")


def _sqrt_in(ctx: Ctx, denom: str, line: int) -> tuple[str, str] | None:
    """(sqrt call text, its argument) when ``denom`` is a square root, or a variable holding one."""
    calls = find_calls(denom, SQRT)
    if calls and denom.lstrip("(").startswith(tuple(c[0] for c in calls)):
        name, arg = calls[0]
        return f"{name}({arg})", arg
    if re.fullmatch(r"\(?\s*[A-Za-z_]\w*(\[[^\]]*\])?\s*\)?", denom):
        var = re.sub(r"[\[\(].*|\)", "", denom.strip("( ")).strip()
        d = ctx.last_def(var, line - 1)
        if d and d.op == "=":
            calls = find_calls(d.rhs, SQRT)
            if calls and d.rhs.strip().startswith(tuple(c[0] for c in calls)):
                name, arg = calls[0]
                return f"{name}({arg}) (line {d.line}: {var})", arg
    return None


def _is_reduction(ctx: Ctx, arg: str, line: int) -> str | None:
    """Where the sqrt argument comes from a sum reduction: the evidence, else None."""
    cache = ctx.cache.setdefault(f"{CODE}:reduction", {})  # three conditions and the candidates ask
    key = (arg, line)
    if key not in cache:
        cache[key] = _reduction_evidence(ctx, arg, line)
    return cache[key]


def _reduction_evidence(ctx: Ctx, arg: str, line: int) -> str | None:
    if REDUCE_CALL.search(arg):
        return arg
    if ctx.p.language == "triton":
        return _scalar_reduction(ctx, arg, line, 4)
    red_lines = {r.line for r in ctx.p.reductions}
    for a in ctx.closure(arg, line, depth=3):
        if a.line in red_lines or REDUCE_CALL.search(a.rhs):
            return f"line {a.line}: {a.rhs}"
        # an accumulator (CUDA: sum += x * x in a loop) is a reduction too
        if a.op == "+=" and "*" in a.rhs and ctx.loop_at(a.line):
            return f"line {a.line}: {' '.join(a.targets)} += {a.rhs}"
    return None


def _scalar_reduction(ctx: Ctx, expr: str, line: int, depth: int) -> str | None:
    """Where ``expr`` (Triton, at ``line``) is one value per row computed from a reduction: built only
    from reductions, literals and the kernel's parameters, through the variables holding them
    (``var = tl.sum(x * x, axis=0) / D``; ``tl.sqrt(var + eps)``). A value that merely went through
    a normalisation (``x = x / tl.sqrt(tl.sum(x * x))``, then ``tl.sqrt(x + 1.0)``) is still a vector:
    not a norm. The evidence, else None."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    found: list[str] = []

    def scalar(node: ast.AST, depth: int, at: int = line) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float))
        if isinstance(node, ast.Call):
            text = ast.unparse(node)
            if REDUCE_CALL.match(text):
                found.append(text)
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cast"):
                return scalar(node.func.value, depth, at)  # a cast keeps one value per row (eps.to(tl.float32))
            if _scalar_full(node):  # tl.full((), eps, tl.float32): a typed scalar, one value per row
                return scalar(node.args[1], depth, at)
            return False
        if isinstance(node, ast.BinOp):
            return scalar(node.left, depth, at) and scalar(node.right, depth, at)
        if isinstance(node, ast.UnaryOp):
            return scalar(node.operand, depth, at)
        if isinstance(node, ast.Name):
            d = ctx.last_def(node.id, at - 1)
            if d is None:
                return ctx.param(node.id) is not None  # a kernel parameter: one value for the program
            if d.op != "=" or depth <= 0 or len(d.targets) != 1:
                return False
            try:
                rhs = ast.parse(d.rhs.strip(), mode="eval").body
            except SyntaxError:
                return False
            if scalar(rhs, depth - 1, d.line):  # names in its right-hand side as of that line
                found.append(f"line {d.line}: {node.id} = {d.rhs}")
                return True
        return False

    return "; ".join(found[::-1]) if scalar(tree, depth) and found else None


def _scalar_full(node: ast.Call) -> bool:
    """``tl.full((), value, dtype)`` (or ``[]``): a 0-d tensor, i.e. one scalar built from ``value``."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    shape = node.args[0] if node.args else None
    return (name == "full" and len(node.args) >= 2 and isinstance(shape, (ast.Tuple, ast.List))
            and not shape.elts)


def _sites(ctx: Ctx):
    """(line, statement, denominator text, sqrt argument) for every division by a square root."""
    if "sites" in ctx.cache.setdefault(CODE, {}):
        return ctx.cache[CODE]["sites"]
    out = []
    for line in sorted({m.line for m in ctx.p.math if m.op == "div"}):
        stmt = ctx.statement(line)
        denoms = [dict(m.detail).get("denominator") for m in ctx.p.math if m.line == line and m.op == "div"]
        denoms = [d for d in denoms if d] or [d for _, d in divisions(stmt)]
        for denom in denoms:
            s = _sqrt_in(ctx, denom, line)
            if s:
                out.append((line, stmt, s[0], s[1]))
                break
    ctx.cache[CODE]["sites"] = out
    return out


def divides_by_sqrt(ctx: Ctx) -> Check:
    sites = _sites(ctx)
    if not sites:
        return no("no division whose denominator is a square root")
    return yes("; ".join(f"line {ln}: {stmt}" for ln, stmt, _, _ in sites[:3]))


def sqrt_of_reduction(ctx: Ctx) -> Check:
    found, missed = [], []
    for ln, stmt, sq, arg in _sites(ctx):
        ev = _is_reduction(ctx, arg, ln)
        (found if ev else missed).append((ln, sq, ev))
    if not found:
        if missed:
            ln, sq, _ = missed[0]
            return no(f"line {ln}: {sq} is not the square root of a reduction")
        return no("no division by a square root")
    return yes("; ".join(f"line {ln}: {sq} of a reduction ({ev})" for ln, sq, ev in found[:3]))


def _fp32(ctx: Ctx, arg: str, line: int) -> bool:
    dts = {dict(m.detail).get("dtype") for m in ctx.p.math if m.line == line and m.op in ("sqrt", "rsqrt")}
    dts |= {dict(m.detail).get("denominator_dtype") for m in ctx.p.math if m.line == line and m.op == "div"}
    dts |= {r.dtype for r in ctx.p.reductions if r.line == line}
    dts.discard(None)
    dts.discard("?")
    if dts:
        return dts <= {"fp32", "fp64"}
    texts = [arg] + [f"{a.decl} {a.rhs}" for a in ctx.closure(arg, line, depth=4)]
    if any(HALF.search(t) and not F32.search(t) for t in texts):
        return False
    return any(F32.search(t) for t in texts)


def denominator_is_float32(ctx: Ctx) -> Check:
    good = [(ln, sq) for ln, _, sq, arg in _sites(ctx) if _is_reduction(ctx, arg, ln) and _fp32(ctx, arg, ln)]
    if not good:
        return no("the norm's operand is not shown to be float32 (no .to(tl.float32) or fp32 accumulator)")
    return yes("; ".join(f"line {ln}: {sq} computed in float32" for ln, sq in good[:3]))


CONDITIONS = {
    "divides-by-sqrt": divides_by_sqrt,
    "sqrt-of-reduction": sqrt_of_reduction,
    "denominator-is-float32": denominator_is_float32,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [
        Hit.at(ln, ln, division=stmt, denominator=sq, reduction=_is_reduction(ctx, arg, ln))
        for ln, stmt, sq, arg in _sites(ctx)
        if _is_reduction(ctx, arg, ln) and _fp32(ctx, arg, ln)
    ]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for line in sorted({m.line for m in ctx.p.math if m.op == "rsqrt"}):
        stmt = ctx.statement(line)
        for name, arg in find_calls(stmt, RSQRT):
            ev = _is_reduction(ctx, arg, line)
            if ev:
                out.append(Hit.at(line, line, rsqrt=f"{name}({arg})", reduction=ev))
                break
    return out


# ---------------------------------------------------------------- rewrite

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


class RsqrtForNormDivision(Rule):
    """Replace division by a square-root norm with a multiply by rsqrt, folding constant scales."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
