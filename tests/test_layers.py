"""The packages' layers: every import of a skel module goes down the stack, never up.

``LAYERS`` is the stack, bottom first; a module may import its own layer and the layers below it,
nothing above. A module's layer is the longest name in the table its import name starts with (so
``skel.validate.spec`` is a layer of its own below ``skel.harness``, and ``skel.miner.mine`` sits
above the rules it runs while the rest of ``skel.miner`` sits below them). Every ``import`` and
``from ... import`` counts, at module level, inside functions and under ``TYPE_CHECKING`` alike,
relative ones resolved, and so does ``importlib.import_module("skel....")`` with a literal name.
The README's Layout table is this stack, top first: the test fails when the two differ.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (layer, import names it covers), bottom first.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("skel.errors", "skel.procs", "skel.executor", "skel.device")),
    ("catalog", ("skel.catalog",)),
    ("miner", ("skel.miner",)),
    ("rewriter", ("skel.rewriter",)),
    ("skeletons", ("skel.skeletons",)),
    ("detect", ("skel.miner.detect", "skel.miner.match", "skel.miner.mine")),
    ("spec", ("skel.validate.spec",)),
    ("harness", ("skel.harness",)),
    ("validate", ("skel.validate",)),
    ("kernels", ("skel.kernels",)),
    ("pipeline", ("skel.pipeline",)),
    ("cli", ("skel",)),
)

# folder -> import name (pyproject.toml's [tool.setuptools] package-dir)
FOLDERS = {"skel": "skel", "catalog": "skel.catalog", "miner": "skel.miner", "rewriter": "skel.rewriter",
           "skeletons": "skel.skeletons", "validate": "skel.validate", "harness": "skel.harness",
           "kernels": "skel.kernels", "pipeline": "skel.pipeline"}


def layer_of(module: str) -> int:
    """The index in LAYERS of ``module``'s layer (longest matching name); -1 for a non-skel module."""
    best, rank = -1, -1
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, rank = len(name), i
    return rank


def module_name(path: Path, root: Path = ROOT) -> tuple[str, bool]:
    """(import name, is a package ``__init__``) of a file under one of FOLDERS. A skeleton folder's
    ``rule.py`` (loaded by path; ``SK001-rsqrt-...`` is no identifier) is named as if it were importable."""
    rel = path.relative_to(root).with_suffix("")
    parts = [FOLDERS[rel.parts[0]], *(p.replace("-", "_") for p in rel.parts[1:])]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, imported module) for every skel import of ``path``, wherever it stands."""
    module, is_package = module_name(path, root)
    here = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from skel.x import y``: y may be a module of its own (a lower layer than skel.x's __init__ says)
            out += [(node.lineno, f"{target}.{a.name}" if layer_of(f"{target}.{a.name}") != layer_of(target)
                     else target) for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return [(line, m) for line, m in out if m == "skel" or m.startswith("skel.")]


def product_files() -> list[Path]:
    """Every .py file of the packages; skeleton examples and fixtures are kernels, not skel code."""
    files = []
    for folder in FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts and not (folder == "skeletons" and "examples" in p.parts)]
    return sorted(files)


def violations(files: list[Path], root: Path = ROOT) -> list[str]:
    out = []
    for path in files:
        mine = layer_of(module_name(path, root)[0])
        for line, target in imports(path, root):
            theirs = layer_of(target)
            if theirs > mine:
                out.append(f"{path.relative_to(root).as_posix()}:{line}: {LAYERS[mine][0]} imports {target} "
                           f"({LAYERS[theirs][0]}, a layer above it)")
    return out


def test_every_import_goes_down_the_stack():
    problems = violations(product_files())
    assert not problems, "imports against the layers (tests/test_layers.py LAYERS, README Layout):\n" + "\n".join(problems)


def test_every_package_folder_has_a_layer():
    for path in product_files():
        assert layer_of(module_name(path)[0]) >= 0, path


@pytest.mark.parametrize("source, expected", [
    ("from skel.pipeline.apply import apply_file\n", "rewriter imports skel.pipeline.apply (pipeline"),
    ("def f():\n    from skel.skeletons.library import load_library\n", "rewriter imports skel.skeletons.library (skeletons"),
    ("import importlib\nm = importlib.import_module('skel.validate.gate')\n", "rewriter imports skel.validate.gate (validate"),
    ("from ..pipeline import report\n", "rewriter imports skel.pipeline (pipeline"),
])
def test_an_upward_import_is_named_with_its_file_and_line(tmp_path, source, expected):
    (tmp_path / "rewriter").mkdir()
    path = tmp_path / "rewriter" / "probe.py"  # a module of skel.rewriter, in a scratch tree
    path.write_text(source)
    [problem] = violations([path], tmp_path)
    assert problem.startswith("rewriter/probe.py:") and expected in problem


def test_downward_and_same_layer_imports_pass(tmp_path):
    (tmp_path / "pipeline").mkdir()
    path = tmp_path / "pipeline" / "probe.py"
    path.write_text("from skel.pipeline.select import settle\nfrom skel.validate.gate import validate\n"
                    "from skel.miner.match import match_file\nfrom . import report\nimport os\n")
    assert violations([path], tmp_path) == []


def test_the_readme_layout_table_is_the_stack():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    header, body = rows[0], rows[1:]
    assert header.split("|")[1].strip() == "layer", header
    readme = [(cells[1].strip(), tuple(re.findall(r"`(skel[\w.]*)`", cells[2])))
              for cells in (row.split("|") for row in body) if cells[1].strip()]
    assert readme == [(name, names) for name, names in reversed(LAYERS)]
