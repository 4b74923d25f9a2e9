"""CUDA helpers across files and through member calls: their findings count for the kernels that call them.

``miner/interproc.py`` attributes a helper's findings to the kernels of its own file that call it by a
free call. Real CUDA code keeps its helpers in headers (``state.cuh``'s ``state_t::merge``) and calls
them as members (``st.merge(v, s)``), as static functions of a struct (``Runner::Run(...)``), or
through a type template parameter bound where the kernel is instantiated
(``PersistentKernelTemplate<A, B, BlockBatchReductionPersistent<T>>``). This pass runs after the
per-file results (parsed or served from the catalog) over the CUDA files of one mining run:

    attribute(files) -> {path: the extra findings of that file's kernels}

Resolution is by ``#include`` reachability (a file's quoted or angle includes that name files of the
run, transitively): a call is followed only into files the caller's file reaches (for a template
parameter: files the instantiating file reaches). A member call ``obj.f()`` resolves through the
receiver's declared type when the caller declares it (``state_t<N> st;``), else when exactly one
struct among the reachable files has a method ``f``; a free call ``f()`` when every definition of
``f`` reachable sits in one file. Anything else is not attributed (precision first). The pass reads
the texts only (comments and strings blanked), never the parse trees: what it needs per file is
its includes, its function definitions (with their struct and template parameters) and the calls
in their bodies, found by a scan that costs one regex pass and a brace match per definition.

A copy of a helper's finding sits at the kernel's call site with ``via`` (the chain of helpers),
``helper_line`` and ``helper_file`` (the helper's file: every copy this pass makes names it, so that
``own_findings`` can tell a file's own findings from the copies of an earlier run). Suppression
comments in the kernel's file silence copied opportunities as they do the file's own.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from functools import cached_property

from skel.catalog.records import Finding
from skel.miner.cuda_frontend import _definition_start as _decl_start

_STRIP = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"\n]+)[>\"]", re.M)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n\\]|\\\n|\\.)*", re.M)
_RECORD = re.compile(r"\b(?:struct|class)\s+(?:alignas\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*(?:<[^{};]*>)?\s*"
                     r"(?:final\s*)?(?::[^{};]*)?\{")
_CALLABLE = re.compile(r"(?<![\w~])([A-Za-z_]\w*(?:[ \t]*::[ \t]*~?[A-Za-z_]\w*)*)[ \t]*\(")
_TAIL = re.compile(r"\s*(?:(?:const|volatile|noexcept|override|final|mutable|&&?|__\w+__|__forceinline__)\b\s*|"
                   r"noexcept\s*\([^)]*\)\s*|->\s*[^{;]+?)*(?::[^;{}]*?)?\{")
_NAME_CALL = re.compile(r"(?<![\w~])([A-Za-z_]\w*)\s*(?:<[^<>;{}()]*>)?\s*\(")
# what precedes a called name: a receiver (obj. obj-> obj[i].) or a qualifier (S:: S<T>::), at the end
_BEFORE = re.compile(r"(?:([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?(?:\.|->)|((?:[A-Za-z_]\w*\s*(?:<[^<>;{}()]*>)?\s*::\s*)+))\s*$")
_DECLARED = re.compile(r"([A-Za-z_]\w*)\s*(?:<[^;(){}<>]*(?:<[^;(){}<>]*>[^;(){}<>]*)*>)?\s*(?:const\s*)?[&*]*\s*$")
_TEMPLATE = re.compile(r"\btemplate\s*<")
_TYPE_PARAM = re.compile(r"^\s*(?:typename|class)\s*(?:\.\.\.)?\s*([A-Za-z_]\w*)")
_KEYWORDS = frozenset("""if for while switch return sizeof alignof decltype catch static_assert alignas
    __launch_bounds__ __attribute__ defined new delete throw case do else typeid static_cast reinterpret_cast
    const_cast dynamic_cast noexcept asm __asm__ operator""".split())
MAX_DEPTH = 6  # helper chains followed at most this deep


@dataclass(frozen=True)
class SourceFile:
    """One file of the run as the pass sees it: its text and its own findings (no cross-file copies)."""

    path: str
    text: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class Definition:
    """A function defined in a file: a kernel, a ``__device__`` helper or a member function."""

    name: str  # the function's own name
    owner: str  # the struct/class it is a member of ("" for a free function), from its body or S::f
    path: str
    line: int
    end_line: int
    body: tuple[int, int]  # offsets of the body's braces in the blanked text
    kernel: bool  # __global__
    device: bool  # __global__ or __device__
    template: tuple[str, ...]  # its template parameters in order ("" for a non-type one), the owner's after
    head: str  # the text from the start of its declaration to the body (parameters included)


@dataclass(frozen=True)
class Call:
    name: str
    receiver: str  # obj of obj.f() / obj->f(), "" otherwise
    qualifier: str  # S of S::f() (the last component), "" otherwise
    line: int


class _File:
    """One file's includes, struct bodies, definitions and calls, computed when first asked."""

    def __init__(self, src: SourceFile):
        self.src = src

    @cached_property
    def code(self) -> str:
        blank = _STRIP.sub(_blank, self.src.text)
        return _DIRECTIVE.sub(_blank, blank)

    @cached_property
    def includes(self) -> tuple[str, ...]:
        return tuple(_INCLUDE.findall(_STRIP.sub(lambda m: m.group() if m.group().startswith('"') else " ",
                                                 self.src.text)))

    @cached_property
    def lines(self) -> list[int]:
        return [m.start() for m in re.finditer("\n", self.code)]

    def line_of(self, offset: int) -> int:
        import bisect

        return bisect.bisect_left(self.lines, offset) + 1

    @cached_property
    def records(self) -> list[tuple[str, int, int, tuple[str, ...]]]:
        """(name, body start, body end, template parameters) of every struct/class body."""
        out = []
        for m in _RECORD.finditer(self.code):
            end = _match(self.code, m.end() - 1)
            if end is not None:
                out.append((m.group(1), m.end() - 1, end, _template_params(self.code, m.start())))
        return out

    @cached_property
    def definitions(self) -> list[Definition]:
        code, out, pos = self.code, [], 0
        while True:
            m = _CALLABLE.search(code, pos)
            if m is None:
                return out
            pos = m.end()
            qual = re.sub(r"\s+", "", m.group(1))
            name = qual.split("::")[-1]
            if name in _KEYWORDS or name.startswith("~"):
                continue
            close = _match(code, m.end() - 1, "()")
            if close is None:
                continue
            tail = _TAIL.match(code, close + 1)
            if tail is None:
                continue
            start = _decl_start(code, m.start())
            head = code[start:m.start()]
            if re.search(r"[=,(]\s*$|\breturn\b|\bnew\b", head) or not re.search(r"[\w*&>]\s*$", head) \
                    and "::" not in qual:
                continue  # a call or an initialiser, not a definition
            brace = tail.end() - 1
            end = _match(code, brace)
            if end is None:
                continue
            owner = qual.split("::")[-2] if "::" in qual else ""
            rec_template: tuple[str, ...] = ()
            if not owner:
                inside = [r for r in self.records if r[1] < m.start() < r[2]]
                if inside:
                    owner, rec_template = inside[-1][0], inside[-1][3]
            out.append(Definition(name, owner, self.src.path, self.line_of(m.start()), self.line_of(end),
                                  (brace, end), "__global__" in head, "__global__" in head or "__device__" in head,
                                  _template_params(code, start) + rec_template, code[start:brace]))
            pos = end + 1

    def calls(self, d: Definition, wanted: frozenset[str]) -> list[Call]:
        """The calls in ``d``'s body of functions named in ``wanted`` (the run's device functions)."""
        out = []
        lo, hi = d.body
        code = self.code
        for m in _NAME_CALL.finditer(code, lo + 1, hi):
            name = m.group(1)
            if name not in wanted or name in _KEYWORDS:
                continue
            k = m.start() - 1
            while k > lo and code[k] in " \t\n":
                k -= 1
            before = _BEFORE.search(code, max(lo, m.start() - 80), m.start()) if code[k] in ".>:" else None
            receiver = qual = ""
            if before and before.group(1):
                receiver = before.group(1)
            elif before and before.group(2):
                qual = re.sub(r"<[^<>]*>|\s+", "", before.group(2)).rstrip(":").split("::")[-1]
            out.append(Call(name, receiver, qual, self.line_of(m.start())))
        return out

    def declared_type(self, d: Definition, var: str, before: int) -> str | None:
        """The type name a variable is declared with in ``d``'s parameters or body (``state_t<N> st``)."""
        found = None
        use = re.compile(r"\b" + re.escape(var) + r"\b(?=\s*[;=,)\[{(])")
        for text, lo, hi in ((d.head, 0, len(d.head)), (self.code, d.body[0], before)):
            for m in use.finditer(text, lo, hi):
                k = m.start() - 1
                while k > lo and text[k] in " \t\n&*":
                    k -= 1
                if not (text[k].isalnum() or text[k] in "_>"):
                    continue
                t = _DECLARED.search(text, max(lo, m.start() - 80), m.start())
                if t and t.group(1) not in ("return", "else", "auto", "case"):
                    found = t.group(1)
        return found


def _blank(m: re.Match) -> str:
    """The match as spaces, its newlines kept (offsets and lines stay the file's)."""
    return "\n".join(" " * len(part) for part in m.group().split("\n"))


def _match(code: str, open_at: int, pair: str = "{}") -> int | None:
    depth = 0
    for m in re.compile("[" + re.escape(pair) + "]").finditer(code, open_at):
        depth += 1 if m.group() == pair[0] else -1
        if depth == 0:
            return m.start()
    return None


def _template_params(code: str, start: int) -> tuple[str, ...]:
    """The parameters of a ``template <...>`` opening the declaration at ``start`` ("" for non-type ones)."""
    m = _TEMPLATE.search(code, start, start + 400)
    if m is None or code[start:m.start()].strip():
        return ()
    close = _angle_close(code, m.end() - 1)
    if close is None:
        return ()
    out = []
    for part in _split_args(code[m.end():close]):
        t = _TYPE_PARAM.match(part)
        out.append(t.group(1) if t else "")
    return tuple(out)


def _angle_close(code: str, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, min(len(code), open_at + 4000)):
        c = code[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                return i
        elif c in ";{}":
            return None
    return None


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for c in text:
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


class _Run:
    """The files of one run, their include closures and the resolution of calls between them."""

    def __init__(self, files: list[SourceFile]):
        self.files = {f.path: _File(f) for f in files}
        self._by_suffix: dict[str, list[str]] = {}
        for path in self.files:
            parts = path.replace("\\", "/").split("/")
            for k in range(1, len(parts) + 1):
                self._by_suffix.setdefault("/".join(parts[-k:]), []).append(path)
        self._closure: dict[str, frozenset[str]] = {}
        self._bindings: dict[tuple[str, str, int], list[tuple[str, str]]] = {}
        self._index: dict[frozenset[str], dict[str, list[Definition]]] = {}
        self.resolved: dict[tuple[str, str, int], list[tuple[int, Definition]]] = {}

    @cached_property
    def names(self) -> frozenset[str]:
        """Names of every device function of the run: the only calls worth resolving."""
        return frozenset(d.name for f in self.files.values() for d in f.definitions if d.device)

    def included(self, path: str) -> list[str]:
        out = []
        here = posixpath.dirname(path.replace("\\", "/"))
        for inc in self.files[path].includes:
            local = posixpath.normpath(posixpath.join(here, inc))
            if local in self.files:
                out.append(local)
                continue
            found = self._by_suffix.get(posixpath.normpath(inc), [])
            if len(found) == 1:  # an include path that names one file of the run
                out.append(found[0])
        return out

    def closure(self, path: str) -> frozenset[str]:
        got = self._closure.get(path)
        if got is None:
            seen, stack = {path}, [path]
            while stack:
                for nxt in self.included(stack.pop()):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            got = self._closure[path] = frozenset(seen)
        return got

    def defs(self, paths: frozenset[str], name: str) -> list[Definition]:
        """The device functions called ``name`` defined in ``paths``."""
        index = self._index.get(paths)
        if index is None:
            index = self._index[paths] = {}
            for p in sorted(paths):
                for d in self.files[p].definitions:
                    if d.device:
                        index.setdefault(d.name, []).append(d)
        return index.get(name, [])

    def resolve(self, d: Definition, call: Call, offset_hint: int) -> list[tuple[Definition, str]]:
        """(callee, file whose includes made it visible) for one call of ``d``; [] when not resolved."""
        reach = self.closure(d.path)
        if call.qualifier:
            if call.qualifier in d.template:
                return self._through_parameter(d, call.qualifier, call.name)
            named = self.defs(reach, call.name)
            members = [x for x in named if x.owner == call.qualifier]
            if members:
                return [(x, d.path) for x in members]
            free = [x for x in named if not x.owner]
            return [(x, d.path) for x in free] if len({x.path for x in free}) == 1 else []
        if call.receiver:
            methods = [x for x in self.defs(reach, call.name) if x.owner]
            if call.receiver == "this":
                return [(x, d.path) for x in methods if x.owner == d.owner]
            typ = self.files[d.path].declared_type(d, call.receiver, offset_hint)
            if typ in d.template:
                return self._through_parameter(d, typ, call.name)
            if typ is not None and any(x.owner == typ for x in methods):
                return [(x, d.path) for x in methods if x.owner == typ]
            owners = {x.owner for x in methods}
            return [(x, d.path) for x in methods] if len(owners) == 1 and typ is None else []
        named = self.defs(reach, call.name)
        if d.owner:
            own = [x for x in named if x.owner == d.owner]
            if own:
                return [(x, d.path) for x in own]
        free = [x for x in named if not x.owner]
        return [(x, d.path) for x in free] if len({x.path for x in free}) == 1 else []

    def _through_parameter(self, d: Definition, param: str, name: str) -> list[tuple[Definition, str]]:
        """Methods ``name`` of the structs bound to ``d``'s type parameter where ``d`` is instantiated
        (``Kernel<A, B, S<T>>``) in a file that reaches ``d``'s file, among the files that one reaches."""
        index = d.template.index(param)
        out = []
        for struct, where in self._bound(d, index):
            reach = self.closure(where)
            out += [(x, where) for x in self.defs(reach, name) if x.owner == struct]
        return out

    def _bound(self, d: Definition, index: int) -> list[tuple[str, str]]:
        key = (d.path, d.name, index)
        if key in self._bindings:
            return self._bindings[key]
        out = []
        pattern = re.compile(r"\b" + re.escape(d.name) + r"\s*<")
        for path, f in self.files.items():
            if d.path not in self.closure(path) or d.name not in f.src.text:
                continue
            for m in pattern.finditer(f.code):
                close = _angle_close(f.code, m.end() - 1)
                if close is None:
                    continue
                args = _split_args(f.code[m.end():close])
                if index < len(args):
                    head = re.match(r"\s*(?:typename\s+)?((?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)", args[index])
                    if head:
                        out.append((re.sub(r"\s+", "", head.group(1)).split("::")[-1], path))
        self._bindings[key] = out = sorted(set(out))
        return out


def attribute(files: list[SourceFile]) -> dict[str, list[Finding]]:
    """The findings of helpers (in other files, or reached by member and struct calls) copied to the
    kernels that reach them, by the kernel's file; files without such findings are left out."""
    helper_paths = {f.path for f in files if f.findings}
    if not helper_paths:
        return {}
    run = _Run(files)
    found: dict[tuple[str, str, int], list[Finding]] = {}  # (path, helper name, helper line) -> findings
    for path in helper_paths:
        defs = [d for d in run.files[path].definitions if d.device and not d.kernel]
        for fnd in run.files[path].src.findings:
            short = fnd.kernel.split("::")[-1]
            home = next((d for d in defs if d.name == short and d.line <= fnd.line <= d.end_line), None)
            if home is not None:
                found.setdefault((path, home.name, home.line), []).append(fnd)
    if not found:
        return {}
    from skel.miner import suppress as sup

    out: dict[str, list[Finding]] = {}
    for path, f in run.files.items():
        if "__global__" not in f.src.text:
            continue
        comments = sup.parse(f.src.text)
        own = {(x.kernel, x.skeleton, x.kind, x.line) for x in f.src.findings}
        for k in f.definitions:
            if not k.kernel:
                continue
            for helper, line, chain in _reached(run, k):
                for fnd in found.get((helper.path, helper.name, helper.line), ()):
                    kernel = _kernel_name(f.src.findings, k)
                    key = (kernel, fnd.skeleton, fnd.kind, line)
                    if key in own or fnd.kind == "opportunity" and comments and comments.find(
                            fnd.skeleton, (line,), sup.header_span({}, k.line, "cuda")) is not None:
                        continue
                    own.add(key)
                    params = [("via", " -> ".join(chain)), ("helper_line", fnd.line), ("helper_file", helper.path)]
                    params += [(k_, v) for k_, v in fnd.params if k_ not in ("via", "helper_line", "helper_file")]
                    out.setdefault(path, []).append(Finding(fnd.skeleton, fnd.kind, path, line, line, kernel,
                                                            tuple(params)))
    return out


def own_findings(findings) -> tuple[Finding, ...]:
    """A file's findings less the copies this pass made (in an earlier run, stored in the catalog)."""
    return tuple(f for f in findings if not any(k == "helper_file" for k, _ in f.params))


def _kernel_name(findings, k: Definition) -> str:
    return k.name if not k.owner else f"{k.owner}::{k.name}"


def _callees(run: _Run, d: Definition) -> list[tuple[int, Definition]]:
    """(call line, callee) for each call of ``d`` that resolves, memoized per definition."""
    key = (d.path, d.name, d.line)
    got = run.resolved.get(key)
    if got is None:
        f = run.files[d.path]
        got = []
        for call in f.calls(d, run.names):
            offset = f.lines[call.line - 2] if call.line >= 2 else 0
            got += [(call.line, callee) for callee, _ in run.resolve(d, call, offset)]
        run.resolved[key] = got
    return got


def _reached(run: _Run, k: Definition) -> list[tuple[Definition, int, list[str]]]:
    """(helper, call line in the kernel, chain of names) for every function the kernel reaches."""
    out, seen = [], {(k.path, k.name, k.line)}
    stack = [(k, None, [])]
    while stack:
        d, line, chain = stack.pop()
        if len(chain) > MAX_DEPTH:
            continue
        for call_line, callee in _callees(run, d):
            key = (callee.path, callee.name, callee.line)
            if key in seen:
                continue
            seen.add(key)
            label = f"{callee.owner}::{callee.name}" if callee.owner else callee.name
            at = line if line is not None else call_line
            out.append((callee, at, chain + [label]))
            stack.append((callee, at, chain + [label]))
    return out
