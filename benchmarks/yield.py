"""Benchmark: yield. Of a fixed list of launchers from registry packages (benchmarks/yield_launchers.toml),
how many come back faster from a zero-config `skel apply`, validated.

    python benchmarks/yield.py fetch DIR                   # here (needs the registry): DIR/corpora.tgz
    python benchmarks/yield.py run DIR OUT [--only K ...]  # on the GPU machine: OUT/yield.json, logs, reports
    python benchmarks/yield.py render OUT [-o README.md]   # the readable table

``fetch`` downloads each package (no deps), keeps its Python sources and data files (no compiled
extensions: the GPU machine has no registry, and what skel judges is the Triton code) and packs them
into one archive the device call carries. ``run`` unpacks it and calls `skel apply FILE --entry LAUNCHER
--unsafe --json` for each launcher in turn: no spec, no shapes, the default candidate budget. A
launcher's package is put on ``sys.path`` so its absolute imports resolve; a package whose
``__init__`` needs what is not installed is set up without it by skel's loader (its notes say so).

Per launcher, yield.json records whether a harness was inferred (or why not), the candidates judged,
how many passed numerics, the accepted speedup per shape with its interval, and ``best_speedup``: the
highest lower end of a speedup interval among the shapes where an accepted candidate was measured
faster (null when nothing was accepted).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "benchmarks" / "yield_launchers.toml"
# what never travels: compiled extensions and large binary blobs (the Triton sources are what skel judges)
_BINARY = re.compile(r"\.(so(\.\d+)*|pyd|dll|dylib|a|o|cubin|fatbin|bin|pt|safetensors)$")
_MAX_FILE = 4 << 20


def launchers() -> list[dict]:
    """The fixed list, each entry with its key (``package/file:launcher``)."""
    entries = tomllib.loads(LIST.read_text(encoding="utf-8"))["launcher"]
    for e in entries:
        e["key"] = f"{e['package'].split('==')[0]}/{e['file']}:{e['launcher']}"
    return entries


def _stem(package: str) -> str:
    dist, version = package.split("==")
    return f"{dist.replace('-', '_')}-{version}"


def fetch(dest: Path) -> Path:
    """Each listed package's sources under ``dest/<dist>-<version>/``, packed into ``dest/corpora.tgz``."""
    sys.path.insert(0, str(REPO / "tests"))
    import pytest
    from conftest import fetch_sdist_corpus, fetch_wheel_corpus

    dest.mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    for e in launchers():
        if e["package"] in done:
            continue
        done.add(e["package"])
        dist, version = e["package"].split("==")
        try:
            root = fetch_wheel_corpus(dist, version)
        except pytest.skip.Exception:
            root = fetch_sdist_corpus(dist, version, e.get("sdist_env"))
        top = e["file"].split("/")[0]
        out = dest / _stem(e["package"])
        shutil.rmtree(out, ignore_errors=True)
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not _BINARY.search(path.name) and path.stat().st_size <= _MAX_FILE \
                    and "__pycache__" not in path.parts:
                target = out / path.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        print(f"{e['package']}: {sum(1 for _ in out.rglob('*.py'))} Python files from {root}")
    archive = dest / "corpora.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        for folder in sorted(p for p in dest.iterdir() if p.is_dir()):
            tf.add(folder, arcname=folder.name)
    print(f"{archive}: {archive.stat().st_size / 1e6:.1f} MB")
    return archive


def _summary(e: dict, proc: subprocess.CompletedProcess | None, data: dict | None, wall: float) -> dict:
    row = {"package": e["package"], "file": e["file"], "launcher": e["launcher"], "class": e["class"],
           "new_package": bool(e.get("new")), "wall_s": round(wall, 1), "harness": False, "reason": "",
           "candidates": 0, "numerics_passed": 0, "accepted": [], "best_speedup": None, "winners": {}}
    if data is None:
        tail = "" if proc is None else (proc.stderr or proc.stdout or "").strip().splitlines()[-1:]
        row["reason"] = ("timed out" if proc is None else (tail[0] if tail else f"exit {proc.returncode}"))[:300]
        return row
    row["harness"] = True
    row["reason"] = (data.get("binding") or {}).get("how", "")[:300]
    cands = data.get("candidates", [])
    row["candidates"] = len(cands)
    row["numerics_passed"] = sum(1 for c in cands if c.get("numerics_passed"))
    row["winners"] = {w["bucket"]: w["candidate"] for w in data.get("winners", [])}
    best = None
    for c in cands:
        if not c.get("accepted"):
            continue
        shapes = []
        for s in (c.get("gate") or {}).get("shapes", ()):
            p = s.get("perf") or {}
            if "speedup" not in p:
                continue
            shapes.append({"shape": s["shape"], "speedup": p["speedup"], "low": p.get("speedup_low"),
                           "high": p.get("speedup_high"), "verdict": p.get("verdict")})
            if p.get("verdict") == "faster" and p.get("speedup_low") is not None:
                best = max(best or 0.0, p["speedup_low"])
        row["accepted"].append({"label": c["label"], "shapes": shapes, "diff": c.get("diff", "")})
    row["best_speedup"] = best
    return row


def run(corpora: Path, out: Path, only: list[str], timeout: int, extra: list[str]) -> None:
    work = out / "corpora"
    if not work.is_dir():
        with tarfile.open(corpora / "corpora.tgz") as tf:
            tf.extractall(work, filter="data")
    rows: list[dict] = []
    for i, e in enumerate(launchers()):
        if only and not any(o in e["key"] for o in only):
            continue
        slug = f"{i:02d}-{e['launcher']}"
        root = work / _stem(e["package"])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "skel", "apply", str(root / e["file"]), "--entry", e["launcher"], "--unsafe",
               "--json", "--no-record", "--report-dir", str(out / slug), *extra]
        print(f"=== [{len(rows) + 1}] {e['key']}", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            proc = None
        wall = time.monotonic() - t0
        data = None
        if proc is not None:
            (out / f"{slug}.log").write_text(proc.stderr, encoding="utf-8")
            try:
                data = json.loads(proc.stdout)
            except json.JSONDecodeError:
                data = None
        row = _summary(e, proc, data, wall)
        rows.append(row)
        print(f"    harness={row['harness']} candidates={row['candidates']} best={row['best_speedup']}"
              f" ({wall:.0f} s) {row['reason'][:160]}", flush=True)
        _write(out, rows)


def _write(out: Path, rows: list[dict]) -> None:
    env = {}
    try:
        import torch
        import triton

        env = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "torch": torch.__version__, "triton": triton.__version__}
    except Exception:
        pass
    doc = {"date": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}", "environment": env,
           "list": str(LIST.relative_to(REPO)), "launchers": rows}
    (out / "yield.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def render(out: Path) -> str:
    doc = json.loads((out / "yield.json").read_text(encoding="utf-8"))
    rows = doc["launchers"]
    faster = [r for r in rows if (r["best_speedup"] or 0) >= 1.05]
    lines = [f"# Yield: zero-config `skel apply` over {len(rows)} launchers", "",
             f"{doc['environment'].get('gpu', '?')}, torch {doc['environment'].get('torch', '?')}, triton"
             f" {doc['environment'].get('triton', '?')}; {doc['date']}; `python benchmarks/yield.py run`"
             f" (list: `{doc['list']}`, fixed before measuring).", "",
             f"**{len(faster)} of {len(rows)}** came back with an accepted speedup >= 1.05x at some shape"
             f" (lower end of the interval); harness inferred for {sum(r['harness'] for r in rows)}.", "",
             "| package | launcher | class | harness | candidates | numerics ok | best speedup (low) | wall s |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        best = f"{r['best_speedup']:.2f}x" if r["best_speedup"] else "-"
        harness = "yes" if r["harness"] else f"no: {r['reason'][:120]}"
        lines.append(f"| {r['package']}{' (new)' if r['new_package'] else ''} | `{r['file']}:{r['launcher']}` |"
                     f" {r['class']} | {harness} | {r['candidates']} | {r['numerics_passed']} | {best} |"
                     f" {r['wall_s']:.0f} |")
    for r in rows:
        for a in r["accepted"]:
            lines += ["", f"## {r['launcher']} ({r['package']}): {a['label']}", "",
                      "| shape | speedup | interval | verdict |", "| --- | ---: | --- | --- |"]
            lines += [f"| {s['shape']} | {s['speedup']:.3f} | [{s['low']:.3f}, {s['high']:.3f}] | {s['verdict']} |"
                      for s in a["shapes"] if s.get("low") is not None]
            lines += ["", "```diff", a["diff"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("dest", type=Path)
    r = sub.add_parser("run")
    r.add_argument("corpora", type=Path, help="the folder holding corpora.tgz")
    r.add_argument("out", type=Path)
    r.add_argument("--only", action="append", default=[], help="launchers whose key contains this (repeatable)")
    r.add_argument("--timeout", type=int, default=420, help="seconds one launcher's apply may run")
    r.add_argument("extra", nargs="*", help="after --: more `skel apply` arguments")
    w = sub.add_parser("render")
    w.add_argument("out", type=Path)
    w.add_argument("-o", "--output", type=Path)
    args = parser.parse_args()
    if args.verb == "fetch":
        fetch(args.dest)
    elif args.verb == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        run(args.corpora, args.out, args.only, args.timeout, args.extra)
    else:
        text = render(args.out)
        if args.output:
            args.output.write_text(text, encoding="utf-8")
        else:
            print(text, end="")


if __name__ == "__main__":
    main()
