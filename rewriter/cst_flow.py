"""Control- and data-flow analysis over LibCST kernels, for the per-skeleton codemods.

``walk`` visits every small statement of a body with the if-conditions (a ``Chain``) and
for-loops enclosing it; ``dependencies`` / ``depends_on`` answer flow-insensitive def-use
questions that respect constexpr branches; ``assignments`` / ``value_dtype`` give a
conservative static dtype of a value. Parsing, naming and editing helpers live in ``cst``.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import libcst as cst

from skel.rewriter.cst import REDUCTIONS, assigned_names, call_name, calls_in, code_of, last_part, method_name, names_in

# A condition on the path to a statement: (source text of the test, polarity).
Cond = tuple[str, bool]
Chain = tuple[Cond, ...]


def walk(
    body: Iterable[cst.BaseStatement], chain: Chain = (), loops: tuple[cst.For, ...] = ()
) -> Iterator[tuple[cst.BaseSmallStatement, cst.SimpleStatementLine | cst.SimpleStatementSuite, Chain, tuple[cst.For, ...]]]:
    """Every small statement under ``body`` in source order, with the if-conditions and
    for-loops enclosing it (relative to ``body``). The second item is the statement line that
    holds it: a ``SimpleStatementSuite`` for a one-line body (``if c: x = 1``), which callers that
    move or replace whole lines must leave alone."""
    for stmt in body:
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in stmt.body:
                yield small, stmt, chain, loops
        elif isinstance(stmt, cst.If):
            yield from _walk_if(stmt, chain, loops)
        elif isinstance(stmt, (cst.For, cst.While)):
            inner = loops + (stmt,) if isinstance(stmt, cst.For) else loops
            yield from walk(_stmts(stmt.body), chain, inner)
        elif isinstance(stmt, (cst.With, cst.Try)):
            yield from walk(_stmts(stmt.body), chain, loops)


def _stmts(block: cst.BaseSuite) -> list:
    """The statements of a block; a one-line suite is its own single statement line."""
    return [block] if isinstance(block, cst.SimpleStatementSuite) else list(block.body)


def _walk_if(stmt: cst.If, chain: Chain, loops):
    test = code_of(stmt.test)
    yield from walk(_stmts(stmt.body), chain + ((test, True),), loops)
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):  # elif: the else of this test, then the elif's own test
        yield from _walk_if(orelse, chain + ((test, False),), loops)
    elif isinstance(orelse, cst.Else):
        yield from walk(_stmts(orelse.body), chain + ((test, False),), loops)


def contradicts(a: Chain, b: Chain) -> bool:
    """True when the two paths test the same condition with opposite outcomes."""
    pol = dict(a)
    return any(t in pol and pol[t] != p for t, p in b)


def runtime_tests(chain: Chain, constexprs: set[str]) -> list[str]:
    """The tests of ``chain`` that read a name other than the ``constexprs`` (decided at run time)."""
    return [test for test, _pol in chain if not names_in(cst.parse_expression(test)) <= constexprs]


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
    for stmt in fors(func):
        for name in assigned_names(cst.Expr(stmt.target)) if not isinstance(stmt.target, cst.Name) else {stmt.target.value}:
            deps.setdefault(name, []).append(((), names_in(stmt.iter)))
    return deps


def fors(node: cst.CSTNode) -> list[cst.For]:
    """Every for-loop under ``node``, outermost first."""
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


def pointer_roots(expr: cst.BaseExpression, defs: dict, seen: frozenset = frozenset()) -> set[str]:
    """Base names of a pointer expression: the leftmost operand of ``+`` chains, followed
    through assignments (``p_o = o + ...`` -> {"o"})."""
    while isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        expr = expr.left
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return set()
    name = expr.value
    if name not in defs or name in seen:
        return {name}
    out: set[str] = set()
    for value in defs[name]:
        out |= pointer_roots(value, defs, seen | {name}) or {name}
    return out


def memory_roots(kernel, defs, kind) -> set[str]:
    out: set[str] = set()
    for call in calls_in(kernel):
        if last_part(call_name(call)) in kind and call.args:
            out |= pointer_roots(call.args[0].value, defs)
    return out


def pointer_params(expr: cst.BaseExpression, defs: dict, params: set[str], seen: frozenset = frozenset()) -> set[str]:
    """The kernel parameters among every operand of a pointer's ``+``/``-`` chains (not only the leftmost:
    ``offs + o`` points into ``o``), followed through assignments."""
    out: set[str] = set()
    todo = [expr]
    while todo:
        e = todo.pop()
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.Add, cst.Subtract)):
            todo += [e.left, e.right]
        elif isinstance(e, cst.Subscript):
            todo.append(e.value)
        elif isinstance(e, cst.Name):
            if e.value in params:
                out.add(e.value)
            elif e.value in defs and e.value not in seen:
                for value in defs[e.value]:
                    out |= pointer_params(value, defs, params, seen | {e.value})
    return out
