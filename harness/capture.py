"""``skel capture``: run the user's own test or benchmark once, record the target file's launcher calls,
and write a spec that replays them.

The command runs in a child process whose PYTHONPATH starts with a hook folder (a ``sitecustomize`` and a
copy of ``recorder.py``), so every Python process of the run records; nothing is patched in this one.
The capture folder gets ``calls.json`` (what was recorded), ``call<i>.safetensors`` (the kept calls'
input tensors) and ``spec.py`` (``spec_<launcher>.py`` each when several launchers were called).
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from skel.harness.capture_merge import NothingCaptured, merge
from skel.harness.capture_plan import plan_specs
from skel.harness.capture_spec import render_spec
from skel.harness.launchers import Launcher, LauncherError, find_launchers, pick
from skel.harness.recording import Capture

DEFAULT_MAX_BYTES = 256 << 20
PYTHON_TOOLS = ("pytest",)  # run as `sys.executable -m TOOL`, so the recorder runs in this interpreter

SITECUSTOMIZE = '''\
"""skel capture's hook: install the recorder, then run any sitecustomize this one hides."""
import importlib
import os
import sys

import _skel_capture_recorder

_skel_capture_recorder.install()
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_ours = sys.modules.pop("sitecustomize")
try:
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.modules["sitecustomize"] = _ours  # the import that is running this file looks it up when done
'''


@dataclass(frozen=True)
class CaptureOptions:
    target: Path
    command: tuple[str, ...]
    entry: str | None = None
    output: Path | None = None  # None: a fresh folder under the captures folder beside the catalog
    force: bool = False
    per_signature: int = 2
    max_bytes: int = DEFAULT_MAX_BYTES
    catalog: Path | None = None


@dataclass(frozen=True)
class CaptureResult:
    folder: Path
    capture: Capture
    specs: tuple[Path, ...]
    problems: tuple[str, ...]  # launchers with kept calls that made no spec, and why

    def to_json(self) -> dict:
        return {"folder": str(self.folder), "specs": [str(p) for p in self.specs], "problems": list(self.problems),
                "capture": self.capture.to_json()}


class CaptureError(ValueError):
    """The capture cannot run or recorded nothing usable (a usage or input error; the message says why)."""


def capture(options: CaptureOptions, *, stdout=None) -> CaptureResult:
    target = options.target.expanduser().resolve()
    if not target.is_file():
        raise CaptureError(f"{options.target}: no such file")
    if not options.command:
        raise CaptureError("no command to run: give it after --, e.g. `skel capture --entry k.py -- python bench.py`")
    try:
        launchers = pick(find_launchers(target), options.entry)
    except LauncherError as exc:
        raise CaptureError(str(exc)) from None
    argv = resolve_command(options.command)
    folder = _prepare_folder(options, target)
    staging = folder / ".staging"
    staging.mkdir()
    try:
        _run(argv, target, launchers, staging, options, stdout)
        names = tuple(l.name for l in launchers)
        try:
            recorded = merge(staging, folder, target=str(target), command=options.command, cwd=os.getcwd(),
                             launchers=names, per_signature=options.per_signature)
        except NothingCaptured as exc:
            raise CaptureError(str(exc)) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (folder / "calls.json").write_text(json.dumps(recorded.to_json(), indent=1) + "\n", encoding="utf-8")
    plans, problems = plan_specs(recorded, {l.name: l.returns for l in launchers})
    specs = []
    for plan in plans:
        path = folder / plan.spec_file
        path.write_text(render_spec(plan, recorded), encoding="utf-8")
        specs.append(path)
    return CaptureResult(folder, recorded, tuple(specs), tuple(problems))


def resolve_command(command: tuple[str, ...]) -> list[str]:
    """``python``/``python3`` ... run as this interpreter, ``pytest`` as ``python -m pytest``; anything else
    is looked up on PATH (its Python processes record too when they can import torch and safetensors)."""
    head, rest = command[0], list(command[1:])
    name = os.path.basename(head)
    if name == "python" or (name.startswith("python") and name[6:].replace(".", "").isdigit()):
        return [sys.executable, *rest]
    if name in PYTHON_TOOLS:
        return [sys.executable, "-m", name, *rest]
    found = shutil.which(head)
    if found is None:
        raise CaptureError(f"command {head!r} not found on PATH")
    return [found, *rest]


def default_captures_dir(catalog: Path | None = None) -> Path:
    """``captures/`` beside the catalog (``~/.cache/skel/captures`` by default)."""
    from skel.catalog.store import resolve_catalog_path

    return resolve_catalog_path(catalog).parent / "captures"


def _prepare_folder(options: CaptureOptions, target: Path) -> Path:
    if options.output is None:
        base = default_captures_dir(options.catalog)
        stem = f"{target.stem}-{hashlib.sha1(str(target).encode()).hexdigest()[:8]}"
        base.mkdir(parents=True, exist_ok=True)
        for i in range(1, 10_000):  # a new folder each time: an earlier capture is never touched
            folder = base / (stem if i == 1 else f"{stem}-{i}")
            try:
                folder.mkdir()
                return folder
            except FileExistsError:
                continue
        raise CaptureError(f"{base}: too many captures of {target.name}; remove old ones")
    folder = options.output.expanduser().resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        if not options.force:
            raise CaptureError(f"{folder} exists and is not empty: pass --force to replace a capture there, "
                               "or choose another -o")
        if not (folder / "calls.json").is_file():
            raise CaptureError(f"{folder} is not a capture folder (no calls.json): --force replaces only a capture")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run(argv: list[str], target: Path, launchers: tuple[Launcher, ...], staging: Path,
         options: CaptureOptions, stdout) -> None:
    with tempfile.TemporaryDirectory(prefix="skel-capture-hook-") as hook:
        hook_dir = Path(hook)
        shutil.copyfile(Path(__file__).with_name("recorder.py"), hook_dir / "_skel_capture_recorder.py")
        (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        config = {"target": str(target), "launchers": [l.name for l in launchers], "staging": str(staging),
                  "per_signature": options.per_signature, "max_bytes": options.max_bytes}
        (hook_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, env.get("PYTHONPATH", "")) if p)
        env["SKEL_CAPTURE_CONFIG"] = str(hook_dir / "config.json")
        rc, tail = _tee(argv, env, stdout)
    if rc != 0:
        shown = "\n".join(tail) or "(nothing on stderr)"
        raise CaptureError(f"the command failed (exit {rc}): {' '.join(options.command)}\n{shown}")


def _tee(argv: list[str], env: dict[str, str], stdout) -> tuple[int, list[str]]:
    """Run ``argv``; its stderr goes through to ours and its last lines are kept for the error message."""
    try:
        proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.PIPE)
    except OSError as exc:
        raise CaptureError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    tail: collections.deque[str] = collections.deque(maxlen=20)

    def pump():
        sink = getattr(sys.stderr, "buffer", None)
        for raw in iter(proc.stderr.readline, b""):
            if sink is not None:
                sink.write(raw)
                sink.flush()
            else:
                sys.stderr.write(raw.decode("utf-8", "replace"))
            tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    reader.join()
    return rc, list(tail)
