"""A capture's spec file: a ``SpecPlan`` rendered through ``templates/captured_spec.py.j2``."""
from __future__ import annotations

import datetime
import shlex
from pathlib import Path

from skel.harness.capture_plan import PlannedCall, SpecPlan
from skel.harness.recording import Capture, PlainArg, TensorArg


def render_spec(plan: SpecPlan, capture: Capture) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    tally = next(t for t in capture.tallies if t.launcher == plan.launcher)
    stem = Path(capture.target).stem
    return env.get_template("captured_spec.py.j2").render(
        launcher=plan.launcher, target=capture.target, date=datetime.date.today().isoformat(),
        command=shlex.join(capture.command), cwd=capture.cwd, kept=len(plan.calls),
        tally=f"{tally.calls} call(s) of {plan.launcher} with {tally.signatures} distinct signature(s)",
        outputs_note=_outputs_note(plan), inplace_note=_inplace_note(plan), notes=list(plan.notes),
        calls=[_call_context(p) for p in plan.calls], dtype=repr(plan.dtype),
        ci=[repr(s.label) for s in plan.ci], decode=[repr(s.label) for s in plan.decode],
        family=repr(f"captured_{stem}_{plan.launcher}"), entry=repr(plan.launcher),
        outputs=repr(plan.outputs), inplace=repr(plan.inplace),
        description=repr(f"{plan.launcher} of {capture.target}, captured from `{shlex.join(capture.command)}`"),
    )


def _outputs_note(plan: SpecPlan) -> str:
    compared = [o for o in plan.outputs if not o.startswith("_")]
    passed = [o for o in plan.outputs if o.startswith("_")]
    text = f"the launcher returned {len(plan.outputs)} value(s); compared: {', '.join(compared) or 'none'}"
    return text + (f"; passed over: {', '.join(passed)}" if passed else "")


def _inplace_note(plan: SpecPlan) -> str:
    if not plan.inplace:
        return "no recorded call changed a tensor input; every input must be left bit-identical."
    return (f"{', '.join(plan.inplace)}: changed by the recorded calls (compared after the call); every other "
            "tensor input must be left bit-identical.")


def _call_context(p: PlannedCall) -> dict:
    call, batch = p.call, p.batch
    tensors = call.tensors
    plain = {a.name: _plain_value(a) for a in call.plain}
    aliased = _aliases(tensors)
    origin = f"call {call.index} of its signature in process {call.pid}"
    if aliased:
        origin += f"; shared memory in the run, separate tensors here: {aliased}"
    return {
        "index": p.index, "origin": origin, "batch_note": _batch_note(batch), "file": repr(call.file),
        "args": repr(tuple(a.name for a in call.args)),
        "tensors": [f"{t.name!r}: ({t.shape!r}, {t.dtype!r}),{_tensor_note(t)}" for t in tensors],
        "plain": "{" + ", ".join(f"{k!r}: {v}" for k, v in plain.items()) + "}",
        "strides": {t.name: t.stride for t in tensors if not t.contiguous} or None,
        "batch": repr(batch.batch), "batched": repr(batch.batched if not batch.why_not else ()),
        "inplace": repr(call.modified), "outputs": repr({name: (shape, dtype) for name, shape, dtype in p.outputs}),
    }


def _plain_value(a: PlainArg) -> str:
    if a.kind == "dtype":
        return f"torch.{a.value}"
    value = tuple(a.value) if a.tuple and isinstance(a.value, list) else a.value
    return repr(value)


def _tensor_note(t: TensorArg) -> str:
    where = f"  # on {t.device}" if t.device != "cpu" else ""
    if t.storage_offset:
        where += f"{'; ' if where else '  # '}recorded at storage offset {t.storage_offset} (replayed at 0)"
    return where


def _batch_note(batch) -> str:
    if batch.why_not:
        return f"{batch.batch if batch.batch is not None else 'none'}; not scaled: {batch.why_not}"
    scaled = ", ".join(batch.batched)
    kept = f"; left as recorded: {', '.join(batch.kept)}" if batch.kept else ""
    assumed = " (one batch size was recorded: dim 0 equal to it is taken to be the batch)" if batch.assumed else ""
    return f"{batch.batch}; scaled with it: {scaled}{kept}{assumed}"


def _aliases(tensors: tuple[TensorArg, ...]) -> str:
    groups: dict[int, list[str]] = {}
    for t in tensors:
        if t.storage:
            groups.setdefault(t.storage, []).append(t.name)
    return "; ".join("=".join(names) for names in groups.values() if len(names) > 1)
