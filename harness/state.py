"""What one inference holds while it reads a launcher and its kernel: the facts of both, the launch's
binding of kernel parameters to the launcher's expressions, the shapes found so far, and notes."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from skel.harness.kernel_facts import KernelFacts, PointerUse
from skel.harness.launcher_facts import LauncherFacts
from skel.harness.sizes import Size

POOL = "POOL"  # the leading dim of a state pool indexed by slot indices


class HarnessError(Exception):
    """No harness can be inferred; the message says what and where."""


def instead(path=None) -> str:
    """What a user whose kernel skel cannot read does instead (the end of every refusal): capture real calls,
    which needs no inference, else write the spec."""
    name = getattr(path, "name", None) or "FILE.py"
    return (f"record real calls instead (skel capture --entry {name} -o DIR -- YOUR_TEST_OR_BENCHMARK), or write"
            " the spec by hand (README: A hand-written spec; examples/fla_delta_rule/spec.py)")


@dataclass
class State:
    lf: LauncherFacts
    kf: KernelFacts
    binding: dict[str, str]  # kernel param -> launcher name/expression
    shapes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    grid: tuple[tuple[str, ...] | None, ...] = ()  # each grid axis as the launcher dims it spans (None: not dims)
    sizes: dict[str, Size] = field(default_factory=dict)  # sizes computed from dims (NT = cdiv(T, BT))
    free: set[str] = field(default_factory=set)  # required int arguments the sizes are made of (chunk_size)
    rows: dict[str, str] = field(default_factory=dict)  # program id over rows the launcher counts -> its dim
    why: dict[str, str] = field(default_factory=dict)  # tensor -> why its layout cannot be read (for the refusal)
    counted: set[str] = field(default_factory=set)  # counts the launcher splits a packed width into (harness.packed)



def param_of(st: State, expr: str) -> str | None:
    name = st.lf.aliases.get(expr, expr)
    return name if st.lf.param(name) else None


def pointer(st: State, tensor: str) -> PointerUse | None:
    """How the kernel uses ``tensor`` through every pointer parameter bound to it (h0 and ht may be one)."""
    uses = [st.kf.pointers[k] for k, e in st.binding.items() if param_of(st, e) == tensor and k in st.kf.pointers]
    if not uses:
        return None
    first = next((u for u in uses if u.loaded), uses[0])
    return replace(first, loaded=any(u.loaded for u in uses), stored=any(u.stored for u in uses))


def kernel_param(st: State, tensor: str) -> str | None:
    return next((k for k, e in st.binding.items() if param_of(st, e) == tensor and k in st.kf.pointers), None)
