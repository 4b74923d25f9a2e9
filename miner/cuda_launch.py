"""Launch sites of CUDA kernels in a file: ``kernel<<<grid, block, smem, stream>>>(args)``
and ``cudaLaunchKernel((void*)kernel, grid, block, args, smem, stream)`` where ``kernel`` is
bound in the same function (``auto kernel = Name<...>;``), with literal template arguments
resolved against the kernel's template parameters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from skel.catalog.records import LaunchSite, Param


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


@dataclass(frozen=True)
class _Launch:
    name: str
    line: int
    grid: str
    block: str | None
    smem: str | None
    stream: str | None
    template_args: tuple[str, ...]
    args: tuple[str, ...] | None
    fn_text: str  # enclosing function, to resolve dim3 variables


_LAUNCH_QUERY = """
(call_expression (kernel_call_syntax)) @chevron
(call_expression function: [(identifier) (qualified_identifier)] @fn) @api
"""


@lru_cache(maxsize=1)
def _launch_query():
    import tree_sitter
    import tree_sitter_cuda

    return tree_sitter.Query(tree_sitter.Language(tree_sitter_cuda.language()), _LAUNCH_QUERY)


def launch_sites(root, src: bytes | None = None) -> list[_Launch]:
    """Launch sites under ``root``; ``src`` (the parsed bytes), when given, lets a file with
    neither ``<<<`` nor ``cudaLaunch`` skip the query over its whole tree."""
    import tree_sitter

    if src is not None and b"<<<" not in src and b"cudaLaunch" not in src:
        return []
    caps = tree_sitter.QueryCursor(_launch_query()).captures(root)
    out = []
    for call in caps.get("chevron", ()):
        kcs = next(c for c in call.children if c.type == "kernel_call_syntax")
        launch = _chevron_launch(call, kcs)
        if launch is not None:
            out.append(launch)
    for fn in caps.get("fn", ()):
        if fn.text.endswith((b"cudaLaunchKernel", b"cudaLaunchCooperativeKernel")):
            launch = _api_launch(fn.parent)
            if launch is not None:
                out.append(launch)
    out.sort(key=lambda l: l.line)
    return out


def _enclosing_function_text(n) -> str:
    p = n.parent
    while p is not None and p.type != "function_definition":
        p = p.parent
    return _text(p) if p is not None else ""


def _callee(fn_node) -> tuple[str, tuple[str, ...]]:
    targs: tuple[str, ...] = ()
    if fn_node.type == "template_function":
        al = fn_node.child_by_field_name("arguments")
        targs = tuple(_text(a) for a in al.named_children) if al is not None else ()
        fn_node = fn_node.child_by_field_name("name")
    elif fn_node.type == "qualified_identifier":
        inner = fn_node.child_by_field_name("name")
        if inner is not None and inner.type == "template_function":
            return _callee(inner)
    return _text(fn_node).split("::")[-1], targs


def _chevron_launch(call, kcs) -> _Launch | None:
    fn = call.child_by_field_name("function")
    if fn is None:
        return None
    name, targs = _callee(fn)
    cfg = [_text(c) for c in kcs.named_children]
    al = call.child_by_field_name("arguments")
    args = tuple(_text(a) for a in al.named_children if a.type != "comment") if al is not None else ()
    cfg += [None] * (4 - len(cfg))
    return _Launch(name, call.start_point[0] + 1, cfg[0] or "", cfg[1], cfg[2], cfg[3], targs, args,
                   _enclosing_function_text(call))


_API_LAUNCH = {"cudaLaunchKernel": (1, 2, 4, 5), "cudaLaunchCooperativeKernel": (1, 2, 4, 5)}


def _api_launch(call) -> _Launch | None:
    """``cudaLaunchKernel((void*)kernel, grid, block, args, smem, stream)`` with ``kernel``
    bound in the same function to ``auto kernel = Name<...>;``."""
    fn = call.child_by_field_name("function")
    if fn is None or _text(fn).split("::")[-1] not in _API_LAUNCH:
        return None
    al = call.child_by_field_name("arguments")
    args = [_text(a) for a in al.named_children] if al is not None else []
    gi, bi, si, ti = _API_LAUNCH[_text(fn).split("::")[-1]]
    if len(args) <= bi:
        return None
    fn_text = _enclosing_function_text(call)
    ref = re.sub(r"\([^()]*\)|[&\s]", "", args[0])  # drop casts and address-of
    m = re.search(rf"\b{re.escape(ref)}\s*=\s*&?\s*([\w:]+)\s*(<(?:[^;{{}}]*)>)?\s*;", fn_text)
    name = m.group(1).split("::")[-1] if m else ref
    targs = tuple(_split_top(m.group(2)[1:-1])) if m and m.group(2) else ()
    pick = lambda i: args[i] if len(args) > i else None  # noqa: E731
    return _Launch(name, call.start_point[0] + 1, args[gi], args[bi], pick(si), pick(ti), targs, None,
                   fn_text)


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _dims(expr: str, fn_text: str) -> tuple[str, ...]:
    """The components of a grid/block expression: dim3(a, b) or a dim3 variable declared
    in the launching function; otherwise the expression itself."""
    expr = expr.strip()
    m = re.fullmatch(r"(?:dim3)?\s*[({](.*)[)}]", expr, re.DOTALL)
    if m and expr.startswith(("dim3", "{")):
        return tuple(_split_top(m.group(1)))
    if re.fullmatch(r"\w+", expr):
        d = re.search(rf"\bdim3\s+{expr}\s*(?:=\s*dim3\s*)?=?\s*[({{](.*?)[)}}]\s*;", fn_text, re.DOTALL)
        if d:
            return tuple(_split_top(d.group(1)))
    return (expr,)


def _literal(v: str):
    v = v.strip()
    if v in ("true", "false"):
        return v == "true"
    m = re.fullmatch(r"(-?\d+)[uUlL]*", v)
    return int(m.group(1)) if m else v


def _num_warps(block: str | None, fn_text: str):
    if not block:
        return None
    total = 1
    for d in _dims(block, fn_text):
        val = _literal(d)
        if not isinstance(val, int) or isinstance(val, bool):
            return None
        total *= val
    return max(1, total // 32)


def launch_profile(l: _Launch, tparams: list[Param], fparams: list[Param]) -> LaunchSite:
    args = tuple((p.name, a) for p, a in zip(fparams, l.args)) if l.args is not None else ()
    values = tuple((p.name, _literal(a)) for p, a in zip(tparams, l.template_args))
    dims = _dims(l.grid, l.fn_text)
    return LaunchSite(line=l.line, grid=l.grid, grid_dims=dims, args=args, constexpr_values=values,
                      num_warps=_num_warps(l.block, l.fn_text), block=l.block, shared_mem=l.smem,
                      stream=l.stream)
