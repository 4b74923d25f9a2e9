"""Launch sites of Triton kernels in the same file: ``kernel[grid](...)``.

Launch lines and calls (``launch_lines``, ``launch_calls``), the module index (``ModuleIndex``).
For each launch: the grid (a name is followed to its assignment, lambda or local
``def grid(meta)``), arguments mapped to parameters, and the values of constexpr
arguments where a straight-line read of the launching function determines them
(``BV = 32``); otherwise the defining expression's text
(``"triton.next_power_of_2(K)"``), which ``launch_values`` can evaluate for example shapes.
"""
from __future__ import annotations

import ast
import bisect
import re
from typing import Any, Mapping

from skel.catalog.records import LaunchSite, Param
from skel.miner.pyexpr import Source, Unresolved, dotted, evaluate, evaluate_text
from skel.miner.triton_scan import LaunchScopes
from skel.miner.triton_scope import Scope

# ------------------------------------------------------------------- launches
# A tile-size constexpr (BV, BLOCK_K, BLOCK_SIZE_N, TILE_M): what a grid built as cdiv(D, TILE) is split by.
TILE_NAME = re.compile(r"^(B[A-Z]{1,2}|BLOCK(_[A-Z0-9]+)*|BLOCK_SIZE(_[A-Z0-9]+)*|TILE(_[A-Z0-9]+)*)$")
_SUBSCRIPTED = re.compile(r"\b(\w+)\s*\[")


def launch_lines(text: str, kernels: set[str]) -> dict[str, list[int]]:
    """Kernel name -> ascending lines where the text shows ``name[`` (a superset of its launches).

    One pass over the text whatever the number of kernels (an alternation of thousands of names
    would be tried at every position).
    """
    out: dict[str, list[int]] = {}
    pos, line = 0, 1
    for m in _SUBSCRIPTED.finditer(text):
        name = m.group(1)
        if name not in kernels:
            continue
        line += text.count("\n", pos, m.start())
        pos = m.start()
        rows = out.setdefault(name, [])
        if not rows or rows[-1] != line:
            rows.append(line)
    return out


# ``Impls(act_quant=_act_quant_kernel)`` or ``self.act_quant = _act_quant_kernel``: a field bound to a kernel
_FIELD_BINDING = re.compile(r"(?:[(,]\s*|\.\s*)([A-Za-z_]\w*)\s*=\s*([A-Za-z_]\w*)\s*(?=[,)\n]|$)", re.M)


def field_aliases(text: str, kernels: set[str]) -> dict[str, str]:
    """Field name -> kernel for fields that a keyword argument or an attribute assignment binds to a
    kernel (``_BlockwiseImpls(act_quant=_act_quant_kernel)``): ``impls.act_quant[grid](...)`` launches
    that kernel. A field bound to two kernels names neither, and a kernel's own name is never a field."""
    seen: dict[str, set[str]] = {}
    for m in _FIELD_BINDING.finditer(text):
        field, value = m.groups()
        if value in kernels and field not in kernels:
            seen.setdefault(field, set()).add(value)
    return {f: next(iter(ks)) for f, ks in seen.items() if len(ks) == 1}


def launch_calls(statements, lines: list[int], kernels: set[str],
                 aliases: dict[str, str] | None = None) -> list[tuple[str, ast.Call, ast.AST | None]]:
    """(kernel name, ``kernel[grid](...)`` call, innermost enclosing function or None) in ``statements``,
    in line order; ``aliases`` (``field_aliases``) resolve ``obj.field[grid](...)``.

    Only statements spanning one of ``lines`` (ascending) are walked: walking every expression
    of a large module costs more than the rest of profiling.
    """
    out = []
    for stmt, fn in statements:
        i = bisect.bisect_left(lines, stmt.lineno)  # a bisection, not a scan of every launch line
        if i == len(lines) or lines[i] > stmt.end_lineno:
            continue
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript):
                name = dotted(n.func.value)
                short = name.rsplit(".", 1)[-1] if name else None
                if short in kernels:
                    out.append((short, n, fn))
                elif aliases and short in aliases and "." in name:
                    out.append((aliases[short], n, fn))
    out.sort(key=lambda t: (t[1].lineno, t[1].col_offset))  # in line order: LaunchScopes reads each function once
    return out


class ModuleIndex:
    """One pass over a module's statements: functions, ``from X import y`` names, simple statements.

    ``import_rows`` keeps every ``from X import y`` as (top level?, name, module) in the order the
    pass meets them (top-level statements first, then nested bodies, depth first from the last
    statement): ``imports`` is that order applied to a dict, and a module read in blocks
    (``triton_blocks``) rebuilds the same dict from its blocks' rows.
    """

    def __init__(self, tree: ast.Module, text: str):
        self.text = text
        self.functions: list[ast.AST] = []
        self.imports: dict[str, str] = {}
        self.import_rows: list[tuple[bool, str, str]] = []
        self.simple_statements: list[tuple[ast.stmt, ast.AST | None]] = []
        stack: list[tuple[list, ast.AST | None]] = [(tree.body, None)]
        top = True
        while stack:
            body, fn = stack.pop()
            for s in body:
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions.append(s)
                    stack.append((s.body, s))
                elif isinstance(s, ast.ClassDef):
                    stack.append((s.body, fn))
                elif isinstance(s, ast.ImportFrom):
                    for a in s.names:
                        name, module = a.asname or a.name, ("." * s.level) + (s.module or "")
                        self.imports[name] = module
                        self.import_rows.append((top, name, module))
                elif isinstance(s, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
                    for part in ("body", "orelse", "finalbody"):
                        stack.append((getattr(s, part, None) or [], fn))
                    for h in getattr(s, "handlers", ()):
                        stack.append((h.body, fn))
                elif isinstance(s, ast.Match):
                    for case in s.cases:
                        stack.append((case.body, fn))
                else:
                    self.simple_statements.append((s, fn))
            top = False
        self.functions.sort(key=lambda f: f.lineno)


def launch_site(call: ast.Call, fn: ast.AST | None, params: tuple[Param, ...], base: Scope, src: Source,
                scopes: LaunchScopes | None = None, via: str = "") -> LaunchSite:
    """The launch ``call`` of a kernel with ``params``; ``via`` names the wrapper a rebuilt call came
    through (``LaunchSite.via``; a field launch ``obj.f[grid](...)`` is recognised here)."""
    scope = (scopes or LaunchScopes(base, src)).before(fn, call.lineno)
    grid_node = call.func.slice
    grid_expr = _follow_grid(grid_node, scope)
    grid_text = src.text(grid_expr) if hasattr(grid_expr, "lineno") else src.text(grid_node)
    body = grid_expr.elts if isinstance(grid_expr, (ast.Tuple, ast.List)) else [grid_expr]
    dims = tuple(src.text(e) if hasattr(e, "lineno") else ast.unparse(e) for e in body)
    names = [p.name for p in params]
    args: list[tuple[str, ast.AST]] = []
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Starred):
            break
        if i < len(names):
            args.append((names[i], a))
    keywords = [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
    for kw in call.keywords:  # ``kernel[grid](..., **kwargs)`` with kwargs a dict literal in scope
        if kw.arg is None:
            keywords += _star_keywords(kw.value, scope)
    for name, value in keywords:
        if name in names:
            args.append((name, value))
    constexpr = {p.name for p in params if p.constexpr}
    values = tuple((n, _value(a, scope, src)) for n, a in args if n in constexpr)
    grid_names, meta_keys, divisors = _grid_reads(grid_node, scope)
    passed = {n: a for n, a in keywords if n in constexpr and TILE_NAME.match(n)}
    tiles = tuple(sorted({n for n, a in passed.items() if n in meta_keys or (isinstance(a, ast.Name) and a.id in grid_names)}
                         | {k for k in meta_keys if k in constexpr and TILE_NAME.match(k) and k not in passed}))
    # constexprs passed (by keyword or position) as a name the grid divides a size by: SPLIT_SIZE in
    # ``grid = (cdiv(n, SPLIT_SIZE),)``, a tile whatever its name when it also sizes a lane range
    split = tuple(sorted(n for n, a in args if n in constexpr and isinstance(a, ast.Name) and a.id in divisors))
    launch_kw = dict(keywords)
    nw, ns = launch_kw.get("num_warps"), launch_kw.get("num_stages")
    return LaunchSite(
        line=call.lineno,
        grid=grid_text,
        grid_dims=dims,
        args=tuple((n, src.text(a)) for n, a in args),
        constexpr_values=values,
        num_warps=None if nw is None else _value(nw, scope, src),
        num_stages=None if ns is None else _value(ns, scope, src),
        grid_tiles=tiles,
        grid_divisors=split,
        via=via or (f"field {src.text(call.func.value)}" if isinstance(call.func.value, ast.Attribute) else ""),
    )


def _star_keywords(node: ast.AST, scope: Scope) -> list[tuple[str, ast.AST]]:
    """The (name, value) pairs of ``**kwargs`` when kwargs is a dict literal or ``dict(a=...)`` the
    scope defines (``kwargs = {"BLOCK_N": 2048, "num_warps": 1}``); nothing when it is not known."""
    seen = 0
    while isinstance(node, ast.Name) and node.id in scope.nodes and seen < 4:
        node = scope.nodes[node.id]
        seen += 1
    if isinstance(node, ast.Dict):
        return [(k.value, v) for k, v in zip(node.keys, node.values)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return [(kw.arg, kw.value) for kw in node.keywords if kw.arg is not None]
    return []


def _grid_reads(node: ast.AST, scope: Scope, limit: int = 256) -> tuple[set[str], set[str], set[str]]:
    """(the host names the grid is computed from, following the host's assignments (``NV = cdiv(V, BV)``,
    ``NK, NV = cdiv(K, BK), cdiv(V, BV)``); the meta-parameters a grid lambda or function reads,
    ``META["BV"]``; the names among the first that divide a size: ``cdiv(n, X)``, ``n // X``)."""
    seen, meta = 0, None
    while isinstance(node, ast.Name) and node.id in scope.nodes and seen < 4:
        node = scope.nodes[node.id]
        seen += 1
    if isinstance(node, (ast.Lambda, ast.FunctionDef)):
        meta = node.args.args[0].arg if node.args.args else None
        node = _follow_grid(node, scope)
    keys = {s.slice.value for s in ast.walk(node) if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name)
            and s.value.id == meta and isinstance(s.slice, ast.Constant) and isinstance(s.slice.value, str)}
    out: set[str] = set()
    divisors = _divisors(node)
    todo = [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id != meta]
    while todo and len(out) < limit:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        value = scope.nodes.get(name)
        if value is not None and not isinstance(value, ast.FunctionDef):
            todo += [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
            divisors |= _divisors(value)
    return out, keys, divisors


def sizes_lanes(kernel_text: str, name: str) -> bool:
    """Whether ``name`` sizes a lane range of the kernel: ``tl.arange(0, name)``, ``tl.arange(0, 2 * name)``.
    With ``LaunchSite.grid_divisors`` it makes a tile of a constexpr not named as one (the miner's SK005
    conditions and the launch search both ask it)."""
    return re.search(rf"\barange\(\s*0\s*,[^()]*\b{re.escape(name)}\b", kernel_text) is not None


def _divisors(node: ast.AST) -> set[str]:
    """Names a size is divided by in ``node``: the second argument of a ``cdiv`` call, the right
    operand of ``//``."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and len(n.args) == 2 and isinstance(n.args[1], ast.Name) and (
                (isinstance(n.func, ast.Attribute) and n.func.attr == "cdiv")
                or (isinstance(n.func, ast.Name) and n.func.id == "cdiv")):
            out.add(n.args[1].id)
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv) and isinstance(n.right, ast.Name):
            out.add(n.right.id)
    return out


def _follow_grid(node: ast.AST, scope: Scope) -> ast.AST:
    seen = 0
    while isinstance(node, ast.Name) and node.id in scope.nodes and seen < 4:
        node = scope.nodes[node.id]
        seen += 1
    if isinstance(node, ast.Lambda):
        return node.body
    if isinstance(node, ast.FunctionDef):
        rets = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
        return rets[-1] if rets else node
    return node


def _value(node: ast.AST, scope: Scope, src: Source) -> Any:
    try:
        return evaluate(node, scope.env)
    except Unresolved:
        if isinstance(node, ast.Name) and node.id in scope.texts:
            return scope.texts[node.id]
        return src.text(node)


def launch_values(launch: LaunchSite, shapes: Mapping[str, Any]) -> dict[str, Any]:
    """Constexpr values at ``launch`` with the unresolved ones evaluated for example ``shapes``.

    ``launch_values(site, {"K": 128, "V": 128})`` -> ``{"BK": 128, "BV": 32, ...}``; values
    that still cannot be computed stay as their text.
    """
    env: dict[str, Any] = dict(shapes)
    pending = {}
    for name, v in launch.constexpr_values:
        if isinstance(v, str) and v not in ("evict_first", "evict_last"):
            pending[name] = v
        else:
            env[name] = v
    args = dict(launch.args)
    for _ in range(3):  # texts may refer to each other (BV = min(BK, 32))
        for name, text in list(pending.items()):
            for candidate in (text, args.get(name, text)):
                try:
                    env[name] = evaluate_text(candidate, env)
                    pending.pop(name)
                    break
                except Unresolved:
                    continue
    out = {n: env.get(n, pending.get(n)) for n, _ in launch.constexpr_values}
    return out


def symbol_values(profile, shapes: Mapping[str, Any], launch: LaunchSite | None = None) -> dict[str, Any]:
    """Constexpr values at a launch plus the kernel's own symbols, for example ``shapes``.

    For the KDA decode kernel with ``{"K": 128, "V": 128}``: ``BV == 32``, ``BK == 128`` and
    ``NV == 4`` (``NV = tl.cdiv(V, BV)``): four V-tile programs per (sequence, head).
    Names that stay unknown are left out.
    """
    site = launch or (profile.launches[0] if profile.launches else None)
    env: dict[str, Any] = dict(shapes)
    if site is not None:
        for name, value in launch_values(site, shapes).items():
            if not isinstance(value, str) or value in ("evict_first", "evict_last"):
                env.setdefault(name, value)
    for name, text in profile.symbols:
        try:
            env[name] = evaluate_text(text, env)
        except Unresolved:
            continue
    return env
