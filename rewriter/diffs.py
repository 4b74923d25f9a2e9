"""Unified diffs that ``git apply`` (and ``patch -p1``) take from the repository root.

Paths are relative to the root of the git checkout holding the file (found by walking up to a
``.git`` entry; git itself is not run), else to the working directory, with ``a/`` and ``b/``
prefixes; a last line without a newline gets git's ``\\ No newline at end of file`` marker, so the
patch applies to the file byte for byte.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

NO_NEWLINE = "\\ No newline at end of file\n"


def repo_relative(path: str | Path) -> str:
    """``path`` relative to its git checkout's root (POSIX separators); else relative to the working
    directory when under it; else its file name."""
    full = Path(path).resolve()
    for folder in full.parents:
        if (folder / ".git").exists():
            return full.relative_to(folder).as_posix()
    try:
        rel = Path(os.path.relpath(full))
    except ValueError:
        return full.name
    return full.name if rel.parts and rel.parts[0] == ".." else rel.as_posix()


def unified_diff(before: str, after: str, path: str | Path) -> str:
    name = repo_relative(path)
    out = []
    for line in difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}"):
        out.append(line)
        if not line.endswith("\n"):
            out[-1] = line + "\n" + NO_NEWLINE
    return "".join(out)
