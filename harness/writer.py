"""Where an inferred harness is written: a readable spec.py the gate loads like a hand-written one.

``inferred_spec`` infers (``infer``), renders (``render``) and writes the spec to the user's cache
(``$XDG_CACHE_HOME/skel/harness/<stem>-<digest>/spec.py``, keyed by the file's text and the options),
so ``skel apply`` and ``skel validate`` without a spec judge against exactly what ``skel harness``
would print, and the report can point at it.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from skel.harness.infer import Harness, infer
from skel.harness.render import render


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skel" / "harness"


def inferred_spec(path: Path, source: str, entry: str | None = None, variants: tuple[str, ...] = (),
                  dims: dict[str, int] | None = None) -> tuple[Path, Harness]:
    """(spec file, harness) for ``path``; raises HarnessError when none can be inferred."""
    harness = infer(path, source, entry, variants, dims)
    text = render(harness)
    key = json.dumps([str(path), source, entry, list(variants), sorted((dims or {}).items())])
    folder = cache_root() / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.py"
    if not spec.exists() or spec.read_text() != text:
        tmp = folder / ".spec.py.tmp"
        tmp.write_text(text)
        os.replace(tmp, spec)
    return spec, harness
