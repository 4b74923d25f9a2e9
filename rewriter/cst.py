"""Shared LibCST helpers for the per-skeleton codemods.

Everything here is structural: kernels are found by their ``@triton.jit``
decorator, calls by their dotted name's last part, conditions by the constexpr
parameters they test. No rewrite hard-codes a variable or kernel name. Control- and
data-flow analysis (``walk``, ``dependencies``, ``value_dtype`` ...) lives in ``cst_flow``.

Conventions used by every codemod module:
- analyse ``Source.module`` (a ``MetadataWrapper``'s module, so node identities
  carry positions), collect edits keyed by the *original* node, apply them with
  ``apply_edits``; line numbers in ``Change`` come from ``Source.line``;
- results are ``Rewrite`` values (``applied_result`` / ``skipped``), never
  exceptions.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from skel.rewriter.base import APPLIED, FAILED, SKIPPED, Change, Rewrite, RewriteOptions

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
    """Parse ``text``; return a ``Source``, or an error string saying where parsing failed.

    Memoised on the text: every rule's rewrite of one file (and a composition's next step,
    whose input is the previous step's checked output) parses it once. libcst trees are
    immutable and no caller writes into ``positions``, so sharing the result is safe."""
    return _parse(text)


@functools.lru_cache(maxsize=16)
def _parse(text: str) -> Source | str:
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
    checked = parse(new_source)  # memoised: the next rewrite of a composition reuses the tree
    if isinstance(checked, str):  # a bug in a codemod, reported as a value
        return Rewrite(code, FAILED, source, f"rewritten source does not parse: {checked}", safety=safety)
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


def nodes_in(node: cst.CSTNode, kind: type | tuple[type, ...] = cst.CSTNode) -> list:
    """Every node under ``node`` (itself included) of type ``kind``, in source order."""
    found: list = []

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, kind):
                found.append(n)
            return True

    node.visit(V())
    return found


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    return nodes_in(node, cst.Call)


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


def is_autotuned(func: cst.FunctionDef) -> bool:
    """``@triton.autotune(...)`` on the kernel: its configs, not the launch, choose num_warps and num_stages."""
    return any(last_part(dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)) == "autotune"
               for d in func.decorators)


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


def chain_edit(edits: dict, key: cst.CSTNode, fn: Callable[[cst.CSTNode], object]) -> None:
    """Add an ``apply_edits`` edit of ``key`` that runs after any already there (two kernels' launch
    edits may change elements of one host tuple assignment)."""
    prev = edits.get(key)
    edits[key] = fn if prev is None else (lambda u, f=fn, p=prev: f(p(u)))


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


def comment_line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(comment=cst.Comment(f"# {text}"))


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


def open_kernels(code: str, safety: str, source: str, options: RewriteOptions) -> tuple[Source, list] | list[Rewrite]:
    """The parsed source and its ``@triton.jit`` kernels, or the rewrite's failed/skipped result to
    return as is (the source does not parse, or has no kernel, or none named ``options.kernel``)."""
    src = parse(source)
    if isinstance(src, str):
        return failed(code, source, src, safety)
    ks = kernels(src.module, options)
    return (src, ks) if ks else no_kernel(code, safety, source, options)


def no_kernel(code: str, safety: str, source: str, options: RewriteOptions) -> list[Rewrite]:
    """The skip for a file where ``kernels`` found nothing (none at all, or none named ``options.kernel``)."""
    named = f" named {options.kernel}" if options.kernel else ""
    return skip(code, safety, source, f"not applicable: no @triton.jit function{named}")
