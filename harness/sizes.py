"""Sizes an address multiplies by that are not shape dims the launcher unpacks, but values it computes
from them or takes as arguments: a chunk count ``NT = triton.cdiv(T, BT)``, a chunk size ``BT =
chunk_size`` (default 64), a kernel's own ``NT = tl.cdiv(T, BT)``. A tensor laid out ``[B, NT, H, K, V]``
or ``[B, T, H, BT]`` has such a size as a dim; the harness computes it from the dims per shape
(``Size.code``, plain Python over dim names), and a required int argument it is made of (``chunk_size``
with no default) becomes a dim of its own (a tile: a power of two, 16 on the interpreter).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from skel.harness.launcher_facts import LauncherFacts

_MAX_DEPTH = 8


@dataclass(frozen=True)
class Size:
    name: str
    code: str  # a Python expression over dim names (and free tile dims)
    why: str


class Translate:
    """Launcher (or kernel, through the launch's binding) expressions as Python over dim names."""

    def __init__(self, lf: LauncherFacts, dims: set[str], module: dict[str, object]):
        self.lf, self.dims, self.module = lf, dims, module
        self.free: set[str] = set()  # required int parameters used as sizes

    def code(self, node: ast.AST, depth: int = 0) -> str | None:
        if depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return str(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = self.code(node.left, depth + 1), self.code(node.right, depth + 1)
            if a is None or b is None:
                return None
            op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
            return f"({a} {op} {b})"
        if isinstance(node, ast.Call) and not node.keywords:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            args = [self.code(a, depth + 1) for a in node.args]
            if any(a is None for a in args):
                return None
            if fname == "cdiv" and len(args) == 2:
                return f"(-(-{args[0]} // {args[1]}))"
            if fname == "next_power_of_2" and len(args) == 1:
                return f"(1 << max(0, {args[0]} - 1).bit_length())"
            if fname in ("min", "max") and len(args) >= 2:
                return f"{fname}({', '.join(args)})"
            if fname == "int" and len(args) == 1:
                return args[0]
        return None

    def name(self, name: str, depth: int) -> str | None:
        lf = self.lf
        if name in lf.dims:
            return name
        if name in lf.dim_alias:
            return lf.dim_alias[name]
        param = lf.param(lf.aliases.get(name, name))
        if param is not None:
            if param.has_default:
                value = param.default
                return str(value) if isinstance(value, int) and not isinstance(value, bool) else None
            if param.annotation == "int":  # a required size the caller picks (chunk_size): a dim of its own
                self.free.add(param.name)
                return param.name
            return None
        if name in lf.exprs and name not in lf.allocs:
            return self.code(lf.exprs[name], depth + 1)
        value = self.module.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return None


def _substitute(node: ast.AST, binding: dict[str, str]) -> ast.AST | None:
    """A kernel expression with each kernel parameter replaced by the launch's argument for it."""
    class Sub(ast.NodeTransformer):
        missing = False

        def visit_Name(self, n: ast.Name):
            if n.id in binding:
                try:
                    return ast.parse(binding[n.id], mode="eval").body
                except SyntaxError:
                    self.missing = True
                    return n
            return n
    import copy

    sub = Sub()
    out = sub.visit(copy.deepcopy(node))
    return None if sub.missing else out


def resolve_sizes(lf: LauncherFacts, names: set[str], dims: set[str], module: dict[str, object],
                  kernel_defs: dict[str, ast.AST], binding: dict[str, str], params: tuple[str, ...]
                  ) -> tuple[dict[str, Size], set[str]]:
    """Each of ``names`` (factors of the launcher's addresses that are no dim) that is a size: from the
    launcher's own local or argument of that name, else from the kernel's local of that name over its
    parameters (translated through ``binding``). Returns the sizes and the free dims they use."""
    tr = Translate(lf, dims, module)
    out: dict[str, Size] = {}
    for name in sorted(names):
        code = tr.name(name, 0) if (name in lf.exprs or lf.param(lf.aliases.get(name, name)) or name in lf.aliases) \
            else None
        why = "the launcher's"
        if code is None and name in kernel_defs:
            node = kernel_defs[name]
            if all(n.id in params for n in ast.walk(node) if isinstance(n, ast.Name)) \
                    and all(n.id in binding for n in ast.walk(node) if isinstance(n, ast.Name)):
                sub = _substitute(node, binding)
                code = tr.code(sub) if sub is not None else None
                why = "the kernel's"
        if code is None or code == name:
            if code == name and name in tr.free:
                continue  # the free dim itself
            continue
        out[name] = Size(name, code, f"{why} {name}")
    return out, tr.free
