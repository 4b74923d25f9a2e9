"""`skel` command line.

One module per verb group under ``skel/commands/``; each exposes
``register(subparsers)`` which adds its parser and sets ``func`` to a handler
``handler(args) -> int``. Exit codes: 0 ok, 1 findings or rejection,
2 usage or input error (``UsageError``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from skel.errors import EXIT_USAGE, UsageError
from skel.procs import die_with_parent_from_env

# Verb modules, in the order `skel --help` lists them.
COMMANDS = (
    "skel.commands.mine",
    "skel.commands.match",
    "skel.commands.catalog",
    "skel.commands.validate",
    "skel.commands.apply",
    "skel.commands.harness",
    "skel.commands.capture",
    "skel.commands.mcp",
    "skel.commands.new",
    "skel.commands.results",
)

DESCRIPTION = """\
skel mines optimization skeletons (named, reusable transformations with
machine-checked conditions) from hand-written Triton and CUDA kernels, and
applies them to new kernels, keeping a rewrite only when numerics and a
microbenchmark both confirm it.

Every verb accepts --json. Exit codes: 0 ok, 1 findings or rejection,
2 usage or input error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 already; keep its message short and clear
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="skel",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"skel {_version()}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skel")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    die_with_parent_from_env()  # started by another skel process (the MCP server): go when it goes
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):  # no verb: a usage error, with the help that explains the verbs
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        _project_defaults(args)
        return int(args.func(args) or 0)
    except UsageError as exc:
        return _usage_error(args, str(exc))
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file or folder the verb had to read or write: name it, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        return _usage_error(args, f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print("skel: interrupted", file=sys.stderr)
        return 130


def _project_defaults(args) -> None:
    """Fill what the command line left unset from ``[tool.skel]`` (``skel.catalog.config``): the catalog
    (after ``--catalog`` and ``$SKEL_CATALOG``), the shape set and the dtype."""
    import os

    from skel.catalog.config import load_config

    config = load_config()
    if hasattr(args, "catalog") and args.catalog is None and config.catalog is not None \
            and not os.environ.get("SKEL_CATALOG", "").strip():
        args.catalog = config.catalog
    for name in ("shapes", "dtype"):
        if hasattr(args, name) and getattr(args, name) is None and getattr(config, name):
            setattr(args, name, getattr(config, name))


def _usage_error(args, message: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"error": message}))
    print(f"skel: error: {message}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
