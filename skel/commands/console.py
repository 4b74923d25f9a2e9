"""Terminal output: colour on a terminal (rich), plain text elsewhere, and ``--quiet/--verbose``.

Colour follows rich's rules: only when the stream is a terminal, never with ``NO_COLOR`` set,
always with ``FORCE_COLOR`` set. Piped or captured output is plain text, byte for byte what the
golden tests compare.
"""
from __future__ import annotations

import sys

STYLES = {"applies": "yellow", "ok": "green", "bold": "bold", "dim": "dim", "warn": "magenta", "error": "red",
          "accepted": "bold green", "rejected": "red"}


def add_verbosity(parser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="print only findings / results, one line each")
    g.add_argument("-v", "--verbose", action="store_true", help="print more: every file, and why")


def console(stream=None):
    """A rich Console on ``stream`` (default: stdout as it is now, so pytest's capture sees it)."""
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True, emoji=False, markup=False)


def print_lines(lines: list[tuple[str, str]], stream=None) -> None:
    """Each (text, style name) on its own line; styled only where the console has colour (plain text where
    rich is not installed, as on a machine that got skel without its dependencies)."""
    try:
        c = console(stream)
    except ImportError:
        for text, _ in lines:
            print(text, file=stream or sys.stdout)
        return
    for text, style in lines:
        c.print(text, style=STYLES.get(style) if c.is_terminal or c.color_system else None)
