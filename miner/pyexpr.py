"""Small helpers over Python ``ast`` nodes: source text, dotted names, a safe evaluator.

Mining is static, so values at launch sites (``BV = 32``,
``BK = triton.next_power_of_2(K)``) are computed by a tiny interpreter over a
whitelisted subset of Python (literals, arithmetic, min/max/cdiv/next_power_of_2),
never by ``eval``.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Any, Mapping


class Source:
    """Original source text of nodes, cheap per call (``ast.get_source_segment`` re-splits the file)."""

    def __init__(self, text: str):
        self.lines = text.splitlines(keepends=True)
        self._bytes: dict[int, bytes] = {}

    def _line(self, i: int) -> bytes:
        b = self._bytes.get(i)
        if b is None:
            b = self.lines[i].encode("utf-8") if 0 <= i < len(self.lines) else b""
            self._bytes[i] = b
        return b

    def text(self, node: ast.AST) -> str:
        """The node's source text (col offsets are UTF-8 byte offsets); ``ast.unparse`` as fallback."""
        try:
            l0, l1 = node.lineno - 1, node.end_lineno - 1
            c0, c1 = node.col_offset, node.end_col_offset
        except AttributeError:
            return ast.unparse(node)
        if l0 == l1:
            return self._line(l0)[c0:c1].decode("utf-8", "replace")
        parts = [self._line(l0)[c0:]] + [self._line(i) for i in range(l0 + 1, l1)] + [self._line(l1)[:c1]]
        return b"".join(parts).decode("utf-8", "replace")


def dotted(node: ast.AST) -> str | None:
    """``tl.math.exp2`` -> "tl.math.exp2"; ``exp`` -> "exp"; anything else -> None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def call_name(call: ast.Call) -> str | None:
    return dotted(call.func)


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def arg(call: ast.Call, index: int, name: str | None = None) -> ast.expr | None:
    """Positional argument ``index`` or keyword ``name``."""
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return kwarg(call, name) if name else None


def literal(node: ast.AST | None) -> Any:
    """A plain literal's value (str/int/float/bool/None), else None."""
    if isinstance(node, ast.Constant):
        return node.value
    return None


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# ------------------------------------------------------------------ evaluator
class Unresolved(Exception):
    """The expression uses something the static evaluator cannot know."""


def _next_pow2(x):
    x = int(x)
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def _cdiv(a, b):
    return -(-int(a) // int(b))


_FUNCS = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "bool": bool, "len": len,
    "next_power_of_2": _next_pow2, "triton.next_power_of_2": _next_pow2,
    "cdiv": _cdiv, "triton.cdiv": _cdiv, "tl.cdiv": _cdiv,
    "math.ceil": math.ceil, "math.log2": math.log2, "math.sqrt": math.sqrt, "math.log": math.log,
    "range": lambda *a: list(range(*a)),
}
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


def evaluate(node: ast.AST, env: Mapping[str, Any]) -> Any:
    """Value of ``node`` given ``env`` (name -> value); raises Unresolved otherwise."""
    try:
        return _ev(node, env)
    except Unresolved:
        raise
    except Exception as exc:  # ZeroDivisionError, TypeError, a huge power...: not statically known
        raise Unresolved(f"{type(exc).__name__}: {exc}") from None


def evaluate_text(text: str, env: Mapping[str, Any]) -> Any:
    """Like ``evaluate`` on source text (e.g. a recorded launch value "triton.next_power_of_2(K)")."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise Unresolved(f"not an expression: {text!r}") from None
    return evaluate(tree.body, env)


def _ev(node, env):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise Unresolved(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_ev(e, env) for e in node.elts] if isinstance(node, ast.List) else tuple(_ev(e, env) for e in node.elts)
    if isinstance(node, ast.Dict):
        return {_ev(k, env): _ev(v, env) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _ev(node.left, env), _ev(node.right, env)
        if isinstance(node.op, ast.Pow) and isinstance(right, int) and right > 64:
            raise Unresolved("power too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        v = _ev(node.operand, env)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return +v
        if isinstance(node.op, ast.Not):
            return not v
        raise Unresolved("unary op")
    if isinstance(node, ast.BoolOp):
        vals = [_ev(v, env) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
        left = _ev(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _ev(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _ev(node.body, env) if _ev(node.test, env) else _ev(node.orelse, env)
    if isinstance(node, ast.Subscript):  # meta['BV'] in grid lambdas
        return _ev(node.value, env)[_ev(node.slice, env)]
    if isinstance(node, ast.Call):
        fn = _FUNCS.get(dotted(node.func) or "")
        if fn is None or node.keywords:
            raise Unresolved(f"call {dotted(node.func)}")
        return fn(*[_ev(a, env) for a in node.args])
    raise Unresolved(type(node).__name__)
