"""A skeleton folder's rule: its ``rule.py`` class, or a rule built from ``[[pattern]]`` tables.

``load_rule`` is called by the library loader once the folder's TOML, docs and examples are
valid. Every problem is recorded (file, line, field) instead of raised, so one bad rule
folder is reported and skipped while the rest of the library loads.
"""
from __future__ import annotations

import re
from pathlib import Path

from skel.skeletons.library import Condition, LibraryProblem


def load_rule(folder: Path, code: str, toml_text: str, patterns, conditions: tuple[Condition, ...],
              problems: list[LibraryProblem]):
    """(the Rule subclass, the conditions to show) or (None, conditions) with ``problems`` filled."""
    from skel.skeletons.rule import KINDS, SAFETIES, RuleLoadError, load_rule_class

    toml = folder / "skeleton.toml"
    rule_py = folder / "rule.py"
    if rule_py.is_file() and patterns is not None:
        problems.append(LibraryProblem(toml, _line(toml_text, "[[pattern]]"), "pattern",
                                       "the folder has both rule.py and [[pattern]] tables: keep one"))
        return None, conditions
    if patterns is not None:
        from skel.skeletons.pattern_rule import PatternProblem, pattern_rule

        try:
            rule = pattern_rule(code, patterns, conditions)
        except PatternProblem as exc:
            problems.append(LibraryProblem(toml, _line(toml_text, "[[pattern]]"), f"pattern[{exc.index}]", exc.message))
            return None, conditions
        return rule, conditions or rule.default_conditions()
    if not rule_py.is_file():
        problems.append(LibraryProblem(rule_py, None, "rule.py",
                                       "missing: a skeleton needs rule.py (one Rule subclass) or [[pattern]] tables"))
        return None, conditions
    try:
        rule = load_rule_class(rule_py, code)
    except RuleLoadError as exc:
        problems.append(LibraryProblem(rule_py, exc.line, "rule.py", exc.message))
        return None, conditions
    if rule.SAFETY not in SAFETIES:
        problems.append(LibraryProblem(rule_py, None, f"{rule.__name__}.SAFETY", f"{rule.SAFETY!r} is not one of {', '.join(SAFETIES)}"))
    if rule.KIND not in KINDS:
        problems.append(LibraryProblem(rule_py, None, f"{rule.__name__}.KIND", f"{rule.KIND!r} is not one of {', '.join(KINDS)}"))
    have = list(rule.CONDITIONS)
    for c in conditions:
        if c.id not in have:
            problems.append(LibraryProblem(toml, _line(toml_text, f'id = "{c.id}"'), f"conditions.{c.id}",
                                           f"no predicate for condition {c.id!r} in {rule_py.name} ({rule.__name__}.CONDITIONS)"))
    for cid in have:
        if cid not in {c.id for c in conditions}:
            problems.append(LibraryProblem(rule_py, None, f"{rule.__name__}.CONDITIONS",
                                           f"predicate {cid!r} is not a condition in skeleton.toml"))
    return rule, conditions


def _line(text: str, needle: str) -> int | None:
    m = re.search(re.escape(needle), text)
    return text.count("\n", 0, m.start()) + 1 if m else None
