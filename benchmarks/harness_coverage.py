"""Benchmark: for how many launchers of real kernel packages `skel harness` infers a harness, and why
the others fail (one line each, grouped).

    python benchmarks/harness_coverage.py [--write]

Corpora from the package registry (cached as the tests cache them): fla-core 0.6.0 (`fla/ops`) and
liger-kernel 0.8.5 (`liger_kernel/ops`). Every top-level function of a file that launches one of the
file's @triton.jit kernels is one launcher; inference is static (nothing is imported). A crash (any
exception other than HarnessError) is counted apart: it is a bug. This measures reach, not whether
the inferred harness is right: tests/test_harness.py checks that on labelled kernels.
"""
from __future__ import annotations

import argparse
import ast
import collections
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
RESULTS = REPO / "benchmarks" / "results" / "harness_coverage.md"
CORPORA = (("fla-core", "0.6.0", "fla/ops"), ("liger-kernel", "0.8.5", "liger_kernel/ops"))


def _reason(message: str) -> str:
    text = message.split(": ", 1)[-1]
    text = re.sub(r"'[^']*'", "'X'", text)
    return re.sub(r"\(.*", "", text).strip()[:90]


def main() -> None:
    from conftest import fetch_wheel_corpus  # the tests' registry cache (pytest only for its skip)

    from skel.harness.infer import HarnessError, infer
    from skel.harness.launchers import launcher_functions

    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    lines = [f"# Harness inference coverage ({datetime.now(timezone.utc):%Y-%m-%d}, `python benchmarks/harness_coverage.py`)", ""]
    for dist, version, sub in CORPORA:
        root = fetch_wheel_corpus(dist, version) / sub
        ok, failed, crashed = 0, collections.Counter(), []
        for path in sorted(root.rglob("*.py")):
            source = path.read_text(encoding="utf-8", errors="replace")
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for name in launcher_functions(tree):
                try:
                    infer(path, source, entry=name)
                    ok += 1
                except HarnessError as exc:
                    failed[_reason(str(exc))] += 1
                except Exception as exc:  # noqa: BLE001 - counted: a crash is a bug to fix
                    crashed.append(f"{path.relative_to(root)}:{name}: {type(exc).__name__}: {exc}"[:200])
        total = ok + sum(failed.values()) + len(crashed)
        lines += [f"## {dist} {version} (`{sub}`)", "",
                  f"{total} launchers: **{ok} inferred** ({100 * ok / max(total, 1):.0f} %), "
                  f"{sum(failed.values())} refused with a reason, {len(crashed)} crashed.", "",
                  "| refused | reason |", "| ---: | --- |"]
        lines += [f"| {n} | {r} |" for r, n in failed.most_common(12)]
        lines += [""] + [f"- crash: {c}" for c in crashed] + [""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        RESULTS.write_text(text + "\n")


if __name__ == "__main__":
    main()
