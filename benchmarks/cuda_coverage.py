"""How many CUDA files with a ``__global__`` definition the CUDA frontend profiles.

Usage: python benchmarks/cuda_coverage.py DIR [--ext .cuh,.cu] [--failures N] [--kernels]

A file counts as "defining a __global__ function" when ``__global__`` appears in its code
(not in a comment, a string or a preprocessor line such as a ``#define``) followed by a
body, found by a brace scan independent of the parser; it counts as
profiled when ``profile_source`` returns at least one profile without raising. Prints the
two counts, the percentage, the time and files/s, and the first failures with reasons.
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
    args = ap.parse_args(argv)
    exts = tuple(e.strip() for e in args.ext.split(","))
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.directory) for f in fs if f.endswith(exts))
    t0 = time.perf_counter()
    with_global = profiled = kernels = empty = 0
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
        try:
            profiles = profile_file(path)
        except ValueError as e:
            failures.append(str(e))
            continue
        if profiles:
            profiled += 1
            kernels += len(profiles)
        else:
            empty += 1
            failures.append(f"{path}: no kernel found (only __global__ declarations?)")
    dt = time.perf_counter() - t0
    pct = 100.0 * profiled / with_global if with_global else 0.0
    print(f"files scanned ({','.join(exts)}): {len(files)}")
    print(f"files defining a __global__ function: {with_global}")
    print(f"files profiled: {profiled} ({pct:.1f} %), kernels: {kernels}, no kernel found: {empty}")
    print(f"time: {dt:.2f} s, {len(files) / dt:.1f} files/s scanned, {with_global / dt:.1f} kernel files/s")
    for line in failures[: args.failures]:
        print("  fail:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
