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


_TILE = "__skel_subtile__"  # placeholders while simplifying (libcst rebuilds nodes, so no identity marks)
_ZERO = "__skel_zero__"


def _is(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


class _Simplify(cst.CSTTransformer):
    """With the tile index replaced by the sub-tile number j: ``j * X`` -> ``X`` for j = 1,
    -> 0 for j = 0 (and ``E + 0`` -> ``E``), -> ``j * X`` otherwise. Only the inserted
    number is simplified; the user's own arithmetic is left as it was."""

    def __init__(self, number: int):
        self.number = number

    def leave_BinaryOperation(self, original, updated: cst.BinaryOperation):
        l, r = updated.left, updated.right
        if isinstance(updated.operator, cst.Multiply) and (_is(l, _TILE) or _is(r, _TILE)):
            other = r if _is(l, _TILE) else l
            if self.number == 0:
                return cst.Name(_ZERO)
            if self.number == 1:
                return _keep_parens(other, updated)
        if isinstance(updated.operator, cst.Add):
            if _is(l, _ZERO):
                return _keep_parens(r, updated)
            if _is(r, _ZERO):
                return _keep_parens(l, updated)
        return updated


def _keep_parens(inner: cst.BaseExpression, outer: cst.BinaryOperation) -> cst.BaseExpression:
    if outer.lpar and not getattr(inner, "lpar", None) and isinstance(inner, (cst.BinaryOperation, cst.UnaryOperation)):
        return inner.with_changes(lpar=outer.lpar, rpar=outer.rpar)
    return inner


def substitute_number(node, var: str, number: int, renames: dict[str, str]):
    """``node`` with ``var`` replaced by the literal ``number`` (simplified) and names renamed."""
    mapping: dict[str, cst.BaseExpression] = {k: cst.Name(v) for k, v in renames.items()}
    mapping[var] = cst.Name(_TILE)
    out = substitute(node, mapping).visit(_Simplify(number))
    return substitute(out, {_TILE: cst.Integer(str(number)), _ZERO: cst.Integer("0")})
