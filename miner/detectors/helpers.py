"""Helpers several rules' conditions share: where a pointer starts, decorators, top-level terms."""
from __future__ import annotations

import re

from skel.miner.detectors.base import Ctx


def enclosing_function(ctx: Ctx, line: int) -> int | None:
    """The line of the ``def`` that encloses ``line`` (by indentation), or None."""
    return ctx.file.enclosing_def(line)


def root_param(ctx: Ctx, pointer: str, line: int, depth: int = 6) -> str | None:
    """The kernel parameter a pointer expression starts from (``p_o`` -> ``o``), following defs."""
    params = {p.name for p in ctx.p.params}
    expr = pointer
    for _ in range(depth):
        m = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", expr)
        if not m:
            return None
        name = m.group(1)
        if name in params:
            return name
        if name == "tl" and "make_block_ptr" in expr:
            inner = re.search(r"make_block_ptr\(\s*(?:base\s*=\s*)?([A-Za-z_]\w*)", expr)
            name = inner.group(1) if inner else name
            if name in params:
                return name
        d = ctx.last_def(name, line - 1) or next(iter(ctx.defs_of(name)), None)
        if d is None:
            return None
        expr, line = d.rhs, d.line
    return None


def decorator_line(ctx: Ctx, name: str) -> int | None:
    """The line of decorator ``@name`` above the kernel's ``def`` (decorators span several lines)."""
    def_line = next((ln for ln in range(ctx.p.line, ctx.p.end_line + 1)
                     if re.match(r"\s*(async\s+)?def\b", ctx.text(ln) + " ")), ctx.p.line)
    ln = def_line - 1
    while ln >= 1 and ln > def_line - 200:
        t = ctx.text(ln)
        if t.startswith("@" + name) or t.startswith("@" + name.split(".")[-1] + "("):
            return ln
        if not t or t.startswith(("def ", "class ")) or (
                not t.startswith(("@", ")", "}", "]", "#")) and ctx._lines[ln - 1][:1] not in " \t"):
            return None
        ln -= 1
    return None


def split_args(args: str) -> list[str]:
    """A call's argument text split at top-level commas."""
    out, depth, cur = [], 0, ""
    for c in args:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


_NUMBER_E = re.compile(r"^\d[\d.]*[eE]$")


def terms(expr: str, sep: str = "+-") -> list[str]:
    """Top-level operands of ``expr`` split at the operators in ``sep`` (unary signs kept)."""
    out, depth, cur = [], 0, ""
    prev = ""  # the last non-blank character before position i (kept as we go: no rescan per character)
    at = -1  # its position
    for i, c in enumerate(expr):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        binary = prev and prev not in "(*/+-,="
        if binary and prev in "eE" and depth == 0 and c in sep:
            # a sign after an exponent (1e-6, 2.5E+3) is part of the number; after a name ending in e
            # (scale - m, q_scale * k_scale) it is an operator: read the token back (rare, so not per character)
            start = at
            while start > 0 and (expr[start - 1].isalnum() or expr[start - 1] in "_."):
                start -= 1
            binary = _NUMBER_E.match(expr[start:at + 1]) is None
        if depth == 0 and c in sep and binary and not (c == "*" and (expr[i + 1 : i + 2] == "*" or prev == "*")):
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        if not c.isspace():
            prev, at = c, i
    out.append(cur.strip())
    return [t for t in out if t]


def indirect_launch(ctx: Ctx, lines) -> str | None:
    """Why none of the launches at ``lines`` is one a rewrite can edit (each goes through a wrapper function
    or a bound field: ``LaunchSite.via``), or None when one of them is a direct ``kernel[grid](...)``."""
    vias = [next((s.via for s in ctx.p.launches if s.line == ln), "") for ln in lines]
    if not vias or any(not v for v in vias):
        return None
    return (f"line {lines[0]}: {ctx.p.name} is launched through {vias[0]}; the rewrite edits only a direct "
            f"{ctx.p.name}[grid](...) launch in the host code (change the wrapped call by hand)")
