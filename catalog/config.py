"""A project's skel settings: ``[tool.skel]`` in its pyproject.toml.

    [tool.skel]
    skeleton_dirs = ["kernels/skel-rules"]   # rule folders joining the shipped library (like --library)
    catalog = ".skel/catalog.sqlite"         # the project's own catalog (like --catalog)
    select = ["SK00"]                        # evaluate only these codes / prefixes (like --select)
    ignore = ["SK006", "SKP*"]               # never report these (like --ignore)
    exclude = ["tests/fixtures"]             # folders/files `skel match` and `skel mine` do not walk into
    shapes = "decode"                        # default shape set for apply / validate (like --shapes)
    dtype = "bfloat16"                       # default input dtype for validate (like --dtype)

Paths are relative to the pyproject.toml. The nearest ``pyproject.toml`` at or above the working
directory is read. A flag on the command line wins over the file; for the catalog the order is
``--catalog``, then ``$SKEL_CATALOG``, then ``[tool.skel] catalog``, then the default. An unknown
key or a value of the wrong type is an error naming the file and the key (a typo must not be ignored).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from skel.errors import UsageError

KEYS = ("skeleton_dirs", "catalog", "select", "ignore", "exclude", "shapes", "dtype")


@dataclass(frozen=True)
class ProjectConfig:
    path: Path | None = None  # the pyproject.toml read (None: none found, or no [tool.skel] in it)
    skeleton_dirs: tuple[Path, ...] = ()
    catalog: Path | None = None
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[Path, ...] = ()
    shapes: str | None = None
    dtype: str | None = None

    def excluded(self, path: str | Path) -> bool:
        p = Path(path).resolve()
        return any(p == e or e in p.parents for e in self.exclude)

    def to_json(self) -> dict:
        return {"path": str(self.path) if self.path else None,
                "skeleton_dirs": [str(d) for d in self.skeleton_dirs],
                "catalog": str(self.catalog) if self.catalog else None, "select": list(self.select),
                "ignore": list(self.ignore), "exclude": [str(e) for e in self.exclude],
                "shapes": self.shapes, "dtype": self.dtype}


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path | None = None) -> ProjectConfig:
    """The ``[tool.skel]`` table of the nearest pyproject.toml (an empty config when there is none)."""
    path = find_pyproject(start)
    if path is None:
        return ProjectConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read [tool.skel]: {exc}") from None
    table = data.get("tool", {}).get("skel")
    if table is None:
        return ProjectConfig()
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.skel] must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise UsageError(f"{path}: [tool.skel]: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    base = path.parent

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UsageError(f"{path}: [tool.skel] {key} must be a list of strings, got {value!r}")
        return tuple(value)

    def text(key: str) -> str | None:
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise UsageError(f"{path}: [tool.skel] {key} must be a string, got {value!r}")
        return value

    dirs = []
    for d in strings("skeleton_dirs"):
        folder = (base / d).resolve()
        if not folder.is_dir():
            raise UsageError(f"{path}: [tool.skel] skeleton_dirs: {d!r} is not a folder ({folder})")
        dirs.append(folder)
    catalog = text("catalog")
    return ProjectConfig(
        path=path, skeleton_dirs=tuple(dirs), catalog=(base / catalog).resolve() if catalog else None,
        select=strings("select"), ignore=strings("ignore"),
        exclude=tuple((base / e).resolve() for e in strings("exclude")),
        shapes=text("shapes"), dtype=text("dtype"))


def skeleton_dirs(start: Path | None = None) -> tuple[Path, ...]:
    """The folders ``[tool.skel] skeleton_dirs`` names (resolved against the pyproject's folder)."""
    return load_config(start).skeleton_dirs
