"""Golden tests generated from every skeleton folder (``skel.skeletons.golden``): fires on
examples/before.py and not on examples/after.py; rewrite(before) == after; re-applied, nothing.
(The numerics of before/after in the interpreter: tests/test_skeleton_examples.py.)

``KNOWN`` holds the folders whose examples and rule still disagree, with why; a listed folder that
passes fails the test (remove it), so the list only shrinks.
"""
from __future__ import annotations

import pytest

from skel.skeletons.golden import check_golden
from skel.skeletons.library import load_library

KNOWN = {
}


@pytest.mark.parametrize("sk", load_library().skeletons, ids=lambda s: s.code)
def test_golden(sk):
    problems = check_golden(sk)
    if sk.code in KNOWN:
        assert problems, f"{sk.code} passes its golden checks now: remove it from KNOWN"
        pytest.xfail(KNOWN[sk.code])
    assert not problems, "\n".join(map(str, problems))
