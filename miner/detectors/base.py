"""What every detector shares: condition results, hits, and the per-kernel context.

A detector module (one per skeleton, ``skNNN_<name>.py``) defines

  CODE        the skeleton code it implements ("SK001")
  CONDITIONS  an ordered dict: condition id (as in the skeleton's ``[[conditions]]``) ->
              predicate ``(Ctx) -> Check``
  instances   ``(Ctx) -> list[Hit]``: where the technique is already used (evidence)
  candidates  ``(Ctx) -> list[Hit]``: the sites an opportunity finding points at; they are
              reported only when every condition holds, so the conditions decide applicability
              and the candidates only say where.

Predicates read the ``KernelProfile`` first; the kernel's own source lines are used only to
show a statement in a detail string or to find the right-hand side of an assignment the
profile names by line (the profile carries lines, not expressions for every value).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable

from skel.catalog.records import KernelProfile
from skel.miner.detectors.text import names_in


@dataclass(frozen=True)
class ConditionResult:
    """One applicability condition evaluated on one kernel."""

    id: str
    holds: bool
    detail: str  # names the lines and variables, e.g. "line 157: b_q / tl.sqrt(...)"


@dataclass(frozen=True)
class Hit:
    """A site a detector points at: a line span and the parameters that made it fire."""

    line: int
    end_line: int
    params: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def at(line: int, end_line: int | None = None, **params: Any) -> "Hit":
        return Hit(line, end_line if end_line is not None else line, tuple(params.items()))


@dataclass(frozen=True)
class Check:
    """A predicate's answer: whether it holds, why, and the sites it found."""

    holds: bool
    detail: str
    hits: tuple[Hit, ...] = ()

    def result(self, cond_id: str) -> ConditionResult:
        return ConditionResult(cond_id, self.holds, self.detail)


def yes(detail: str, hits: Iterable[Hit] = ()) -> Check:
    return Check(True, detail, tuple(hits))


def no(detail: str) -> Check:
    return Check(False, detail)


Predicate = Callable[["Ctx"], Check]

_IF_TEST = re.compile(r"^(?:if|elif)\s+(.+?):\s*(?:#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z_][\w\s,\[\]\.]*?)\s*(\+=|-=|\*=|/=|=)(?!=)\s*(.+?)\s*;?\s*$")
LOAD_CALL = re.compile(r"(?<![\w])(?:tl\.load|__ldg|__ldcs|__ldlu|__ldca|__ldcg)\s*\(")
_ANNOTATED = re.compile(r"^\s*([A-Za-z_]\w*)\s*:\s*[\w\.\[\], ]+?\s*=(?!=)\s*(.+?)\s*$")
_TOP_DEF = re.compile(r"^def\s")
_NAME_EQ = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")
_NOT_ASSIGN = ("if ", "elif ", "for ", "while ", "return ", "def ", "@")  # statements _ASSIGN may match
_TARGET = re.compile(r"[A-Za-z_][\w\.]*")
_EXACT = re.compile(r"bit[- ]?exact|bit[- ]for[- ]bit|bitwise[- ](?:identical|equal|exact|parity)|bit[- ]identical|"
                    r"torch\.equal\(|assert_equal\(|byte[- ]identical", re.I)
_EXACT_HINTS = ("xact", "XACT", "it for", "IT FOR", "itwise", "dentical", "equal(")
_CPP_DECL = re.compile(r"^\s*((?:const\s+)?(?:[\w:<>]+\s*[*&]?\s+)+)([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=|\+=)\s*(.+?);")


@dataclass(frozen=True)
class Assign:
    line: int
    targets: tuple[str, ...]
    op: str  # "=", "+=", "*=", ...
    rhs: str
    decl: str = ""  # C++ declared type ("float", "const int"), "" for Python


class FileText:
    """A file's text split into lines once, shared by the ``Ctx`` of every kernel in it.

    ``cache`` holds answers that depend on the file only (where functions start, host-side
    lines of interest), so a detector asks them once per file, not once per kernel: a file
    with thousands of kernels must not be rescanned for each of them.
    """

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.cache: dict[str, Any] = {}

    @cached_property
    def _defs_by_indent(self) -> dict[int, list[int]]:
        """Indentation -> ascending lines whose stripped text starts with ``def ``."""
        out: dict[int, list[int]] = {}
        for i, raw in enumerate(self.lines, 1):
            stripped = raw.strip()
            if stripped.startswith("def "):
                out.setdefault(len(raw) - len(raw.lstrip()), []).append(i)
        return out

    def enclosing_def(self, line: int) -> int | None:
        """The nearest line above ``line`` holding a ``def`` indented less than ``line`` (None when
        there is none, e.g. at module level): the function that encloses it, by indentation."""
        if not (1 <= line <= len(self.lines)):
            return None
        raw = self.lines[line - 1]
        indent = len(raw) - len(raw.lstrip())
        best = None
        for level, rows in self._defs_by_indent.items():
            if level < indent:
                i = bisect.bisect_left(rows, line) - 1
                if i >= 0 and (best is None or rows[i] > best):
                    best = rows[i]
        return best

    @cached_property
    def _top_defs(self) -> list[int]:
        return [i for i, raw in enumerate(self.lines, 1) if _TOP_DEF.match(raw)]

    def top_def_before(self, line: int) -> int:
        """The last line above ``line`` that starts a module-level ``def`` (0 when there is none)."""
        i = bisect.bisect_left(self._top_defs, line) - 1
        return self._top_defs[i] if i >= 0 else 0

    def lines_matching(self, key: str, test: Callable[[str], Any], lo: int, hi: int,
                       needs: tuple[str, ...] = ()) -> list[tuple[int, Any]]:
        """(line, ``test(stripped line)``) for lines in [lo, hi) where the test is truthy (a regex's
        ``match``/``search``). The file is tested once per ``key``; each call is a bisection, so a
        function launching thousands of kernels is not rescanned for each of them.

        ``needs``: substrings one of which every line passing ``test`` contains; lines without any
        are not tested (a substring check costs a fraction of a regex with backtracking)."""
        rows = self.cache.get(key)
        if rows is None:
            lines = enumerate(self.lines, 1)
            if needs:
                has = re.compile("|".join(map(re.escape, needs))).search
                lines = ((i, raw) for i, raw in lines if has(raw))
            rows = [(i, r) for i, raw in lines if (r := test(raw.strip()))]
            self.cache[key] = rows
            self.cache[key + ":lines"] = [i for i, _ in rows]
        at = self.cache[key + ":lines"]
        return rows[bisect.bisect_left(at, lo):bisect.bisect_left(at, hi)]

    @cached_property
    def exact_contract(self) -> str | None:
        """Where the file states that results must match bit for bit (``bit-exact``, ``bitwise
        identical``, ``torch.equal``): "line N: text", or None. Rounding rewrites there need a caveat."""
        if not any(w in self.text for w in _EXACT_HINTS):  # plain substring scans first: most files say nothing
            return None
        m = _EXACT.search(self.text)
        if m is None:
            return None
        i = self.text.count("\n", 0, m.start()) + 1
        return f"line {i}: {self.lines[i - 1].strip()[:120]}"

    @cached_property
    def _assign_lines(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, raw in enumerate(self.lines, 1):
            m = _NAME_EQ.match(raw)
            if m:
                out.setdefault(m.group(1), []).append(i)
        return out

    def assignment_lines(self, name: str, after: int, before: int) -> list[int]:
        """Lines strictly between ``after`` and ``before`` that start ``name =`` (or ``name ==``:
        callers match their own pattern on these), nearest to ``before`` first."""
        rows = self._assign_lines.get(name, [])
        lo, hi = bisect.bisect_right(rows, after), bisect.bisect_left(rows, before)
        return rows[lo:hi][::-1]


_last_file: FileText | None = None


def file_text(text: str) -> FileText:
    """The ``FileText`` of ``text``; the same object while the same string is passed (kernel after kernel)."""
    global _last_file
    cur = _last_file
    if cur is None or cur.text is not text:  # identity, not equality: comparing two large texts is a scan
        cur = _last_file = FileText(text)
    return cur


class Ctx:
    """One kernel, its profile and the text of its file, with cached lookups for predicates."""

    def __init__(self, profile: KernelProfile, source_text: str):
        self.p = profile
        self.source = source_text
        self.file = file_text(source_text)
        self._lines = self.file.lines
        self.cache: dict[str, Any] = {}

    # -- source text -------------------------------------------------------------------------
    def text(self, line: int) -> str:
        """The stripped source line (1-based); '' outside the file."""
        if 1 <= line <= len(self._lines):
            return self._lines[line - 1].strip()
        return ""

    def statement(self, line: int) -> str:
        """The logical statement starting at ``line`` (joins lines while brackets are open)."""
        return self._statement(line)[0]

    def _statement(self, line: int) -> tuple[str, int]:
        """(statement text, number of physical lines), cached per line."""
        cache = self.cache.setdefault("_stmt", {})
        hit = cache.get(line)
        if hit is None and 1 <= line <= len(self._lines):
            raw = _strip_comment(self._lines[line - 1], self.p.language)
            if _balance(raw, self.p.language) <= 0 and not raw.rstrip().endswith("\\"):
                hit = cache[line] = (raw.strip(), 1)  # most statements: one line, nothing left open
        if hit is None:
            out, depth, i = [], 0, line
            while 1 <= i <= len(self._lines) and i < line + 40:
                raw = _strip_comment(self._lines[i - 1], self.p.language)
                out.append(raw.strip())
                depth += _balance(raw, self.p.language)
                if depth <= 0 and not raw.rstrip().endswith("\\"):
                    break
                i += 1
            hit = cache[line] = (" ".join(s for s in out if s), i - line + 1)
        return hit

    @property
    def body(self) -> range:
        return range(self.p.line, self.p.end_line + 1)

    @cached_property
    def assigns(self) -> tuple[Assign, ...]:
        """Assignments in the kernel body, one per statement start (simple statements only)."""
        rows: list[Assign] = []
        skip_to = 0
        for ln in self.body:
            if ln < skip_to:
                continue
            stmt, n_lines = self._statement(ln)
            skip_to = ln + max(1, n_lines)
            a = _parse_assign(stmt, ln, self.p.language) if ("=" in stmt) else None
            if a:
                rows.append(a)
        return tuple(rows)

    @cached_property
    def _defs(self) -> dict[str, list[Assign]]:
        index: dict[str, list[Assign]] = {}
        for a in self.assigns:
            for t in a.targets:
                index.setdefault(t, []).append(a)
        return index

    def defs_of(self, var: str, before: int | None = None) -> list[Assign]:
        """Assignments to ``var`` (latest last), optionally only those on lines before ``before``."""
        rows = self._defs.get(var, [])
        return rows if before is None else [a for a in rows if a.line < before]

    @cached_property
    def dataflow_graph(self):
        """The profile's dataflow as ``miner.dataflow.Graph`` (built once per kernel)."""
        from skel.miner import dataflow

        return dataflow.Graph(self.p.dataflow)

    def last_def(self, var: str, before: int) -> Assign | None:
        rows = self.defs_of(var, before + 1)
        return rows[-1] if rows else None

    def closure(self, expr: str, line: int, depth: int = 4, through_loads: bool = True) -> list[Assign]:
        """The assignments ``expr`` (at ``line``) is computed from, following names back ``depth`` steps.

        With ``through_loads=False`` a loaded value is a leaf: its address arithmetic is not
        part of the value's computation.
        """
        key = ("_closure", expr, line, depth, through_loads)  # several conditions ask the same question
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = tuple(self._closure(expr, line, depth, through_loads))
        return list(hit)

    def _closure(self, expr: str, line: int, depth: int, through_loads: bool) -> list[Assign]:
        out: list[Assign] = []
        seen: set[tuple[str, int]] = set()
        frontier = [(n, line) for n in names_in(expr)]
        for _ in range(depth):
            nxt = []
            for name, ln in frontier:
                if (name, ln) in seen:
                    continue
                seen.add((name, ln))
                rows = self.defs_of(name, ln)
                if not rows:
                    continue
                a = rows[-1]
                # an augmented assignment (x += y) keeps the earlier value too
                group = [a] + ([rows[-2]] if a.op != "=" and len(rows) > 1 else [])
                for d in group:
                    if d not in out:
                        out.append(d)
                        if not through_loads and LOAD_CALL.search(d.rhs):
                            continue
                        nxt += [(n, d.line) for n in names_in(d.rhs) | ({name} if d.op != "=" else set())]
            frontier = nxt
        return out

    # -- profile helpers ---------------------------------------------------------------------
    def loop_at(self, line: int):
        """The innermost loop that contains ``line``."""
        best = None
        for lp in self.p.loops:
            if lp.line <= line <= lp.end_line and (best is None or lp.line >= best.line):
                best = lp
        return best

    def in_time_loop(self, line: int):
        for lp in self.p.loops:
            if lp.is_time_loop and lp.line < line <= lp.end_line:
                return lp
        return None

    def enclosing_tests(self, line: int, stop: int) -> list[str]:
        """The ``if``/``elif`` tests enclosing ``line`` (Python, by indentation), innermost first,
        looking up no further than line ``stop``."""
        def indent(ln: int) -> int:
            raw = self._lines[ln - 1] if 1 <= ln <= len(self._lines) else ""
            return len(raw) - len(raw.lstrip())

        tests, level = [], indent(line)
        for ln in range(line - 1, stop, -1):
            text = self.text(ln)
            if not text or indent(ln) >= level:
                continue
            m = _IF_TEST.match(text)
            if m:
                tests.append(m.group(1))
            level = indent(ln)
        return tests

    def constexpr_test(self, test: str) -> bool:
        """Every name the condition reads is a constexpr parameter (Triton resolves it at compile time)."""
        names = set(re.findall(r"[A-Za-z_]\w*", test)) - {"not", "and", "or", "True", "False", "None"}
        return all((p := self.param(n)) is not None and p.constexpr for n in names)

    def param(self, name: str):
        return next((q for q in self.p.params if q.name == name), None)

    def launch_value(self, name: str) -> Any:
        """The value (or source text) the first launch site passes for constexpr ``name``."""
        for site in self.p.launches:
            for k, v in site.constexpr_values:
                if k == name:
                    return v
            for k, v in site.args:
                if k == name:
                    return v
        return None


def _strip_comment(line: str, language: str) -> str:
    marker = "#" if language == "triton" else "//"
    # good enough for kernels: comment markers inside string literals are rare in kernel bodies
    i = line.find(marker)
    return line if i < 0 else line[:i]


def _balance(raw: str, language: str) -> int:
    """Open minus closed brackets on a line; C++ braces delimit blocks, not statements."""
    opens, closes = ("([{", ")]}") if language == "triton" else ("([", ")]")
    return sum(raw.count(c) for c in opens) - sum(raw.count(c) for c in closes)


def _count_continuation(lines: list[str], line: int, language: str) -> int:
    depth, i = 0, line
    while 1 <= i <= len(lines) and i < line + 40:
        raw = _strip_comment(lines[i - 1], language)
        depth += _balance(raw, language)
        if depth <= 0 and not raw.rstrip().endswith("\\"):
            return i - line + 1
        i += 1
    return i - line


def _parse_assign(stmt: str, line: int, language: str) -> Assign | None:
    if language != "triton":
        m = _CPP_DECL.match(stmt)
        if m:
            return Assign(line, (m.group(2),), m.group(4), m.group(5), m.group(1).strip())
    ann = _ANNOTATED.match(stmt)
    if ann:
        return Assign(line, (ann.group(1),), "=", ann.group(2))
    if stmt.lstrip().startswith(_NOT_ASSIGN):
        return None
    m = _ASSIGN.match(stmt)
    if not m:
        return None
    lhs = m.group(1)
    targets = tuple(t.strip().split("[")[0].strip() for t in lhs.split(","))
    targets = tuple(t for t in targets if _TARGET.fullmatch(t))
    if not targets:
        return None
    rhs = m.group(3)
    # "a: tl.constexpr = 1.44" style annotated assignments keep their value after the annotation
    return Assign(line, targets, m.group(2), rhs)


