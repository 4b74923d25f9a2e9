"""Same-file ``@triton.jit`` helpers inlined into a kernel, for reading its facts.

A kernel often reaches a tensor only through a helper it calls: bitsandbytes' dequant kernels hand
``absmax_ptr`` to ``dequant_4bit_body_util``, which loads ``absmax_ptr + offsets // PAIRED_QUANT_BLOCK``.
Read alone, the kernel never indexes ``absmax_ptr`` and its shape cannot be inferred. ``inline`` returns
a copy of the kernel in which each call of a helper whose body is straight-line code (assignments,
expression statements, one final ``return``) is replaced by what it computes, written in the kernel's
own names: the helper's parameters become the call's arguments, its locals their values, its loads and
stores stay loads and stores (so ``tl.load(absmax_ptr + offsets // (QUANT_BLOCK // 2))`` appears in the
kernel, at the line of the call). A statement calling a helper for its effects (``_store_row(...)``)
gains the helper's expression statements on its line. Helpers with loops or branches, or ones that
call themselves, are left as calls: their tensors stay "not indexed", as before.

Nothing here runs: the copy exists only to be read by ``kernel_facts``.
"""
from __future__ import annotations

import ast
import copy

MAX_DEPTH = 3  # helpers calling helpers
MAX_NODES = 4000  # a helper whose locals, written out, grow past this (x = a * a; y = x * x ...) stays a call


def inline(fn: ast.FunctionDef, jit: dict[str, ast.FunctionDef]) -> ast.FunctionDef:
    """``fn`` with the calls of the straight-line helpers among ``jit`` (name -> def) inlined, or
    ``fn`` itself when it calls none."""
    helpers = {name: h for name, h in jit.items() if name != fn.name and _straight(h)}
    if not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers
               for n in ast.walk(fn)):
        return fn
    out = copy.deepcopy(fn)
    out.body = _Inliner(helpers, MAX_DEPTH).statements(out.body)
    return ast.fix_missing_locations(out)


def _straight(h: ast.FunctionDef) -> bool:
    """Assignments and expression statements, then at most one ``return`` as the last statement."""
    body = [s for s in h.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstring
    for i, s in enumerate(body):
        if isinstance(s, ast.Return):
            if i != len(body) - 1:
                return False
        elif not isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Pass)):
            return False
    return bool(body)


class _Inliner:
    def __init__(self, helpers: dict[str, ast.FunctionDef], depth: int):
        self.helpers, self.depth = helpers, depth

    def statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, field, self.statements(inner))
            effects: list[ast.stmt] = []
            if not isinstance(stmt, (ast.For, ast.While, ast.If, ast.With, ast.FunctionDef)):
                stmt = _Calls(self, effects, stmt.lineno).visit(stmt)
            elif isinstance(stmt, (ast.For, ast.While, ast.If)):  # the header only (range(...), the test)
                head = _Calls(self, effects, stmt.lineno)
                for field in ("iter", "test"):
                    if getattr(stmt, field, None) is not None:
                        setattr(stmt, field, head.visit(getattr(stmt, field)))
            out.extend(effects)
            if not (isinstance(stmt, ast.Expr) and stmt.value is None):
                out.append(stmt)
        return out

    def expand(self, call: ast.Call, line: int, effects: list[ast.stmt]) -> ast.expr | None:
        """What ``call`` of a helper returns, in the caller's names; its expression statements go to
        ``effects``. None when the call cannot be bound (a starred argument, an unknown keyword)."""
        h = self.helpers[call.func.id]
        args = h.args.posonlyargs + h.args.args
        if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(args):
            return None
        env: dict[str, ast.expr] = {}
        for a, value in zip(args, call.args):
            env[a.arg] = value
        for kw in call.keywords:
            if kw.arg is None or kw.arg not in {a.arg for a in args}:
                return None
            env[kw.arg] = kw.value
        defaults = h.args.defaults
        for a, d in zip(args[len(args) - len(defaults):], defaults):
            env.setdefault(a.arg, d)
        if any(a.arg not in env for a in args):
            return None
        inner = _Inliner({k: v for k, v in self.helpers.items() if k != h.name}, self.depth - 1) if self.depth > 1 else None
        result: ast.expr | None = ast.Constant(None)
        mine: list[ast.stmt] = []  # this call's effects, handed over only when the whole body is inlined
        for s in h.body:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue  # docstring
            if isinstance(s, ast.Pass):
                continue
            value = getattr(s, "value", None)
            sub = _substitute(value, env, line) if value is not None else None
            if sub is not None and inner is not None:
                sub = _Calls(inner, mine, line).visit(sub)
            if sub is not None and sum(1 for _ in ast.walk(sub)) > MAX_NODES:
                return None
            if isinstance(s, ast.Return):
                result = sub if sub is not None else ast.Constant(None)
            elif isinstance(s, ast.Expr):
                mine.append(ast.copy_location(ast.Expr(sub), _at(line)))
            elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                old = env.get(s.target.id, ast.Name(s.target.id, ast.Load()))
                env[s.target.id] = ast.copy_location(ast.BinOp(old, s.op, sub), _at(line))
            elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                for t in targets:
                    _bind(t, sub, env)
        effects.extend(mine)
        return result


class _Calls(ast.NodeTransformer):
    """Replaces each call of an inlinable helper inside one statement."""

    def __init__(self, inliner: _Inliner, effects: list[ast.stmt], line: int):
        self.inliner, self.effects, self.line = inliner, effects, line

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.inliner.helpers:
            value = self.inliner.expand(node, self.line, self.effects)
            if value is not None:
                return value
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node  # a combine function's body is not the kernel's code path


def _bind(target: ast.AST, value: ast.expr | None, env: dict[str, ast.expr]) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value if value is not None else ast.Constant(None)
    elif isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts):
                _bind(t, v, env)
        else:
            for i, t in enumerate(target.elts):
                _bind(t, ast.Subscript(value, ast.Constant(i), ast.Load()) if value is not None else None, env)


def _substitute(node: ast.expr, env: dict[str, ast.expr], line: int) -> ast.expr:
    """A copy of ``node`` with the names of ``env`` replaced by (copies of) their values, every node at ``line``."""

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            if n.id in env and isinstance(n.ctx, ast.Load):
                return copy.deepcopy(env[n.id])
            return n

    out = Sub().visit(copy.deepcopy(node))
    for n in ast.walk(out):
        if hasattr(n, "lineno"):
            n.lineno, n.end_lineno = line, line
    return out


def _at(line: int) -> ast.AST:
    anchor = ast.Pass()
    anchor.lineno = anchor.end_lineno = line
    anchor.col_offset = anchor.end_col_offset = 0
    return anchor
