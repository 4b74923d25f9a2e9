"""A helper's findings count for the kernels that call it.

Kernels delegate work to helpers (``@triton.jit`` functions without a program id or launch of
their own, CUDA ``__device__`` functions): an L2 norm by division, a warp-shuffle reduction, an
exp without log2(e). The detectors see the helper as its own profile (kind ``device-function``);
here each of its findings is repeated for every kernel of the same file that calls it, directly
or through other helpers, at the kernel's call site, with the helper's own site as context
(``via``, ``helper_line``). The helper's own finding stays too (it is evidence of where the
code is).

    attribute_to_callers(profiles, findings, text) -> findings + the callers' copies

Linear in the file: each kernel's body is scanned once for the names of the file's helpers.
"""
from __future__ import annotations

import re

from skel.catalog.records import KernelProfile

_COMMENT = {"triton": re.compile(r"#.*$"), "cuda": re.compile(r"//.*$")}


def attribute_to_callers(profiles: list[KernelProfile], findings: list, text: str) -> list:
    helpers: dict[str, list[str]] = {}  # short name -> full names (``A::sum``, ``B::sum``, ``rms``)
    for p in profiles:
        if p.kind == "device-function":
            helpers.setdefault(p.name.split("::")[-1], []).append(p.name)
    if not helpers or not findings:
        return findings
    lines = text.splitlines()
    names = "|".join(map(re.escape, sorted(helpers)))
    # Triton: a bare call; CUDA: also qualified (math::f, ns::f<T>(...)), never a member (x.f())
    call = re.compile(r"(?<![\w.])(?:\w+::)*(" + names + r")\s*(?:<[^<>;]*>)?\s*\(")
    calls = {p.name: _calls(p, lines, call, helpers) for p in profiles}  # full name -> [(callee, line)]
    full = {n for ns in helpers.values() for n in ns}
    by_helper: dict[str, list] = {}
    for f in findings:
        if f.kernel in full:
            by_helper.setdefault(f.kernel, []).append(f)
    if not by_helper:
        return findings
    from skel.catalog.records import Finding

    have = {(f.kernel, f.skeleton, f.kind, f.line) for f in findings}
    out = list(findings)
    for p in profiles:
        if p.kind == "device-function":
            continue
        for helper, line, chain in _reachable(p.name, calls, full):
            for f in by_helper.get(helper, ()):
                key = (p.name, f.skeleton, f.kind, line)
                if key in have:
                    continue
                have.add(key)
                via = " -> ".join(chain)
                out.append(Finding(f.skeleton, f.kind, p.path, line, line, p.name,
                                   (("via", via), ("helper_line", f.line), *f.params)))
    out.sort(key=lambda f: (f.line, f.skeleton, f.kind))
    return out


def _qualifier(text: str, at: int) -> str:
    """The last qualifier before the name at ``at``: ``B`` in ``B::sum(``, ``Butterfly`` in
    ``Butterfly<N / 2>::sum(`` (template arguments skipped), "" for an unqualified call."""
    i = at
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if text[max(0, i - 2):i] != "::":
        return ""
    i -= 2
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # skip the template arguments, nested ones included
        depth = 0
        while i > 0:
            i -= 1
            depth += {">": 1, "<": -1}.get(text[i], 0)
            if depth == 0:
                break
    end = i
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    return text[i:end] or "?"  # "?": qualified by something not read (a decltype, a macro)


def _resolve(owner: str, short: str, caller: str, helpers: dict[str, list[str]]) -> str | None:
    """The helper a call ``owner::short(...)`` made in ``caller`` names. A member helper (``A::sum``)
    answers a call qualified by its owner or an unqualified one from a sibling member; a free helper
    (namespaces are not tracked) answers any call of its name; an unreadable qualifier ("?") keeps
    the first helper of that name."""
    if owner == "?":
        return helpers[short][0] if helpers.get(short) else None
    caller_owner = caller.rsplit("::", 1)[0] if "::" in caller else ""
    for name in helpers.get(short, ()):
        home = name.rsplit("::", 1)[0] if "::" in name else ""
        if not home or (owner and home.split("::")[-1] == owner) or (not owner and home == caller_owner):
            return name
    return None


def _calls(p: KernelProfile, lines: list[str], pattern: re.Pattern,
           helpers: dict[str, list[str]]) -> list[tuple[str, int]]:
    strip = _COMMENT.get(p.language, _COMMENT["triton"])
    out = []
    for ln in range(p.line, min(p.end_line, len(lines)) + 1):  # a one-line body sits on the def line
        text = strip.sub("", lines[ln - 1])
        for m in pattern.finditer(text):
            callee = _resolve(_qualifier(text, m.start(1)), m.group(1), p.name, helpers)
            if callee is not None and callee != p.name:
                out.append((callee, ln))
    return out


def _reachable(kernel: str, calls: dict, helpers: set[str]) -> list[tuple[str, int, list[str]]]:
    """(helper, call line in the kernel, helper chain) for every helper the kernel reaches."""
    out, seen = [], set()
    stack = [(callee, line, [callee]) for callee, line in calls.get(kernel, ())]
    while stack:
        helper, line, chain = stack.pop()
        if helper in seen or helper not in helpers:
            continue
        seen.add(helper)
        out.append((helper, line, chain))
        stack += [(c, line, chain + [c]) for c, _ in calls.get(helper, ()) if c not in seen]
    return out
