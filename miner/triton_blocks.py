"""A Python module parsed in blocks of whole top-level statements.

A syntax tree costs about 200 bytes of memory per byte of source: one tree of a file with
20,000 kernels (8 MB) is 1.7 GB. The frontend reads such a file block by block instead: each
block (about ``BLOCK_CHARS`` of source) is parsed on its own, with as many newlines in front
as lines precede it, so every node carries the line numbers of the whole file. The trees of the
first ``KEEP_CHARS`` of source are kept for the passes that need them again; later blocks are
parsed again when asked for, so memory stays bounded whatever the size of the file.

Where a block starts is decided from the text: a line that starts in column 0 with a name or
``@`` (not ``else``/``elif``/``except``/``finally``, not after a decorator). Such a line is a
top-level statement unless it lies inside a string or brackets, and then the block before it
does not parse on its own. So every block is checked by parsing it: one that fails is joined
with the next; if joining does not help, the file is parsed whole, which either raises the
file's own syntax error or gives the one tree of the whole file, read as a single block. A file with a lone carriage return
(a line break the tokenizer counts and ``\\n`` does not) is read as a single block.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator

BLOCK_CHARS = 256_000
KEEP_CHARS = 2_000_000
MAX_JOINS = 8  # a block that still does not parse after this many joins: parse the file whole

_STATEMENT_START = re.compile(r"^[A-Za-z_@]", re.M)
_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b")
_DEFINES = re.compile(r"(?:async\s+)?(?:def|class)\b")
_LONE_CR = re.compile(r"\r(?!\n)")


@dataclass(frozen=True)
class Span:
    first_line: int  # 1-based
    start: int  # character offsets into the text
    end: int


def split(text: str, block_chars: int) -> list[Span]:
    """Candidate blocks of at least ``block_chars`` characters (the last one shorter), in order."""
    if _LONE_CR.search(text):
        return [Span(1, 0, len(text))]
    spans: list[Span] = []
    start, first_line = 0, 1
    line, pos = 1, 0
    after_decorator = False
    for m in _STATEMENT_START.finditer(text):
        at = m.start()
        line += text.count("\n", pos, at)
        pos = at
        head = text[at:at + 16]
        if after_decorator:  # the decorated def/class (or the next decorator) belongs to it
            after_decorator = head.startswith("@")
            continue
        if head.startswith("@"):
            after_decorator = True
        elif _CONTINUES.match(head):
            continue
        if at - start >= block_chars:
            spans.append(Span(first_line, start, at))
            start, first_line = at, line
    spans.append(Span(first_line, start, len(text)))
    return spans


class Resplit(Exception):
    """The blocks changed (the module is now read whole): run the pass over them again."""


class ModuleBlocks:
    """The blocks of one module and their trees (``tree(i)``); iterate ``parse_all()`` first."""

    def __init__(self, text: str, path: str, block_chars: int | None = None, keep_chars: int | None = None):
        self.text, self.path = text, path
        self.spans = split(text, BLOCK_CHARS if block_chars is None else block_chars)
        self.keep_chars = KEEP_CHARS if keep_chars is None else keep_chars
        self._kept: dict[int, ast.Module] = {}
        self._kept_chars = 0

    def __len__(self) -> int:
        return len(self.spans)

    def parse_all(self) -> Iterator[tuple[int, ast.Module]]:
        """Every block's tree, in order, each checked (see the module's docstring).

        A block that does not parse is joined with the next (a boundary inside a string or
        brackets) up to ``MAX_JOINS`` times; then the whole file is parsed, which raises its
        syntax error, or, if it parses, makes the module one block and raises ``Resplit``: the
        caller starts its pass again.
        """
        i = 0
        while i < len(self.spans):
            tree = self._parse_joining(i)
            self._keep(i, tree)
            yield i, tree
            i += 1

    def _parse_joining(self, i: int) -> ast.Module:
        for _ in range(MAX_JOINS + 1):
            try:
                return self._parse(i)
            except SyntaxError:
                if i + 1 >= len(self.spans):
                    break
                a, b = self.spans[i], self.spans[i + 1]
                self.spans[i:i + 2] = [Span(a.first_line, a.start, b.end)]
        if len(self.spans) == 1:
            return ast.parse(self.text, filename=self.path)  # raises the file's own error
        whole = ast.parse(self.text, filename=self.path)  # raises the file's own error, if it has one
        self.spans = [Span(1, 0, len(self.text))]
        self._kept, self._kept_chars = {0: whole}, len(self.text)
        raise Resplit(f"{self.path}: a block boundary fell inside a statement; read whole")

    def tree(self, i: int) -> ast.Module:
        """Block ``i``'s tree: the kept one, or parsed again."""
        kept = self._kept.get(i)
        return kept if kept is not None else self._parse(i)

    def line_range(self, i: int) -> tuple[int, int]:
        """(first line, last line) of block ``i``."""
        sp = self.spans[i]
        return sp.first_line, sp.first_line + self.text.count("\n", sp.start, sp.end)

    def _parse(self, i: int) -> ast.Module:
        sp = self.spans[i]
        if len(self.spans) == 1:
            return ast.parse(self.text, filename=self.path)
        # newlines first: the block's nodes get the line numbers they have in the whole file
        return ast.parse("\n" * (sp.first_line - 1) + self.text[sp.start:sp.end], filename=self.path)

    def _keep(self, i: int, tree: ast.Module) -> None:
        size = self.spans[i].end - self.spans[i].start
        if self._kept_chars + size <= self.keep_chars or len(self.spans) == 1:
            self._kept[i] = tree
            self._kept_chars += size
