"""Positions in one CUDA source for the frontend's recovery of kernels a whole-file parse lost.

``Covered``: the byte ranges of the kernels found so far, asked by bisection. ``byte_offsets``:
UTF-8 byte offsets of ascending character offsets, encoding each stretch once. ``Positions``:
byte offsets and (row, byte column) points of character offsets, to parse one stretch of the
file in place with tree-sitter's included ranges (positions and lines stay the file's).
"""
from __future__ import annotations

import bisect
import re


class Covered:
    """Byte ranges of the kernels found so far; ``holds(b)``: does one contain offset b (bisection)."""

    def __init__(self, ranges):
        rows = sorted(ranges)
        self.starts = [a for a, _ in rows]
        self.reach: list[int] = []  # the furthest end among the ranges starting at or before each start
        for _, b in rows:
            self.reach.append(max(b, self.reach[-1]) if self.reach else b)
        self.extra: list[tuple[int, int]] = []  # recovered kernels (few): checked one by one

    def holds(self, b: int) -> bool:
        i = bisect.bisect_right(self.starts, b) - 1
        return (i >= 0 and b < self.reach[i]) or any(s <= b < e for s, e in self.extra)

    def add(self, a: int, b: int) -> None:
        self.extra.append((a, b))


def byte_offsets(text: str, offsets: list[int]) -> list[int]:
    """UTF-8 byte offsets of ascending character ``offsets`` (encoding each stretch once)."""
    if text.isascii():
        return list(offsets)
    out, pos, bpos = [], 0, 0
    for off in offsets:
        bpos += len(text[pos:off].encode("utf-8"))
        pos = off
        out.append(bpos)
    return out


class Positions:
    """Byte offsets and (row, byte column) points of character offsets of one text, for parsing
    a stretch of it in place (``parse``)."""

    def __init__(self, text: str, data: bytes, parser):
        self.text, self.data, self.parser = text, data, parser
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]  # line starts (characters)
        self.ascii = text.isascii()
        self._bytes: list[int] | None = None

    def point(self, off: int) -> tuple[int, tuple[int, int]]:
        row = bisect.bisect_right(self.starts, off) - 1
        if self.ascii:
            return off, (row, off - self.starts[row])
        if self._bytes is None:  # byte offset of every line start, once
            acc, out = 0, []
            for a, b in zip(self.starts, self.starts[1:] + [len(self.text)]):
                out.append(acc)
                acc += len(self.text[a:b].encode("utf-8"))
            self._bytes = out
        col = len(self.text[self.starts[row]:off].encode("utf-8"))
        return self._bytes[row] + col, (row, col)

    def parse(self, start: int, stop: int):
        """The root node of a parse of characters [start, stop) alone, positioned in the file."""
        import tree_sitter

        (b0, p0), (b1, p1) = self.point(start), self.point(stop)
        parser = self.parser
        parser.included_ranges = [tree_sitter.Range(p0, p1, b0, b1)]
        try:
            return parser.parse(self.data).root_node
        finally:
            parser.included_ranges = [tree_sitter.Range((0, 0), (0xFFFFFFFF, 0xFFFFFFFF), 0, 0xFFFFFFFF)]
