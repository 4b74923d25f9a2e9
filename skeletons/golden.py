"""Golden checks generated from a skeleton folder's examples (Fixit / semgrep style).

For every skeleton:
  - it fires on ``examples/before.py`` (an opportunity in some kernel) and not on ``examples/after.py``;
  - with a rewrite: ``rewrite(before.py)`` produces ``after.py`` (a search: one of its variants;
    ``after.<variant>.py`` names the variant it must equal), and re-applied to ``after.py`` it
    produces nothing new (the rewrite contract's idempotence);
  - every extra pair ``examples/<case>.before.py`` -> ``examples/<case>.after.py``: ``rewrite(before) == after``.
Static: the examples are profiled and rewritten, never imported (``tests/test_golden.py`` runs the
numerics of before/after in the interpreter). ``skel catalog check --golden`` reports the same problems.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from skel.rewriter.base import RewriteOptions

OPTIONS = RewriteOptions(shape=(("K", 16), ("V", 16)))


@dataclass(frozen=True)
class GoldenProblem:
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: golden: {self.message}"


def _opportunities(sk, path: Path, text: str) -> list[int]:
    from skel.miner.detectors.base import Ctx
    from skel.miner.triton_frontend import profile_source

    rule = sk.rule()
    lines = []
    for p in profile_source(text, str(path)):
        if p.kind == "kernel":
            lines += [h.line for h in rule.detect(Ctx(p, text)).opportunities]
    return lines


def _diff(want: str, got: str, path: Path) -> str:
    d = difflib.unified_diff(want.splitlines(), got.splitlines(), str(path), "rewrite(before)", lineterm="", n=1)
    return "\n".join(list(d)[:12])


def check_golden(sk) -> list[GoldenProblem]:
    """Every golden problem of one library skeleton (empty: its examples and its rule agree)."""
    ex = sk.folder / "examples"
    before_p, after_p = ex / "before.py", ex / "after.py"
    if "triton" not in sk.targets:
        return []  # CUDA-only: the examples are not Triton kernels the miner's Python frontend reads
    before, after = before_p.read_text(encoding="utf-8"), after_p.read_text(encoding="utf-8")
    out: list[GoldenProblem] = []
    if not _opportunities(sk, before_p, before):
        out.append(GoldenProblem(before_p, f"{sk.code} does not fire (no opportunity) on its own before.py"))
    hit = _opportunities(sk, after_p, after)
    if hit and sk.rule.KIND != "launch-search":  # a search's output still has launch constants to search
        out.append(GoldenProblem(after_p, f"{sk.code} still fires on after.py (line {hit[0]})"))
    if sk.rule.rewrite is None:
        return out
    results = sk.rule.rewrite(before, OPTIONS)
    applied = [r for r in results if r.applied]
    if not applied:
        why = results[0].reason if results else "nothing returned"
        out.append(GoldenProblem(before_p, f"the rewrite does not apply to before.py: {why}"))
    elif not any(r.source == after for r in applied):
        out.append(GoldenProblem(after_p, "rewrite(before.py) is not after.py:\n" + _diff(after, applied[0].source, after_p)))
    for variant in sorted(ex.glob("after.*.py")):
        label = variant.name[len("after."):-len(".py")]
        match = [r for r in applied if _slug(r.variant) == label]
        if not match:
            out.append(GoldenProblem(variant, f"no variant labelled {label!r} (variants: "
                                              f"{', '.join(_slug(r.variant) for r in applied) or 'none'})"))
        elif match[0].source != variant.read_text(encoding="utf-8"):
            out.append(GoldenProblem(variant, "the variant's rewrite differs:\n" + _diff(variant.read_text(), match[0].source, variant)))
    again = [r for r in sk.rule.rewrite(after, OPTIONS) if r.applied and r.source != after]
    if again and sk.rule.KIND != "launch-search":  # a search re-run on its own output still finds other variants
        out.append(GoldenProblem(after_p, f"the rewrite changes after.py again: {again[0].reason}"))
    for case in sorted(ex.glob("*.before.py")):
        want_p = case.with_name(case.name.replace(".before.py", ".after.py"))
        if not want_p.is_file():
            out.append(GoldenProblem(case, f"no {want_p.name} beside it"))
            continue
        got = [r for r in sk.rule.rewrite(case.read_text(encoding="utf-8"), OPTIONS) if r.applied]
        want = want_p.read_text(encoding="utf-8")
        if not got or got[0].source != want:
            out.append(GoldenProblem(want_p, "rewrite(case) differs:\n" + _diff(want, got[0].source if got else "", want_p)))
    return out


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "=-_," else "_" for c in label)
