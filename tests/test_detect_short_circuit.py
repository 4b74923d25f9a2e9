"""Mining checks a rule's conditions only up to the first that fails (``detect(every_condition=False)``):
the instances and opportunities must be exactly those of the full evaluation, and the conditions
checked a prefix of the full list, on every rule and every example and fixture of the library
(Triton and CUDA) and the bundled target kernels."""
from __future__ import annotations

from pathlib import Path

import pytest

import skel.kernels
from skel.skeletons.library import load_library
from skel.miner.detectors.base import Ctx
from skel.miner.mine import _frontend

LIBRARY = load_library()
KERNELS = Path(skel.kernels.__file__).resolve().parent


def sources() -> list[Path]:
    found = [p for sk in LIBRARY for p in sorted((sk.folder / "examples").glob("*")) if p.suffix in (".py", ".cu")]
    return found + sorted(KERNELS.glob("*/kernel.py"))


@pytest.mark.parametrize("path", sources(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_stopping_at_the_first_failing_condition_finds_the_same(path):
    text = path.read_text()
    profiles = _frontend("cuda" if path.suffix == ".cu" else "triton")(text, str(path))
    for p in profiles:
        for sk in LIBRARY:
            full = sk.rule().detect(Ctx(p, text))
            short = sk.rule().detect(Ctx(p, text), every_condition=False)
            where = f"{sk.code} on {p.name} ({path.name})"
            assert (short.instances, short.opportunities) == (full.instances, full.opportunities), where
            assert short.conditions == full.conditions[:len(short.conditions)], where
            failed = [c for c in full.conditions if not c.holds]
            assert short.conditions == full.conditions if not failed else short.conditions[-1] == failed[0], where
