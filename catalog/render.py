"""Jinja environments for the text and code skel generates (``*.j2`` in a templates folder beside the module that
uses them: pipeline/templates/, skeletons/_templates/):
the agent brief, promoted rules (skeleton.toml, docs.md), dispatch wrappers. One configuration for all:
undefined names are errors, blocks leave no stray blank lines, trailing newlines are kept, no HTML escaping.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path


def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


@lru_cache(maxsize=None)
def environment(folder: str):
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["toml"] = toml_string
    env.filters["fmt"] = lambda v: f"{v:.4g}"
    return env


def render(folder: Path | str, template: str, **values) -> str:
    return environment(str(folder)).get_template(template).render(**values)
