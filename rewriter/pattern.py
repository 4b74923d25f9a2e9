"""The generic pattern engine: before/after expressions with metavariables, applied through libcst.

A pattern edit is ``before`` -> ``after`` where ``$1, $2 ...`` are holes. Every
expression of the target whose syntax tree matches ``before`` (a hole matches any
subtree; a hole used twice must match the same subtree twice; formatting and
parentheses do not matter) is replaced by ``after`` with each hole's matched source
text, so the rest of the file keeps its formatting and comments. Candidate
skeletons distilled from history (``skel mine --history``) are applied this way.

A pattern's edits apply together or not at all: each replacement must match somewhere,
else the target is left as it was (a half-applied compound is a different program).

Inserted statements (``insert`` edits, e.g. ``$1 = $2 * 1.4426950408889634``, a constant
folded before a loop): a hole of the statement is either bound by a replacement's match
(``$2`` above: the first match in that function) or *fresh*, a hole no ``before`` binds,
which names a new variable (``$1``): it gets a name unused in the file, ``<bound
name>_folded`` where the statement binds one name. The statement goes into each jit
function where the replacements matched, right before the function-level statement that
holds the first match (before the loop, for a match inside one). Deletions are not
applied: the pattern is skipped with that reason.

Hole constraints (``where``, from a skeleton's ``[[pattern]]`` table): ``{"$2": {"calls":
["sum", "reduce"]}}`` means the subtree ``$2`` matched holds a call whose name ends in one of
them; ``no_calls`` the opposite; ``is`` one of ``name``, ``number``, ``call``, ``attribute``
for the kind of the subtree itself. A match that breaks a constraint is not a match.

Only values are rewritten: never an assignment target, an attribute's or keyword's name, a
function's or parameter's name. A ``before`` that is a bare hole (``$1 => $1.to(...)``)
would rewrite every expression and is refused, as is an ``after`` hole nothing defines.
"""
from __future__ import annotations

import ast
import re

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter.base import APPLIED, FAILED, SKIPPED, Change, Rewrite

_HOLE = "__skel_hole_"
_HOLE_RE = re.compile(r"\$(\d+)")
_ATOMIC = (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript, ast.List, ast.Tuple)
CONSTRAINTS = ("calls", "no_calls", "is")
_IS = {"name": ast.Name, "number": ast.Constant, "call": ast.Call, "attribute": ast.Attribute}


def _call_names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _satisfies(binds: dict[str, ast.AST], where: dict[str, dict]) -> bool:
    """Every hole constraint holds for the subtrees this match bound (an unbound hole: vacuously)."""
    for hole, rule in where.items():
        node = binds.get(_HOLE + hole.lstrip("$"))
        if node is None:
            continue
        calls = _call_names(node)
        if "calls" in rule and not calls & set(rule["calls"]):
            return False
        if "no_calls" in rule and calls & set(rule["no_calls"]):
            return False
        kind = _IS.get(rule.get("is", ""))
        if "is" in rule and (kind is None or not isinstance(node, kind)
                             or (rule["is"] == "number" and not isinstance(node.value, (int, float)))):
            return False
    return True


def _parse_pattern(text: str) -> ast.expr:
    return ast.parse(_HOLE_RE.sub(_HOLE + r"\1", text), mode="eval").body


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


def _fill(after: str, binds: dict[str, ast.AST], source: str, names: dict[str, str] = {}) -> str:
    """``after`` with each hole replaced by the target's own text for the subtree it matched
    (or, for a hole this match does not bind, by ``names``: fresh names and earlier bindings)."""
    def sub(m):
        if _HOLE + m.group(1) not in binds:
            return names["$" + m.group(1)]
        node = binds[_HOLE + m.group(1)]
        text = ast.get_source_segment(source, node) or ast.unparse(node)
        # `0.to(...)` is not Python: a number followed by an attribute needs parentheses too
        number = isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
            and after[m.end():m.end() + 1] == "."
        alone = after[:m.start()].rstrip()[-1:] in ("(", ",", "[") and after[m.end():].lstrip()[:1] in (")", ",", "]")
        return text if (isinstance(node, _ATOMIC) and not number) or alone else f"({text})"

    return _HOLE_RE.sub(sub, after)


def _holes(text: str) -> set[str]:
    return {"$" + h for h in _HOLE_RE.findall(text)}


class _Function:
    """Per jit function: the first bindings of each hole, fresh names, and where to insert."""

    def __init__(self, body: cst.BaseSuite):
        self.body = body
        self.top = -1  # index of the function-level statement being visited
        self.binds: dict[str, str] = {}  # hole -> the target's text it matched first
        self.first_top: int | None = None  # function-level statement holding the first match


class _Replacer(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider, cst.metadata.ExpressionContextProvider)

    def __init__(self, module: cst.Module, edits: list[tuple[ast.expr, str]], jit_only: bool,
                 inserts: list[str] = (), fresh: set[str] = frozenset(), used: set[str] = frozenset(),
                 where: dict[str, dict] | None = None):
        super().__init__()
        self.module, self.edits, self.jit_only, self.where = module, edits, jit_only, where or {}
        self.inserts, self.fresh, self.used = list(inserts), set(fresh), set(used)
        self.jit_depth = 0
        self.funcs: list[_Function | None] = []
        self.changes: list[Change] = []
        self.matched: set[int] = set()  # indices of the edits that matched somewhere
        self.unbound: list[str] = []  # functions where an inserted statement had a hole no match bound
        self.names: set[int] = set()  # ids of Name nodes that are names, not values (attributes, keywords...)

    # Names that are not values: an attribute's name, a keyword, a function's or parameter's name.
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.names.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.names.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self.names.add(id(node.name))

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        jit = C.jit_decorator(node) is not None
        self.jit_depth += jit
        self.funcs.append(_Function(node.body) if jit else None)
        self.names.add(id(node.name))

    def on_visit(self, node) -> bool:
        fn = self.funcs[-1] if self.funcs else None
        if fn is not None and isinstance(node, cst.BaseStatement):
            for i, stmt in enumerate(fn.body.body):
                if stmt is node:
                    fn.top = i
        return super().on_visit(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        fn = self.funcs.pop()
        self.jit_depth -= (C.jit_decorator(original) is not None)
        if fn is None or fn.first_top is None or not self.inserts:
            return updated
        stmts = []
        for text in self.inserts:
            if _holes(text) - set(fn.binds):
                self.unbound.append(original.name.value)
                return updated
            stmts.append(cst.parse_statement(_HOLE_RE.sub(lambda m: fn.binds["$" + m.group(1)], text) + "\n"))
        line = self.get_metadata(cst.metadata.PositionProvider, original.body.body[fn.first_top]).start.line
        for st in stmts:
            self.changes.append(Change(line, f"inserted before line {line}: {self.module.code_for_node(st).strip()}"))
        body = list(updated.body.body)
        body[fn.first_top:fn.first_top] = stmts
        return updated.with_changes(body=updated.body.with_changes(body=body))

    def _fresh_name(self, hole: str, binds: dict[str, str]) -> str:
        """``<name>_folded`` where an inserted statement defining ``hole`` binds exactly one name, else ``skel_v``."""
        base = "skel_v"
        for text in self.inserts:
            if hole in _holes(text):
                named = [binds[h] for h in _holes(text) - {hole} if binds.get(h, "").isidentifier()]
                if len(named) == 1:
                    base = named[0] + "_folded"
                    break
        name, i = base, 1
        while name in self.used:
            i += 1
            name = f"{base}{i}"
        self.used.add(name)
        return name

    def on_leave(self, original, updated):
        updated = super().on_leave(original, updated)
        if not isinstance(original, cst.BaseExpression) or (self.jit_only and not self.jit_depth):
            return updated
        if id(original) in self.names or self.get_metadata(cst.metadata.ExpressionContextProvider, original,
                                                           None) == cst.metadata.ExpressionContext.STORE:
            return updated  # a target or a name, not a value
        text = "(" + self.module.code_for_node(original) + ")"
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            return updated
        fn = self.funcs[-1] if self.funcs else None
        for index, (pat, after) in enumerate(self.edits):
            binds: dict[str, ast.AST] = {}
            if _match(pat, node, binds) and _satisfies(binds, self.where):
                line = self.get_metadata(cst.metadata.PositionProvider, original).start.line
                names = dict(fn.binds) if fn is not None else {}  # kept only if this match is applied
                if fn is not None:
                    for name in binds:
                        names.setdefault("$" + name[len(_HOLE):], _fill("$" + name[len(_HOLE):], binds, text))
                    for hole in sorted(self.fresh - set(names)):  # fixed at the function's first applied match
                        names[hole] = self._fresh_name(hole, names)
                try:
                    replacement = cst.parse_expression(_fill(after, binds, text, names))
                except (cst.ParserSyntaxError, KeyError):  # not an expression here, or a fresh name outside a jit function
                    continue
                self.matched.add(index)
                if fn is not None:
                    fn.binds = names
                    if fn.first_top is None:
                        fn.first_top = fn.top
                self.changes.append(Change(line, f"{ast.unparse(node)} -> {self.module.code_for_node(replacement)}"))
                return replacement.with_changes(lpar=original.lpar, rpar=original.rpar) if original.lpar else replacement
        return updated


def pattern_problem(edits: list[dict]) -> str | None:
    """Why the engine cannot apply this pattern to any target at all, or None (target-independent checks)."""
    if any(e["kind"] == "delete" for e in edits):
        return ("the pattern also deletes statements; the pattern engine replaces expressions and inserts "
                "statements, it does not delete them")
    replaces = [e for e in edits if e["kind"] == "replace"]
    inserts = [e["after"] for e in edits if e["kind"] == "insert"]
    if not replaces:
        return "the pattern only inserts statements: nothing in the target anchors where they go"
    bare = next((e["before"] for e in replaces if _HOLE_RE.fullmatch(e["before"].strip())), None)
    if bare is not None:
        return f"the pattern rewrites `{bare}`, any expression at all: nothing anchors where it applies"
    bound = set().union(*(_holes(e["before"]) for e in replaces))
    fresh: set[str] = set()  # holes an inserted statement assigns: new variables
    for text in inserts:
        lhs, _, rhs = text.partition("=")
        if not rhs or not _HOLE_RE.fullmatch(lhs.strip()) or rhs.startswith("="):
            return f"the inserted statement `{text}` does not assign a new variable ($N = ...)"
        if _holes(rhs) - bound - fresh:
            return (f"the inserted statement `{text}` uses {min(_holes(rhs) - bound - fresh)}, "
                    "which no match binds and no earlier inserted statement defines")
        fresh.add(lhs.strip())
    undefined = set().union(*(_holes(e["after"]) for e in replaces)) - bound - fresh
    if undefined:
        return (f"the pattern's replacement uses {min(undefined)}, which no match binds and no inserted "
                "statement defines")
    return None


def apply_pattern(code: str, source: str, edits: list[dict], conditions: list[dict] = (),
                  where: dict[str, dict] | None = None, safety: str = "unsafe") -> Rewrite:
    """Apply a pattern (``[{"kind", "before", "after"}]``: a candidate's refined pattern, or a skeleton's
    ``[[pattern]]`` tables) to ``source``; ``where``: hole constraints; ``safety``: the edits' safety."""
    def skip(reason: str) -> Rewrite:
        return Rewrite(code, SKIPPED, source, reason, safety=safety)

    problem = pattern_problem(edits)
    if problem:
        return skip(problem)
    replaces = [e for e in edits if e["kind"] == "replace"]
    inserts = [e["after"] for e in edits if e["kind"] == "insert"]
    try:
        pats = [(_parse_pattern(e["before"]), e["after"]) for e in replaces]
        for _, after in pats:
            _parse_pattern(after)
        for text in inserts:
            ast.parse(_HOLE_RE.sub(_HOLE + r"\1", text))
    except SyntaxError as exc:
        return Rewrite(code, FAILED, source, f"pattern does not parse: {exc.msg}", safety=safety)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return Rewrite(code, FAILED, source, f"target does not parse: line {exc.raw_line}: {exc.message}", safety=safety)
    fresh = {t.partition("=")[0].strip() for t in inserts}  # the new variables the inserted statements define
    used = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    jit_only = any(c.get("id") == "in-jit-function" for c in conditions)
    wrapper = cst.metadata.MetadataWrapper(module)
    replacer = _Replacer(wrapper.module, pats, jit_only, inserts, fresh, used, where)
    new = wrapper.visit(replacer)
    if not replacer.matched:
        return skip("no code matches the pattern (or it is already applied)")
    missing = [replaces[i]["before"] for i in range(len(replaces)) if i not in replacer.matched]
    if missing:
        return skip(f"only part of the pattern matches (nothing matches `{missing[0]}`); its edits apply together "
                    "or not at all")
    if replacer.unbound:
        return skip(f"in {replacer.unbound[0]} the inserted statement has a hole no match binds")
    out = new.code
    try:
        ast.parse(out)
    except SyntaxError as exc:
        return Rewrite(code, FAILED, source, f"rewritten source does not parse (line {exc.lineno}): {exc.msg}",
                       safety=safety)
    n_ins = sum(c.description.startswith("inserted") for c in replacer.changes)
    what = f"{len(replacer.changes) - n_ins} replacement(s)" + (f" and {n_ins} inserted statement(s)" if n_ins else "")
    changes = tuple(sorted(replacer.changes, key=lambda c: c.line))
    return Rewrite(code, APPLIED, out, what + " by pattern", changes, safety=safety)


def preview_rewrites(source: str, candidates) -> list[Rewrite]:
    """One rewrite per history candidate (``CandidateSkeleton``), through its refined pattern."""
    return [apply_pattern(c.code, source, c.pattern["refined"], c.pattern["conditions"]) for c in candidates]
