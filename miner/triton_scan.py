"""Reading Python statements straight through into a ``Scope`` (``triton_scope``).

``module_scope``: what a module's top-level statements define (values where a tiny evaluator
knows them, ``BV = 32``; the defining text otherwise). ``scope_before`` / ``LaunchScopes``: what
a launching function knows just before a launch line (its parameters unknown, both arms of an
``if`` that ends before it merged, the arm it lies in followed). Used by ``triton_launch`` for
launch sites' constexpr values and grids.
"""
from __future__ import annotations

import ast

from skel.miner.pyexpr import Source, Unresolved, evaluate
from skel.miner.triton_scope import Scope

_MISSING = object()


def module_scope(tree: ast.Module, src: Source, scope: Scope | None = None) -> Scope:
    """What the module's top-level statements define; with ``scope``, ``tree`` continues it (the
    module read block by block gives the scope of the whole)."""
    scope = scope if scope is not None else Scope()
    _scan(tree.body, scope, src, stop_line=10**9, module=True)
    return scope


def scope_before(fn: ast.AST | None, line: int, base: Scope, src: Source) -> Scope:
    """What is known just before ``line`` of ``fn``: a layer over the module's scope, not a copy."""
    return LaunchScopes(base, src).before(fn, line)


class LaunchScopes:
    """``scope_before`` for many launches, each launching function read once.

    Per function a reader keeps a stack of levels: the function's statements, and for the
    statement holding the last launch asked, the arm of the ``if`` (or the body of the loop) it
    lies in, and so on down. Statements wholly before a launch are read into their level's
    scope once and kept for later launches; a later launch leaves the levels it is not in and
    goes down from there. So a function launching thousands of kernels one after the other, or
    from the arms of an ``if``/``elif`` chain thousands long, is read once, not once per launch.
    Launches asked in ascending line order per function reuse the reading; an earlier line
    starts it again. What each launch sees is what reading the function up to it would give.
    """

    def __init__(self, base: Scope, src: Source):
        self.base, self.src = base, src
        self._readers: dict[int, list] = {}  # id(fn) -> [fn, last line, levels]

    def before(self, fn: ast.AST | None, line: int) -> Scope:
        if fn is None:
            return self.base.child()
        r = self._readers.get(id(fn))
        if r is None or r[0] is not fn or line < r[1]:
            scope = self.base.child()
            for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs:
                # a launcher's own parameters are whatever its caller passes
                scope.env.pop(a.arg, None)
                scope.texts[a.arg] = a.arg
            r = self._readers[id(fn)] = [fn, line, [_Level(fn.body, scope, None, None)]]
        r[1] = line
        levels = r[2]
        while len(levels) > 1 and not levels[-1].holds(line):
            levels.pop()
        while True:
            lvl = levels[-1]
            stmts = lvl.stmts
            while lvl.i < len(stmts) and stmts[lvl.i].end_lineno < line:  # wholly before: read once, kept
                _scan([stmts[lvl.i]], lvl.scope, self.src, stop_line=line)
                lvl.i += 1
            if lvl.i == len(stmts) or stmts[lvl.i].lineno >= line:
                return _layer_over(lvl.scope)
            c = stmts[lvl.i]  # the statement the launch is in
            if isinstance(c, ast.If):  # follow the arm the launch is in (as _scan does)
                in_body = bool(c.body) and c.body[-1].end_lineno >= line and c.body[0].lineno < line
                levels.append(_Level(c.body if in_body else c.orelse, _layer_over(lvl.scope), c, in_body))
            elif isinstance(c, (ast.For, ast.While, ast.With, ast.Try)):  # its parts, read in order
                parts = [x for part in ("body", "orelse", "finalbody") for x in (getattr(c, part, []) or [])]
                levels.append(_Level(parts, _layer_over(lvl.scope), c, None))
            else:
                here = _layer_over(lvl.scope)
                _scan([c], here, self.src, stop_line=line)
                return here


class _Level:
    """Statements read in order into ``scope``; ``i`` is the next one not read yet."""

    __slots__ = ("stmts", "scope", "stmt", "in_body", "i")

    def __init__(self, stmts, scope: Scope, stmt, in_body):
        self.stmts, self.scope, self.stmt, self.in_body, self.i = stmts, scope, stmt, in_body, 0

    def holds(self, line: int) -> bool:
        """Whether a launch at ``line`` lies in these statements (the same arm of the same ``if``)."""
        c = self.stmt
        if not (c.lineno < line <= c.end_lineno):
            return False
        if self.in_body is None:  # a loop's parts, or the function itself
            return True
        in_body = bool(c.body) and c.body[-1].end_lineno >= line and c.body[0].lineno < line
        return in_body == self.in_body


def _layer_over(scope: Scope) -> Scope:
    """A new layer over ``scope``, skipping layers that hold nothing (an elif chain thousands
    deep would otherwise make every name lookup walk thousands of empty layers)."""
    while scope.parent is not None and not scope.touched():
        scope = scope.parent
    return scope.child()


_MERGE = object()


def _scan(stmts, scope: Scope, src: Source, stop_line: int, module: bool = False) -> None:
    """Read ``stmts`` in order until ``stop_line``, into ``scope``.

    Iterative (a stack of statement lists): an if/elif chain thousands deep is no recursion.
    Once a statement at or after ``stop_line`` is met nothing later is read: statements come in
    line order, and an ``if`` whose both arms are read (and merged) ends before ``stop_line``.
    """
    stack: list[tuple] = [(iter(stmts), scope)]
    while stack:
        frame = stack[-1]
        if frame[0] is _MERGE:  # both arms of an if read: merge them
            stack.pop()
            _merge(*frame[1:])
            continue
        s = next(frame[0], None)
        sc = frame[1]
        if s is None:
            stack.pop()
            continue
        if s.lineno >= stop_line:
            return
        if isinstance(s, (ast.Assign, ast.AnnAssign)) and getattr(s, "value", None) is not None:
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                _bind(t, s.value, sc, src)
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            name = s.target.id
            _bind(s.target, ast.BinOp(ast.Name(name, ast.Load()), s.op, s.value), sc, src,
                  text=f"{sc.texts.get(name, name)} {_opsym(s.op)} {src.text(s.value)}")
        elif isinstance(s, ast.If):
            if s.end_lineno >= stop_line:  # the launch is inside this if: follow its arm only, and stop there
                arm = s.body if s.body and s.body[-1].end_lineno >= stop_line and s.body[0].lineno < stop_line else s.orelse
                stack[-1] = (iter(arm), sc)
                continue
            a, b = sc.child(), sc.child()
            stack.append((_MERGE, sc, a, b))
            stack.append((iter(s.orelse), b))
            stack.append((iter(s.body), a))
        elif isinstance(s, (ast.For, ast.While, ast.With, ast.Try)) and not module:
            for part in ("finalbody", "orelse", "body"):  # pushed last first: read body, orelse, finalbody
                stack.append((iter(getattr(s, part, []) or []), sc))
        elif isinstance(s, ast.FunctionDef) and not module:
            sc.nodes[s.name] = s  # def grid(meta): ...


def _bind(target, value, scope: Scope, src: Source, text: str | None = None) -> None:
    if isinstance(target, ast.Name):
        scope.nodes[target.id] = value
        try:
            scope.env[target.id] = evaluate(value, scope.env)
            scope.texts.pop(target.id, None)
        except Unresolved:
            scope.env.pop(target.id, None)
            scope.texts[target.id] = text or src.text(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
                and not any(isinstance(e, ast.Starred) for e in value.elts + target.elts):
            for t, v in zip(target.elts, value.elts):
                _bind(t, v, scope, src)
        else:
            for i, t in enumerate(target.elts):
                name = t.value.id if isinstance(t, ast.Starred) and isinstance(t.value, ast.Name) else getattr(t, "id", None)
                if name:
                    scope.env.pop(name, None)
                    scope.nodes.pop(name, None)
                    scope.texts[name] = name  # B, T, H, K, V = k.shape: a shape, known only at run time


def _merge(into: Scope, a: Scope, b: Scope) -> None:
    # The names the arms changed (and the few a merge changes anyway): not every name in sight.
    for name in into.merge_names(a, b):
        if not (name in a.env or name in b.env or name in a.texts or name in b.texts):
            continue
        va, vb = a.env.get(name, _MISSING), b.env.get(name, _MISSING)
        if va is not _MISSING and va == vb:
            into.env[name] = va
            into.texts.pop(name, None)
            continue
        into.env.pop(name, None)
        ta = repr(va) if va is not _MISSING else a.texts.get(name, name)
        tb = repr(vb) if vb is not _MISSING else b.texts.get(name, name)
        into.texts[name] = ta if ta == tb else f"{ta} | {tb}"
        node = a.nodes.get(name) or b.nodes.get(name)
        if node is not None:
            into.nodes[name] = node
        else:  # neither arm defines it by an expression (a parameter, an unpacked shape): no node, not None
            into.nodes.pop(name, None)


def _opsym(op) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/"}.get(type(op), "?")
