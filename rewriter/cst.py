"""Shared LibCST helpers for the per-skeleton codemods.

Everything here is structural: kernels are found by their ``@triton.jit``
decorator, calls by their dotted name's last part, conditions by the constexpr
parameters they test. No rewrite hard-codes a variable or kernel name.

Conventions used by every codemod module:
- analyse ``Source.module`` (a ``MetadataWrapper``'s module, so node identities
  carry positions), collect edits keyed by the *original* node, apply them with
  ``apply_edits``; line numbers in ``Change`` come from ``Source.line``;
- results are ``Rewrite`` values (``applied_result`` / ``skipped``), never
  exceptions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from skel.rewriter.base import APPLIED, FAILED, SKIPPED, Change, Rewrite, RewriteOptions

# A condition on the path to a statement: (source text of the test, polarity).
Cond = tuple[str, bool]
Chain = tuple[Cond, ...]

_EMPTY = cst.Module(body=[])


@dataclass
class Source:
    """A parsed source with positions; ``module`` nodes are the ones with metadata."""

    text: str
    module: cst.Module
    positions: dict

    def line(self, node: cst.CSTNode) -> int:
        pos = self.positions.get(node)
        return pos.start.line if pos is not None else 0


def parse(text: str) -> Source | str:
    """Parse ``text``; return a ``Source``, or an error string saying where parsing failed."""
    try:
        wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
    except cst.ParserSyntaxError as exc:
        return f"the input does not parse (line {exc.raw_line}, column {exc.raw_column}): {exc.message}"
    return Source(text, wrapper.module, dict(wrapper.resolve(PositionProvider)))


def failed(code: str, source: str, reason: str, safety: str = "safe") -> list[Rewrite]:
    return [Rewrite(code, FAILED, source, reason, safety=safety)]


def applied_result(
    code: str,
    source: str,
    new_source: str,
    changes: Iterable[Change],
    summary: str,
    safety: str,
    variant: str = "",
    params: tuple = (),
) -> Rewrite:
    """An applied rewrite, after checking that the output parses (the contract's third clause)."""
    try:
        cst.parse_module(new_source)
    except cst.ParserSyntaxError as exc:  # a bug in a codemod, reported as a value
        return Rewrite(code, FAILED, source, f"rewritten source does not parse: {exc.message}", safety=safety)
    changes = tuple(sorted(changes, key=lambda c: c.line))
    return Rewrite(code, APPLIED, new_source, summary, changes, variant, params, safety)


# ---------------------------------------------------------------- expressions


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def dotted(node: cst.BaseExpression) -> str | None:
    """``tl.math.exp`` for an Attribute chain of Names, ``exp`` for a Name, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def call_name(node: cst.CSTNode) -> str | None:
    return dotted(node.func) if isinstance(node, cst.Call) else None


def last_part(name: str | None) -> str:
    return name.rsplit(".", 1)[-1] if name else ""


def method_name(call: cst.Call) -> str:
    """The called function's last name, also for methods of expressions (``f(x).to`` -> ``to``)."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # `.attr` is a Name node too, but not a variable
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # keyword names are not variables
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def names_in(node: cst.CSTNode) -> set[str]:
    """Variable names an expression (or statement) reads or writes."""
    v = _Names()
    node.visit(v)
    return v.names


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(V())
    return found


def is_load(node: cst.CSTNode) -> bool:
    return last_part(call_name(node)) == "load"


def is_store(node: cst.CSTNode) -> bool:
    return last_part(call_name(node)) == "store"


REDUCTIONS = {"sum", "reduce", "max", "min", "xor_sum"}


def has_reduction(node: cst.CSTNode) -> bool:
    return any(last_part(call_name(c)) in REDUCTIONS for c in calls_in(node))


# ------------------------------------------------------------------ kernels


def jit_decorator(func: cst.FunctionDef) -> cst.Decorator | None:
    """The ``@triton.jit`` / ``@jit`` / ``@triton.jit(...)`` decorator of ``func``, if any."""
    for dec in func.decorators:
        expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
        if last_part(dotted(expr)) == "jit":
            return dec
    return None


def kernels(module: cst.Module, options: RewriteOptions | None = None) -> list[cst.FunctionDef]:
    """Every ``@triton.jit`` function of the module (top level or under module-level ifs)."""
    only = options.kernel if options else None
    found: list[cst.FunctionDef] = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            if jit_decorator(node) is not None and (only is None or node.name.value == only):
                found.append(node)
            return False  # nested defs are not kernels

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

    module.visit(V())
    return found


def triton_language_alias(module: cst.Module) -> str:
    """The name ``triton.language`` is imported as (``tl`` by convention)."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code_of(alias.name) == "triton.language":
                        return alias.asname.name.value if alias.asname else "triton.language"
            if isinstance(small, cst.ImportFrom) and code_of(small.module or cst.Name("x")) == "triton":
                if not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        if code_of(alias.name) == "language":
                            return alias.asname.name.value if alias.asname else "language"
    return "tl"


def params(func: cst.FunctionDef) -> list[cst.Param]:
    p = func.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def annotation_text(param: cst.Param) -> str:
    return code_of(param.annotation.annotation) if param.annotation else ""


def constexpr_params(func: cst.FunctionDef) -> set[str]:
    return {p.name.value for p in params(func) if last_part(annotation_text(p)) == "constexpr"}


# --------------------------------------------------------------- statements


def assigned_names(node: cst.CSTNode) -> set[str]:
    """Names bound anywhere inside ``node`` (assignments, augmented assignments, for targets)."""
    out: set[str] = set()

    def targets(t: cst.BaseExpression) -> None:
        if isinstance(t, cst.Name):
            out.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                targets(el.value)

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                targets(t.target)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            targets(n.target)

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            targets(n.target)

        def visit_For(self, n: cst.For) -> None:
            targets(n.target)

    node.visit(V())
    return out


def walk(
    body: Iterable[cst.BaseStatement], chain: Chain = (), loops: tuple[cst.For, ...] = ()
) -> Iterator[tuple[cst.BaseSmallStatement, cst.SimpleStatementLine, Chain, tuple[cst.For, ...]]]:
    """Every small statement under ``body`` in source order, with the if-conditions and
    for-loops enclosing it (relative to ``body``)."""
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                yield small, stmt, chain, loops
        elif isinstance(stmt, cst.If):
            yield from _walk_if(stmt, chain, loops)
        elif isinstance(stmt, (cst.For, cst.While)):
            inner = loops + (stmt,) if isinstance(stmt, cst.For) else loops
            yield from walk(stmt.body.body, chain, inner)
        elif isinstance(stmt, (cst.With, cst.Try)):
            yield from walk(stmt.body.body, chain, loops)


def _walk_if(stmt: cst.If, chain: Chain, loops):
    test = code_of(stmt.test)
    yield from walk(stmt.body.body, chain + ((test, True),), loops)
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):  # elif: the else of this test, then the elif's own test
        yield from _walk_if(orelse, chain + ((test, False),), loops)
    elif isinstance(orelse, cst.Else):
        yield from walk(orelse.body.body, chain + ((test, False),), loops)


def contradicts(a: Chain, b: Chain) -> bool:
    """True when the two paths test the same condition with opposite outcomes."""
    pol = dict(a)
    return any(t in pol and pol[t] != p for t, p in b)


def chain_text(chain: Chain) -> str:
    return " and ".join(t if p else f"not ({t})" for t, p in chain) or "always"


def single_target(small: cst.BaseSmallStatement) -> str | None:
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return small.target.value
    return None


def dependencies(func: cst.FunctionDef) -> dict[str, list[tuple[Chain, set[str]]]]:
    """Flow-insensitive def-use facts: for each name, the (path condition, names read) of each
    assignment to it in ``func``. Augmented assignments also read their target."""
    deps: dict[str, list[tuple[Chain, set[str]]]] = {}
    for small, _line, chain, _loops in walk(func.body.body):
        if isinstance(small, cst.Assign):
            read = names_in(small.value)
            for t in small.targets:
                for name in assigned_names(cst.Expr(t.target)) if not isinstance(t.target, cst.Name) else {t.target.value}:
                    deps.setdefault(name, []).append((chain, read))
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            deps.setdefault(small.target.value, []).append((chain, names_in(small.value) | {small.target.value}))
    for stmt in _fors(func):
        for name in assigned_names(cst.Expr(stmt.target)) if not isinstance(stmt.target, cst.Name) else {stmt.target.value}:
            deps.setdefault(name, []).append(((), names_in(stmt.iter)))
    return deps


def _fors(node: cst.CSTNode) -> list[cst.For]:
    found: list[cst.For] = []

    class V(cst.CSTVisitor):
        def visit_For(self, n: cst.For) -> None:
            found.append(n)

    node.visit(V())
    return found


def depends_on(
    names: set[str], targets: set[str], deps: dict[str, list[tuple[Chain, set[str]]]], chain: Chain = ()
) -> bool:
    """Does a value reading ``names`` (under path ``chain``) depend, transitively, on ``targets``?
    Assignments on paths that contradict ``chain`` are ignored (constexpr branches)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n in targets:
            return True
        if n in seen:
            continue
        seen.add(n)
        for def_chain, read in deps.get(n, ()):
            if not contradicts(chain, def_chain):
                todo.extend(read)
    return False


# -------------------------------------------------------------------- edits


def apply_edits(module: cst.Module, edits: dict[cst.CSTNode, Callable[[cst.CSTNode], object]]) -> cst.Module:
    """Replace nodes by identity: ``edits[original](updated_node)`` gives the new node (or a
    ``FlattenSentinel`` / ``RemovalSentinel`` where libcst allows one). Children are rewritten
    first, so edits may nest."""

    class T(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):  # type: ignore[override]
            fn = edits.get(original_node)
            return fn(updated_node) if fn is not None else updated_node

    return module.visit(T())


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def comment_line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(comment=cst.Comment(f"# {text}"))


def assignments(func: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """name -> the right-hand sides assigned to it in ``func`` (source order)."""
    out: dict[str, list[cst.BaseExpression]] = {}
    for small, _line, _chain, _loops in walk(func.body.body):
        name = single_target(small)
        if name is not None and isinstance(small, (cst.Assign, cst.AugAssign)):
            out.setdefault(name, []).append(small.value)
    return out


_F32 = ("float32", "fp32")
_F16 = ("float16", "bfloat16", "fp16", "bf16")


def value_dtype(node: cst.BaseExpression, defs: dict[str, list[cst.BaseExpression]], depth: int = 0) -> str:
    """Static, conservative dtype of a value: "fp32", "16bit" or "?" (unknown).

    fp32 when the value is cast or created as float32, is a dot/reduction of fp32 values,
    or is arithmetic whose tensor operands are all fp32; names are followed to their
    assignments in the kernel (all of them must agree)."""
    if depth > 8:
        return "?"
    if isinstance(node, (cst.Integer, cst.Float)):
        return "scalar"
    if isinstance(node, cst.Call):
        name = method_name(node)
        text = code_of(node)
        if name in ("to", "zeros", "full", "cast", "zeros_like"):
            tail = code_of(node.args[-1].value) if node.args else ""
            if any(t in tail for t in _F32):
                return "fp32"
            if any(t in tail for t in _F16):
                return "16bit"
            if name == "to" and isinstance(node.func, cst.Attribute):
                return "?"
        if name == "dot":
            return "fp32" if "out_dtype" not in text or any(t in text for t in _F32) else "?"
        if name in REDUCTIONS | {"exp", "exp2", "sqrt", "rsqrt", "sigmoid", "log", "where", "maximum", "minimum"}:
            kinds = {value_dtype(a.value, defs, depth + 1) for a in node.args if a.keyword is None}
            kinds.discard("scalar")
            return kinds.pop() if len(kinds) == 1 else "?"
        # other elementwise helpers (softplus, a user's exp): fp32 in, fp32 out
        kinds = {value_dtype(a.value, defs, depth + 1) for a in node.args if a.keyword is None} - {"scalar"}
        return "fp32" if kinds == {"fp32"} else "?"
    if isinstance(node, cst.IfExp):
        kinds = {value_dtype(node.body, defs, depth + 1), value_dtype(node.orelse, defs, depth + 1)} - {"scalar"}
        return kinds.pop() if len(kinds) == 1 else ("scalar" if not kinds else "?")
    if isinstance(node, cst.Subscript):
        return value_dtype(node.value, defs, depth + 1)
    if isinstance(node, cst.UnaryOperation):
        return value_dtype(node.expression, defs, depth + 1)
    if isinstance(node, cst.BinaryOperation):
        kinds = {value_dtype(node.left, defs, depth + 1), value_dtype(node.right, defs, depth + 1)} - {"scalar"}
        if not kinds:
            return "scalar"
        if "fp32" in kinds:
            return "fp32"  # arithmetic with an fp32 tensor promotes 16-bit operands to fp32
        return kinds.pop() if len(kinds) == 1 else "?"
    if isinstance(node, cst.Name):
        rhs = defs.get(node.value)
        if not rhs:
            return "scalar"  # a kernel parameter or a global: tensors come from loads, not arguments
        # self-updates (x = x / s) read the name being defined: evaluate them without it
        rest = {k: w for k, w in defs.items() if k != node.value}
        kinds = {value_dtype(v, rest, depth + 1) for v in rhs}
        concrete = kinds - {"?", "scalar"}
        if len(concrete) == 1:
            return concrete.pop()
        return "scalar" if kinds == {"scalar"} else "?"
    return "?"


def launches(module: cst.Module, kernels: dict[str, cst.FunctionDef]) -> list[tuple[cst.Call, cst.FunctionDef, cst.FunctionDef]]:
    """Every ``kernel[grid](...)`` call of one of ``kernels`` (by name): (call, kernel, enclosing function)."""
    found = []

    class V(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: list[cst.FunctionDef] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.stack.append(node)

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.stack.pop()

        def visit_Call(self, node: cst.Call) -> None:
            f = node.func
            if isinstance(f, cst.Subscript) and isinstance(f.value, cst.Name) and f.value.value in kernels and self.stack:
                found.append((node, kernels[f.value.value], self.stack[-1]))

    module.visit(V())
    return found


def skip(code: str, safety: str, source: str, reason: str) -> list[Rewrite]:
    """``base.skipped`` that keeps the skeleton's safety on the result."""
    return [Rewrite(code, SKIPPED, source, reason, safety=safety)]


def no_kernel(code: str, safety: str, source: str, options: RewriteOptions) -> list[Rewrite]:
    """The skip for a file where ``kernels`` found nothing (none at all, or none named ``options.kernel``)."""
    named = f" named {options.kernel}" if options.kernel else ""
    return skip(code, safety, source, f"not applicable: no @triton.jit function{named}")
