"""Which files ``skel mine PATH...`` looks at.

Directories are walked recursively (git checkouts are plain directories here);
hidden entries (``.git``, ``.venv``), ``__pycache__``, ``node_modules`` and virtual
environments (a folder holding ``pyvenv.cfg``) are skipped below a root. Symbolic
links are followed, but a directory already on the current path (a loop) is
reported and not entered, and a file reached twice is mined once. Problems are
returned as ``WalkError`` rows; the walk never raises for a bad path.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from skel.catalog.records import language_of

SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages-cache"})


@dataclass(frozen=True)
class Candidate:
    path: str  # absolute, as reached (symlinks not resolved, so paths stay recognisable)
    repo: str  # the enclosing git checkout, else the PATH argument it was found under
    explicit: bool  # named on the command line (not found by walking)
    language: str  # triton | cuda


@dataclass(frozen=True)
class WalkError:
    path: str
    error: str


def collect(paths: list[str]) -> tuple[list[Candidate], list[WalkError]]:
    """Candidate source files under ``paths`` (files or directories), in a stable order."""
    out: list[Candidate] = []
    errors: list[WalkError] = []
    seen_files: set[tuple[int, int]] = set()
    for raw in paths:
        path = os.path.abspath(os.path.expanduser(raw))
        try:
            st = os.stat(path)
        except OSError as exc:
            errors.append(WalkError(path, _os_reason(path, exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            repo = _repo_of(path)
            _walk_dir(path, repo, out, errors, seen_files, ancestors={(st.st_dev, st.st_ino): path})
        elif stat.S_ISREG(st.st_mode):
            lang = language_of(path)
            if lang is None:
                errors.append(WalkError(path, "not a kernel source: expected .py or a CUDA/C++ file "
                                              "(.cu .cuh .cuhpp .h .hpp .cc .cpp ...)"))
                continue
            if (st.st_dev, st.st_ino) not in seen_files:
                seen_files.add((st.st_dev, st.st_ino))
                out.append(Candidate(path, _repo_of(os.path.dirname(path)), True, lang))
        else:
            errors.append(WalkError(path, "not a regular file or directory (device, FIFO or socket)"))
    return out, errors


def _walk_dir(root: str, repo: str, out, errors, seen_files, ancestors: dict) -> None:
    try:
        with os.scandir(root) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        errors.append(WalkError(root, _os_reason(root, exc, is_dir=True)))
        return
    for e in entries:
        if e.name.startswith(".") or e.name in SKIP_DIRS:
            continue
        try:
            st = os.stat(e.path)  # follows symlinks
        except OSError as exc:
            if e.is_symlink() and language_of(e.name) is None and not _looks_like_dir_link(e.path):
                continue  # a dangling link to something we would not mine anyway
            errors.append(WalkError(e.path, _os_reason(e.path, exc)))
            continue
        if stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                errors.append(WalkError(e.path, f"symlink loop: leads back to {ancestors[key]}; not entered"))
                continue
            if os.path.exists(os.path.join(e.path, "pyvenv.cfg")):
                continue  # a virtual environment's installed packages are not the project's kernels
            _walk_dir(e.path, repo, out, errors, seen_files, {**ancestors, key: e.path})
        elif stat.S_ISREG(st.st_mode):
            lang = language_of(e.name)
            if lang is None:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen_files:
                continue
            seen_files.add(key)
            out.append(Candidate(e.path, repo, False, lang))


def _looks_like_dir_link(path: str) -> bool:
    try:
        target = os.readlink(path)
    except OSError:
        return False
    return language_of(target) is None and not os.path.splitext(target)[1]


def _repo_of(path: str) -> str:
    """The nearest enclosing folder with a ``.git`` entry, else ``path`` itself."""
    p = Path(path)
    for d in (p, *p.parents):
        if os.path.exists(d / ".git"):  # never raises: a folder we may not read is simply not a checkout
            return str(d)
    return str(p)


def _os_reason(path: str, exc: OSError, is_dir: bool = False) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM) and is_dir:
        return "permission denied: cannot list the directory"
    if exc.errno == errno.ELOOP:
        return "symlink loop: the link resolves to itself"
    if exc.errno == errno.ENOENT:
        if os.path.islink(path):
            return f"broken symbolic link (points to {os.readlink(path)!r}, which does not exist)"
        return "no such file or directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return f"cannot access: {exc.strerror or exc}"
