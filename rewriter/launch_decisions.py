"""Where the host code decides a launch's parameters, and what they come to at a shape (SK005's reading).

At a ``kernel[grid](...)`` launch, a tile constexpr (``BV``, ``BLOCK_M``) is decided by one of:
- ``literal``: a host assignment holding one power-of-two literal (``BV = 32``,
  ``BV = min(8, triton.next_power_of_2(V))``): the search edits that literal, so the form stays;
- ``override``: any other host decision -- a conditional (``BV = min(pow2(V), 8 if small else 32)``),
  a tuple unpacked from a nested conditional over a shape dim (``BLOCK_M, num_warps = (32, 4) if d <= 16
  else ...``), a same-file helper (``BLOCK, warps = _pick(d)``), a module constant, assignments in
  branches: the search sets the variable right after the statement that decides it (``BV = 16  # skel
  SK005``), so the grid and every later use follow;
- ``argument``: an expression in the launch itself (``BV=min(triton.next_power_of_2(V), 32)``) that the grid
  reads through its meta-parameters (``grid = lambda META: (cdiv(V, META["BV"]), ...)``);
- ``heuristic``: a ``@triton.heuristics({"BV": lambda args: ...})`` entry the grid reads through META: the
  lambda's body becomes the searched literal.
A tile the grid does not depend on (``BK`` covering all of K) is not a work partition and is kept, as is
one the caller passes in (a parameter of the launching function).

``Evaluator`` gives host expressions a value at a shape: integers, booleans and tuples through arithmetic,
comparisons, conditionals, ``min``/``max``/``cdiv``/``next_power_of_2``, module constants and same-file
helper functions (their ifs and returns interpreted, a few calls deep). What it cannot evaluate is None:
the search then neither prunes on it nor claims the original's value.
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from skel.miner.triton_launch import TILE_NAME, sizes_lanes  # one definition, shared with the miner
from skel.rewriter import cst as C

DEPTH = 6  # helper calls deep

Value = int | bool | tuple | None


def pow2(n: int) -> int:
    """The least power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


_BINOPS = {
    cst.Add: lambda a, b: a + b, cst.Subtract: lambda a, b: a - b, cst.Multiply: lambda a, b: a * b,
    cst.FloorDivide: lambda a, b: a // b if b else None, cst.Modulo: lambda a, b: a % b if b else None,
    cst.LeftShift: lambda a, b: a << b if 0 <= b < 64 else None, cst.RightShift: lambda a, b: a >> b if b >= 0 else None,
    cst.Power: lambda a, b: a ** b if 0 <= b < 64 else None,
}
_COMPARES = {
    cst.LessThan: lambda a, b: a < b, cst.LessThanEqual: lambda a, b: a <= b, cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b, cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b,
}


class Evaluator:
    """Values of host expressions over a module's constants and same-file helper functions."""

    def __init__(self, module: cst.Module):
        self.functions: dict[str, cst.FunctionDef] = {}
        self.constants: dict[str, Value] = {}
        for stmt in module.body:
            if isinstance(stmt, cst.FunctionDef) and C.jit_decorator(stmt) is None:
                self.functions[stmt.name.value] = stmt
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                        bind(self.constants, _targets(small), self.value(small.value, self.constants))

    def value(self, node: cst.BaseExpression, env: dict[str, Value], depth: int = 0) -> Value:
        v = self._value(node, env, depth)
        return v if v is None or isinstance(v, (bool, int, tuple)) else None

    def _value(self, node, env, depth):  # noqa: C901 - one case per expression kind
        ev = lambda n: self.value(n, env, depth)  # noqa: E731
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.Name):
            if node.value in ("True", "False"):
                return node.value == "True"
            return env[node.value] if node.value in env else self.constants.get(node.value)
        if isinstance(node, (cst.Tuple, cst.List)):
            items = tuple(ev(e.value) for e in node.elements if not isinstance(e, cst.StarredElement))
            return items if len(items) == len(node.elements) and None not in items else None
        if isinstance(node, cst.IfExp):
            test = ev(node.test)
            if test is None:  # undecidable here: the value only when both branches agree
                a, b = ev(node.body), ev(node.orelse)
                return a if a == b else None
            return ev(node.body) if test else ev(node.orelse)
        if isinstance(node, cst.UnaryOperation):
            a = ev(node.expression)
            if a is None:
                return None
            if isinstance(node.operator, cst.Not):
                return not a
            return -a if isinstance(node.operator, cst.Minus) and isinstance(a, int) else (a if isinstance(node.operator, cst.Plus) else None)
        if isinstance(node, cst.BooleanOperation):
            a = ev(node.left)
            if a is None:
                return None
            if isinstance(node.operator, cst.And):
                return ev(node.right) if a else a
            return a if a else ev(node.right)
        if isinstance(node, cst.BinaryOperation):
            a, b = ev(node.left), ev(node.right)
            op = _BINOPS.get(type(node.operator))
            if op is None or not isinstance(a, int) or not isinstance(b, int) or isinstance(a, bool) and isinstance(b, bool):
                return None
            return op(int(a), int(b))
        if isinstance(node, cst.Comparison):
            left = ev(node.left)
            for target in node.comparisons:
                right = ev(target.comparator)
                op = _COMPARES.get(type(target.operator))
                if left is None or right is None or op is None:
                    return None
                if not op(left, right):
                    return False
                left = right
            return True
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = meta_key(node)
            if key is not None and isinstance(env.get(node.value.value), dict):  # a grid's META["BV"]
                return env[node.value.value].get(key)
            base, idx = ev(node.value), ev(node.slice[0].slice.value)
            if isinstance(base, tuple) and isinstance(idx, int) and -len(base) <= idx < len(base):
                return base[idx]
            return None
        if isinstance(node, cst.Call):
            return self._call(node, env, depth)
        return None

    def _call(self, node: cst.Call, env, depth) -> Value:
        name = C.call_name(node) or ""
        fn = C.last_part(name)
        if any(a.star for a in node.args):
            return None
        vals = [self.value(a.value, env, depth) for a in node.args if a.keyword is None]
        if fn in self.functions and "." not in name:
            return self.call_helper(self.functions[fn], node, env, depth)
        if None in vals:
            return None
        if fn == "next_power_of_2" and len(vals) == 1:
            return pow2(vals[0])
        if fn == "cdiv" and len(vals) == 2 and vals[1]:
            return -(-vals[0] // vals[1])
        if fn in ("min", "max") and vals and all(isinstance(v, int) for v in vals):
            return (min if fn == "min" else max)(vals)
        if fn == "int" and len(vals) == 1 and isinstance(vals[0], int):
            return vals[0]
        return None

    def call_helper(self, func: cst.FunctionDef, call: cst.Call, env, depth: int) -> Value:
        if depth >= DEPTH:
            return None
        local: dict[str, Value] = {}
        ps = C.params(func)
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        for i, p in enumerate(ps):
            if i < len(positional):
                local[p.name.value] = self.value(positional[i].value, env, depth)
            elif p.name.value in keywords:
                local[p.name.value] = self.value(keywords[p.name.value], env, depth)
            elif p.default is not None:
                local[p.name.value] = self.value(p.default, self.constants, depth)
        done, value = self.run(list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else [func.body],
                               local, depth + 1)
        return value if done else None

    def run(self, stmts: list, env: dict[str, Value], depth: int) -> tuple[bool, Value]:
        """Interpret a helper's body: (returned?, value). An undecidable if stops it (not returned, None)."""
        for stmt in stmts:
            if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                for small in stmt.body:
                    if isinstance(small, cst.Return):
                        return True, self.value(small.value, env, depth) if small.value is not None else None
                    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                        bind(env, _targets(small), self.value(small.value, env, depth))
                    elif isinstance(small, cst.AugAssign):
                        return False, None
            elif isinstance(stmt, cst.If):
                test = self.value(stmt.test, env, depth)
                if test is None:
                    return False, None
                branch = stmt.body if test else stmt.orelse
                if branch is None:
                    continue
                body = [branch] if isinstance(branch, cst.If) else _block(branch.body if isinstance(branch, cst.Else) else branch)
                done, value = self.run(body, env, depth)
                if done:
                    return True, value
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or _is_docstring(stmt):
                continue
            else:
                return False, None
        return False, None

    def host_env(self, host: cst.FunctionDef, shape: dict[str, int], until: cst.CSTNode | None = None,
                 overrides: dict[str, int] | None = None) -> dict[str, Value]:
        """Values of the launching function's names at ``shape``, interpreting its assignments in order (the
        shape's dims and ``overrides`` win over what the code assigns), branches by their tests; stops at ``until``."""
        env: dict[str, Value] = {**shape, **(overrides or {})}
        self._host(_block(host.body), env, set(env), until)
        return env

    def _host(self, stmts, env, fixed, until) -> bool:
        for stmt in stmts:
            if until is not None and _contains(stmt, until) and not isinstance(stmt, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
                return True
            if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                for small in stmt.body:
                    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                        targets = _targets(small)
                        values: dict[str, Value] = {}
                        bind(values, targets, self.value(small.value, env))
                        for k, v in values.items():
                            if k not in fixed:
                                env[k] = v
                    elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                        if small.target.value not in fixed:
                            env[small.target.value] = None
            elif isinstance(stmt, cst.If):
                test = self.value(stmt.test, env)
                taken = [stmt.body] if test else []
                if stmt.orelse is not None and not test:
                    taken = [stmt.orelse]
                if test is None:  # both branches may run: names either binds become unknown
                    for name in C.assigned_names(stmt) - fixed:
                        env[name] = None
                    if until is not None and _contains(stmt, until):
                        return True
                    continue
                for branch in taken:
                    body = [branch] if isinstance(branch, cst.If) else _block(branch.body if isinstance(branch, cst.Else) else branch)
                    if self._host(body, env, fixed, until):
                        return True
            elif isinstance(stmt, (cst.With, cst.Try)):
                if self._host(_block(stmt.body), env, fixed, until):
                    return True
            elif isinstance(stmt, (cst.For, cst.While)):
                for name in C.assigned_names(stmt) - fixed:
                    env[name] = None
                if until is not None and _contains(stmt, until):
                    return True
        return False


def bind(env: dict[str, Value], targets: list[cst.BaseExpression], value: Value) -> None:
    """``a = v`` and ``a, b = (x, y)`` into ``env`` (unknown parts as None)."""
    for t in targets:
        if isinstance(t, cst.Name):
            env[t.value] = value
        elif isinstance(t, (cst.Tuple, cst.List)):
            items = [e.value for e in t.elements]
            vals = value if isinstance(value, tuple) and len(value) == len(items) else (None,) * len(items)
            for item, v in zip(items, vals):
                bind(env, [item], v)


def _targets(small) -> list[cst.BaseExpression]:
    if isinstance(small, cst.AnnAssign):
        return [small.target]
    return [t.target for t in small.targets]


def _block(suite) -> list:
    return [suite] if isinstance(suite, cst.SimpleStatementSuite) else list(suite.body)


def _is_docstring(stmt) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    if node is target:
        return True
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, n) -> bool:
            nonlocal found
            if n is target:
                found = True
            return not found

    node.visit(V())
    return found


# ------------------------------------------------------------------------------ the grid


def meta_key(node: cst.CSTNode, meta: str | None = None) -> str | None:
    """"BV" for ``META["BV"]`` (a name subscripted by a string literal; the name ``meta`` when given)."""
    if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index) and isinstance(node.slice[0].slice.value, cst.SimpleString)):
        return None
    if meta is not None and node.value.value != meta:
        return None
    return node.slice[0].slice.value.evaluated_value


@dataclass(frozen=True)
class Grid:
    """What a launch's grid reads: host names (through assignments) and meta-parameters (``META["BV"]``)."""
    expr: cst.BaseExpression | None  # the tuple (or lambda body) that gives the program counts
    meta: str | None  # the lambda's / function's parameter name when the grid is one
    names: frozenset[str]
    meta_keys: frozenset[str]
    divisors: frozenset[str] = frozenset()  # names among ``names`` a size is divided by: cdiv(n, X), n // X


def grid_of(call: cst.Call, host: cst.FunctionDef, assigns: dict[str, list[cst.BaseExpression]]) -> Grid:
    node = call.func.slice[0].slice.value if isinstance(call.func, cst.Subscript) else None
    meta, expr = None, node
    seen: set[str] = set()
    while isinstance(expr, cst.Name) and expr.value not in seen:  # grid = lambda META: ...; def grid(meta): ...
        seen.add(expr.value)
        fn = _nested_def(host, expr.value)
        if fn is not None:
            meta = C.params(fn)[0].name.value if C.params(fn) else None
            expr = _returned(fn)
            break
        if expr.value in assigns and len(assigns[expr.value]) == 1:
            expr = assigns[expr.value][0]
        else:
            break
    if isinstance(expr, cst.Lambda):
        meta = expr.params.params[0].name.value if expr.params.params else None
        expr = expr.body
    if expr is None:
        return Grid(None, None, frozenset(), frozenset())
    keys = {k for sub in C.nodes_in(expr, cst.Subscript) if (k := meta_key(sub, meta)) is not None} if meta else set()
    names = closure(C.names_in(expr) - ({meta} if meta else set()), assigns)
    divisors = {d for node in [expr, *(v for n in names for v in assigns.get(n, ()))] for d in _divisors(node)}
    return Grid(expr, meta, frozenset(names), frozenset(keys), frozenset(divisors))


def _divisors(node: cst.CSTNode) -> set[str]:
    """Names a size is divided by in ``node`` (``cdiv(n, X)``, ``n // X``): as the miner's grid reading."""
    out = set()
    for c in C.calls_in(node):
        if C.last_part(C.call_name(c)) == "cdiv" and len(c.args) == 2 and isinstance(c.args[1].value, cst.Name):
            out.add(c.args[1].value.value)
    for b in C.nodes_in(node, cst.BinaryOperation):
        if isinstance(b.operator, cst.FloorDivide) and isinstance(b.right, cst.Name):
            out.add(b.right.value)
    return out


def is_tile(name: str, arg: cst.Arg | None, grid: Grid, kernel: cst.FunctionDef) -> bool:
    """A tile constexpr at a launch: named as one (BV, BLOCK_N), or passed as a name the grid divides a
    size by that also sizes a lane range of the kernel (``SPLIT_SIZE`` in ``grid = (cdiv(n, SPLIT_SIZE),)``
    and ``tl.arange(0, SPLIT_SIZE)``): the miner's rule (``LaunchSite.grid_divisors``, ``sizes_lanes``)."""
    if TILE_NAME.match(name):
        return True
    return (arg is not None and isinstance(arg.value, cst.Name) and arg.value.value in grid.divisors
            and sizes_lanes(C.code_of(kernel), name))


def launch_args(call: cst.Call, kernel: cst.FunctionDef) -> dict[str, cst.Arg]:
    """Kernel parameter -> the argument the launch passes it, by keyword or by position."""
    names = [p.name.value for p in C.params(kernel)]
    out = {}
    for i, a in enumerate(call.args):
        if a.keyword is not None:
            out[a.keyword.value] = a
        elif a.star:
            break
        elif i < len(names):
            out[names[i]] = a
    return out


def closure(names: set[str], assigns: dict[str, list[cst.BaseExpression]]) -> set[str]:
    """``names`` and every name their host assignments read, transitively."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            for value in assigns.get(n, ()):
                todo.extend(C.names_in(value))
    return out


def host_assignments(host: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """Every name the launching function binds -> the values bound to it (a tuple target maps to the whole value)."""
    out: dict[str, list[cst.BaseExpression]] = {}

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is host

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            for name in C.assigned_names(node):
                out.setdefault(name, []).append(node.value)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if node.value is not None:
                for name in C.assigned_names(node):
                    out.setdefault(name, []).append(node.value)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            for name in C.assigned_names(node):
                out.setdefault(name, []).append(node.value)

    host.visit(V())
    return out


def _nested_def(host: cst.FunctionDef, name: str) -> cst.FunctionDef | None:
    for stmt in _block(host.body):
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def _returned(fn: cst.FunctionDef) -> cst.BaseExpression | None:
    for stmt in _block(fn.body):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Return):
                    return small.value
    return None


# ------------------------------------------------------------------------------ decisions


@dataclass(frozen=True)
class Decision:
    """Where one launch parameter is set and how the search changes it there."""
    name: str  # the kernel's constexpr
    how: str  # "literal" | "override" | "argument" | "heuristic"
    line: int  # where the code decides it
    decided_by: str  # that code, for the report
    node: cst.CSTNode  # the Integer to replace / the statement to override after / the Arg / the lambda
    var: str = ""  # the host variable an override sets (after ``node``; at the top of ``node`` when it is the
    # launching function itself: a module-level name it reads)


def launch_statement_path(host: cst.FunctionDef, call: cst.Call) -> list[tuple[list, int]]:
    """(block statements, index) from the function body down to the statement holding ``call``."""
    path: list[tuple[list, int]] = []
    stmts = _block(host.body)
    while True:
        for i, stmt in enumerate(stmts):
            if _contains(stmt, call):
                path.append((stmts, i))
                inner = _inner_block(stmt, call)
                if inner is None:
                    return path
                stmts = inner
                break
        else:
            return path


def _inner_block(stmt, call) -> list | None:
    blocks = []
    if isinstance(stmt, cst.If):
        blocks = [stmt.body, stmt.orelse]
    elif isinstance(stmt, (cst.For, cst.While, cst.With)):
        blocks = [stmt.body, getattr(stmt, "orelse", None)]
    elif isinstance(stmt, cst.Try):
        blocks = [stmt.body, *stmt.handlers, stmt.orelse, stmt.finalbody]
    for b in blocks:
        if b is None or not _contains(b, call):
            continue
        if isinstance(b, cst.If):
            return [b]
        body = b.body if isinstance(b, (cst.Else, cst.ExceptHandler, cst.Finally)) else b
        return _block(body)
    return None


def deciding_statement(path: list[tuple[list, int]], var: str) -> cst.CSTNode | None:
    """The last statement before the launch (in the launch's block or one enclosing it) that binds ``var``."""
    for stmts, idx in reversed(path):
        for stmt in reversed(stmts[:idx]):
            if var in C.assigned_names(stmt):
                return stmt
    return None


def literal_site(value: cst.BaseExpression):
    """The one power-of-two literal ``value`` holds (an Integer), "whole" (no literal), or "ambiguous"."""
    if isinstance(value, cst.Integer):
        return value
    lits = [n for n in C.nodes_in(value, cst.Integer)
            if n.value.isdigit() and int(n.value) >= 2 and pow2(int(n.value)) == int(n.value)]
    if len(lits) == 1 and not isinstance(value, cst.Tuple) and not C.nodes_in(value, cst.IfExp):
        return lits[0]
    return "whole" if not lits else "ambiguous"


def heuristics(kernel: cst.FunctionDef) -> dict[str, cst.Lambda]:
    """``@triton.heuristics({"BV": lambda args: ...})`` entries of the kernel."""
    out: dict[str, cst.Lambda] = {}
    for dec in kernel.decorators:
        d = dec.decorator
        if isinstance(d, cst.Call) and C.last_part(C.dotted(d.func)) == "heuristics" and d.args:
            table = d.args[0].value
            if isinstance(table, cst.Dict):
                for el in table.elements:
                    if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString) and isinstance(el.value, cst.Lambda):
                        out[el.key.evaluated_value] = el.value
    return out


def decide(name: str, arg: cst.Arg | None, kernel: cst.FunctionDef, host: cst.FunctionDef, call: cst.Call,
           grid: Grid, assigns: dict[str, list[cst.BaseExpression]], line) -> Decision | str:
    """How the search may set tile ``name`` at this launch, or why it keeps it (a sentence)."""
    if arg is None:
        lam = heuristics(kernel).get(name)
        if lam is not None and name in grid.meta_keys:
            return Decision(name, "heuristic", line(lam), C.code_of(lam), lam)
        return f"{name} kept: not passed at the launch" + (" and the grid does not read it" if lam is not None else "")
    value = arg.value
    if isinstance(value, cst.Name) and value.value not in grid.names and name not in grid.meta_keys:
        return f"{name} kept: the grid does not depend on it"
    if not isinstance(value, cst.Name):
        if name in grid.meta_keys:
            return Decision(name, "argument", line(arg), C.code_of(value), arg)
        local = set(assigns) | {p.name.value for p in C.params(host)}
        if not (C.names_in(value) & grid.names & local):
            return f"{name} kept: the grid does not depend on it"
        return f"{name} kept: decided in the launch ({C.code_of(value)}) and again in the grid; no one place sets both"
    var = value.value
    if var in {p.name.value for p in C.params(host)}:
        return f"{name} kept: the caller passes it ({var} is a parameter of {host.name.value})"
    path = launch_statement_path(host, call)
    stmt = deciding_statement(path, var)
    if stmt is None:
        if var in assigns:  # bound only after the launch or in a nested scope
            return f"{name} kept: no assignment of {var} before the launch"
        return Decision(name, "override", line(host), f"{var} (a module-level name)", host, var=var)
    values = assigns.get(var, [])
    value = _own_value(stmt, var) if len(values) == 1 else None
    params = {p.name.value for p in C.params(host)}
    alias, seen = value, [var]
    while isinstance(alias, cst.Name) and alias.value not in seen and len(seen) < 4:  # CHUNK_LEN = chunk_size
        if alias.value in params:
            return (f"{name} kept: the caller passes it ({' = '.join(seen)} = {alias.value}, a parameter of "
                    f"{host.name.value})")
        seen.append(alias.value)
        more = assigns.get(alias.value, [])
        alias = more[0] if len(more) == 1 else None
    if value is not None:
        site = literal_site(value)
        if isinstance(site, cst.Integer):
            return Decision(name, "literal", line(stmt), C.code_of(value), site, var=var)
        if site == "whole":  # no literal to keep: the value itself becomes the searched literal
            return Decision(name, "literal", line(stmt), C.code_of(value), value, var=var)
    return Decision(name, "override", line(stmt), _stmt_text(stmt), stmt, var=var)


def _own_value(stmt: cst.CSTNode, var: str) -> cst.BaseExpression | None:
    """The expression a one-line assignment binds to ``var`` alone: ``var = e`` or the matching element of
    ``a, var = e1, e2`` (None for anything else: an unpacked call, a conditional tuple, a branch)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if isinstance(target, cst.Name):
        return assign.value if target.value == var else None
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(assign.value, (cst.Tuple, cst.List)):
        names = [e.value for e in target.elements]
        items = [e.value for e in assign.value.elements]
        if len(names) == len(items) and not any(isinstance(e, cst.StarredElement) for e in assign.value.elements):
            for n, item in zip(names, items):
                if isinstance(n, cst.Name) and n.value == var:
                    return item
    return None


def _stmt_text(stmt: cst.CSTNode) -> str:
    text = cst.Module(body=[stmt]).code.strip() if isinstance(stmt, cst.BaseStatement) else C.code_of(stmt)
    first = text.splitlines()[0] if text else ""
    return first + (" ..." if len(text.splitlines()) > 1 else "")


def grid_tiles(call: cst.Call, kernel: cst.FunctionDef, host: cst.FunctionDef) -> set[str]:
    """Tile constexprs the launch's grid is built from (directly, through host names or META): programs that
    differ only in such a tile are siblings reading the same other data."""
    assigns = host_assignments(host)
    grid = grid_of(call, host, assigns)
    constexprs = C.constexpr_params(kernel)
    out = {name for name in heuristics(kernel) if name in grid.meta_keys and name in constexprs}
    for a in call.args:
        if a.keyword and a.keyword.value in constexprs and TILE_NAME.match(a.keyword.value):
            if a.keyword.value in grid.meta_keys or (isinstance(a.value, cst.Name) and a.value.value in grid.names):
                out.add(a.keyword.value)
    return out
