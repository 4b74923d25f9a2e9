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
    helpers = {p.name.split("::")[-1]: p for p in profiles if p.kind == "device-function"}
    if not helpers or not findings:
        return findings
    lines = text.splitlines()
    names = "|".join(map(re.escape, sorted({n.split("::")[-1] for n in helpers})))
    # Triton: a bare call; CUDA: also qualified (math::f, ns::f<T>(...)), never a member (x.f())
    call = re.compile(r"(?<![\w.])(?:\w+::)*(" + names + r")\s*(?:<[^<>;]*>)?\s*\(")
    calls = {p.name.split("::")[-1]: _calls(p, lines, call) for p in profiles}  # name -> [(callee, line)]
    by_helper: dict[str, list] = {}
    for f in findings:
        short = f.kernel.split("::")[-1]
        if short in helpers and helpers[short].name == f.kernel:
            by_helper.setdefault(short, []).append(f)
    if not by_helper:
        return findings
    from skel.catalog.records import Finding

    have = {(f.kernel, f.skeleton, f.kind, f.line) for f in findings}
    out = list(findings)
    for p in profiles:
        if p.kind == "device-function":
            continue
        for helper, line, chain in _reachable(p.name.split("::")[-1], calls, helpers):
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


def _calls(p: KernelProfile, lines: list[str], pattern: re.Pattern) -> list[tuple[str, int]]:
    strip = _COMMENT.get(p.language, _COMMENT["triton"])
    out = []
    for ln in range(p.line + 1, min(p.end_line, len(lines)) + 1):
        for m in pattern.finditer(strip.sub("", lines[ln - 1])):
            if m.group(1) != p.name.split("::")[-1]:
                out.append((m.group(1), ln))
    return out


def _reachable(kernel: str, calls: dict, helpers: dict) -> list[tuple[str, int, list[str]]]:
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
