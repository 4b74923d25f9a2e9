"""The edit script between two versions of a kernel file, at the syntax-tree level.

Both versions are parsed with ``ast`` (formatting and comments vanish), top-level
functions are aligned by name, and each pair is compared statement by statement:

- renames are not edits: a local name that maps consistently to one other name in
  every statement that kept its shape is renamed in the old version first;
- moved code is not an edit: a statement deleted in one place and inserted, unchanged,
  in another place of the same block nesting cancels out (moving it into or out of a
  loop is an edit: that is what hoisting is);
- a changed statement becomes the smallest expression subtree that holds every
  difference (``b / tl.sqrt(s)`` -> ``b * tl.rsqrt(s)``, not the whole assignment).

The result is plain data (``KernelEdit``), stored in the catalog and clustered by
``skel.miner.history_patterns``. Nothing here imports or runs mined code.
"""
from __future__ import annotations

import ast
import copy
import difflib
from collections import defaultdict
from dataclasses import dataclass

from skel.catalog.records import Edit, KernelEdit

_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith)
_LIFT = (ast.Name, ast.Constant, ast.Attribute)
MAX_CHANGED = 24  # changed statements above which a function counts as rewritten, not edited


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Top-level functions by name; a name defined twice is dropped (no reliable alignment)."""
    seen: dict[str, list] = defaultdict(list)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            seen[node.name].append(node)
    return {name: nodes[0] for name, nodes in seen.items() if len(nodes) == 1}


def is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def diff_files(path: str, old: ast.Module, new: ast.Module) -> list[KernelEdit]:
    """Edits per function present in both versions (added or removed functions are not edits of a kernel)."""
    before, after = functions(old), functions(new)
    out = []
    for name, fa in after.items():
        fb = before.get(name)
        if fb is None or _cached(fb, "dump", lambda f: _dump(f)) == _cached(fa, "dump", lambda f: _dump(f)):
            continue
        names = local_names(fb) | local_names(fa)
        edits = diff_functions(fb, fa, names)
        if edits:
            out.append(KernelEdit(path, name, fa.lineno, is_jit(fa), tuple(sorted(names)), tuple(edits)))
    return out


def local_names(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def _cached(fn: ast.AST, what: str, compute):
    """Per-function results kept on the node: a parsed blob is the new side of one commit and the old of the next."""
    attr = "_skel_" + what
    value = getattr(fn, attr, None)
    if value is None:
        value = compute(fn)
        setattr(fn, attr, value)
    return value


# ------------------------------------------------------------------ tokens
@dataclass
class _Tok:
    node: ast.AST  # a statement (a compound statement's header: body emptied) or a decorator
    nesting: str
    header: bool = False


def _tokens(fn: ast.FunctionDef) -> list[_Tok]:
    toks = [_Tok(d, "@decorator") for d in fn.decorator_list]
    toks.append(_Tok(_header(fn), "@signature", header=True))

    def walk(body: list[ast.stmt], nesting: str) -> None:
        for st in body:
            if isinstance(st, _COMPOUND):
                toks.append(_Tok(_header(st), nesting, header=True))
                inner = f"{nesting}/{type(st).__name__.lower()}".lstrip("/")
                walk(st.body, inner)
                walk(getattr(st, "orelse", []) or [], inner + ":else")
            else:
                toks.append(_Tok(st, nesting))

    walk(fn.body, "")
    return toks


def _header(st: ast.AST) -> ast.AST:
    """The statement without its nested blocks (they are tokens of their own)."""
    h = copy.copy(st)
    for field in ("body", "orelse", "decorator_list"):
        if hasattr(h, field):
            setattr(h, field, [])
    return h


_SKIP_FIELDS = ("ctx", "type_comment")


def _ser(node, blank: frozenset[str] | set[str] | None = None) -> str:
    """A compact structural dump (no positions, no load/store context); ``blank`` names print as ``_``.

    Hand-written rather than ``ast.dump`` because history mining dumps every statement of
    every changed kernel: this is the hot loop.
    """
    if isinstance(node, ast.AST):
        if blank is not None:
            if type(node) is ast.Name and node.id in blank:
                return "_"
            if type(node) is ast.arg and node.arg in blank:
                return "(arg _ " + _ser(node.annotation, blank) + ")"
        return "(" + type(node).__name__ + " " + " ".join(
            _ser(getattr(node, f, None), blank) for f in node._fields if f not in _SKIP_FIELDS) + ")"
    if isinstance(node, list):
        return "[" + ",".join(_ser(x, blank) for x in node) + "]"
    return repr(node)


def _dump(node: ast.AST) -> str:
    return _ser(node)


def _shape(node: ast.AST, names: set[str]) -> str:
    """Dump with local names blanked: two statements of one shape differ only by names."""
    return _ser(node, names)


def _rename(node: ast.AST, mapping: dict[str, str]) -> ast.AST:
    class R(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name):
            return ast.copy_location(ast.Name(mapping.get(n.id, n.id), n.ctx), n)

        def visit_arg(self, a: ast.arg):
            a = ast.arg(mapping.get(a.arg, a.arg), a.annotation and self.visit(a.annotation))
            return a

    return R().visit(copy.deepcopy(node))


def _names_in_order(node: ast.AST) -> list[str]:
    out = []

    class V(ast.NodeVisitor):
        def visit_Name(self, n):
            out.append(n.id)

        def visit_arg(self, a):
            out.append(a.arg)
            self.generic_visit(a)

    V().visit(node)
    return out


# ------------------------------------------------------------------ renames
def _renames(tb: list[_Tok], ta: list[_Tok], names: set[str]) -> dict[str, str]:
    """old name -> new name, for names renamed consistently wherever a statement kept its shape."""
    sb = [_shape(t.node, names) for t in tb]
    sa = [_shape(t.node, names) for t in ta]
    pairs: dict[str, set[str]] = defaultdict(set)
    back: dict[str, set[str]] = defaultdict(set)
    sm = difflib.SequenceMatcher(None, sb, sa, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            continue
        for tok_b, tok_a in zip(tb[i1:i2], ta[j1:j2]):
            for nb, na in zip(_names_in_order(tok_b.node), _names_in_order(tok_a.node)):
                if nb in names or na in names:
                    pairs[nb].add(na)
                    back[na].add(nb)
    return {b: next(iter(a)) for b, a in pairs.items()
            if len(a) == 1 and b != next(iter(a)) and len(back[next(iter(a))]) == 1}


# -------------------------------------------------------------------- diff
def diff_functions(fb: ast.FunctionDef, fa: ast.FunctionDef, names: set[str], max_changed: int = MAX_CHANGED) -> list[Edit]:
    """The edits from ``fb`` to ``fa``; none when the function was rewritten wholesale (over ``max_changed``)."""
    tb, ta = _cached(fb, "tokens", _tokens), _cached(fa, "tokens", _tokens)
    kb = _cached(fb, "keys", lambda f: [(t.nesting, _dump(t.node)) for t in tb])
    ka = _cached(fa, "keys", lambda f: [(t.nesting, _dump(t.node)) for t in ta])
    changed = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in
                  difflib.SequenceMatcher(None, kb, ka, autojunk=False).get_opcodes() if tag != "equal")
    if changed > max_changed:
        return []  # a rewrite or refactor of the whole function: no single recurring edit to learn from
    mapping = _renames(tb, ta, names)
    if mapping:
        tb = [_Tok(_rename(t.node, mapping), t.nesting, t.header) for t in tb]
        kb = [(t.nesting, _dump(t.node)) for t in tb]
    deleted: list[_Tok] = []
    inserted: list[_Tok] = []
    edits: list[Edit] = []
    sm = difflib.SequenceMatcher(None, kb, ka, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        olds, news = list(tb[i1:i2]), list(ta[j1:j2])
        for ob, na in _pair(olds, news):
            if ob is None:
                inserted.append(na)
            elif na is None:
                deleted.append(ob)
            else:
                edits.append(_replace(ob, na))
    # Moved code: the same statement deleted and inserted in the same nesting cancels out.
    pool = defaultdict(list)
    for t in deleted:
        pool[(t.nesting, _dump(t.node))].append(t)
    for t in inserted:
        key = (t.nesting, _dump(t.node))
        if pool.get(key):
            pool[key].pop()
            continue
        edits.append(Edit("insert", "", _src(t.node), _line(t.node), True, t.nesting))
    for ts in pool.values():
        for t in ts:
            edits.append(Edit("delete", _src(t.node), "", _line(t.node), True, t.nesting))
    edits.sort(key=lambda e: (e.line, e.kind, e.before, e.after))
    return edits


def _pair(olds: list[_Tok], news: list[_Tok]):
    """Pair statements of a changed block: same statement type (and same assigned names) in order."""
    j = 0
    used = set()
    for ob in olds:
        match = None
        for k in range(j, len(news)):
            if k not in used and _same_slot(ob, news[k]):
                match = k
                break
        if match is None:
            yield ob, None
        else:
            used.add(match)
            j = match + 1
            yield ob, news[match]
    for k, na in enumerate(news):
        if k not in used:
            yield None, na


def _same_slot(a: _Tok, b: _Tok) -> bool:
    if type(a.node) is not type(b.node) or a.nesting != b.nesting or a.header != b.header:
        return False
    if isinstance(a.node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        ta = a.node.targets if isinstance(a.node, ast.Assign) else [a.node.target]
        tb = b.node.targets if isinstance(b.node, ast.Assign) else [b.node.target]
        return [_dump(t) for t in ta] == [_dump(t) for t in tb]
    return True


def _replace(ob: _Tok, na: _Tok) -> Edit:
    rb, ra = _diff_root(ob.node, na.node)
    stmt = isinstance(rb, ast.stmt)
    return Edit("replace", _src(rb), _src(ra), _line(ra) or _line(na.node), stmt, na.nesting)


def _diff_root(b: ast.AST, a: ast.AST) -> tuple[ast.AST, ast.AST]:
    """The smallest expression (or statement) pair that holds every difference between ``b`` and ``a``."""
    chain = [(b, a)]
    while True:
        nb, na = chain[-1]
        child = _single_differing_child(nb, na)
        if child is None:
            break
        chain.append(child)
    # Climb to an expression or statement; a bare name, constant or attribute gets its parent
    # expression as context (``tl.exp`` -> ``tl.math.exp2`` is reported as the whole call).
    k = len(chain) - 1
    while k > 0 and not isinstance(chain[k][0], (ast.expr, ast.stmt)):
        k -= 1
    if k > 0 and isinstance(chain[k][0], _LIFT) and isinstance(chain[k - 1][0], ast.expr):
        k -= 1
    return chain[k]


def _single_differing_child(b: ast.AST, a: ast.AST):
    if type(b) is not type(a):
        return None
    diff = None
    for field in b._fields:
        vb, va = getattr(b, field, None), getattr(a, field, None)
        if isinstance(vb, ast.AST) and isinstance(va, ast.AST):
            if isinstance(vb, (ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context)):
                if type(vb) is not type(va) and not isinstance(vb, ast.expr_context):
                    return None
                continue
            if _dump(vb) != _dump(va):
                if diff is not None:
                    return None
                diff = (vb, va)
        elif isinstance(vb, list) and isinstance(va, list):
            if len(vb) != len(va):
                if [_dump(x) for x in vb] != [_dump(x) for x in va]:
                    return None
            for xb, xa in zip(vb, va):
                if isinstance(xb, ast.AST) and _dump(xb) != _dump(xa):
                    if diff is not None:
                        return None
                    diff = (xb, xa)
                elif not isinstance(xb, ast.AST) and xb != xa:
                    return None
        elif not (isinstance(vb, ast.AST) or isinstance(va, ast.AST)) and (type(vb) is not type(va) or vb != va):
            return None
        elif (vb is None) != (va is None):
            return None
    return diff


def _src(node: ast.AST) -> str:
    if isinstance(node, ast.stmt) and getattr(node, "body", None) == []:
        # A compound statement's header (its blocks are tokens of their own): keep it parseable.
        node = copy.copy(node)
        node.body = [ast.Pass()]
    return ast.unparse(node)


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0) or 0
