"""The recorder's staging folder (one set of files per process of the run) merged into one ``Capture``.

Calls are ordered by when they returned. A call whose tensor file is gone was replaced in its process
by a later sample; of the rest, per signature across all processes, the first call and the latest K-1
stay (their tensor files moved to ``call<i>.safetensors``, in call order).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from skel.harness.recording import Capture, LauncherTally, RecordedCall


class NothingCaptured(ValueError):
    """The run recorded nothing a spec can be made of; the message says what was seen."""


def merge(staging: Path, folder: Path, *, target: str, command: tuple[str, ...], cwd: str,
          launchers: tuple[str, ...], per_signature: int) -> Capture:
    modules = [json.loads(p.read_text()) for p in sorted(staging.glob("*.module.json"))]
    raw = [json.loads(line) for p in sorted(staging.glob("*.calls.jsonl")) for line in p.read_text().splitlines() if line]
    counts: dict[str, dict] = {}
    for p in sorted(staging.glob("*.counts.json")):
        for key, entry in json.loads(p.read_text()):
            into = counts.setdefault(key, {"launcher": entry["launcher"], "calls": 0})
            into["calls"] += entry["calls"]
    logs = [line for p in sorted(staging.glob("*.log")) for line in p.read_text().splitlines() if line]
    _explain_nothing(modules, raw, target, command, launchers, logs)
    raw.sort(key=lambda r: r["time"])
    held = [r for r in raw if r["file"] is not None and (staging / r["file"]).is_file()]
    chosen: dict[str, list[dict]] = {}
    for r in held:
        chosen.setdefault(r["signature"], []).append(r)
    keep = {id(r) for rs in chosen.values() for r in (rs[:1] + rs[1:][-(per_signature - 1):] if per_signature > 1 else rs[:1])}
    calls, unkept_seen = [], set()
    for r in raw:
        if id(r) in keep:
            label = f"call{sum(1 for c in calls if c.file)}"
            os.replace(staging / r["file"], folder / f"{label}.safetensors")
            calls.append(RecordedCall.from_raw(r, label, f"{label}.safetensors"))
        elif r["file"] is None and r["signature"] not in chosen and r["signature"] not in unkept_seen:
            unkept_seen.add(r["signature"])
            calls.append(RecordedCall.from_raw(r, f"skipped{len(unkept_seen) - 1}", None))
    tallies = tuple(
        LauncherTally(name, sum(e["calls"] for e in counts.values() if e["launcher"] == name),
                      sum(1 for e in counts.values() if e["launcher"] == name),
                      sum(1 for c in calls if c.launcher == name and c.file))
        for name in launchers if any(e["launcher"] == name for e in counts.values())
    )
    nbytes = sum((folder / c.file).stat().st_size for c in calls if c.file)
    notes = tuple(f"not kept: {c.launcher} {_shapes(c)}: {c.skipped}" for c in calls if c.file is None) + tuple(logs)
    return Capture(target, command, cwd, launchers, tallies, tuple(calls), notes, nbytes)


def _explain_nothing(modules: list[dict], raw: list[dict], target: str, command: tuple[str, ...],
                     launchers: tuple[str, ...], logs: list[str]) -> None:
    cmd = " ".join(command)
    if not modules:
        raise NothingCaptured(
            f"nothing captured: {target} was never imported by the run (was `{cmd}` running this file? "
            "It must be imported as a module: a file run as the main script, or loaded by path through "
            "importlib.util.spec_from_file_location, is not seen)")
    if not raw:
        names = sorted({m["module"] for m in modules})
        raise NothingCaptured(
            f"nothing captured: {target} was imported (as {', '.join(names)}) but none of its launchers "
            f"({', '.join(launchers)}) was called: was `{cmd}` running this file's kernels?"
            + (f" Recorder log: {'; '.join(logs[-3:])}" if logs else ""))
    if not any(r["file"] for r in raw):
        reasons = sorted({r["skipped"] for r in raw if r["skipped"]})
        raise NothingCaptured(f"nothing captured: no call could be kept ({'; '.join(reasons)})")


def _shapes(call: RecordedCall) -> str:
    return ", ".join(f"{t.name}{list(t.shape)}" for t in call.tensors)
