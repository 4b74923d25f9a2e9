"""Detector precision and recall over the labelled fixtures in every skeleton folder.

Fixture files (``skeletons/SKnnn-*/examples/fixtures*.py`` and ``fixtures*.cu``) carry markers on the
line directly above each case (stacked markers apply to the same next code line):

    # skel: SK001 opportunity     a finding of that skeleton and kind is expected on the next line
    # skel: SK001 instance
    # skel-ok: SK001              no finding of that skeleton on the next line

(``//`` instead of ``#`` in CUDA). A finding of skeleton C in C's own fixture files that no
marker expects is a false positive; in other skeletons' fixtures only marked lines count.
The fixtures are profiled statically, never imported or run.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from skel.skeletons.library import default_root, load_library
from skel.miner.detect import ConditionResult, evaluate, run_detectors

DETECTORS = {sk.code: sk.rule for sk in load_library()}  # every rule of the shipped library

MARK = re.compile(r"^\s*(?:#|//)\s*skel(-ok)?:\s*(SK\d{3})(?:\s+(instance|opportunity))?\s*$")


@dataclass(frozen=True)
class Case:
    path: str
    line: int  # the code line the marker labels
    code: str
    kind: str | None  # None for skel-ok


def fixture_files() -> list[Path]:
    root = default_root()
    return sorted(p for p in root.glob("SK*/examples/fixtures*") if p.suffix in (".py", ".cu", ".cuh"))


def read_cases(path: Path) -> list[Case]:
    cases, pending = [], []
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = MARK.match(raw)
        if m:
            pending.append((m.group(2), None if m.group(1) else (m.group(3) or "")))
            continue
        if raw.strip() and pending:
            cases += [Case(str(path), i, code, kind) for code, kind in pending]
            pending = []
    assert not pending, f"{path}: markers at the end of the file label no line"
    for c in cases:
        assert c.kind != "", f"{path}:{c.line - 1}: '# skel: {c.code}' needs a kind (instance or opportunity)"
    return cases


def profiles(path: Path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        from skel.miner.triton_frontend import profile_source
    else:
        from skel.miner.cuda_frontend import profile_source
    return text, profile_source(text, str(path))


def findings(path: Path):
    text, profs = profiles(path)
    out = []
    for p in profs:
        out += run_detectors(p, text)
    return out


def owner(path: Path) -> str:
    return path.parent.parent.name[:5]


def score() -> dict:
    """Per skeleton: true positives, false positives, false negatives (with the cases)."""
    tally = defaultdict(lambda: {"tp": [], "fp": [], "fn": []})
    for path in fixture_files():
        cases = read_cases(path)
        found = findings(path)
        got = {(f.skeleton, f.kind, f.line): f for f in found}
        expected = {(c.code, c.kind, c.line) for c in cases if c.kind}
        ok_lines = {(c.code, c.line) for c in cases if c.kind is None}
        for key in expected:
            tally[key[0]]["tp" if key in got else "fn"].append((path.name, owner(path), key))
        for key, f in got.items():
            if key in expected:
                continue
            code, kind, line = key
            if code == owner(path) or (code, line) in ok_lines:
                tally[code]["fp"].append((path.name, owner(path), key, dict(f.params)))
    return tally


def test_fixtures_exist_for_every_detector():
    owners = {owner(p) for p in fixture_files()}
    missing = sorted(set(DETECTORS) - owners)
    assert not missing, f"skeletons without detector fixtures: {missing}"


def test_every_detector_has_positive_and_negative_cases():
    per = defaultdict(lambda: {"pos": 0, "neg": 0})
    for path in fixture_files():
        for c in read_cases(path):
            per[c.code]["pos" if c.kind else "neg"] += 1
    bad = {code: dict(v) for code, v in per.items() if not v["pos"] or not v["neg"]}
    bad.update({code: "no cases" for code in DETECTORS if code not in per})
    assert not bad, f"each skeleton needs positive and negative fixture cases: {bad}"


def test_detector_precision_and_recall_on_fixtures():
    tally = score()
    lines, failed = [], []
    for code in sorted(DETECTORS):
        t = tally[code]
        tp, fp, fn = len(t["tp"]), len(t["fp"]), len(t["fn"])
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        lines.append(f"{code}: precision {precision:.2f} recall {recall:.2f} (tp {tp}, fp {fp}, fn {fn})")
        if precision < 1.0 or recall < 1.0:
            failed += [f"  {code} false positive {c}" for c in t["fp"]] + [f"  {code} missed {c}" for c in t["fn"]]
    print("\n".join(lines))
    assert not failed, "\n".join(lines + ["misclassified:"] + failed)


def test_every_condition_id_is_implemented():
    lib = load_library()
    missing = []
    for sk in lib:
        module = DETECTORS.get(sk.code)
        if module is None:
            missing.append(f"{sk.code}: no detector module")
            continue
        for c in sk.conditions:
            if c.id not in module.CONDITIONS:
                missing.append(f"{sk.code}: condition {c.id!r} ({sk.folder / 'skeleton.toml'}) has no predicate")
        extra = set(module.CONDITIONS) - {c.id for c in sk.conditions}
        if extra:
            missing.append(f"{sk.code}: predicates {sorted(extra)} are not conditions in skeleton.toml")
    assert not missing, "\n".join(missing)


def test_evaluate_reports_every_condition_in_order():
    lib = load_library()
    path = next(p for p in fixture_files() if owner(p) == "SK001" and p.suffix == ".py")
    text, profs = profiles(path)
    sk = lib.get("SK001")
    results = evaluate(sk, profs[0], text)
    assert [r.id for r in results] == [c.id for c in sk.conditions]
    assert all(isinstance(r, ConditionResult) and r.detail for r in results)


def test_opportunity_only_when_all_conditions_hold():
    """An opportunity finding implies every condition holds for its kernel (and the reverse
    check: a kernel with a failing condition has no opportunity of that skeleton)."""
    for path in fixture_files():
        text, profs = profiles(path)
        for p in profs:
            got = {(f.skeleton, f.kind) for f in run_detectors(p, text)}
            for code in DETECTORS:
                res = evaluate(code, p, text)
                if (code, "opportunity") in got:
                    assert all(r.holds for r in res), (path.name, p.name, code, res)


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: f"{p.parent.parent.name[:5]}/{p.name}")
def test_fixture_parses_to_kernels(path):
    _, profs = profiles(path)
    assert profs, f"{path}: the frontend found no kernel"
