"""Reading table rows straight from an SQLite file's pages, for what SQLite itself cannot reach.

A damaged interior page hides every leaf below it from SQLite's cursors, and a damaged schema
page hides whole tables; the leaves themselves are often intact. ``PageFile`` reads the file
(``https://sqlite.org/fileformat2.html``), with the committed frames of its -wal laid over it
(checksums and salts checked, as SQLite does), skips the freelist (deleted content lives
there), and decodes table-leaf cells, overflow chains included, into rows. A leaf belongs to
the table whose root its chain of parents reaches (roots from the schema table, itself read
page by page); a leaf whose parent is the damaged page is matched to a table by its rows'
shape: the number of columns and each value's type against the table's declared types,
kept only when exactly one table fits. Nothing here writes.
"""
from __future__ import annotations

import sqlite3
import struct
from dataclasses import dataclass
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MAGIC = (0x377F0682, 0x377F0683)
TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF = 5, 13, 2, 10


class BadPage(Exception):
    """A page, cell or record that does not parse (garbage, or cut by a damaged page)."""


@dataclass(frozen=True)
class Column:
    name: str
    affinity: str  # INTEGER, TEXT, REAL
    notnull: bool
    rowid_alias: bool  # INTEGER PRIMARY KEY: stored as NULL in the record, the cell's rowid is its value


@dataclass(frozen=True)
class TableShape:
    name: str
    columns: tuple[Column, ...]

    def fits(self, values: list) -> bool:
        if len(values) != len(self.columns):
            return False
        for c, v in zip(self.columns, values):
            if v is None:
                if c.notnull and not c.rowid_alias:
                    return False
            elif c.rowid_alias:
                return False
            elif c.affinity == "TEXT" and not isinstance(v, str):
                return False
            elif c.affinity == "INTEGER" and not isinstance(v, int):
                return False
            elif c.affinity == "REAL" and not isinstance(v, (int, float)):
                return False
        return True

    def row(self, rowid: int, values: list) -> dict:
        return {c.name: (rowid if c.rowid_alias else v) for c, v in zip(self.columns, values)}


def shapes(ddl: str) -> dict[str, TableShape]:
    """Each table of ``ddl`` (skel's schema of one version) as the shape its records have."""
    conn = sqlite3.connect(":memory:")
    try:
        for stmt in ddl.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        out = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid"):
            info = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            pks = [r for r in info if r[5]]
            cols = tuple(Column(r[1], _affinity(r[2]), bool(r[3]),
                                len(pks) == 1 and r[5] == 1 and r[2].upper() == "INTEGER") for r in info)
            out[name] = TableShape(name, cols)
        return out
    finally:
        conn.close()


def _affinity(declared: str) -> str:
    d = declared.upper()
    return "INTEGER" if "INT" in d else "TEXT" if "TEXT" in d or "CHAR" in d else "REAL" if "REAL" in d else "ANY"


class PageFile:
    """The pages of an SQLite file as SQLite would see them (main file + committed WAL frames)."""

    def __init__(self, path: Path):
        data = Path(path).read_bytes()
        if data[:16] != SQLITE_MAGIC or len(data) < 512:
            raise BadPage(f"{path}: not an SQLite file")
        size = int.from_bytes(data[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise BadPage(f"{path}: the header's page size {size} is not a power of two")
        self.usable = self.page_size - data[20]
        self.encoding = {2: "utf-16-le", 3: "utf-16-be"}.get(int.from_bytes(data[56:60], "big"), "utf-8")
        self.user_version = int.from_bytes(data[60:64], "big", signed=True)
        self._main = data
        self._wal, wal_size = _wal_pages(Path(str(path) + "-wal"), self.page_size)
        counted = int.from_bytes(data[28:32], "big")
        on_disk = len(data) // self.page_size
        self.count = wal_size or (counted if 0 < counted <= on_disk else on_disk)
        self.free = self._freelist()

    def page(self, no: int) -> bytes:
        if not 1 <= no <= self.count:
            raise BadPage(f"page {no} is outside the file")
        if no in self._wal:
            return self._wal[no]
        data = self._main[(no - 1) * self.page_size:no * self.page_size]
        return data.ljust(self.page_size, b"\0")

    def _freelist(self) -> set[int]:
        free, trunk = set(), int.from_bytes(self.page(1)[32:36], "big")
        while trunk and trunk not in free and trunk <= self.count:
            free.add(trunk)
            data = self.page(trunk)
            n = int.from_bytes(data[4:8], "big")
            if n > (self.usable - 8) // 4:
                break
            free.update(int.from_bytes(data[8 + 4 * k:12 + 4 * k], "big") for k in range(n))
            trunk = int.from_bytes(data[0:4], "big")
        return free

    # ------------------------------------------------------------- b-tree pages
    def btree(self, no: int) -> tuple[int, list[int], int]:
        """(page type, cell offsets, right-most child or 0) of a b-tree page; BadPage when it is not one."""
        data, h = self.page(no), 100 if no == 1 else 0
        kind = data[h]
        if kind not in (TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF):
            raise BadPage(f"page {no}: not a b-tree page")
        interior = kind in (TABLE_INTERIOR, INDEX_INTERIOR)
        header = 12 if interior else 8
        n = int.from_bytes(data[h + 3:h + 5], "big")
        first = h + header + 2 * n
        if first > self.usable:
            raise BadPage(f"page {no}: {n} cells do not fit")
        cells = [int.from_bytes(data[h + header + 2 * k:h + header + 2 * k + 2], "big") for k in range(n)]
        if any(not first <= c < self.usable for c in cells):
            raise BadPage(f"page {no}: a cell lies outside the page")
        right = int.from_bytes(data[h + 8:h + 12], "big") if interior else 0
        return kind, cells, right

    def children(self, no: int) -> list[int]:
        """The child pages of a table-interior page."""
        kind, cells, right = self.btree(no)
        if kind != TABLE_INTERIOR:
            return []
        data = self.page(no)
        return [int.from_bytes(data[c:c + 4], "big") for c in cells] + [right]

    def leaf_rows(self, no: int) -> tuple[list[tuple[int, list]], int]:
        """(rowid, values) of every cell of a table-leaf page that decodes, and how many did not."""
        kind, cells, _ = self.btree(no)
        if kind != TABLE_LEAF:
            return [], 0
        data, out, bad = self.page(no), [], 0
        for c in cells:
            try:
                out.append(self._cell(data, c))
            except (BadPage, IndexError, UnicodeDecodeError, struct.error):
                bad += 1
        return out, bad

    def _cell(self, data: bytes, off: int) -> tuple[int, list]:
        size, i = _varint(data, off)
        rowid, i = _varint(data, i)
        rowid = rowid - (1 << 64) if rowid >= 1 << 63 else rowid
        u = self.usable
        local = size
        if size > u - 35:
            m = (u - 12) * 32 // 255 - 23
            k = m + (size - m) % (u - 4)
            local = k if k <= u - 35 else m
        body = bytearray(data[i:i + local])
        if len(body) != local or i + local > u:
            raise BadPage("a cell runs past its page")
        if local < size:
            nxt, seen = int.from_bytes(data[i + local:i + local + 4], "big"), set()
            while len(body) < size:
                if nxt in seen or nxt in self.free or not 1 < nxt <= self.count:
                    raise BadPage("an overflow chain is cut")
                seen.add(nxt)
                page = self.page(nxt)
                body += page[4:u][:size - len(body)]
                nxt = int.from_bytes(page[0:4], "big")
        return rowid, self._record(bytes(body))

    def _record(self, body: bytes) -> list:
        header, i = _varint(body, 0)
        if not 1 <= header <= len(body):
            raise BadPage("a record header runs past its record")
        types = []
        while i < header:
            t, i = _varint(body, i)
            types.append(t)
        if i != header:
            raise BadPage("a record header does not end where it says")
        pos, values = header, []
        for t in types:
            if t == 0 or t in (8, 9):
                values.append(None if t == 0 else t - 8)
                continue
            if t in (10, 11):
                raise BadPage("a reserved serial type")
            n = (0, 1, 2, 3, 4, 6, 8, 8)[t] if t < 8 else (t - 12) // 2
            raw = body[pos:pos + n]
            if len(raw) != n:
                raise BadPage("a value runs past its record")
            pos += n
            if t < 7:
                values.append(int.from_bytes(raw, "big", signed=True))
            elif t == 7:
                values.append(struct.unpack(">d", raw)[0])
            elif t % 2:
                values.append(raw.decode(self.encoding))
            else:
                values.append(bytes(raw))
        if pos != len(body):
            raise BadPage("a record is longer than its values")
        return values

    # ------------------------------------------------------------------ tables
    def schema_roots(self) -> dict[str, int]:
        """Table name -> root page, from the schema table (page 1's b-tree) as far as it reads."""
        roots = {}
        for leaf in self.leaves_under(1):
            for _, values in self.leaf_rows(leaf)[0]:
                if len(values) == 5 and values[0] == "table" and isinstance(values[3], int):
                    roots[str(values[1])] = values[3]
        return roots

    def leaves_under(self, root: int) -> list[int]:
        """The table-leaf pages reachable from ``root`` (pages that do not parse are skipped)."""
        out, todo, seen = [], [root], set()
        while todo:
            no = todo.pop()
            if no in seen or no in self.free:
                continue
            seen.add(no)
            try:
                kind, _, _ = self.btree(no)
                if kind == TABLE_LEAF:
                    out.append(no)
                elif kind == TABLE_INTERIOR:
                    todo.extend(self.children(no))
            except BadPage:
                continue
        return sorted(out)

    def lost_trees(self, reached: set[int]) -> list[list[int]]:
        """The leaves of each b-tree whose root nobody reaches any more: a damaged parent or schema page
        pointed at it. Each group is one table's (or one subtree's) leaves."""
        pointed, tops = set(), []
        for no in range(1, self.count + 1):
            if no in self.free or no in reached:
                continue
            try:
                kind, _, _ = self.btree(no)
            except BadPage:
                continue
            if kind in (TABLE_INTERIOR, TABLE_LEAF):
                tops.append(no)
                if kind == TABLE_INTERIOR:
                    pointed.update(self.children(no))
        return [self.leaves_under(no) for no in tops if no not in pointed and no != 1]


@dataclass(frozen=True)
class PageRows:
    """Rows of one table read page by page: (rowid, column -> value), and cells that did not decode."""

    table: str
    rows: tuple[tuple[int, dict], ...]
    undecodable: int


def table_rows(pf: PageFile, tables: dict[str, TableShape], wanted: set[str]) -> dict[str, PageRows]:
    """Every row of the ``wanted`` tables that reads page by page: from the leaves under each table's root,
    and from trees nobody reaches any more whose rows fit exactly one table's shape."""
    roots = pf.schema_roots()
    found: dict[str, list] = {t: [] for t in wanted}
    bad: dict[str, int] = {t: 0 for t in wanted}
    reached = set(pf.leaves_under(1)) | _interior_under(pf, 1)
    for name, root in roots.items():
        leaves = pf.leaves_under(root)
        reached.update(leaves)
        reached.update(_interior_under(pf, root))
        if name in wanted:
            for leaf in leaves:
                got, n = pf.leaf_rows(leaf)
                found[name] += got
                bad[name] += n
    for leaves in pf.lost_trees(reached):
        got = [row for leaf in leaves for row in pf.leaf_rows(leaf)[0]]
        fitting = [t for t in tables if got and all(tables[t].fits(v) for _, v in got)]
        if len(fitting) == 1 and fitting[0] in wanted:
            found[fitting[0]] += got
    out = {}
    for name in wanted:
        shape = tables[name]
        rows = {rowid: shape.row(rowid, v) for rowid, v in found[name] if shape.fits(v)}
        out[name] = PageRows(name, tuple(sorted(rows.items())), bad[name] + len(found[name]) - len(rows))
    return out


def _interior_under(pf: PageFile, root: int) -> set[int]:
    out, todo = set(), [root]
    while todo:
        no = todo.pop()
        if no in out:
            continue
        try:
            if pf.btree(no)[0] != TABLE_INTERIOR:
                continue
        except BadPage:
            continue
        out.add(no)
        todo.extend(pf.children(no))
    return out


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = 0
    for k in range(8):
        b = buf[i + k]
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, i + k + 1
    return (value << 8) | buf[i + 8], i + 9


def _wal_pages(wal: Path, page_size: int) -> tuple[dict[int, bytes], int]:
    """Page number -> its image as of the last committed transaction in ``wal``, and the database size (pages)
    then (0: no committed frame)."""
    try:
        data = wal.read_bytes()
    except OSError:
        return {}, 0
    if len(data) < 32:
        return {}, 0
    magic, _, size, _, salt1, salt2, c1, c2 = struct.unpack(">8I", data[:32])
    if magic not in WAL_MAGIC or size != page_size:
        return {}, 0
    order = ">" if magic & 1 else "<"
    s = _checksum(data[:24], order, 0, 0)
    if s != (c1, c2):
        return {}, 0
    pages, pending, db_size = {}, {}, 0
    pos, frame = 32, 24 + page_size
    while pos + frame <= len(data):
        no, commit, fs1, fs2, fc1, fc2 = struct.unpack(">6I", data[pos:pos + 24])
        if (fs1, fs2) != (salt1, salt2):
            break
        s = _checksum(data[pos + 24:pos + frame], order, *_checksum(data[pos:pos + 8], order, *s))
        if s != (fc1, fc2):
            break
        pending[no] = data[pos + 24:pos + frame]
        if commit:
            pages.update(pending)
            pending, db_size = {}, commit
        pos += frame
    return pages, db_size


def _checksum(data: bytes, order: str, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for k in range(0, len(words), 2):
        s0 = (s0 + words[k] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[k + 1] + s0) & 0xFFFFFFFF
    return s0, s1

