"""Benchmark: precision and recall of the miner on hand-labelled kernels from real packages.

    python benchmarks/mining_eval.py [--labels DIR] [--only SUBSTRING] [--write]

The labels (``benchmarks/mining_labels/*.csv``, rules in that folder's README) name a package
version, a file inside its wheel, a kernel (its name and definition line) and a skeleton, with
the verdict a reader reached from the code: ``instance``, ``opportunity`` or ``none``. The
wheels come from the package registry (``pip download --no-deps``, cached like the test
corpora: $SKEL_CORPUS_CACHE or ~/.cache/skel/corpus); nothing is vendored.

Matching, per (file, kernel, skeleton) that has labels: the kinds labelled there are the
complete truth for it. A labelled kind that the miner reports on that kernel (a finding whose
``kernel`` is that name: sites on the launcher or in a helper count for the kernel they were
reported for) is a true positive, a labelled kind it does not report a false negative; a kind
it reports that no label names (or that a ``none`` label rules out) is a false positive.
Findings on kernels or skeletons that carry no label are not judged.

Prints per-skeleton and overall precision/recall and every error; ``--write`` stores the
report as benchmarks/results/mining_eval.md. Nothing here asserts a number.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "benchmarks" / "mining_labels"
RESULTS = REPO / "benchmarks" / "results" / "mining_eval.md"
KINDS = ("instance", "opportunity", "none")
HELD_OUT = "heldout"  # label files named heldout*.csv: labelled without looking at skel's output first
CUDA_SUFFIXES = (".cu", ".cuh", ".cuhpp", ".h", ".hpp")


@dataclass(frozen=True)
class Label:
    package: str  # "fla-core==0.6.0"
    file: str  # path inside the unpacked wheel
    line: int  # the kernel's definition line
    kernel: str
    skeleton: str
    kind: str  # instance | opportunity | none
    reason: str
    where: str  # labels file and row, for messages

    @property
    def unit(self) -> tuple[str, str, str]:
        return (self.package, self.file, self.kernel)


@dataclass(frozen=True)
class Found:
    """What the miner reported for one kernel: its findings and whether it was profiled at all."""

    profiled: bool
    line: int | None  # the profiled kernel's line (None when not profiled)
    findings: tuple = ()  # catalog.store.Finding rows whose kernel is this one


@dataclass(frozen=True)
class Error:
    kind: str  # "false positive" | "false negative"
    label: Label  # the label the verdict rests on (for a false positive: one of the unit's labels)
    finding_kind: str
    detail: str


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    errors: list[Error] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


# ------------------------------------------------------------------- labels
def read_labels(folder: Path = LABELS) -> list[Label]:
    """Every label under ``folder``; a malformed row raises ValueError naming file, row and field."""
    out, problems = [], []
    for path in sorted(folder.glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as fh:
            for row_no, row in enumerate(csv.DictReader(fh), 2):
                where = f"{path.name}:{row_no}"
                try:
                    label = _label(row, where)
                except ValueError as exc:
                    problems.append(str(exc))
                    continue
                out.append(label)
    seen = set()
    for lb in out:
        key = (lb.unit, lb.skeleton, lb.kind)
        if key in seen:
            problems.append(f"{lb.where}: duplicate label {lb.skeleton} {lb.kind} for {lb.kernel}")
        seen.add(key)
    by_unit = defaultdict(set)
    for lb in out:
        by_unit[(lb.unit, lb.skeleton)].add(lb.kind)
    for (unit, code), kinds in by_unit.items():
        if "none" in kinds and len(kinds) > 1:
            problems.append(f"{unit[1]}: {unit[2]}: {code} is labelled both none and {sorted(kinds - {'none'})}")
    if problems:
        raise ValueError("bad labels:\n  " + "\n  ".join(problems))
    return out


def _label(row: dict, where: str) -> Label:
    def need(name: str) -> str:
        value = (row.get(name) or "").strip()
        if not value:
            raise ValueError(f"{where}: field {name!r} is empty")
        return value

    package, kind, code = need("package"), need("label"), need("skeleton")
    if "==" not in package:
        raise ValueError(f"{where}: package {package!r} is not NAME==VERSION")
    if kind not in KINDS:
        raise ValueError(f"{where}: label {kind!r} is not one of {', '.join(KINDS)}")
    if not (len(code) == 5 and code.startswith("SK") and code[2:].isdigit()):
        raise ValueError(f"{where}: skeleton {code!r} is not a code like SK012")
    line = need("line")
    if not line.isdigit():
        raise ValueError(f"{where}: line {line!r} is not a number")
    return Label(package, need("file"), int(line), need("kernel"), code, kind, need("reason"), where)


# ------------------------------------------------------------------- mining
def corpus_root(package: str) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mine_speed import fetch  # the benchmarks' one wheel fetcher (cache shared with the tests)

    name, version = package.split("==")
    return fetch(name, version)


def mine_file(root: Path, rel: str) -> tuple[list, list, str | None]:
    """Profiles, findings and an error for one corpus file, through the miner's own entry point."""
    from skel.miner.mine import analyze

    path = root / rel
    if not path.is_file():
        return [], [], f"{rel}: no such file in the unpacked wheel ({root})"
    text = path.read_text(encoding="utf-8", errors="replace")
    language = "cuda" if path.suffix in CUDA_SUFFIXES else "triton"
    return analyze(rel, text, language)


def mine_labelled(labels: list[Label], roots: dict[str, Path] | None = None) -> tuple[dict, list[str]]:
    """(package, file, kernel) -> Found for every labelled kernel, and the miner's errors.

    CUDA files are mined as one run over the folder that holds a package's labelled CUDA files
    (their deepest common folder), as ``skel mine FOLDER`` would: each file alone, then the
    cross-file pass (``miner.crossfile``) that copies helpers' findings from headers to the
    kernels that reach them."""
    roots = dict(roots or {})
    found, problems = {}, []
    files = sorted({(lb.package, lb.file) for lb in labels})
    mined: dict[tuple[str, str], tuple[list, list]] = {}
    for package, rel in files:
        if package not in roots:
            roots[package] = corpus_root(package)
        profiles, findings, err = mine_file(roots[package], rel)
        if err:
            problems.append(f"{package} {rel}: {err}")
        mined[(package, rel)] = (profiles, findings)
    for package in sorted({p for p, _ in files}):
        cuda = [rel for p, rel in files if p == package and Path(rel).suffix in CUDA_SUFFIXES]
        if cuda:
            _link_cuda(roots[package], package, cuda, mined, problems)
    for package, rel in files:
        profiles, findings = mined[(package, rel)]
        kernels = {lb.kernel: lb.line for lb in labels if (lb.package, lb.file) == (package, rel)}
        for name, line in kernels.items():
            profs = [p for p in profiles if p.name == name]
            prof = min(profs, key=lambda p: abs(p.line - line)) if profs else None
            mine = tuple(f for f in findings if f.kernel == name)
            found[(package, rel, name)] = Found(prof is not None, prof.line if prof else None, mine)
    return found, problems


def _link_cuda(root: Path, package: str, labelled: list[str], mined: dict, problems: list[str]) -> None:
    """Mine every CUDA file (with ``__global__`` or ``__device__``) under the labelled files' common
    folder and add the cross-file pass's findings to the labelled files' own."""
    import os

    from skel.miner.crossfile import SourceFile, attribute

    folder = Path(os.path.commonpath([str(Path(rel).parent) for rel in labelled]))
    run = []
    for path in sorted((root / folder).rglob("*")):
        if path.suffix not in CUDA_SUFFIXES or not path.is_file():
            continue
        rel = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8", errors="replace")
        if "__global__" not in text and "__device__" not in text:
            continue
        if (package, rel) not in mined:
            profiles, findings, err = mine_file(root, rel)
            if err:
                problems.append(f"{package} {rel}: {err}")
            mined[(package, rel)] = (profiles, findings)
        run.append(SourceFile(rel, text, tuple(mined[(package, rel)][1])))
    extra = attribute(run)
    for rel in labelled:
        profiles, findings = mined[(package, rel)]
        mined[(package, rel)] = (profiles, list(findings) + extra.get(rel, []))


# ------------------------------------------------------------------- scoring
def score(labels: list[Label], found: dict) -> dict[str, Tally]:
    """Per skeleton code (and "all"): true/false positives and negatives, every error kept."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    groups: dict[tuple, list[Label]] = defaultdict(list)
    for lb in labels:
        groups[(lb.unit, lb.skeleton)].append(lb)
    for (unit, code), group in sorted(groups.items()):
        got = found.get(unit, Found(False, None))
        reported = defaultdict(list)
        for f in got.findings:
            if f.skeleton == code:
                reported[f.kind].append(f)
        expected = {lb.kind: lb for lb in group if lb.kind != "none"}
        for kind, lb in expected.items():
            if kind in reported:
                _add(tallies, code, "tp")
            else:
                why = "kernel not profiled by the miner" if not got.profiled else "no such finding on the kernel"
                _add(tallies, code, "fn", Error("false negative", lb, kind, why))
        for kind, rows in reported.items():
            if kind in expected:
                continue
            lb = next((x for x in group if x.kind == "none"), group[0])
            first = rows[0]
            detail = f"reported at line {first.line}" + (f" {dict(first.params)}" if first.params else "")
            _add(tallies, code, "fp", Error("false positive", lb, kind, detail))
    return dict(tallies)


def _add(tallies: dict, code: str, what: str, error: Error | None = None) -> None:
    for key in (code, "all"):
        t = tallies[key]
        setattr(t, what, getattr(t, what) + 1)
        if error is not None:
            t.errors.append(error)


# ------------------------------------------------------------------- report
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _by_file(labels: list[Label]) -> dict[str, list[Label]]:
    """Labels per labels file (``heldout2.csv``), from where each was read."""
    out: dict[str, list[Label]] = defaultdict(list)
    for lb in labels:
        out[lb.where.split(":", 1)[0]].append(lb)
    return dict(out)


def report(labels: list[Label], tallies: dict[str, Tally], problems: list[str], heldout: dict | None = None,
           by_file: dict[str, dict[str, Tally]] | None = None) -> str:
    """The Markdown report; ``heldout`` scores the held-out labels together, ``by_file`` each held-out file."""
    packages = sorted({lb.package for lb in labels})
    counts = defaultdict(lambda: defaultdict(int))
    for lb in labels:
        counts[lb.skeleton][lb.kind] += 1
    kernels = {lb.unit for lb in labels}
    cuda = {u for u in kernels if Path(u[1]).suffix in CUDA_SUFFIXES}
    lines = [
        "# Mining evaluation: precision and recall on hand-labelled kernels",
        "",
        "Generated by `python benchmarks/mining_eval.py --write`; do not edit by hand. Labels and",
        "their rules: `benchmarks/mining_labels/` (README there). A label is a reader's verdict on one",
        "(kernel, skeleton): the kinds labelled are the complete truth for that pair.",
        "",
        f"Corpora (wheels from the package registry): {', '.join(packages)}.",
        f"Labels: {len(labels)} on {len(kernels)} kernels ({len(cuda)} CUDA, {len(kernels) - len(cuda)} Triton), "
        f"{len({(lb.package, lb.file) for lb in labels})} files.",
        "",
        "| skeleton | labels (instance / opportunity / none) | TP | FP | FN | precision | recall |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for code in sorted(counts):
        t, c = tallies.get(code, Tally()), counts[code]
        lines.append(f"| {code} | {c['instance']} / {c['opportunity']} / {c['none']} | {t.tp} | {t.fp} | {t.fn} | "
                     f"{_pct(t.precision)} | {_pct(t.recall)} |")
    t = tallies.get("all", Tally())
    lines += [f"| **all** | {len(labels)} | {t.tp} | {t.fp} | {t.fn} | **{_pct(t.precision)}** | **{_pct(t.recall)}** |", ""]
    held = [lb for lb in labels if lb.where.startswith(HELD_OUT)]
    if held and heldout is not None:
        h = heldout.get("all", Tally())
        lines += [f"Held-out subset ({HELD_OUT}*.csv: {len(held)} labels on "
                  f"{len({lb.unit for lb in held})} kernels, each file judged by reading before skel was run on its files; "
                  f"figures as the miner stands now): TP {h.tp}, FP {h.fp}, FN {h.fn}, precision {_pct(h.precision)}, "
                  f"recall {_pct(h.recall)}.", ""]
        for name, part in sorted(_by_file(held).items()):
            t_ = (by_file or {}).get(name, {}).get("all", Tally())
            lines += [f"- `{name}` ({len(part)} labels on {len({lb.unit for lb in part})} kernels; "
                      f"{', '.join(sorted({lb.package for lb in part}))}): TP {t_.tp}, FP {t_.fp}, FN {t_.fn}, "
                      f"precision {_pct(t_.precision)}, recall {_pct(t_.recall)}."]
        lines += [""]
    lines += [
        "How to read it: a unit is one (kernel, skeleton, kind); precision is TP / (TP + FP) over the kinds the",
        "miner reports on labelled pairs, recall TP / (TP + FN) over the labelled instance/opportunity kinds;",
        "`none` labels are where any finding would be a false positive. The labels were written by the session",
        "that fixed the detectors, most files picked while investigating the issue's error classes: the",
        "held-out subset is the less biased figure, and it is small. A held-out file scores the miner without",
        "bias only until the miner is fixed on its errors: the figure each one had when it was first run (before",
        "those fixes) is recorded in `benchmarks/mining_labels/README.md`.",
        "",
        "## Every remaining error", ""]
    if not t.errors:
        lines.append("None.")
    for e in sorted(t.errors, key=lambda e: (e.label.skeleton, e.kind, e.label.file, e.label.line)):
        lb = e.label
        lines.append(f"- {lb.skeleton} {e.kind} ({e.finding_kind}): {lb.package} `{lb.file}:{lb.line}` {lb.kernel}: "
                     f"{e.detail}; label ({lb.where}, {lb.kind}): {lb.reason}")
    if problems:
        lines += ["", "## Files the miner reported problems on", ""] + [f"- {p}" for p in problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=LABELS, help="folder of label CSV files")
    ap.add_argument("--only", default="", help="only labels whose file contains this text")
    ap.add_argument("--write", action="store_true", help=f"store the report as {RESULTS.relative_to(REPO)}")
    args = ap.parse_args(argv)
    try:
        labels = [lb for lb in read_labels(args.labels) if args.only in lb.file]
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    found, problems = mine_labelled(labels)
    held = [lb for lb in labels if lb.where.startswith(HELD_OUT)]
    per_file = {name: score(part, found) for name, part in _by_file(held).items()}
    text = report(labels, score(labels, found), problems, score(held, found) if held else None, per_file)
    print(text)
    if args.write:
        RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
