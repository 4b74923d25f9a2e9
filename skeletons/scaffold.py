"""`skel new SKnnn-name [--dir DIR]`: a rule folder to fill in, that passes `skel catalog check`.

The scaffold is a Python rule (``rule.py``) with one condition and a rewrite through the pattern
engine, and examples whose golden check fails until the rule is written: ``examples/after.py``
shows what the rewrite must produce (`skel catalog check --golden --library DIR` says what differs).
"""
from __future__ import annotations

import re
from pathlib import Path

from skel.skeletons.library import CODE_RE, DOC_HEADINGS, NAME_RE
from skel.errors import UsageError

_TOML = '''code = "{code}"
name = "{name}"
title = "TODO: one line saying what the rewrite does"
category = "compute"
lifecycle = "preview"
targets = ["triton"]
families = []
conflicts = []
enables = []

[[conditions]]
id = "has-pattern"
holds = "TODO: what is true of a kernel the rewrite applies to"
fails = "TODO: the reason shown when it is not"

[transformation]
method = "TODO: how the rewrite is done, in words"

[constraints]
registers = "TODO"
shared_memory = "TODO"
warps = "TODO"
occupancy = "TODO"
grows_with = "TODO"

[[provenance]]
repo = "TODO: where the technique was seen"
path = "TODO"
line = 1
version = "TODO"
'''

_RULE = '''"""{code} {name}: TODO (conditions on the shared analysis, and the rewrite)."""
from __future__ import annotations

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.rewriter.base import RewriteOptions
from skel.rewriter.pattern import apply_pattern
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
BEFORE, AFTER = "TODO_BEFORE($1)", "TODO_AFTER($1)"  # TODO: the expression this rule rewrites, with holes


def _sites(ctx: Ctx) -> list[int]:
    """Lines of the kernel where the rewrite would change something (TODO: the real analysis)."""
    return [ln for ln in ctx.body if "TODO_BEFORE(" in ctx.text(ln)]


def has_pattern(ctx: Ctx) -> Check:
    lines = _sites(ctx)
    return yes(f"line {{lines[0]}}: {{ctx.text(lines[0])}}", [Hit.at(ln) for ln in lines]) if lines else no("TODO: why not")


def rewrite(source: str, options: RewriteOptions = RewriteOptions()):
    edits = [{{"kind": "replace", "before": BEFORE, "after": AFTER}}]
    return [apply_pattern(CODE, source, edits, [{{"id": "in-jit-function"}}], safety=SAFETY)]


SAFETY = "unsafe"  # TODO: "safe" only when the rewrite keeps every bit


class {cls}(Rule):
    """TODO: one line."""

    SAFETY = SAFETY
    LANGUAGES = ("triton",)
    CONDITIONS = {{"has-pattern": has_pattern}}

    def sites(self, ctx):
        return [Hit.at(ln) for ln in _sites(ctx)]

    rewrite = staticmethod(rewrite)
'''

_BEFORE = '''"""{code} example (TODO: before.py is a kernel the rule applies to, after.py what its rewrite makes of it)."""
import triton
import triton.language as tl


@triton.jit
def example_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, x / 2.0, mask=offs < n)
'''


def scaffold(spec: str, where: Path) -> Path:
    """Write ``where/<spec>/`` (``spec`` = ``SKnnn-name``); UsageError when the name or folder is wrong."""
    m = re.fullmatch(r"(SK\d{3})-([a-z0-9]+(?:-[a-z0-9]+)*)", spec)
    if not m or not CODE_RE.match(m.group(1)) or not NAME_RE.match(m.group(2)):
        raise UsageError(f"{spec!r}: expected SKnnn-name (e.g. SK901-halve-by-multiply: lower-case words joined by -)")
    code, name = m.groups()
    where = Path(where)
    if not where.is_dir():
        raise UsageError(f"--dir {where}: no such folder")
    folder = where / spec
    if folder.exists():
        raise UsageError(f"{folder}: already exists; refusing to write over it")
    cls = "".join(w.capitalize() for w in name.split("-"))
    (folder / "examples").mkdir(parents=True)
    (folder / "skeleton.toml").write_text(_TOML.format(code=code, name=name), encoding="utf-8")
    (folder / "rule.py").write_text(_RULE.format(code=code, name=name, cls=cls), encoding="utf-8")
    docs = [f"# {code} {name}", ""] + [line for h in DOC_HEADINGS for line in (f"## {h}", "TODO", "")]
    (folder / "docs.md").write_text("\n".join(docs), encoding="utf-8")
    (folder / "examples" / "before.py").write_text(_BEFORE.format(code=code), encoding="utf-8")
    after = _BEFORE.format(code=code).replace("x / 2.0", "x * 0.5")  # what rewrite(before.py) must produce
    (folder / "examples" / "after.py").write_text(after, encoding="utf-8")
    return folder
