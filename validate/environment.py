"""Where a verdict was measured: GPU, driver, CUDA, torch, triton, Python, skel, the target's commit, the date.

Recorded with every verdict (the catalog's ``validation_runs``, their ``extra``) and carried by reports and
``skel results export``, so that a number can always be traced to the machine and code that produced it.
Nothing here is measured; every fact is read (``nvidia-smi`` or ``/proc/driver/nvidia/version`` for the
driver, ``git`` in the target's folder for the commit), and a fact that cannot be read is "".
"""
from __future__ import annotations

import datetime as _dt
import platform
import re
import subprocess
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@dataclass(frozen=True)
class Environment:
    gpu: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    python: str = ""
    skel: str = ""
    commit: str = ""  # the target's git commit ("+dirty" when the file has uncommitted changes)
    date: str = ""  # ISO 8601 UTC

    def to_json(self) -> dict:
        return asdict(self)

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """As ``ValidationRun.extra`` entries (gpu, torch and triton have columns of their own)."""
        return tuple((k, v) for k, v in asdict(self).items() if k not in ("gpu", "torch", "triton", "date") and v)


def current(target: str | Path | None = None, device: str = "cpu", gpu: str = "", driver: str = "") -> Environment:
    """The environment of this process; ``gpu``/``driver`` as a worker reported them, when it did."""
    cuda = ""
    if device == "cuda":
        try:
            import torch

            cuda = torch.version.cuda or ""
            gpu = gpu or torch.cuda.get_device_name()
        except Exception:  # no usable CUDA here: the facts stay empty rather than guessed
            pass
        driver = driver or nvidia_driver()
    return Environment(gpu=gpu, driver=driver, cuda=cuda, torch=_version("torch"), triton=_version("triton"),
                       python=platform.python_version(), skel=_version("skel"),
                       commit=git_commit(target) if target else "",
                       date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def nvidia_driver() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
        if m:
            return m.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
        return out.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_commit(target: str | Path) -> str:
    """HEAD of the git checkout holding ``target``, with "+dirty" when ``target`` differs from it; "" outside git."""
    path = Path(target).resolve()
    folder = path if path.is_dir() else path.parent
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return ""
        commit = head.stdout.strip()
        if path.is_file():
            dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", path.name],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if dirty:
                commit += "+dirty"
        return commit
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return ""
