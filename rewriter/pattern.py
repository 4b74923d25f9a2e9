"""The generic pattern engine: before/after expressions with metavariables, applied through libcst.

A pattern edit is ``before`` -> ``after`` where ``$1, $2 ...`` are holes. Every
expression of the target whose syntax tree matches ``before`` (a hole matches any
subtree; a hole used twice must match the same subtree twice; formatting and
parentheses do not matter) is replaced by ``after`` with each hole's matched source
text, so the rest of the file keeps its formatting and comments. Candidate
skeletons distilled from history (``skel mine --history``) are applied this way.

Scope: replacements of expressions. A pattern that inserts or deletes statements
(e.g. a folded constant defined before a loop) is reported as skipped with that
reason, not half-applied.
"""
from __future__ import annotations

import ast
import re

import libcst as cst

from skel.rewriter.base import APPLIED, FAILED, SKIPPED, Change, Rewrite

_HOLE = "__skel_hole_"
_ATOMIC = (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript, ast.List, ast.Tuple)


def _parse_pattern(text: str) -> ast.expr:
    return ast.parse(re.sub(r"\$(\d+)", _HOLE + r"\1", text), mode="eval").body


def _match(pat: ast.AST, node: ast.AST, binds: dict[str, ast.AST]) -> bool:
    if isinstance(pat, ast.Name) and pat.id.startswith(_HOLE):
        if pat.id in binds:
            return ast.dump(binds[pat.id]) == ast.dump(node)
        binds[pat.id] = node
        return True
    if type(pat) is not type(node):
        return False
    for field in pat._fields:
        if field in ("ctx", "type_comment"):
            continue
        a, b = getattr(pat, field, None), getattr(node, field, None)
        if isinstance(a, ast.AST):
            if not isinstance(b, ast.AST) or not _match(a, b, binds):
                return False
        elif isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            for x, y in zip(a, b):
                if isinstance(x, ast.AST) and not (isinstance(y, ast.AST) and _match(x, y, binds)):
                    return False
                if not isinstance(x, ast.AST) and x != y:
                    return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


def _fill(after: str, binds: dict[str, ast.AST], source: str) -> str:
    """``after`` with each hole replaced by the target's own text for the subtree it matched."""
    def sub(m):
        node = binds[_HOLE + m.group(1)]
        text = ast.get_source_segment(source, node) or ast.unparse(node)
        return text if isinstance(node, _ATOMIC) else f"({text})"

    return re.sub(r"\$(\d+)", sub, after)


class _Replacer(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self, module: cst.Module, edits: list[tuple[ast.expr, str]], jit_only: bool):
        super().__init__()
        self.module, self.edits, self.jit_only = module, edits, jit_only
        self.jit_depth = 0
        self.changes: list[Change] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if any("jit" in self.module.code_for_node(d.decorator) for d in node.decorators):
            self.jit_depth += 1

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if any("jit" in self.module.code_for_node(d.decorator) for d in original.decorators):
            self.jit_depth -= 1
        return updated

    def on_leave(self, original, updated):
        updated = super().on_leave(original, updated)
        if not isinstance(original, cst.BaseExpression) or (self.jit_only and not self.jit_depth):
            return updated
        text = "(" + self.module.code_for_node(original) + ")"
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            return updated
        for pat, after in self.edits:
            binds: dict[str, ast.AST] = {}
            if _match(pat, node, binds):
                line = self.get_metadata(cst.metadata.PositionProvider, original).start.line
                replacement = cst.parse_expression(_fill(after, binds, text))
                self.changes.append(Change(line, f"{ast.unparse(node)} -> {self.module.code_for_node(replacement)}"))
                return replacement.with_changes(lpar=original.lpar, rpar=original.rpar) if original.lpar else replacement
        return updated


def apply_pattern(code: str, source: str, edits: list[dict], conditions: list[dict] = ()) -> Rewrite:
    """Apply a candidate's refined pattern (``[{"kind", "before", "after"}]``) to ``source``."""
    if any(e["kind"] != "replace" for e in edits):
        kinds = sorted({e["kind"] for e in edits if e["kind"] != "replace"})
        return Rewrite(code, SKIPPED, source, f"the pattern also {' and '.join(k + 's' for k in kinds)} statements; "
                       "the pattern engine applies expression replacements only", safety="unsafe")
    try:
        pats = [(_parse_pattern(e["before"]), e["after"]) for e in edits]
        for _, after in pats:
            _parse_pattern(after)
    except SyntaxError as exc:
        return Rewrite(code, FAILED, source, f"pattern does not parse: {exc.msg}", safety="unsafe")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return Rewrite(code, FAILED, source, f"target does not parse: line {exc.raw_line}: {exc.message}", safety="unsafe")
    jit_only = any(c.get("id") == "in-jit-function" for c in conditions)
    wrapper = cst.metadata.MetadataWrapper(module)
    replacer = _Replacer(wrapper.module, pats, jit_only)
    new = wrapper.visit(replacer)
    if not replacer.changes:
        return Rewrite(code, SKIPPED, source, "no code matches the pattern (or it is already applied)", safety="unsafe")
    out = new.code
    try:
        ast.parse(out)
    except SyntaxError as exc:
        return Rewrite(code, FAILED, source, f"rewritten source does not parse (line {exc.lineno}): {exc.msg}",
                       safety="unsafe")
    return Rewrite(code, APPLIED, out, f"{len(replacer.changes)} replacement(s) by pattern",
                   tuple(replacer.changes), safety="unsafe")


def preview_rewrites(source: str, candidates) -> list[Rewrite]:
    """One rewrite per history candidate (``CandidateSkeleton``), through its refined pattern."""
    return [apply_pattern(c.code, source, c.pattern["refined"], c.pattern["conditions"]) for c in candidates]
