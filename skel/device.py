"""The GPU a run is for: which one (``--device cuda:N``) and what it has (SM count, L2 size).

Decisions that depend on the device read a ``DeviceProfile`` instead of an H200's numbers:
the launch search sizes grids against ``sm_count``, the gate rotates inputs past ``l2_bytes``,
the split-KV detector compares batch x heads with ``sm_count``. The profile is, in order:
- ``SKEL_DEVICE_PROFILE``: JSON ``{"name": ..., "sm_count": ..., "l2_bytes": ...}`` (a device to plan
  for without having it, e.g. mining on a laptop for an H100, or a test faking a small GPU);
- the CUDA device in use, read from the driver (only where the caller allows importing torch);
- else an H200's figures, marked ``assumed`` wherever they are shown.

``select_device`` turns ``cuda:N`` into the only GPU this process and its workers see
(``CUDA_VISIBLE_DEVICES``), so every worker, timer and allocation is on that GPU without
passing an index through the gate; it must run before CUDA is initialised.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass

from skel.errors import UsageError

ENV = "SKEL_DEVICE_PROFILE"
DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    sm_count: int
    l2_bytes: int
    source: str  # "cuda" (read from the device), "SKEL_DEVICE_PROFILE" or "assumed"

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        where = {"cuda": "read from the device", ENV: f"from {ENV}"}.get(self.source, "assumed: no GPU visible")
        return f"{self.name}: {self.sm_count} SMs, {self.l2_bytes / 2**20:g} MiB L2 ({where})"


ASSUMED = DeviceProfile("NVIDIA H200", 132, 60 * 2**20, "assumed")


def _from_env() -> DeviceProfile | None:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        value = json.loads(raw)
        return DeviceProfile(str(value.get("name", "custom device")), int(value["sm_count"]), int(value["l2_bytes"]), ENV)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{ENV}: expected JSON with sm_count and l2_bytes (and a name), got {raw!r} ({exc})") from None


def device_profile(probe: bool = False) -> DeviceProfile:
    """The profile decisions use. ``probe``: read the CUDA device (imports torch); otherwise only when torch is
    already imported by this process (static mining never pays for importing torch)."""
    env = _from_env()
    if env is not None:
        return env
    if probe or "torch" in sys.modules:
        try:
            import torch

            if torch.cuda.is_available():
                read = read_device()
                return DeviceProfile(read.name, read.sm_count, read.l2_bytes or ASSUMED.l2_bytes, "cuda")
        except Exception:  # noqa: BLE001 - a broken CUDA install plans for the assumed device
            pass
    return ASSUMED


def read_device() -> DeviceProfile:
    """The CUDA device in use, as its driver reports it (an L2 size it does not report is 0). Needs CUDA."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return DeviceProfile(props.name, int(props.multi_processor_count), int(getattr(props, "L2_cache_size", 0)), "cuda")


def select_device(arg: str | None) -> str | None:
    """``cpu`` / ``cuda`` / ``cuda:N`` -> the device name the gate uses (``cpu`` or ``cuda``; None: decide later).
    ``cuda:N`` makes GPU N the only one visible to this process and its workers."""
    if arg is None:
        return None
    m = DEVICE.match(arg.strip())
    if not m:
        raise UsageError(f"--device {arg}: expected cpu, cuda or cuda:N (N a GPU index)")
    kind, index = m.group(1), m.group(2)
    if index is None:
        return kind
    if kind == "cpu":
        raise UsageError(f"--device {arg}: cpu takes no index")
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_initialized():
            raise UsageError(f"--device {arg}: CUDA is already initialised in this process; choose the GPU before it "
                             "(CUDA_VISIBLE_DEVICES)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if int(index) >= len(ids):
            raise UsageError(f"--device {arg}: only {len(ids)} GPU(s) visible (CUDA_VISIBLE_DEVICES={visible})")
        chosen = ids[int(index)]
    else:
        chosen = index
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise UsageError(f"--device {arg}: no such GPU on this machine (torch sees none with "
                         f"CUDA_VISIBLE_DEVICES={chosen})")
    return "cuda"
