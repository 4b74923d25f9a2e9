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

TEMPLATES = Path(__file__).parent / "_templates" / "scaffold"  # Jinja; "_": the library loader passes it over


def _render(template: str, **values) -> str:
    from skel.catalog.render import render

    return render(TEMPLATES, template, **values)


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
    (folder / "skeleton.toml").write_text(_render("skeleton.toml.j2", code=code, name=name), encoding="utf-8")
    (folder / "rule.py").write_text(_render("rule.py.j2", code=code, name=name, cls=cls), encoding="utf-8")
    (folder / "docs.md").write_text(_render("docs.md.j2", code=code, name=name, headings=DOC_HEADINGS).rstrip("\n")
                                    + "\n", encoding="utf-8")
    before = _render("before.py.j2", code=code)
    (folder / "examples" / "before.py").write_text(before, encoding="utf-8")
    after = before.replace("x / 2.0", "x * 0.5")  # what rewrite(before.py) must produce
    (folder / "examples" / "after.py").write_text(after, encoding="utf-8")
    return folder
