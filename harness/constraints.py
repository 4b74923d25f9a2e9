"""Divisibility a kernel asserts on its sizes: ``tl.static_assert(K % (4 * BLOCK_SIZE_K) == 0)`` (or a plain
``assert``) with every other name a constexpr whose value the code fixes: a keyword of the launch, the
kernel's default, or each ``triton.Config`` of its ``@triton.autotune`` (any may be picked, so the size
must suit all of them: the least common multiple). Static: read with ``ast``, nothing runs.

Autotune configs are read from a literal list, a module-level name bound to one, or a module function
with no parameters that returns one (``configs=get_autotune_config()``, as Triton's tutorials write).
"""
from __future__ import annotations

import ast
import math


def divisors(kernel: ast.FunctionDef, tree: ast.Module, launch_consts: dict[str, int]) -> dict[str, tuple[int, str]]:
    """Kernel parameter -> (what its value must be a multiple of, the assert as written)."""
    configs = _autotune_configs(kernel, tree) or [{}]
    defaults = _int_defaults(kernel)
    out: dict[str, tuple[int, str]] = {}
    for node in ast.walk(kernel):
        test = None
        if isinstance(node, ast.Assert):
            test = node.test
        elif isinstance(node, ast.Call) and _name(node.func).endswith("static_assert") and node.args:
            test = node.args[0]
        for name, expr in _modulo_tests(test):
            values = [_evaluate(expr, {**defaults, **config, **launch_consts}) for config in configs]
            if not values or any(v is None or v < 2 for v in values):
                continue
            k = math.lcm(*values)
            if k > out.get(name, (1, ""))[0]:
                out[name] = (k, f"{ast.unparse(test)} at line {node.lineno}")
    return out


def _name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _modulo_tests(test: ast.AST | None) -> list[tuple[str, ast.AST]]:
    """``X % E == 0`` (and each side of an ``and``) -> [(X, E)]."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [pair for value in test.values for pair in _modulo_tests(value)]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        if isinstance(left, ast.Constant):
            left, right = right, left
        if isinstance(right, ast.Constant) and right.value == 0 and isinstance(left, ast.BinOp) \
                and isinstance(left.op, ast.Mod) and isinstance(left.left, ast.Name):
            return [(left.left.id, left.right)]
    return []


def _evaluate(node: ast.AST, env: dict[str, int]) -> int | None:
    """An int expression of literals and known names (+, -, *, //, **), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        value = env.get(node.id)
        return value if type(value) is int else None
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, env), _evaluate(node.right, env)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None, ast.Pow: lambda: a ** b if 0 <= b < 64 else None}
        op = ops.get(type(node.op))
        return op() if op else None
    return None


def _int_defaults(kernel: ast.FunctionDef) -> dict[str, int]:
    args = kernel.args.args
    out = {}
    for a, d in zip(args[len(args) - len(kernel.args.defaults):], kernel.args.defaults):
        if isinstance(d, ast.Constant) and type(d.value) is int:
            out[a.arg] = d.value
    return out


def _autotune_configs(kernel: ast.FunctionDef, tree: ast.Module) -> list[dict[str, int]]:
    """The int entries of each ``triton.Config({...})`` of the kernel's autotune decorator ([] if unread)."""
    for d in kernel.decorator_list:
        if isinstance(d, ast.Call) and _name(d.func).endswith("autotune"):
            node = next((kw.value for kw in d.keywords if kw.arg == "configs"), d.args[0] if d.args else None)
            return _config_list(node, tree, 0)
    return []


def _config_list(node: ast.AST | None, tree: ast.Module, depth: int) -> list[dict[str, int]]:
    if node is None or depth > 3:
        return []
    if isinstance(node, ast.Name):  # configs=_CONFIGS: the module-level list
        value = next((s.value for s in tree.body if isinstance(s, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)), None)
        return _config_list(value, tree, depth + 1)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and not node.keywords:
        fn = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == node.func.id
                   and not s.args.args), None)  # configs=get_configs(): what it returns
        returns = [s.value for s in (fn.body if fn else []) if isinstance(s, ast.Return)]
        return _config_list(returns[-1], tree, depth + 1) if len(returns) == 1 else []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _config_list(node.left, tree, depth + 1), _config_list(node.right, tree, depth + 1)
        return left + right if left and right else []
    if not isinstance(node, (ast.List, ast.Tuple)):
        return []
    out = []
    for e in node.elts:
        if not (isinstance(e, ast.Call) and _name(e.func) == "Config" and e.args and isinstance(e.args[0], ast.Dict)):
            return []  # a config written some other way: the list is not read
        table = e.args[0]
        out.append({k.value: v.value for k, v in zip(table.keys, table.values) if isinstance(k, ast.Constant)
                    and isinstance(v, ast.Constant) and type(v.value) is int})
    return out
