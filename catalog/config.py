"""Where a user's own skeleton rules live: ``[tool.skel] skeleton_dirs`` in their pyproject.toml.

    [tool.skel]
    skeleton_dirs = ["kernels/skel-rules"]   # relative to the pyproject.toml

The nearest ``pyproject.toml`` at or above the working directory is read; its folders join
the shipped library (and any ``--library DIR``), each folder holding ``SKnnn-name/`` rules.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from skel.errors import UsageError


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def skeleton_dirs(start: Path | None = None) -> tuple[Path, ...]:
    """The folders ``[tool.skel] skeleton_dirs`` names (resolved against the pyproject's folder)."""
    path = find_pyproject(start)
    if path is None:
        return ()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read [tool.skel]: {exc}") from None
    dirs = data.get("tool", {}).get("skel", {}).get("skeleton_dirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
        raise UsageError(f"{path}: [tool.skel] skeleton_dirs must be a list of folder paths, got {dirs!r}")
    out = []
    for d in dirs:
        folder = (path.parent / d).resolve()
        if not folder.is_dir():
            raise UsageError(f"{path}: [tool.skel] skeleton_dirs: {d!r} is not a folder ({folder})")
        out.append(folder)
    return tuple(out)
