"""`skel mine --history` killed with SIGKILL midway, then run again: it resumes where it stopped and ends with
the catalog an uninterrupted run leaves; and its progress line (done/total, rate, ETA).

The kill is deterministic: a child process runs the real CLI with ``record_commit`` wrapped so that the
process SIGKILLs itself right after the N-th commit was committed (tests/history_repo.py's repository).
"""
from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from io import StringIO
from pathlib import Path

import pytest

import history_repo as hr
from catalog_files import history_state
from skel.cli import main
from skel.commands.progress import RateProgress

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repositories")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "repo"
    hr.build(path)
    return path


KILLER = textwrap.dedent("""
    import os, signal, sys
    from skel.catalog.candidates import HistoryStore
    stop_after, done, record = int(sys.argv[1]), [0], HistoryStore.record_commit
    def record_then_die(self, *args, **kwargs):
        record(self, *args, **kwargs)
        done[0] += 1
        if done[0] == stop_after:
            os.kill(os.getpid(), signal.SIGKILL)
    HistoryStore.record_commit = record_then_die
    from skel.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def kill_mid_history(db: Path, repo: Path, after: int, *extra: str) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLER, str(after), "mine", "--history", str(repo), "--catalog",
                           str(db), "--no-progress", *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def no_process_mentions(path: Path, timeout_s: float = 5.0) -> bool:
    """No process left whose command line names ``path`` (the killed miner's git cat-file, say)."""
    if not Path("/proc").is_dir():
        return True
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and str(path).encode() in (p / "cmdline").read_bytes():
                    left.append(p.name)
            except OSError:
                continue
        if not left or time.monotonic() > deadline:
            return not left
        time.sleep(0.05)


def test_history_killed_mid_run_resumes_and_ends_as_an_uninterrupted_run(repo, tmp_path, capsys):
    whole = tmp_path / "whole.sqlite"
    assert main(["mine", "--history", str(repo), "--catalog", str(whole), "--no-progress"]) == 0
    db = tmp_path / "killed.sqlite"
    kill_mid_history(db, repo, after=4)
    assert no_process_mentions(repo), "the killed run left a child process behind"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT head FROM history_repos").fetchall() == [("",)], "not complete, not claimed"
        assert conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 0
        kept = {r[0] for r in conn.execute("SELECT DISTINCT commit_sha FROM history_edits")}
    shas = hr.git(repo, "log", "--reverse", "--format=%H").split()
    assert kept and kept <= set(shas[:4]), "the first four commits' work is kept, nothing of later ones"
    assert {r for r in history_state(whole)["history_edits"] if r[2] in kept} == \
        {r for r in history_state(db)["history_edits"]}, "each kept commit has all of its edits"
    capsys.readouterr()
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["commits"] == len(shas) - 4, "only the remaining commits are walked"
    assert history_state(db) == history_state(whole)
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress"]) == 0
    assert history_state(db) == history_state(whole), "a further run has nothing to do"


def _killed_then_resumed_equals_uninterrupted(repo: Path, tmp_path: Path, after: int, *extra: str) -> None:
    """A run killed after ``after`` commits (with ``extra`` arguments), then a plain run, ends where one
    uninterrupted plain run ends."""
    whole = tmp_path / "whole.sqlite"
    assert main(["mine", "--history", str(repo), "--catalog", str(whole), "--no-progress"]) == 0
    db = tmp_path / "killed.sqlite"
    kill_mid_history(db, repo, after, *extra)
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress"]) == 0
    assert history_state(db) == history_state(whole)


def test_history_killed_on_an_older_head_resumes_then_walks_on(repo, tmp_path):
    _killed_then_resumed_equals_uninterrupted(repo, tmp_path, 3, "--rev", "HEAD~2")


def test_history_killed_after_every_commit_before_distilling_redistils(repo, tmp_path):
    _killed_then_resumed_equals_uninterrupted(repo, tmp_path, len(hr.STEPS))  # every commit recorded, killed before the head moved


class _Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_history_progress_shows_done_total_rate_and_eta():
    now = [100.0]
    term = _Terminal()
    bar = RateProgress(term, "skel mine --history repo", "commits", clock=lambda: now[0])
    bar(400, 900)  # a resumed run starts at 400: that is not this run's speed
    now[0] += 10
    bar(450, 900, "abc1234567")
    assert "450/900 commits (50 %), 5.0 commits/s, ETA 1 min 30 s  abc1234567" in term.getvalue()
    assert "\x1b[" in term.getvalue()  # drawn by rich, in place
    bar.close()
    assert term.getvalue().endswith("\x1b[2K")  # the bar is cleared when the run ends
    log = StringIO()
    plain = RateProgress(log, "skel mine --history repo", "commits", every_s=10, clock=lambda: now[0])
    plain(0, 20)
    now[0] += 1
    plain(1, 20)
    assert log.getvalue() == "", "no line before every_s has passed"
    now[0] += 10
    plain(5, 20)
    assert log.getvalue().count("\n") == 1 and "5/20 commits" in log.getvalue()


def test_a_stopped_run_is_not_resumed_under_other_paths(repo, tmp_path):
    _killed_then_resumed_equals_uninterrupted(repo, tmp_path, 2, "--under", "ops")


def test_force_over_a_walk_with_no_commit_forgets_the_old_edits(repo, tmp_path):
    db = tmp_path / "c.sqlite"
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress"]) == 0
    assert main(["mine", "--history", str(repo), "--catalog", str(db), "--no-progress", "--force",
                 "--under", "no/such/folder"]) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM history_edits").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 0
