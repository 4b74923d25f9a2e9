"""The user's files around a judgement: hashed before and after, restored from a backup if touched.

The gate watches the target kernel, its spec, the candidate and every regular file directly in
their folders and in the working directory (not below them). Before the workers start it keeps
each file's hash and, up to a size, its bytes; afterwards a file that changed or vanished is put
back from those bytes, a file that appeared is moved into a quarantine folder (nothing is deleted),
and the candidate is rejected with what happened. Landlock normally makes
such writes impossible; this is the second line, and the only one where Landlock is missing.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

MAX_BACKUP = 8 << 20  # bytes kept per file
MAX_TOTAL = 256 << 20  # bytes kept in all
MAX_FILES = 2000  # files watched per folder


@dataclass(frozen=True)
class FileChange:
    path: str
    what: str  # "modified", "deleted", "created"
    restored: bool
    moved_to: str = ""  # where a created file went

    def describe(self) -> str:
        if self.what == "created":
            return f"created {self.path} ({'moved to ' + self.moved_to if self.moved_to else 'left in place'})"
        return f"{self.what} {self.path} ({'restored from the backup' if self.restored else 'no backup: over 8 MB'})"


@dataclass(frozen=True)
class _Seen:
    digest: str
    mode: int
    content: bytes | None


class FileGuard:
    def __init__(self, files: list[Path], folders: list[Path]):
        self.paths: list[Path] = []
        self.named = {f.resolve() for f in files}
        self.folders = sorted({f.resolve() for f in folders if f.is_dir()})
        seen: set[Path] = set()
        for path in [*files, *(p for d in self.folders for p in _listing(d))]:
            path = path.resolve()
            if path not in seen and path.is_file():
                seen.add(path)
                self.paths.append(path)
        self.before: dict[Path, _Seen] = {}
        budget = MAX_TOTAL
        for path in self.paths:
            try:
                data = path.read_bytes() if path.stat().st_size <= min(MAX_BACKUP, budget) else None
                digest = hashlib.sha256(data).hexdigest() if data is not None else _hash(path)
                mode = path.stat().st_mode
            except OSError:
                continue
            if data is not None:
                budget -= len(data)
            self.before[path] = _Seen(digest, mode, data)

    def check_and_restore(self, folders: bool = True) -> list[FileChange]:
        """The watched files that changed (restored where a backup exists) and, with ``folders``, the
        files that appeared in the watched folders (quarantined). Without ``folders`` only the named
        files count: with every worker's writes confined to its scratch folder, the rest of a folder
        changing is another process's doing, and its files are none of the gate's business."""
        changes: list[FileChange] = []
        for path, seen in self.before.items():
            if not folders and path not in self.named:
                continue
            try:
                now = _hash(path) if path.is_file() else None
            except OSError:
                now = None
            if now == seen.digest:
                continue
            what = "deleted" if now is None else "modified"
            restored = False
            if seen.content is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f".{path.name}.skel-restore")
                    tmp.write_bytes(seen.content)
                    os.chmod(tmp, seen.mode & 0o7777)
                    os.replace(tmp, path)
                    restored = True
                except OSError:
                    pass
            changes.append(FileChange(str(path), what, restored))
        for folder in self.folders if folders else ():
            for path in _listing(folder):
                path = path.resolve()
                if path.is_file() and path not in self.before and not path.name.endswith(".skel-restore"):
                    changes.append(FileChange(str(path), "created", False, _quarantine(path)))
        return changes


def _quarantine(path: Path) -> str:
    """Move a file the judgement left in a watched folder out of the user's way; returns where, or ""."""
    import shutil
    import tempfile

    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skel" / "quarantine"
    try:
        home.mkdir(parents=True, exist_ok=True)
        dest = Path(tempfile.mkdtemp(dir=home)) / path.name
        shutil.move(str(path), dest)
        return str(dest)
    except OSError:
        return ""


def _listing(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            return [Path(e.path) for _, e in zip(range(MAX_FILES), it) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
