"""Reading one kernel source file: its bytes, then its text, or one reason why not.

Python files are decoded as Python itself decodes them (PEP 263, ``tokenize.detect_encoding``):
a UTF-8 byte-order mark or a coding cookie on the first two lines (``# -*- coding: latin-1 -*-``),
UTF-8 otherwise. CUDA/C++ files are UTF-8 (a byte-order mark allowed). A NUL byte anywhere means
the file is not source text. Only regular files are opened (a FIFO would block the read), and no
more than the size limit is ever read.

Every refusal is an ``UnreadableSource``: a ``UsageError`` whose message is
``PATH[:LINE]: reason`` (what ``skel match``/``apply``/``catalog prompt`` print), with the bare
``reason`` and ``line`` for ``skel mine``'s per-file error entries.
"""
from __future__ import annotations

import errno
import io
import os
import stat
import tokenize
from dataclasses import dataclass

from skel.errors import UsageError

MAX_BYTES = 5_000_000  # default size limit; SKEL_MAX_BYTES overrides it, --max-bytes per command
LIMIT_HINT = "--max-bytes or SKEL_MAX_BYTES"


class UnreadableSource(UsageError):
    """A file that cannot be read as kernel source; ``reason`` says why in words."""

    def __init__(self, path: str, reason: str, line: int | None = None):
        self.path, self.reason, self.line = str(path), reason, line
        super().__init__(f"{self.path}:{line}: {reason}" if line else f"{self.path}: {reason}")

    @property
    def entry(self) -> str:
        """The reason as one error entry of ``skel mine`` (which names the path itself)."""
        return f"{self.reason} (line {self.line})" if self.line else self.reason


@dataclass(frozen=True)
class SourceText:
    text: str
    encoding: str  # the codec that decoded it: "utf-8", "utf-8-sig", "iso-8859-1", ...
    size: int  # bytes on disk


def default_max_bytes() -> int:
    """``SKEL_MAX_BYTES`` when set to a positive integer, else ``MAX_BYTES``."""
    raw = os.environ.get("SKEL_MAX_BYTES", "").strip()
    try:
        value = int(raw)
    except ValueError:
        return MAX_BYTES
    return value if value > 0 else MAX_BYTES


def too_large(size: int, limit: int) -> str:
    what = f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size} bytes"
    most = f"{limit / 1e6:g} MB" if limit >= 100_000 else f"{limit} bytes"
    return f"skipped: larger than {most} ({what}; raise the limit with {LIMIT_HINT})"


def os_reason(exc: OSError, is_dir: bool = False) -> str:
    """An ``OSError`` from stat/open/read in words."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied: cannot list the directory" if is_dir else "permission denied"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "symlink loop: the link resolves to itself"
    if exc.errno == errno.EISDIR:
        return "is a directory, not a file"
    return f"cannot read: {exc.strerror or exc}"


def read_bytes(path: str, max_bytes: int | None = None) -> bytes:
    """The file's bytes; ``UnreadableSource`` for a missing, special, unreadable or too large file."""
    limit = max_bytes or default_max_bytes()
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise UnreadableSource(path, f"broken symbolic link (points to {os.readlink(path)!r})") from None
        raise UnreadableSource(path, os_reason(exc)) from None
    if stat.S_ISDIR(st.st_mode):
        raise UnreadableSource(path, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableSource(path, "not a regular file (a device, FIFO or socket): not read")
    if st.st_size > limit:
        raise UnreadableSource(path, too_large(st.st_size, limit))
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)  # never more than the limit, whatever stat said
    except OSError as exc:
        raise UnreadableSource(path, os_reason(exc)) from None
    if len(data) > limit:
        raise UnreadableSource(path, too_large(len(data), limit))
    return data


def decode(data: bytes, language: str, path: str) -> SourceText:
    """``data`` as text (``language``: "triton" for Python, "cuda"); ``UnreadableSource`` otherwise."""
    nul = data.find(b"\x00")
    if nul >= 0:
        raise UnreadableSource(path, f"binary file (NUL byte at offset {nul}): not source text")
    encoding = _python_encoding(data, path) if language == "triton" else "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        if encoding in ("utf-8", "utf-8-sig"):
            why = "not UTF-8 text (binary, or another encoding" + (
                " without a coding cookie)" if language == "triton" else "; CUDA sources are read as UTF-8)")
        else:
            why = f"not valid {encoding} text (the encoding its coding cookie names)"
        raise UnreadableSource(path, f"{why}: byte 0x{data[exc.start]:02x} at offset {exc.start}", line) from None
    except LookupError:  # a codec name Python knows for source but cannot decode with
        raise UnreadableSource(path, f"its coding cookie names an encoding Python cannot decode ({encoding})", 1) from None
    return SourceText(text, encoding, len(data))


def _python_encoding(data: bytes, path: str) -> str:
    """PEP 263: the BOM or coding cookie of the first two lines; UTF-8 without either."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        msg = str(exc.msg if exc.msg else exc)
        if msg.startswith("invalid or missing encoding declaration"):
            return "utf-8"  # undecodable first lines and no cookie: the decode below says where
        if msg.startswith("unknown encoding"):
            raise UnreadableSource(path, f"its coding cookie names an unknown encoding ({msg.split(':', 1)[1].strip()})",
                                   _cookie_line(data)) from None
        if msg.startswith("encoding problem"):
            raise UnreadableSource(path, "a UTF-8 byte-order mark and a coding cookie naming another encoding",
                                   _cookie_line(data)) from None
        raise UnreadableSource(path, f"bad encoding declaration: {msg}", _cookie_line(data)) from None
    return encoding


def _cookie_line(data: bytes) -> int:
    first = data.split(b"\n", 2)[:2]
    return 2 if len(first) == 2 and b"coding" not in first[0] else 1


def read_source(path: str, language: str, max_bytes: int | None = None) -> SourceText:
    """Read and decode one source file (the rules above)."""
    return decode(read_bytes(path, max_bytes), language, str(path))


def write_source(path, text: str, encoding: str) -> None:
    """Write ``text`` in the encoding it was read with (so a coding cookie stays true), line ends as they are."""
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise UsageError(f"{path}: cannot be written in {encoding}, the source's encoding: "
                         f"{exc.object[exc.start]!r} at offset {exc.start}") from None
    with open(path, "wb") as fh:
        fh.write(data)


def read_written(path, encoding: str) -> str:
    """What ``write_source`` wrote, back as text (no newline translation)."""
    with open(path, "rb") as fh:
        return fh.read().decode(encoding)
