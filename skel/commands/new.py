"""`skel new SKnnn-name [--dir DIR]`: scaffold a skeleton rule folder to fill in."""
from __future__ import annotations

from pathlib import Path

from skel.commands.common import add_catalog, add_json, emit_json
from skel.errors import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("new", help="scaffold a skeleton rule folder (skeleton.toml, rule.py, docs.md, examples/)",
                       description="Write DIR/SKnnn-name/ with a rule to fill in. It passes `skel catalog check "
                                   "--library DIR` as written; its golden check (`--golden`) fails until rule.py "
                                   "turns examples/before.py into examples/after.py.")
    p.add_argument("spec", metavar="SKnnn-name", help="code and name, e.g. SK901-halve-by-multiply")
    p.add_argument("--dir", type=Path, default=Path("."), help="the folder of rules to write into (default: .)")
    add_catalog(p, used=False)
    add_json(p)
    p.set_defaults(func=cmd_new)


def cmd_new(args) -> int:
    from skel.skeletons.scaffold import scaffold

    folder = scaffold(args.spec, args.dir)
    if args.json:
        emit_json({"folder": str(folder), "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                                                          if p.is_file())})
        return EXIT_OK
    print(f"wrote {folder}/ (skeleton.toml, rule.py, docs.md, examples/before.py, examples/after.py)")
    print(f"next: edit rule.py, then `skel catalog check --golden --library {args.dir}`")
    return EXIT_OK
