"""SK002 helpers: fresh names, renaming and substitution over libcst trees.

Renaming touches variables only: attribute names (``x.to``) and keyword names
(``mask=``) are Name nodes too, and are left alone.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C


class NameAllocator:
    """Names not used anywhere in a module (so generated names never shadow the user's)."""

    def __init__(self, module: cst.CSTNode):
        self.used = C.names_in(module) | _attr_names(module)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name = f"{base}{i}"
            i += 1
        self.used.add(name)
        return name


def _attr_names(node: cst.CSTNode) -> set[str]:
    out: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            out.add(n.value)

    node.visit(V())
    return out


class _Substitute(cst.CSTTransformer):
    def __init__(self, mapping: dict[str, cst.BaseExpression]):
        self.mapping = mapping

    def leave_Name(self, original: cst.Name, updated: cst.Name):
        new = self.mapping.get(original.value)
        return new if new is not None else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg):
        return updated.with_changes(keyword=original.keyword) if original.keyword is not None else updated

    def leave_Param(self, original: cst.Param, updated: cst.Param):
        return updated.with_changes(name=original.name)


def substitute(node, mapping: dict[str, cst.BaseExpression]):
    """``node`` with variable names replaced by expressions (targets too: use names there)."""
    return node.visit(_Substitute(mapping)) if mapping else node


def rename(node, mapping: dict[str, str]):
    return substitute(node, {k: cst.Name(v) for k, v in mapping.items()})


def _int(node: cst.BaseExpression, marks: set[int]) -> int | None:
    if id(node) in marks and isinstance(node, cst.Integer):
        return int(node.value)
    return None


class _Simplify(cst.CSTTransformer):
    """``0 * X`` -> 0, ``1 * X`` -> X, ``X + 0`` -> X, only for the literals a sub-tile
    substitution inserted (``marks``): what replacing ``i_v`` by a sub-tile number leaves."""

    def __init__(self, marks: set[int]):
        self.marks = marks

    def leave_BinaryOperation(self, original, updated: cst.BinaryOperation):
        l, r = _int(updated.left, self.marks), _int(updated.right, self.marks)
        if isinstance(updated.operator, cst.Multiply):
            if l == 0 or r == 0:
                zero = cst.Integer("0")
                self.marks.add(id(zero))
                return zero
            if l == 1:
                return _keep_parens(updated.right, updated)
            if r == 1:
                return _keep_parens(updated.left, updated)
        if isinstance(updated.operator, cst.Add):
            if l == 0:
                return _keep_parens(updated.right, updated)
            if r == 0:
                return _keep_parens(updated.left, updated)
        return updated


def _keep_parens(inner: cst.BaseExpression, outer: cst.BinaryOperation) -> cst.BaseExpression:
    if outer.lpar and not getattr(inner, "lpar", None) and isinstance(inner, (cst.BinaryOperation, cst.UnaryOperation)):
        return inner.with_changes(lpar=outer.lpar, rpar=outer.rpar)
    return inner


def substitute_number(node, var: str, number: int, renames: dict[str, str]):
    """``node`` with ``var`` replaced by the literal ``number`` (then simplified) and names renamed."""
    lit = cst.Integer(str(number))
    mapping: dict[str, cst.BaseExpression] = {k: cst.Name(v) for k, v in renames.items()}
    mapping[var] = lit
    out = substitute(node, mapping)
    return out.visit(_Simplify({id(lit)}))
