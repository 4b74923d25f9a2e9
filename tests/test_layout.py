"""The repository's layout: probes live in experiments/ and nothing outside it depends on them.

`benchmarks/` keeps product tools; a probe that answered one question lives in
`experiments/<date>-<question>/` with its write-up (README.md) and results. Probes may import
each other (through sys.path, from their own folders); nothing else may import one or point a
path at one, so moving, rewriting or deleting an experiment never breaks the product or the tests.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
SKIP_DIRS = {".git", ".venv", "venv", "experiments", "__pycache__", ".skel", ".whl", "build", "dist",
             "node_modules", ".pytest_cache"}
THIS = Path(__file__).resolve()  # the checker names the folder it checks
FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+(-[a-z0-9]+)*")
# a path into experiments/ that code could follow: the folder as a path component, outside prose
PATH_INTO = re.compile(r"(?<![\w.-])experiments([/\\]|$)")
# a module or script under experiments/, named anywhere (docstrings included)
MODULE_REF = re.compile(r"experiments/[\w./-]*\.(py|sh)\b")


def _files(suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out += [Path(dirpath) / f for f in filenames if f.endswith(suffixes)]
    return [p for p in out if p.resolve() != THIS]


def _experiment_modules() -> set[str]:
    return {p.stem for p in EXPERIMENTS.rglob("*.py")} | {"experiments"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _python_problems(path: Path, modules: set[str], root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if not re.search(r"\b(%s)\b" % "|".join(map(re.escape, sorted(modules))), text):
        return []  # names none of them: nothing to parse
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []  # fixtures of unparsable code import nothing
    rel = path.relative_to(root)
    docs = _docstrings(tree)
    problems = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in modules:
                problems.append(f"{rel}:{node.lineno}: imports {name}, a module under experiments/")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MODULE_REF.search(node.value) or (id(node) not in docs and PATH_INTO.search(node.value)):
                problems.append(f"{rel}:{node.lineno}: points into experiments/: {node.value[:80]!r}")
    return problems


def test_every_experiment_folder_is_dated_and_has_a_write_up():
    folders = [p for p in EXPERIMENTS.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert folders, "experiments/ holds no experiment"
    for folder in folders:
        assert FOLDER.fullmatch(folder.name), f"{folder.name}: name it <YYYY-MM-DD>-<question>"
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.relative_to(ROOT)} has no README.md (the question, method, findings, outcome)"
        assert readme.read_text().startswith("# "), f"{readme.relative_to(ROOT)}: open with the question as a heading"


def test_nothing_outside_experiments_imports_or_points_at_one():
    modules = _experiment_modules()
    problems = [p for path in _files((".py",)) for p in _python_problems(path, modules)]
    for path in _files((".sh",)) + [ROOT / ".ci" / "run"]:
        if path.is_file() and PATH_INTO.search(path.read_text(errors="replace")):
            problems.append(f"{path.relative_to(ROOT)}: runs or reads something under experiments/")
    assert not problems, "\n".join(problems)


def test_the_checks_catch_an_import_and_a_path(tmp_path):
    modules = _experiment_modules()
    bad = tmp_path / "tool.py"
    bad.write_text('"""Docs may cite experiments/x/README.md."""\nimport sys\nsys.path.insert(0, "../experiments/x")\n'
                   "import graph_timing\nfrom experiments import y\n")
    problems = _python_problems(bad, modules, tmp_path)
    assert len(problems) == 3, problems
    ok = tmp_path / "doc.py"
    ok.write_text('"""Measured on the H200 (experiments/2026-11-29-x/results.md)."""\nX = 1\n')
    assert _python_problems(ok, modules, tmp_path) == []

