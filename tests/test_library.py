"""The skeleton library loader and `skel catalog check|list|show|search`."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from skel.skeletons.library import DOC_HEADINGS, LibraryError, check_library, default_root, load_library
from skel.cli import main

REQUIRED_KEYS = {"code", "name", "category", "conditions", "transformation", "constraints", "evidence", "provenance"}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_shipped_library_is_valid_and_large_enough():
    lib = load_library()
    assert len(lib) >= 12
    codes = [s.code for s in lib]
    assert codes == sorted(set(codes))
    for sk in lib:
        assert sk.conditions and sk.provenance
        assert all(sk.docs[h] for h in DOC_HEADINGS)


def test_catalog_check_passes_on_library(capsys):
    code, out, err = run(capsys, "catalog", "check")
    assert code == 0, err
    assert "all checks passed" in out


def test_catalog_list_json_has_required_fields(capsys):
    code, out, _ = run(capsys, "catalog", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) >= 12
    for row in rows:
        assert REQUIRED_KEYS <= row.keys()
        assert row["conditions"] and row["provenance"]
        assert isinstance(row["evidence"], list)


def test_catalog_list_filters(capsys):
    _, out, _ = run(capsys, "catalog", "list", "--json", "--category", "precision")
    rows = json.loads(out)
    assert rows and all(r["category"] == "precision" for r in rows)


def test_catalog_show_and_search(capsys):
    code, out, _ = run(capsys, "catalog", "show", "sk001")
    assert code == 0
    for heading in DOC_HEADINGS:
        assert f"## {heading}" in out
    assert "## Applicability conditions" in out and "## Evidence" in out
    code, out, _ = run(capsys, "catalog", "search", "rsqrt")
    assert code == 0 and "SK001" in out
    code, out, _ = run(capsys, "catalog", "search", "no-such-technique-xyzzy")
    assert code == 1


def test_catalog_show_unknown_code_is_usage_error(capsys):
    code, _, err = run(capsys, "catalog", "show", "SK999")
    assert code == 2 and "SK999" in err


@pytest.fixture
def broken_library(tmp_path):
    """A copy of two shipped skeletons that a test can break."""
    src = default_root()
    folders = sorted(p for p in src.iterdir() if p.is_dir() and p.name.startswith("SK"))[:2]
    for f in folders:
        shutil.copytree(f, tmp_path / f.name, ignore=shutil.ignore_patterns("__pycache__", "fixtures*"))
    return tmp_path, folders[0].name


def _edit(path: Path, pattern: str, repl: str) -> None:
    text = path.read_text()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.MULTILINE)
    assert n == 1, f"pattern {pattern!r} not found in {path}"
    path.write_text(new)


BREAKAGES = [
    # (file, regex, replacement, expected field, expected message fragment, line expected)
    ("skeleton.toml", r'^category = ".*"$', 'category = "speed"', "category", "not one of", True),
    ("skeleton.toml", r'^code = ".*"$', 'code = "X1"', "code", "does not match", True),
    ("skeleton.toml", r'^lifecycle = (".*")$', r'lifecycle = \1\nsafety = "safe"', "safety", "read off the rule", True),
    ("skeleton.toml", r'^lifecycle = ".*"$', 'lifecycle = "ga"\ncolour = "red"', "colour", "unknown field", True),
    ("skeleton.toml", r'^targets = .*$', 'targets = []', "targets", "must not be empty", True),
    ("skeleton.toml", r'^title = ".*"$', 'title = "unterminated', "toml", "", True),
    ("skeleton.toml", r'^(\[\[provenance\]\]\n(?:.*\n)*?)line = \d+', r'\1line = "ten"', "provenance[0].line", "positive integer", True),
    ("skeleton.toml", r'^enables = .*$', 'enables = ["SK998"]', "enables", "unknown skeleton code", False),
    ("docs.md", r'^## Why it is faster$', '## Why it is quick', "docs", "missing heading '## Why it is faster'", False),
    ("examples/before.py", r'\Z', '\ndef broken(:\n', "before.py", "does not parse", True),
    ("rule.py", r'^class ', 'class Second(Rule):\n    pass\n\n\nclass ', "rule.py", "exactly one Rule subclass", False),
    ("rule.py", r'^CONDITIONS = \{', 'CONDITIONS = {\n    "made-up": lambda ctx: None,', "RsqrtForNormDivision.CONDITIONS", "not a condition in skeleton.toml", False),
]


@pytest.mark.parametrize("file,pattern,repl,field,fragment,has_line", BREAKAGES,
                         ids=[f"{b[0]}-{b[3]}" for b in BREAKAGES])
def test_check_names_file_and_field(capsys, broken_library, file, pattern, repl, field, fragment, has_line):
    root, name = broken_library
    _edit(root / name / file, pattern, repl)
    code, out, err = run(capsys, "catalog", "check", "--library", str(root))
    assert code == 2
    expected_file = str(root / name / file)
    lines = [l for l in err.splitlines() if l.startswith(expected_file)]
    assert lines, err
    assert any(f": {field}: " in l and fragment in l for l in lines), err
    if has_line:
        assert any(re.match(re.escape(expected_file) + r":\d+: ", l) for l in lines), err
    with pytest.raises(LibraryError):
        load_library(root)


def test_check_missing_file_and_duplicate_code(capsys, broken_library):
    root, name = broken_library
    (root / name / "examples" / "after.py").unlink()
    other = next(p for p in root.iterdir() if p.name != name)
    _edit(other / "skeleton.toml", r'^code = ".*"$', f'code = "{name[:5]}"')
    _, problems = check_library(root)
    messages = [str(p) for p in problems]
    assert any("after.py" in m and "missing" in m for m in messages)
    assert any("folder name" in m for m in messages)  # code no longer matches its folder


def test_check_json_output(capsys, broken_library):
    root, name = broken_library
    _edit(root / name / "skeleton.toml", r'^category = ".*"$', 'category = "speed"')
    code, out, _ = run(capsys, "catalog", "check", "--library", str(root), "--json")
    assert code == 2
    data = json.loads(out)
    assert data["problems"][0]["field"] == "category"
    assert data["problems"][0]["path"].endswith("skeleton.toml")


def test_help_explains_every_verb(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "catalog" in out and "Exit codes" in out


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["catalog", "list", "--category", "nonsense"])
    assert exc.value.code == 2
