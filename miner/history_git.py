"""Reading a git repository's history without a work tree: commits, changed files, blobs.

Everything goes through the ``git`` executable (``--no-ext-diff``, no textconv, no
pager, no hooks), so mined repositories are read as data and nothing in them runs.
Works on bare repositories (``/path/repo.git``) and on checkouts.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_ZERO = "0" * 40
_RS, _US = "\x1e", "\x1f"  # record / field separators in our --format


class GitError(RuntimeError):
    """git failed or the path is not a repository; the message names the repository and the command."""


@dataclass(frozen=True)
class FileChange:
    """One file changed by a commit: blob ids before (None when added) and after (None when deleted)."""

    old_path: str
    new_path: str
    old_blob: str | None
    new_blob: str | None


@dataclass(frozen=True)
class Commit:
    sha: str
    parent: str | None
    date: str  # author date, ISO 8601
    message: str
    changes: tuple[FileChange, ...]


def _git(repo: Path, *args: str, input_: bytes | None = None) -> bytes:
    cmd = ["git", "-C", str(repo), "-c", "core.quotepath=off", "--no-pager", *args]
    try:
        done = subprocess.run(cmd, input=input_, capture_output=True, check=False)
    except FileNotFoundError:
        raise GitError("git is not installed (needed to mine history)") from None
    if done.returncode != 0:
        raise GitError(f"{repo}: `git {' '.join(args[:3])} ...` failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def is_git_repo(path: Path) -> bool:
    """True for a checkout's top level (or any folder inside one) and for a bare repository."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    return out.returncode == 0


def head(repo: Path, rev: str = "HEAD") -> str:
    return _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    cmd = ["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def commits(repo: Path, rev: str, since: str | None = None, paths: tuple[str, ...] = (),
            max_count: int | None = None) -> list[Commit]:
    """Non-merge commits reachable from ``rev`` (not from ``since``), oldest first, with their file changes.

    Merges are skipped: their content arrives through the commits they merge. Renames are
    followed (``-M``) so a moved kernel file is diffed against its old self.
    """
    rng = f"{since}..{rev}" if since else rev
    args = ["log", "--no-ext-diff", "--no-textconv", "--no-merges", "-M", "--raw", "--no-abbrev",
            f"--format={_RS}%H{_US}%P{_US}%aI{_US}%B{_US}"]
    if max_count:
        args.append(f"--max-count={int(max_count)}")
    args += [rng, "--", *paths]
    text = _git(repo, *args).decode("utf-8", errors="replace")
    out = []
    for record in text.split(_RS)[1:]:
        sha, parents, date, message, raw = record.split(_US, 4)
        out.append(Commit(sha, parents.split()[0] if parents.strip() else None, date,
                          message.strip(), tuple(_raw_changes(raw))))
    out.reverse()
    return out


def _raw_changes(raw: str):
    # ":100644 100644 <old> <new> M\tpath"  or  ":... R087\told\tnew"
    for line in raw.splitlines():
        if not line.startswith(":"):
            continue
        meta, _, names = line.partition("\t")
        fields = meta.split()
        if len(fields) < 5:
            continue
        old, new, status = fields[2], fields[3], fields[4]
        parts = names.split("\t")
        old_path = parts[0]
        new_path = parts[1] if len(parts) > 1 else parts[0]
        yield FileChange(old_path, new_path, None if old == _ZERO else old, None if new == _ZERO or status == "D" else new)


class BlobReader:
    """A long-lived ``git cat-file --batch``: one process for every blob of a run."""

    def __init__(self, repo: Path):
        self.repo = repo
        self._proc = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )

    def read(self, blob: str) -> bytes | None:
        """The blob's bytes, or None when the object is missing (shallow or partial clone)."""
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(blob.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().split()
        if len(header) < 3 or header[1] != b"blob":
            return None
        size = int(header[2])
        data = self._proc.stdout.read(size)
        self._proc.stdout.read(1)  # the newline after the content
        return data

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)

    def __enter__(self) -> "BlobReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
