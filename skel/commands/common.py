"""Small helpers shared by the verb modules: common flags, JSON and text output."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from skel.errors import UsageError


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def add_catalog(parser: argparse.ArgumentParser, used: bool = True) -> None:
    """``--catalog PATH`` (every verb takes it, so one alias or script can pass it everywhere; ``used=False``
    says in the help that this verb reads and writes no catalog)."""
    parser.add_argument(
        "--catalog",
        type=Path,
        metavar="PATH",
        help="catalog database (default: $SKEL_CATALOG, else [tool.skel] catalog, else ~/.cache/skel/catalog.sqlite)"
        + ("" if used else "; accepted by every verb, this one reads and writes no catalog"),
    )


def add_library(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--library",
        type=Path,
        metavar="DIR",
        action="append",
        default=[],
        help="add a folder of skeleton rules (SKnnn-name/ folders) to the shipped library; repeatable. "
             "[tool.skel] skeleton_dirs in your pyproject.toml adds folders too",
    )


def library_dirs(args) -> tuple[Path, ...]:
    """The user's rule folders: every ``--library DIR``, then ``[tool.skel] skeleton_dirs``."""
    from skel.catalog.config import skeleton_dirs

    return (*getattr(args, "library", []), *skeleton_dirs())


def load_user_library(args):
    """The shipped library plus the user's folders. A broken user folder is reported on stderr
    (file:line: field: problem) and skipped, so one bad rule does not stop the run; a problem in
    the shipped library is a UsageError."""
    from skel.skeletons.library import Library, check_library, default_root, load_library

    extra = library_dirs(args)
    if not extra:
        from skel.skeletons.library import LibraryError

        try:
            return load_library()
        except LibraryError as exc:
            raise UsageError(f"the shipped skeleton library has problems (run `skel catalog check`):\n{exc}") from None
    root = default_root()
    skeletons, problems = check_library(root, *extra)
    shipped = [p for p in problems if root.resolve() in Path(p.path).resolve().parents]
    if shipped:
        raise UsageError("the shipped skeleton library has problems (run `skel catalog check`):\n"
                         + "\n".join(map(str, shipped)))
    for p in problems:
        warn(f"skipped: {p}")
    bad = {Path(p.path).resolve() for p in problems}
    good = [s for s in skeletons if not any(s.folder.resolve() in (b, *b.parents) for b in bad)]
    return Library(root, tuple(good), tuple(extra))


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def emit_json(data: Any) -> None:
    # Written in large pieces: json.dump writes each token on its own, and a report of 100k findings
    # is then millions of writes (3 s of a 7 s warm re-mine of 5,000 files); one string of it all
    # would hold the whole text, and its pieces, in memory at once.
    pieces: list[str] = []
    for piece in json.JSONEncoder(indent=2, default=json_default).iterencode(data):
        pieces.append(piece)
        if len(pieces) >= 16384:
            sys.stdout.write("".join(pieces))
            pieces.clear()
    sys.stdout.write("".join(pieces) + "\n")


def json_default(obj: Any):
    """What JSON output makes of skel's records (to_json), paths and tuples."""
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot render {type(obj).__name__} as JSON")


def warn(message: str) -> None:
    print(f"skel: {message}", file=sys.stderr)


def dims_arg(text: str) -> dict[str, int]:
    """``N=64,H=32`` -> {"N": 64, "H": 32} (an argparse type)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: expected NAME=INT, e.g. N=64,H=32") from None
        if not eq or out[name.strip()] < 1:
            raise argparse.ArgumentTypeError(f"{part!r}: expected NAME=INT with INT >= 1")
    return out
