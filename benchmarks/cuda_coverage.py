"""How many CUDA files with a ``__global__`` definition the CUDA frontend profiles.

Usage: python benchmarks/cuda_coverage.py DIR [--ext .cuh,.cu] [--failures N] [--baseline]

A file counts as "defining a __global__ function" when ``__global__`` appears in its code
(not in a comment, a string or a preprocessor line such as a ``#define``) followed by a
body, found by a brace scan independent of the parser; it counts as
profiled when ``profile_source`` returns at least one profile without raising. Prints the
two counts, the percentage, the time and files/s, and the first failures with reasons.
Times are wall and CPU (process) seconds: on a shared machine CPU time is the fair one.
The total covers reading every file, the definition scan and profiling; the frontend keeps
the last sanitized texts, so profiling a file right after the scan does not sanitize it
again ("profile_file alone" is printed too).
``--baseline`` also times a plain tree-sitter-cuda parse of every scanned file (no
sanitizing, no analysis) for comparison.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from skel.miner.cuda_frontend import kernel_definition_lines, profile_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--ext", default=".cuh", help="comma-separated file suffixes (default .cuh)")
    ap.add_argument("--failures", type=int, default=20, help="how many failures to list")
    ap.add_argument("--baseline", action="store_true", help="also time a plain tree-sitter parse")
    args = ap.parse_args(argv)
    exts = tuple(e.strip() for e in args.ext.split(","))
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.directory) for f in fs if f.endswith(exts))
    t0, c0 = time.perf_counter(), time.process_time()
    with_global = profiled = kernels = empty = 0
    profile_cpu = 0.0  # the profile_file calls alone (the rest: reading, the definition scan)
    failures: list[str] = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            failures.append(f"{path}: {e}")
            continue
        if not kernel_definition_lines(text):
            continue  # no __global__ definition: none, or only in comments, strings, #defines, prototypes
        with_global += 1
        p0 = time.process_time()
        try:
            profiles = profile_file(path)
        except ValueError as e:
            failures.append(str(e))
            continue
        finally:
            profile_cpu += time.process_time() - p0
        if profiles:
            profiled += 1
            kernels += len(profiles)
        else:
            empty += 1
            failures.append(f"{path}: no kernel found (only __global__ declarations?)")
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    pct = 100.0 * profiled / with_global if with_global else 0.0
    print(f"files scanned ({','.join(exts)}): {len(files)}")
    print(f"files defining a __global__ function: {with_global}")
    print(f"files profiled: {profiled} ({pct:.1f} %), kernels: {kernels}, no kernel found: {empty}")
    print(f"time: {dt:.2f} s wall, {cpu:.2f} s CPU; {len(files) / cpu:.1f} files/s scanned (CPU), "
          f"{with_global / cpu:.1f} kernel files/s (CPU); profile_file alone {profile_cpu:.2f} s CPU")
    if args.baseline:
        bwall, bcpu = _plain_parse(files)
        print(f"baseline, plain tree-sitter parse of all {len(files)} files: {bwall:.2f} s wall, "
              f"{bcpu:.2f} s CPU, {len(files) / bcpu:.1f} files/s (CPU)")
    for line in failures[: args.failures]:
        print("  fail:", line)
    return 0


def _plain_parse(files: list[str]) -> tuple[float, float]:
    import tree_sitter
    import tree_sitter_cuda

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))
    t0, c0 = time.perf_counter(), time.process_time()
    for path in files:
        with open(path, "rb") as f:
            parser.parse(f.read())
    return time.perf_counter() - t0, time.process_time() - c0


if __name__ == "__main__":
    sys.exit(main())
