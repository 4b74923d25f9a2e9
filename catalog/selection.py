"""Which skeletons a run evaluates: ``--skeleton``, ``--select`` and ``--ignore`` (and ``[tool.skel]``).

A pattern is a code (``SK001``), a prefix (``SK00`` or ``SK00*``: every code starting so) or a glob
(``SKP*``, ``SK0?1``), upper-cased. ``--skeleton`` names exact codes or globs, and each must match
a skeleton of the library; ``--select`` keeps the codes one of its patterns matches; ``--ignore``
drops the codes one of its patterns matches. ``--ignore`` wins over ``--select``, as in ruff.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from skel.errors import UsageError


def code_matches(code: str, pattern: str) -> bool:
    code, pattern = code.upper(), pattern.strip().upper()
    if not pattern:
        return False
    if pattern.endswith("*") and not any(ch in pattern[:-1] for ch in "*?["):
        return code.startswith(pattern[:-1])
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(code, pattern)
    return code.startswith(pattern)


@dataclass(frozen=True)
class Selection:
    skeletons: tuple[str, ...] = ()  # exact codes or globs (--skeleton, repeatable)
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("skeletons", "select", "ignore"):
            object.__setattr__(self, name, tuple(p.strip().upper() for p in getattr(self, name) if p.strip()))

    def keeps(self, code: str) -> bool:
        if self.skeletons and not any(_exact_or_glob(code, p) for p in self.skeletons):
            return False
        if self.select and not any(code_matches(code, p) for p in self.select):
            return False
        return not any(code_matches(code, p) for p in self.ignore)

    def apply(self, codes: list[str], where: str = "the library") -> list[str]:
        """The codes kept, in order; a ``--skeleton`` or ``--select`` pattern that names no code of
        ``codes`` is a UsageError (a typo must not silently check nothing)."""
        for flag, patterns, match in (("--skeleton", self.skeletons, _exact_or_glob),
                                      ("--select", self.select, code_matches)):
            for p in patterns:
                if not any(match(c, p) for c in codes):
                    raise UsageError(f"{flag} {p}: no such skeleton in {where} (known: {', '.join(codes)})")
        return [c for c in codes if self.keeps(c)]

    def to_json(self) -> dict:
        return {"skeleton": list(self.skeletons), "select": list(self.select), "ignore": list(self.ignore)}


def _exact_or_glob(code: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(code.upper(), pattern)
    return code.upper() == pattern
