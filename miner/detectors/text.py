"""Small helpers over expression text (calls, operands of a division, names).

Kernel statements are short; these helpers read one statement at a time and never need a
full parse. They are deliberately conservative: when an operand cannot be delimited they
return nothing rather than guess.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

WORD = re.compile(r"[A-Za-z_]\w*")


def names_in(expr: str) -> set[str]:
    return set(WORD.findall(expr))


def call_args(text: str, start: int) -> str:
    """The text between the parenthesis at ``text[start]`` and its match."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return text[start + 1 :]


def find_calls(text: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """Every call ``name(args)`` in ``text`` for the given (possibly dotted) names: (name, args)."""
    out = []
    for name, pattern in _call_patterns(tuple(names)):
        if name not in text:  # most names are absent from a statement: skip the regex
            continue
        for m in pattern.finditer(text):
            out.append((name, call_args(text, m.end() - 1)))
    return out


@lru_cache(maxsize=256)
def _call_patterns(names: tuple[str, ...]) -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((name, re.compile(rf"(?<![\w\.]){re.escape(name)}\s*\(")) for name in names)


_OPERAND = re.compile(r"\s*(-?\s*[A-Za-z_][\w\.]*|\d[\w\.]*)")


def operand_at(text: str, i: int) -> str:
    """The operand that starts at ``text[i]``: a call, a parenthesised group or a name with subscripts."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return ""
    if text[i] == "(":
        return "(" + call_args(text, i) + ")"
    m = _OPERAND.match(text, i)
    if not m:
        return ""
    j = m.end()
    while j < len(text) and text[j] in "([":
        close = ")" if text[j] == "(" else "]"
        inner = call_args(text.replace("[", "(").replace("]", ")"), j) if close == "]" else call_args(text, j)
        j += len(inner) + 2
    return text[i:j].strip()


def divisions(text: str) -> list[tuple[str, str]]:
    """Every true division ``a / b`` in ``text`` as (text before the slash, denominator operand)."""
    out = []
    for m in re.finditer(r"(?<![/])/(?![/=])", text):
        out.append((text[: m.start()], operand_at(text, m.end())))
    return out

