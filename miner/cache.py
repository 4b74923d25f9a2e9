"""Content keys for incremental mining.

A mined file is recorded in the catalog under the key
``sha256:<hex of the file's bytes>|miner:<fingerprint>``. The fingerprint hashes the
miner's own code (frontends, detectors) and the skeleton library, so findings
recorded by an older miner or against another library are re-mined instead of
served stale; an unchanged file under an unchanged miner is skipped without parsing.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

_MINER_DIR = Path(__file__).resolve().parent
_SKELETONS_DIR = _MINER_DIR.parent / "skeletons"


def content_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1)
def miner_fingerprint() -> str:
    """12 hex digits over the miner's Python files, every skeleton's metadata and its detector
    (``rule.py``: a changed condition changes the findings)."""
    h = hashlib.sha256()
    files = sorted(_MINER_DIR.rglob("*.py"))
    if _SKELETONS_DIR.is_dir():
        files += sorted(_SKELETONS_DIR.glob("*/skeleton.toml"))
        files += sorted(_SKELETONS_DIR.glob("*.py")) + sorted(_SKELETONS_DIR.glob("*/rule.py"))  # the detectors
    for f in files:
        if "__pycache__" in f.parts:
            continue
        try:
            h.update(str(f.relative_to(_MINER_DIR.parent)).encode())
            h.update(f.read_bytes())
        except OSError:
            continue
    return h.hexdigest()[:12]


def cache_key(data: bytes) -> str:
    return f"{content_digest(data)}|miner:{miner_fingerprint()}"
