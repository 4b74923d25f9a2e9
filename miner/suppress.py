"""Suppression comments in kernel sources: ``# skel: ignore[SK001] reason``.

The forms (``//`` in place of ``#`` in CUDA files):

    x = a / tl.sqrt(s)   # skel: ignore[SK001] the division is what the paper specifies
    # skel: ignore[SK001,SK003] reason      alone on a line: covers the next code line
    # skel: ignore                          every skeleton (a reason is still welcome)
    # skel: ignore-file[SK002] reason       the whole file
    y = a / b            # noqa: SK001      flake8/ruff spelling, SK codes only

Codes may be prefixes with ``*`` (``SK00*``), as ``--select`` takes them. A comment on a kernel's
header (its ``def`` or ``__global__`` line, or any of its decorator lines) covers the whole kernel;
a comment on another line covers what is reported at that line. ``skel match``, ``skel mine`` and
``skel catalog prompt`` honour them; each reports what was suppressed and why.

Fixture markers (``# skel: SK001 opportunity``) are a different form and are not suppressions.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from skel.catalog.selection import code_matches

_SKEL = re.compile(r"(?:#|//)\s*skel:\s*ignore(?P<file>-file)?\b(?:\[(?P<codes>[^\]]*)\])?(?P<reason>[^\n]*)")
_NOQA = re.compile(r"(?:#|//)\s*noqa:\s*(?P<codes>SK[0-9A-Za-z*]*(?:\s*,\s*SK[0-9A-Za-z*]*)*)(?P<reason>[^\n]*)")
_CODE = re.compile(r"^SK[0-9A-Z]*\*?$")


@dataclass(frozen=True)
class Suppression:
    line: int  # the line the comment is on
    target: int  # the line it covers (the next code line for a comment alone on its line); 0 = file
    codes: tuple[str, ...]  # empty: every skeleton
    reason: str

    def names(self, code: str) -> bool:
        return not self.codes or any(code_matches(code, c) for c in self.codes)

    def to_json(self) -> dict:
        return {"line": self.line, "codes": list(self.codes), "reason": self.reason}


@dataclass(frozen=True)
class Suppressions:
    items: tuple[Suppression, ...] = ()
    problems: tuple[tuple[int, str], ...] = ()  # (line, what is wrong with a comment there)

    def __bool__(self) -> bool:
        return bool(self.items)

    def find(self, code: str, lines: tuple[int, ...] = (), header: tuple[int, int] | None = None
             ) -> Suppression | None:
        """The suppression that covers skeleton ``code`` reported at every one of ``lines`` (empty: at
        the kernel as a whole) in a kernel whose header spans ``header`` (first, last line); else None."""
        for s in self.items:
            if s.names(code) and (s.target == 0 or (header and header[0] <= s.target <= header[1])):
                return s
        if not lines:
            return None
        hits = [next((s for s in self.items if s.target == line and s.names(code)), None) for line in lines]
        return hits[0] if all(hits) else None

    def uncovered(self, code: str, lines: tuple[int, ...]) -> tuple[int, ...]:
        """The lines of ``lines`` that no line-scope suppression of ``code`` covers."""
        return tuple(line for line in lines
                     if not any(s.target == line and s.names(code) for s in self.items))


def parse(text: str) -> Suppressions:
    """Every suppression comment in ``text``. A comment naming something that is not a skeleton code
    is reported in ``problems`` (and suppresses nothing), never silently taken as "all"."""
    if "skel:" not in text and "noqa:" not in text:
        return Suppressions()
    lines = text.splitlines()
    items, problems = [], []
    for i, raw in enumerate(lines, 1):
        m = _SKEL.search(raw) or _NOQA.search(raw)
        if m is None or _inside_string(raw, m.start()):
            continue
        codes_text = m.group("codes")
        codes = tuple(c.strip().upper() for c in (codes_text or "").split(",") if c.strip())
        bad = [c for c in codes if not _CODE.match(c)]
        if bad or (codes_text is not None and not codes):
            problems.append((i, f"suppression names no skeleton code: {codes_text!r} (expected e.g. SK001 or SK00*)"))
            continue
        file_scope = bool(m.groupdict().get("file"))
        alone = not raw[:m.start()].strip()
        target = 0 if file_scope else (_next_code_line(lines, i) if alone else i)
        items.append(Suppression(i, target, codes, m.group("reason").strip().lstrip("-—:,").strip()))
    return Suppressions(tuple(items), tuple(problems))


def _inside_string(line: str, at: int) -> bool:
    """A marker inside a string literal on its line (``"# skel: ignore"``) is text, not a comment."""
    before = line[:at]
    return before.count('"') % 2 == 1 or before.count("'") % 2 == 1


def _next_code_line(lines: list[str], i: int) -> int:
    for j in range(i, len(lines)):  # lines[j] is line j + 1
        s = lines[j].strip()
        if s and not s.startswith(("#", "//")):
            return j + 1
    return i


def headers(text: str, language: str) -> dict[int, int]:
    """Kernel header spans: def line -> first line of its decorators (Python); CUDA kernels map to
    the line above the signature (``template <...>``)."""
    if language != "triton":
        return {}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.lineno] = min([d.lineno for d in node.decorator_list] + [node.lineno])
    return out


def header_span(spans: dict[int, int], line: int, language: str) -> tuple[int, int]:
    if language == "triton":
        return (spans.get(line, line), line)
    return (max(1, line - 1), line)
