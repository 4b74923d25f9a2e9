"""The files the rule invariant and the golden tests run over, and one cached verdict per (file, rule).

``verdicts(path)``: per skeleton code, (detector reports an opportunity somewhere in the file,
the rule's rewrite produces a candidate for the file, the rewrite's reason). Computed once per
file for the whole test session: the invariant and the golden tests share it.
"""
from __future__ import annotations

import functools
from pathlib import Path

from skel.catalog.records import reported
from skel.skeletons.library import default_root, load_library
from skel.rewriter.base import RewriteOptions

ROOT = Path(__file__).resolve().parents[1]
# A real-corpus sample: fla-core 0.6.0's decode files, small and large, with and without a V-tile grid.
FLA_SAMPLE = ("fla/ops/kda/fused_recurrent.py", "fla/ops/gated_delta_rule/fused_recurrent.py",
              "fla/ops/delta_rule/fused_recurrent.py", "fla/ops/hgrn/fused_recurrent.py",
              "fla/ops/rwkv6/fused_recurrent.py", "fla/ops/comba/fused_recurrent.py")
OPTIONS = RewriteOptions(shape=(("K", 16), ("V", 16)))


def library_files() -> list[Path]:
    """Every Triton example and fixture of every shipped skeleton folder, and the kernels/ targets."""
    root = default_root()
    out = sorted(p for p in root.glob("SK*/examples/*.py"))
    out += sorted(ROOT.glob("kernels/*/kernel.py")) + sorted(ROOT.glob("kernels/*/fla_upstream.py"))
    return out


@functools.cache
def verdicts(path: str) -> dict[str, tuple[bool, bool, str]]:
    from skel.miner.triton_frontend import profile_source
    from skel.miner.detectors.base import Ctx

    text = Path(path).read_text(encoding="utf-8")
    profiles = reported(profile_source(text, path))  # as skel match reports them
    out = {}
    for sk in load_library():
        rule = sk.rule()
        opportunity = any(rule.detect(Ctx(p, text)).opportunities for p in profiles)
        if sk.rule.rewrite is None:
            out[sk.code] = (opportunity, False, "no rewrite")
            continue
        results = sk.rule.rewrite(text, OPTIONS)
        applied = [r for r in results if r.applied]
        out[sk.code] = (opportunity, bool(applied), (applied or results)[0].reason if results else "")
    return out


@functools.cache
def rewrites(path: str, code: str):
    text = Path(path).read_text(encoding="utf-8")
    return tuple(load_library().get(code).rule.rewrite(text, OPTIONS))
