"""Diffs `skel apply --dry-run` prints apply with `git apply` from the repository root (paths relative to
the git root, a/ b/ prefixes, git's no-newline marker), and a dry run writes nothing."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from skel.cli import main
from skel.rewriter.diffs import repo_relative, unified_diff

KDA = Path(__file__).resolve().parents[1] / "kernels" / "kda_decode" / "kernel.py"


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    (root / "ops" / "kda").mkdir(parents=True)
    shutil.copy(KDA, root / "ops" / "kda" / "decode.py")
    assert git(root, "init", "-q").returncode == 0
    return root


def test_dry_run_diff_applies_from_the_repository_root(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo / "ops")  # run from a subfolder: the diff still names the path from the root
    before = sorted(p for p in repo.rglob("*") if ".git" not in p.parts)
    rc = main(["apply", "kda/decode.py", "--dry-run", "--unsafe", "--skeleton", "SK001", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["report"] is None
    assert sorted(p for p in repo.rglob("*") if ".git" not in p.parts) == before  # nothing written
    diff = data["candidates"][0]["diff"]
    assert diff.startswith("--- a/ops/kda/decode.py\n+++ b/ops/kda/decode.py\n")
    patch = repo / ".." / "sk001.diff"
    patch.write_text(diff)
    check = git(repo, "apply", "--check", str(patch.resolve()))
    assert check.returncode == 0, check.stderr
    rc = main(["apply", "kda/decode.py", "--dry-run", "--unsafe", "--skeleton", "SK001", "--quiet"])
    quiet = capsys.readouterr().out
    assert rc == 1 and quiet == diff  # --quiet: the diff alone, for `skel apply ... -q | git apply`
    assert git(repo, "apply", str(patch.resolve())).returncode == 0
    assert "tl.rsqrt" in (repo / "ops" / "kda" / "decode.py").read_text()


def test_a_file_without_a_final_newline(repo):
    f = repo / "ops" / "tail.py"
    f.write_text("a = 1\nb = 2")
    diff = unified_diff("a = 1\nb = 2", "a = 1\nb = 3", f)
    assert diff.endswith("\\ No newline at end of file\n") and "--- a/ops/tail.py" in diff
    patch = repo.parent / "tail.diff"
    patch.write_text(diff)
    assert git(repo, "apply", str(patch)).returncode == 0, git(repo, "apply", "--check", str(patch)).stderr
    assert f.read_text() == "a = 1\nb = 3"


def test_outside_a_checkout_the_path_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "k").mkdir()
    monkeypatch.chdir(tmp_path)
    if any((p / ".git").exists() for p in tmp_path.resolve().parents):
        pytest.skip("the temporary folder lies inside a git checkout")
    assert repo_relative(tmp_path / "k" / "x.py") == "k/x.py"
