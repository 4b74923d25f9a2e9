"""What every rewrite returns.

A rewrite is a function ``(source: str, options: RewriteOptions) -> list[Rewrite]``, the
``rewrite`` of one skeleton folder's rule (``skeletons/SKnnn-*/rule.py``). It transforms the target's own code
(libcst codemod, template rendered from the kernel's structure, or a
launch-config change) and never substitutes a canned kernel. Results are
values, not exceptions (LibCST codemod style): a rewrite that does not apply
returns one ``Rewrite`` with status "skipped" and the reason; most rewrites
return one variant, a launch-config search returns several.

Contract every rewrite honours (tested per skeleton):
- unrelated code, comments and formatting are left as they were;
- applying it to its own output changes nothing (status "skipped", reason says
  it is already applied);
- the result parses.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from skel.device import DeviceProfile

APPLIED = "applied"
SKIPPED = "skipped"
FAILED = "failed"


@dataclass(frozen=True)
class Change:
    line: int  # line in the input source where the change starts
    description: str


@dataclass(frozen=True)
class Rewrite:
    skeleton: str  # e.g. "SK001"
    status: str  # applied | skipped | failed
    source: str  # the rewritten source (the input unchanged when skipped/failed)
    reason: str  # why skipped/failed, or a one-line summary of what was applied
    changes: tuple[Change, ...] = ()
    variant: str = ""  # a label for one of several variants, e.g. "BV=16,num_warps=2"
    params: tuple[tuple[str, Any], ...] = ()  # parameters chosen (launch configs, sub-tile counts)
    safety: str = "safe"  # safe | unsafe (from the skeleton; unsafe rewrites need --unsafe)

    @property
    def applied(self) -> bool:
        return self.status == APPLIED

    def to_json(self) -> dict:
        return {
            "skeleton": self.skeleton,
            "status": self.status,
            "reason": self.reason,
            "variant": self.variant,
            "params": dict(self.params),
            "safety": self.safety,
            "changes": [{"line": c.line, "description": c.description} for c in self.changes],
        }


@dataclass(frozen=True)
class RewriteOptions:
    kernel: str | None = None  # restrict to one kernel (by name) in a multi-kernel file
    # Launch-config search bounds and the target shape the search is pruned for.
    shape: tuple[tuple[str, int], ...] = ()
    max_variants: int = 8
    extra: tuple[tuple[str, Any], ...] = field(default=())
    # the smallest shape of the sweep (batch 1): the search also ranks variants by how they fill the device there
    small_shape: tuple[tuple[str, int], ...] = ()
    device: "DeviceProfile | None" = None  # None: skel.device.device_profile()


RewriteFn = Callable[[str, RewriteOptions], list[Rewrite]]


def skipped(code: str, source: str, reason: str) -> list[Rewrite]:
    return [Rewrite(code, SKIPPED, source, reason)]
