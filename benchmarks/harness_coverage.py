"""Benchmark: for how many launchers of real kernel packages `skel harness` infers a harness, and why
the others fail (one line each, grouped).

    python benchmarks/harness_coverage.py [--write] [--run N] [--only PATH[:LAUNCHER] ...]
                                          [--corpus DIST==VERSION:FOLDER ...] [--sdist-env NAME=VALUE ...]

``--only`` keeps the launchers of the named files (a path relative to the corpus root, e.g.
``fla/ops/kda/chunk_bwd.py:chunk_kda_bwd_dAv``) and judges every one of them; the counts then cover
those files only (do not ``--write`` them over the full table).
``--run N`` also judges an identical copy of N inferred launchers (every k-th, deterministic) through the
gate on the CPU interpreter (ci shapes, one seed, the original as oracle): an inferred harness counts as
working only if the gate runs it and accepts the copy. Each run is a subprocess with a time limit.

Corpora from the package registry (cached as the tests cache them): fla-core 0.6.0 (`fla/ops`) and
liger-kernel 0.8.5 (`liger_kernel/ops`) by default; ``--corpus sglang==0.5.23:sglang`` names others (then
only those; do not ``--write`` them over the default table); a package the registry ships as source only is read
from its sdist (``--corpus mamba-ssm==2.3.2.post1:mamba_ssm --sdist-env MAMBA_SKIP_CUDA_BUILD=TRUE``). Every top-level function of a file that launches one of the
file's @triton.jit kernels is one launcher; inference is static (nothing is imported). A crash (any
exception other than HarnessError) is counted apart: it is a bug. This measures reach, not whether
the inferred harness is right: tests/test_harness.py checks that on labelled kernels.
"""
from __future__ import annotations

import argparse
import ast
import collections
import re
import subprocess
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
    from skel.harness.infer import HarnessError, infer
    from skel.harness.launchers import launcher_functions

    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--run", type=int, default=0, help="judge an identical copy of N inferred launchers")
    parser.add_argument("--run-timeout", type=int, default=240)
    parser.add_argument("--only", action="append", default=[], metavar="PATH[:LAUNCHER]",
                        help="judge only these files (relative to the corpus root) or launchers")
    parser.add_argument("--corpus", action="append", default=[], metavar="DIST==VERSION:FOLDER",
                        help="a registry package and the folder in it to read (repeatable; default: fla-core, Liger)")
    parser.add_argument("--sdist-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a package the registry ships as source only is unpacked from its sdist; its metadata"
                             " build reads these (e.g. MAMBA_SKIP_CUDA_BUILD=TRUE for mamba-ssm)")
    args = parser.parse_args()
    sdist_env = dict(e.split("=", 1) for e in args.sdist_env)
    corpora = CORPORA
    if args.corpus:
        try:
            corpora = tuple((c.split("==")[0], c.split("==")[1].split(":")[0], c.split(":", 1)[1]) for c in args.corpus)
        except IndexError:
            parser.error("--corpus takes DIST==VERSION:FOLDER, e.g. sglang==0.5.23:sglang")
    lines = [f"# Harness inference coverage ({datetime.now(timezone.utc):%Y-%m-%d}, `python benchmarks/harness_coverage.py`)", ""]
    for dist, version, sub in corpora:
        base = _corpus(dist, version, sdist_env)
        root = base / sub
        ok, failed, crashed = 0, collections.Counter(), []
        inferred = []
        for path in sorted(root.rglob("*.py")):
            rel = str(path.relative_to(base))
            if args.only and not any(o.split(":")[0] == rel for o in args.only):
                continue
            source = path.read_text(encoding="utf-8", errors="replace")
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for name in launcher_functions(tree):
                if args.only and not any(o in (rel, f"{rel}:{name}") for o in args.only):
                    continue
                try:
                    infer(path, source, entry=name)
                    ok += 1
                    inferred.append((path, name))
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
        if (args.run or args.only) and inferred:
            lines += _runs(inferred, args.run or len(inferred), args.run_timeout, base)
    text = "\n".join(lines)
    print(text)
    if args.write:
        RESULTS.write_text(text + "\n")


def _corpus(dist: str, version: str, sdist_env: dict[str, str]) -> Path:
    """The package's wheel unpacked, else (a source-only release) its sdist."""
    import pytest
    from conftest import fetch_sdist_corpus, fetch_wheel_corpus

    try:
        return fetch_wheel_corpus(dist, version)
    except pytest.skip.Exception:
        return fetch_sdist_corpus(dist, version, sdist_env)


_RUN = """
import os, shutil, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from skel.validate.gate import validate
path, entry = Path(sys.argv[1]), sys.argv[2]
copy = Path(tempfile.mkdtemp()) / path.name
shutil.copy(path, copy)
r = validate(path, copy, shapes="ci", seeds=(0,), device="cpu", entry=entry, time_limit=float(sys.argv[4]))
print("ACCEPTED" if r.accepted else "REJECTED", (r.error or "; ".join(r.reasons or ()))[:160].replace(chr(10), " "))
"""


def _runs(inferred: list, n: int, timeout: int, root: Path) -> list[str]:
    step = max(1, len(inferred) // n)
    sample = inferred[::step][:n]
    counts: collections.Counter = collections.Counter()
    rows = []
    env = {**__import__("os").environ, "TRITON_INTERPRET": "1"}
    for i, (path, name) in enumerate(sample, 1):
        try:
            out = subprocess.run([sys.executable, "-c", _RUN, str(path), name, str(root), str(timeout - 20)],
                                 capture_output=True, text=True, timeout=timeout, env=env)
            last = (out.stdout.strip().splitlines() or [f"exit {out.returncode}: " + out.stderr.strip()[-150:]])[-1]
        except subprocess.TimeoutExpired:
            last = f"TIMEOUT after {timeout} s"
        verdict = last.split(" ", 1)[0] if last.startswith(("ACCEPTED", "REJECTED", "TIMEOUT")) else "ERROR"
        counts[verdict] += 1
        rows.append(f"| `{path.relative_to(root)}` | {name} | {last[:170].replace('|', '/')} |")
        print(f"[{i}/{len(sample)}] {path.name}:{name}: {last[:120]}", file=sys.stderr)
    return [f"Judged an identical copy of {len(sample)} inferred launchers (every {step}th) on the CPU interpreter:"
            f" **{counts['ACCEPTED']} accepted**, {counts['REJECTED']} rejected, {counts['ERROR']} errors,"
            f" {counts['TIMEOUT']} past {timeout} s.", "", "| file | launcher | gate |", "| --- | --- | --- |",
            *rows, ""]


if __name__ == "__main__":
    main()
