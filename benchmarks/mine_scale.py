"""Benchmark: the mining figures of issues 18 and 21, measured A/B against another checkout.

    python benchmarks/mine_scale.py [--python LABEL=PYTHON ...] [--repeat 5] [--kernels 3200]
                                    [--cuda-kernels 3000] [--files 5000] [--no-fla] [--write]

Figures (each a wall clock of ``PYTHON -m skel mine ... --json --no-progress --catalog FRESH`` in a
new process: interpreter start, imports, walk, parse, detectors, catalog, JSON output):

1. one generated Triton file of ``--kernels`` kernels (``mine_speed.triton_bundle``), cold: the issue
   asks for 3,200 kernels in <= 3 s on 2 cores; the same for a CUDA file of ``--cuda-kernels``;
2. fla-core 0.6.0 (registry wheel) cold and warm (<= 5 s and <= 0.5 s);
3. ``--files`` unchanged kernel files re-mined warm (<= 5 s): copies of fla-core's kernel files in
   folders of their own, mined cold once per interpreter, then re-mined.

``--python LABEL=PYTHON`` (repeatable) names the interpreters to compare, each with a checkout of skel
installed (``pip install --no-deps --no-build-isolation -e CHECKOUT`` in its venv); default: this
interpreter only, as ``this``. Runs of the interpreters are interleaved (A B A B ...) so that the
load of a shared machine falls on both alike; each figure reports the best and the median.
With ``--write`` the report goes to benchmarks/results/mine_speed_<date>.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mine_speed  # noqa: E402  (the generators and the corpus fetch, beside this script)

REPO = HERE.parent
_SUMMARY = re.compile(r"\((\d+) parsed, (\d+) unchanged\)")


CPU: dict[str, list[float]] = {}  # figure/label -> CPU seconds of each run (user + system, with its workers)


def run_mine(python: str, target: Path, catalog: Path, cpu_key: str = "") -> tuple[float, int, int]:
    """(wall seconds, files parsed, files unchanged) of one ``skel mine`` in a new process; its CPU
    seconds (the process and the workers it waited for) are kept under ``CPU[cpu_key]``."""
    cmd = [python, "-m", "skel", "mine", str(target), "--json", "--no-progress", "--catalog", str(catalog),
           "--max-bytes", "50000000"]
    err = catalog.parent / "stderr.txt"
    t0 = time.perf_counter()
    # run from the catalog's folder: from a checkout, `-m skel` would import that checkout's skel/
    with open(err, "w") as fe:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, cwd=catalog.parent)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    stderr = err.read_text()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{python} -m skel mine {target} failed ({proc.returncode}): {stderr[-2000:]}")
    m = _SUMMARY.search(stderr)
    if not m:
        raise SystemExit(f"no summary line from {python} -m skel mine {target}: {stderr[-2000:]}")
    if cpu_key:
        CPU.setdefault(cpu_key, []).append(usage.ru_utime + usage.ru_stime)
    return wall, int(m.group(1)), int(m.group(2))


def fresh(tmp: Path, name: str) -> Path:
    for f in tmp.glob(name + "*"):
        f.unlink()
    return tmp / name


def bench_cold(pythons: dict[str, str], target: Path, repeat: int, tmp: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {label: [] for label in pythons}
    for _ in range(repeat):
        for label, py in pythons.items():
            times[label].append(run_mine(py, target, fresh(tmp, f"cold-{label}.sqlite"), f"{target.name}/{label}")[0])
    return times


def bench_cold_warm(pythons: dict[str, str], target: Path, repeat: int, tmp: Path) -> tuple[dict, dict]:
    cold: dict[str, list[float]] = {label: [] for label in pythons}
    warm: dict[str, list[float]] = {label: [] for label in pythons}
    for _ in range(repeat):
        for label, py in pythons.items():
            cat = fresh(tmp, f"cw-{label}.sqlite")
            cold[label].append(run_mine(py, target, cat, f"cold/{label}")[0])
            wall, parsed, _ = run_mine(py, target, cat, f"warm/{label}")
            if parsed:
                raise SystemExit(f"{label}: the warm run parsed {parsed} files (is someone editing the miner?)")
            warm[label].append(wall)
    return cold, warm


def many_files(root: Path, n: int) -> Path:
    """``n`` kernel files: fla-core's files that mention triton and jit, copied into folders copy00, copy01..."""
    src = mine_speed.fetch(*mine_speed.FLA) / "fla"
    files = [p for p in sorted(src.rglob("*.py")) if b"triton" in (b := p.read_bytes()) and b"jit" in b]
    made = 0
    for k in range(n // len(files) + 1):
        for p in files[: n - made]:
            dest = root / f"copy{k:02d}" / p.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)
            made += 1
    return root


def bench_many_warm(pythons: dict[str, str], n: int, repeat: int, tmp: Path) -> tuple[dict, dict]:
    root = many_files(tmp / f"files{n}", n)
    cold: dict[str, list[float]] = {}
    warm: dict[str, list[float]] = {label: [] for label in pythons}
    cats = {label: fresh(tmp, f"many-{label}.sqlite") for label in pythons}
    for label, py in pythons.items():
        wall, parsed, _ = run_mine(py, root, cats[label], f"many-cold/{label}")
        cold[label] = [wall]
        if parsed != n:
            raise SystemExit(f"{label}: the cold run parsed {parsed} of {n} files")
    for _ in range(repeat):
        for label, py in pythons.items():
            wall, parsed, unchanged = run_mine(py, root, cats[label], f"many-warm/{label}")
            if parsed or unchanged != n:
                raise SystemExit(f"{label}: the warm run parsed {parsed} files, {unchanged} unchanged of {n}")
            warm[label].append(wall)
    return cold, warm


def rows(figure: str, times: dict[str, list[float]], target: str, cpu: str) -> list[str]:
    out = []
    for label, ts in times.items():
        cs = CPU.get(f"{cpu}/{label}", [])
        out.append(f"| {figure} | {label} | {min(ts):.2f} | {statistics.median(ts):.2f} | "
                   f"{', '.join(f'{t:.2f}' for t in ts)} | "
                   f"{f'{min(cs):.2f} / {statistics.median(cs):.2f}' if cs else ''} | {target} |")
    return out


def describe(pythons: dict[str, str], tmp: Path) -> list[str]:
    out = []
    for label, py in pythons.items():
        where = subprocess.run([py, "-c", "import os, skel.miner.mine as m; print(os.path.dirname(os.path.dirname(m.__file__)))"],
                               capture_output=True, text=True, cwd=tmp).stdout.strip()
        rev = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "not a git checkout"
        out.append(f"- `{label}`: `{py}`, skel from `{where}` ({rev})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", action="append", default=[], metavar="LABEL=PYTHON")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", type=int, default=3200)
    ap.add_argument("--cuda-kernels", type=int, default=3000)
    ap.add_argument("--files", type=int, default=5000, help="unchanged files re-mined warm (0: skip)")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    pythons = dict(p.split("=", 1) for p in args.python) or {"this": sys.executable}
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    started = datetime.now(timezone.utc)
    table = ["| figure | code | best (s) | median (s) | all runs (s) | CPU best / median (s) | target |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="skel-mine-scale-") as name:
        tmp = Path(name)
        who = describe(pythons, tmp)
        bundle = tmp / f"bundle{args.kernels}.py"
        bundle.write_text(mine_speed.triton_bundle(args.kernels))
        table += rows(f"{args.kernels} Triton kernels, one file, cold", bench_cold(pythons, bundle, args.repeat, tmp),
                      "<= 3 s" if args.kernels == 3200 else "", bundle.name)
        cuda = tmp / f"bundle{args.cuda_kernels}.cu"
        cuda.write_text(mine_speed.cuda_bundle(args.cuda_kernels))
        table += rows(f"{args.cuda_kernels} CUDA kernels, one file, cold", bench_cold(pythons, cuda, args.repeat, tmp), "",
                      cuda.name)
        if not args.no_fla:
            cold, warm = bench_cold_warm(pythons, mine_speed.fetch(*mine_speed.FLA) / "fla", args.repeat, tmp)
            table += rows("fla-core 0.6.0, cold", cold, "<= 5 s", "cold") + rows("fla-core 0.6.0, warm", warm, "<= 0.5 s",
                                                                                 "warm")
        if args.files:
            cold, warm = bench_many_warm(pythons, args.files, max(3, args.repeat // 2 + 1), tmp)
            table += rows(f"{args.files} kernel files, cold (once)", cold, "", "many-cold")
            table += rows(f"{args.files} unchanged kernel files, warm", warm, "<= 5 s", "many-warm")
    text = "\n".join([
        "# Mining speed at scale (issues 18 and 21)", "",
        f"- date: {started.isoformat(timespec='seconds')}",
        f"- machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}; PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}",
        f"- load average at start: {load}; at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        + " (a shared machine: other work inflates times; the interpreters' runs are interleaved)",
        "- command: `python benchmarks/mine_scale.py " + " ".join(sys.argv[1:]) + "`",
        "- timing: wall clock of `PYTHON -m skel mine TARGET --json --no-progress --catalog FRESH` in a new process;"
        " CPU: its user + system seconds with the workers it waited for (wait4), less sensitive to the machine's load",
        *who, "", *table, "",
    ])
    print(text)
    if args.write:
        out = HERE / "results" / f"mine_speed_{started.date().isoformat()}.md"
        out.write_text(text + "\n")
        print(f"written to {out.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()
