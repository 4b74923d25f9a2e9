"""Make real CUDA headers parseable by tree-sitter-cuda without running a preprocessor.

tree-sitter sees the file before macro expansion, so ``FLASHINFER_INLINE void f()`` or
``CUTLASS_DEVICE`` reads as a type name followed by garbage and the parser emits ERROR
nodes that can swallow whole kernels. ``sanitize`` rewrites the text so that it parses,
and every edit keeps the length of what it replaces (spaces, or a shorter CUDA keyword
padded with spaces) and never touches a newline: byte offsets, lines and columns of the
sanitized text are those of the original file.

What it does, in order:
1. finds comments, string literals and preprocessor lines (a small lexer), so later
   steps only look at code;
2. flattens ``#if``/``#ifdef``/``#elif``/``#else``/``#endif``: keeps the first branch
   (the second for ``#if 0``) and blanks the directives and the other branches, because
   branches with unbalanced braces are the commonest cause of ERROR nodes;
3. maps known specifier macros to the CUDA keyword they expand to (``CUTLASS_DEVICE`` ->
   ``__device__``) and strips attribute-like macros (``__align__(16)``,
   ``__cluster_dims__(...)``, ``C10_LAUNCH_BOUNDS_1(...)``, ``[[...]]``);
4. strips, generically, any other ALL-CAPS identifier (with its argument list, if any)
   that stands where a declaration specifier would be: followed by another identifier
   (``MY_API static int f()``), which valid expanded C++ never has for a value; one with
   DEVICE in its name becomes ``__device__`` (``_CCCL_HOST_DEVICE_API``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Known macros -> the CUDA specifier they expand to (must not be longer than the macro).
SPECIFIER_MACROS: dict[str, str] = {
    "CUTLASS_DEVICE": "__device__",
    "CUTLASS_HOST_DEVICE": "__host__ __device__",
    "CUTLASS_GLOBAL": "__global__",
    "CUTLASS_HOST": "__host__",
    "CUTE_DEVICE": "__device__",
    "CUTE_HOST_DEVICE": "__device__",
    "CUTE_HOST": "__host__",
    "FLASHINFER_INLINE": "__device__",
    "FLASHINFER_HOST_DEVICE": "__host__ __device__",
    "FLASHINFER_DEVICE": "__device__",
    "_CCCL_DEVICE": "__device__",
    "_CCCL_HOST": "__host__",
    "_CCCL_HOST_DEVICE": "__device__",
    "_CCCL_API": "",
    "C10_DEVICE": "__device__",
    "C10_HOST_DEVICE": "__device__",
    "C10_HOST": "__host__",
    "DEVICE_INLINE": "__device__",
    "HOST_DEVICE": "__device__",
}
# Function-like attributes the grammar does not know: always stripped with their arguments.
ATTRIBUTE_CALLS = re.compile(r"__align__|__cluster_dims__|__maxnreg__|\w*LAUNCH_BOUNDS\w*")
# ALL-CAPS names that are real types, never stripped.
KNOWN_CAPS_TYPES = frozenset({"FILE", "CUresult", "CUDA", "BOOL", "DWORD"})
# After these tokens an ALL-CAPS name is a type or a name being declared, not a macro.
_NO_STRIP_AFTER = frozenset(
    {"struct", "class", "enum", "union", "namespace", "typename", "::", ".", "->", "new",
     "operator", "goto", "using", "typedef", "friend", "sizeof", "alignof", "decltype"}
)

_LEX = re.compile(
    r"""(?P<line_comment>//[^\n]*)
      | (?P<block_comment>/\*.*?\*/)
      | (?P<raw>R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)")
      | (?P<string>"(?:\\.|[^"\\\n])*")
      | (?P<char>'(?:\\.|[^'\\\n])*')
      | (?P<preproc>^[ \t]*\#(?:[^\n\\]|\\.|\\\n)*)
    """,
    re.VERBOSE | re.MULTILINE | re.DOTALL,
)
# Where a _LEX match can start: every branch but the preprocessor one starts with one of
# these; a preprocessor line is found at its "#" and matched from its line start. Scanning
# for these first is ten times faster than letting _LEX try every offset of a 4 MB file.
_LEX_START = re.compile(r"""[/"'#]|R\"""")
_CAPS = re.compile(r"_*[A-Z][A-Z0-9_]*\Z")
# The leading lookahead only names the possible first characters: same matches, but the
# regex engine can skip ahead instead of trying each alternative at every offset.
_TYPE_DECL = re.compile(r"(?=[tcsu])\b(?:typename|class|struct|using|typedef)\s+([A-Za-z_]\w*)")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w+)(.*)", re.DOTALL)


@dataclass(frozen=True)
class Sanitized:
    text: str  # same length and same newlines as the input
    code: str  # ``text`` with comments, strings and preprocessor lines blanked
    stripped: tuple[str, ...]  # distinct macro names removed or mapped, in order of appearance


def blank(s: str) -> str:
    """Spaces of the same length, newlines kept."""
    return re.sub(r"[^\n]", " ", s)


def sanitize(text: str) -> Sanitized:
    buf = list(text)
    code = list(text)
    directives: list[tuple[int, int, str, str]] = []  # (start, end, name, rest)
    for m in _lex(text):
        kind = m.lastgroup
        if kind == "delim":
            kind = "raw"
        if kind in ("string", "raw"):  # keep the quotes: asm() strings are read later from the tree
            code[m.start() + 1 : m.end() - 1] = blank(m.group()[1:-1])
            continue
        code[m.start() : m.end()] = blank(m.group())
        if kind == "preproc":
            d = _DIRECTIVE.match(m.group())
            if d:
                directives.append((m.start(), m.end(), d.group(1), d.group(2)))
    _flatten_conditionals(text, directives, buf, code)
    code_text = "".join(code)
    stripped = _strip_macros(code_text, buf, code)
    return Sanitized("".join(buf), "".join(code), tuple(stripped))


def _lex(text: str):
    """The matches of ``_LEX.finditer(text)``, found by jumping between possible starts."""
    pos = 0
    search, match, rfind = _LEX_START.search, _LEX.match, text.rfind
    while True:
        c = search(text, pos)
        if c is None:
            return
        at = c.start()
        if text[at] == "#":  # a directive only when nothing but blanks precedes it on its line
            line_start = rfind("\n", 0, at) + 1
            if line_start < pos or text[line_start:at].strip(" \t"):
                pos = at + 1
                continue
            at = line_start
        m = match(text, at)
        if m is None:
            pos = c.start() + 1
            continue
        yield m
        pos = m.end()


def _flatten_conditionals(text: str, directives, buf: list[str], code: list[str]) -> None:
    """Keep one branch of every #if chain; blank directives and the other branches."""
    stack: list[list] = []  # frames: [keeping_now, a_branch_was_kept, parent_keeping]
    region_start = None  # start offset of the text currently being dropped

    def keeping() -> bool:
        return all(f[0] for f in stack)

    for start, end, name, rest in directives:
        if name not in ("if", "ifdef", "ifndef", "elif", "else", "endif"):
            continue
        was_keeping = keeping()
        if name in ("if", "ifdef", "ifndef"):
            take = not (name == "if" and rest.strip() in ("0", "(0)", "false"))
            stack.append([take, take])
        elif not stack:
            continue  # unbalanced #else/#endif: leave the text alone
        elif name in ("elif", "else"):
            frame = stack[-1]
            frame[0] = not frame[1]
            frame[1] = frame[1] or frame[0]
        else:
            stack.pop()
        now_keeping = keeping()
        if was_keeping and not now_keeping:
            region_start = end
        elif not was_keeping and now_keeping and region_start is not None:
            _blank_range(buf, code, region_start, start)
            region_start = None
        _blank_range(buf, code, start, end)
    if region_start is not None and not keeping():
        _blank_range(buf, code, region_start, len(text))


def _blank_range(buf: list[str], code: list[str], start: int, end: int) -> None:
    """Blank ``[start, end)`` in both, newlines kept (the buffers never move a newline)."""
    if start >= end:
        return
    spaces = blank("".join(buf[start:end]))
    buf[start:end] = spaces
    code[start:end] = spaces


_CANDIDATE = re.compile(r"(?=[\[_A-Z])(?:\[\[|\b_*[A-Z][A-Z0-9_]*\b|\b(?:__align__|__cluster_dims__|__maxnreg__)\b)")
_PREV_WORD = re.compile(r"(?:[A-Za-z_]\w*|::|->|[^\s\w])\s*\Z")
_NEXT = re.compile(r"\s*(\S)")


def _strip_macros(code_text: str, buf: list[str], code: list[str]) -> list[str]:
    """Look only at candidate tokens (ALL-CAPS names, ``[[``, known attributes); their
    neighbours are read from the text around them, which keeps 4 MB files fast."""
    type_names = set(_TYPE_DECL.findall(code_text)) | KNOWN_CAPS_TYPES
    stripped: list[str] = []
    resume = 0
    for m in _CANDIDATE.finditer(code_text):
        tok, start, end = m.group(), m.start(), m.end()
        if start < resume:
            continue
        if tok == "[[":  # C++ attribute: [[nodiscard]], [[likely]] ...
            close = code_text.find("]]", end, end + 400)
            if close >= 0:
                _blank_range(buf, code, start, close + 2)
                resume = close + 2
            continue
        if tok in SPECIFIER_MACROS:
            _replace(buf, code, start, end, SPECIFIER_MACROS[tok])
            _note(stripped, tok)
            continue
        attribute = ATTRIBUTE_CALLS.fullmatch(tok) is not None
        if not attribute and (len(tok) < 3 or not _CAPS.match(tok) or tok in type_names):
            continue
        after = _after_group(code_text, end)
        if attribute and after is not None:
            _blank_range(buf, code, start, after)
            _note(stripped, tok)
            resume = after
            continue
        prev = _PREV_WORD.search(code_text, max(0, start - 64), start)
        if prev is not None and prev.group().strip() in _NO_STRIP_AFTER:
            continue
        j = after if after is not None else end
        nxt = _NEXT.match(code_text, j)
        if nxt is not None and _starts_declaration(code_text[nxt.start(1):nxt.start(1) + 2]):
            _blank_range(buf, code, start, j)
            if "DEVICE" in tok and len(tok) >= 10:  # _CCCL_HOST_DEVICE_API, MY_DEVICE_INLINE...
                _replace(buf, code, start, end, "__device__")
            _note(stripped, tok)
            resume = j
    return stripped


def _starts_declaration(tok: str) -> bool:
    return tok == "[[" or tok[:1] == "~" or (tok[:1].isalpha() or tok[:1] == "_")


def _after_group(code_text: str, end: int) -> int | None:
    """Offset just past a balanced ``(...)`` right after ``end`` (spaces allowed), or None."""
    m = _NEXT.match(code_text, end)
    if m is None or m.group(1) != "(":
        return None
    depth = 0
    for i in range(m.start(1), min(len(code_text), m.start(1) + 4000)):
        c = code_text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c in ";{}":
            return None  # a statement boundary inside "(...)": not an argument list
    return None


def _replace(buf: list[str], code: list[str], start: int, end: int, keyword: str) -> None:
    padded = keyword.ljust(end - start)
    buf[start:end] = padded
    code[start:end] = padded


def _note(stripped: list[str], name: str) -> None:
    if name not in stripped:
        stripped.append(name)
