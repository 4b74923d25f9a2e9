"""Applicability decided once: a rule reports an opportunity in a file iff its rewrite produces a
candidate there (rules without a rewrite report opportunities and say everywhere that they have none).

Over every example and fixture of every skeleton folder, the kernels/ targets and a sample of
fla-core 0.6.0's decode files (fetched from the registry at test time), each (file, rule with a
rewrite) pair is checked. ``KNOWN`` lists the pairs where the conditions and the rewrite still
disagree, each with why; the test fails on any other disagreement *and* on a listed pair that now
agrees (remove it), so the list can only shrink.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from rule_corpus import FLA_SAMPLE, ROOT, library_files, verdicts

# (file relative to the repository or to fla-core, code) -> why the two still disagree
KNOWN: dict[tuple[str, str], str] = {
}


def _one(path: str) -> tuple[str, dict]:
    return path, verdicts(path)


@pytest.fixture(scope="module")
def table(fla_corpus):
    files = [str(p) for p in library_files()] + [str(fla_corpus / rel) for rel in FLA_SAMPLE]
    workers = min(2, os.cpu_count() or 1)
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        rows = dict(pool.map(_one, files))
    return rows, fla_corpus


def _rel(path: str, fla: Path) -> str:
    p = Path(path)
    for base in (ROOT, fla):
        try:
            return str(p.relative_to(base))
        except ValueError:
            continue
    return path


def test_opportunity_iff_rewrite_produces_a_candidate(table):
    rows, fla = table
    pairs = disagree = 0
    new, seen = [], set()
    for path, verdict in rows.items():
        for code, (opportunity, applied, reason) in verdict.items():
            if reason == "no rewrite":
                continue
            pairs += 1
            if opportunity == applied:
                continue
            disagree += 1
            key = (_rel(path, fla), code)
            seen.add(key)
            if key not in KNOWN:
                side = "the conditions report an opportunity, the rewrite" if opportunity else "the rewrite applies, the conditions"
                new.append(f"{key[0]}: {code}: {side} {'does not apply' if opportunity else 'report none'} ({reason[:160]})")
    fixed = sorted(set(KNOWN) - seen)
    print(f"{pairs} (file, rule) pairs over {len(rows)} files; {disagree} disagree ({len(KNOWN)} known)")
    assert not new, "conditions and rewrite disagree:\n" + "\n".join(new)
    assert not fixed, f"these known disagreements agree now: remove them from KNOWN: {fixed}"


def test_every_rule_without_a_rewrite_says_so():
    from skel.skeletons.library import load_library

    for sk in load_library():
        if sk.rule.rewrite is None:
            assert sk.availability == "never", sk.code
        else:
            assert sk.availability == "always", sk.code
