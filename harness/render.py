"""An inferred harness as a readable ``spec.py`` (Jinja template ``templates/spec.py.j2``)."""
from __future__ import annotations

from pathlib import Path

import jinja2

from skel.harness.infer import BATCH_SWEEP, Harness

_TEMPLATES = Path(__file__).resolve().parent / "templates"


def _pytuple(items) -> str:
    return repr(tuple(items))


def _shape_args(values: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def shape_sets(h: Harness) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """ci: two interpreter-sized shapes (the second with odd sizes where the code allows them);
    decode: the batch-like dim over 1 ... 256 (and tokens 1 and 8), the others at model-like sizes; a
    flat tensor's numel over 1 ... 256 rows of 4096."""
    ci = [{d.name: d.ci[i] for d in h.dims} for i in (0, 1)]
    batch = next((d for d in h.dims if d.role == "batch"), None)
    flat = next((d for d in h.dims if d.role == "flat"), None) if batch is None else None
    tokens = next((d for d in h.dims if d.role == "tokens"), None)
    base = {d.name: d.decode for d in h.dims}
    decode = []
    for t in ((1, 8) if tokens else (None,)):
        for n in (BATCH_SWEEP if batch or flat else (None,)):
            shape = dict(base)
            if batch:
                shape[batch.name] = n
            elif flat:  # a flat tensor: the batch sweep times a model-like row of 4096
                shape[flat.name] = n * flat.decode
            if tokens:
                shape[tokens.name] = t
            if shape not in decode:
                decode.append(shape)
    return ci, decode


def render(h: Harness) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["pytuple"] = _pytuple
    ci, decode = shape_sets(h)
    return env.get_template("spec.py.j2").render(
        h=h, dims=[d.name for d in h.dims], value_code={v.name: v.code for v in h.values}, written=h.written,
        family=f"inferred:{h.path.stem}.{h.entry}", ci=[_shape_args(s) for s in ci],
        decode=[_shape_args(s) for s in decode], dispatch=h.dispatch,
        description=f"inferred from {h.path.name}: {h.entry} launching {h.kernel}",
        batch=next((d.name for d in h.dims if d.role == "batch"), "N"),
        slots_in_shape=" * ".join(f"shape[{d!r}]" for d in h.slots),
    )
