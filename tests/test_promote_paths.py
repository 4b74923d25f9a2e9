"""`skel catalog promote` with crafted candidate names: whatever a catalog row's name is (``../..``, an absolute
path, NUL, separators, ``..``, non-ASCII, empty, 300 characters), the folder is a slug directly inside
--library, and a link in the way or a path resolving outside is refused with exit 2.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

import history_repo as hr
from catalog_files import candidate_code, copy, quiet
from skel.skeletons.library import load_skeleton
from skel.skeletons.promote import slug
from skel.cli import main

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repositories")

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A catalog with the history candidates of tests/history_repo.py's repository."""
    root = tmp_path_factory.mktemp("promote")
    hr.build(root / "repo")
    db = root / "catalog.sqlite"
    quiet(["mine", "--history", str(root / "repo"), "--no-progress", "--catalog", str(db)], expect=(0,))
    return db


CRAFTED = ["../../escaped", "/etc/passwd", "a/../../b", "..", ".", "x\x00y", "C:\\Windows\\evil", "名前",
           "", "-", "a" * 300, "~/home", "\n[code]\nname = 'x'"]


@pytest.fixture()
def library(tmp_path):
    lib = tmp_path / "lib"
    shutil.copytree(REPO_ROOT / "skeletons", lib, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    return lib


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.parametrize("name", CRAFTED)
def test_promote_never_writes_outside_the_library_whatever_the_name(base, tmp_path, library, capsys, name):
    db = copy(base, tmp_path)
    cand = candidate_code(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE candidates SET name = ? WHERE code = ?", (name, cand))
    outside = tree(tmp_path) - {str(Path("lib") / p) for p in tree(library)}
    before = set(os.listdir(library))
    capsys.readouterr()
    assert main(["catalog", "promote", cand, "--catalog", str(db), "--library", str(library)]) == 0, \
        capsys.readouterr().err
    (new,) = set(os.listdir(library)) - before
    folder = library / new
    assert folder.is_dir() and not folder.is_symlink() and folder.resolve().parent == library.resolve()
    assert new == f"{new[:5]}-{slug(name)}" and slug(name) and "/" not in new and ".." not in new
    sk, problems = load_skeleton(folder)
    assert problems == [] and sk.name == slug(name)
    after_outside = tree(tmp_path) - {str(Path("lib") / p) for p in tree(library)}
    assert after_outside - outside <= {"catalog.sqlite-wal", "catalog.sqlite-shm"}, after_outside - outside


def test_promote_refuses_a_folder_that_is_a_link_out_of_the_library(base, tmp_path, library, capsys, monkeypatch):
    from skel.skeletons import promote
    from skel.errors import UsageError

    db = copy(base, tmp_path)
    cand = candidate_code(db)
    with sqlite3.connect(db) as conn:
        name = conn.execute("SELECT name FROM candidates WHERE code = ?", (cand,)).fetchone()[0]
    code = promote.next_code(library)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (library / f"{code}-{slug(name)}").symlink_to(elsewhere, target_is_directory=True)
    capsys.readouterr()
    rc = main(["catalog", "promote", cand, "--as", code, "--catalog", str(db), "--library", str(library)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert list(elsewhere.iterdir()) == []
    # the generator itself refuses a link in the way, and a folder that would resolve outside the library
    from skel.catalog.store import open_catalog

    with open_catalog(db) as cat:
        c = cat.candidate(cand)
    linked = promote.Promotion(cand, code, library / f"{code}-{slug(name)}", (("skeleton.toml", "x"),))
    with pytest.raises(UsageError, match="refusing"):
        promote.write(linked)
    monkeypatch.setattr(promote, "slug", lambda n: "x/../../../escaped")
    with pytest.raises(UsageError, match="outside the library"):
        promote.render(c, "SK099", library)
    monkeypatch.undo()
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "escaped").exists()
    for bad in (["--as", "../SK999"], ["--as", "SK1/.."]):
        assert main(["catalog", "promote", cand, *bad, "--catalog", str(db), "--library", str(library)]) == 2
    assert main(["catalog", "promote", "SKP../../x", "--catalog", str(db), "--library", str(library)]) == 2
    assert main(["catalog", "promote", cand, "--catalog", str(db), "--library", str(tmp_path / "nope")]) == 2


