"""Three-valued truth of a condition (True, False, or None for "not decided"), for reading the one path
through a kernel or launcher that given argument values take."""
from __future__ import annotations

import ast
from typing import Callable


def truth(test: ast.AST, leaf: Callable[[ast.AST], bool | None]) -> bool | None:
    """``not``, ``and`` and ``or`` over ``leaf``, which decides (or not) every other condition; a literal
    (``IS_KDA=False`` at a launch) is its own truth."""
    if isinstance(test, ast.Constant) and isinstance(test.value, (bool, int, type(None))):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = truth(test.operand, leaf)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [truth(v, leaf) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return leaf(test)
