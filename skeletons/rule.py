"""What a skeleton's ``rule.py`` subclasses, and how a folder's rule is found.

A rule folder ``SKnnn-name/`` holds one ``rule.py`` with one ``Rule`` subclass (or, for an
expression-level skeleton, ``[[pattern]]`` tables in ``skeleton.toml`` and no ``rule.py``).
The class states everything the rest of skel derives:

  CONDITIONS  condition id (exactly as in ``skeleton.toml``) -> predicate ``(Ctx) -> Check``,
              evaluated on the shared static analysis (``skel.miner.detectors.base.Ctx``)
  instances   ``(Ctx) -> list[Hit]``: where the technique is already used (evidence)
  sites       ``(Ctx) -> list[Hit]``: where an opportunity points, when every condition holds
  rewrite     optional ``(source, RewriteOptions) -> list[Rewrite]``; each result carries
              its own safety (``SAFETY`` unless the rule says otherwise per edit)
  SAFETY      safe (bitwise or reassociation-free) | unsafe (rounding, reduction order)
  KIND        codemod | template | launch-search | pattern

Derived, never typed: availability (``always`` with a rewrite, ``never`` without), whether
the rewrite is a search applied last (``KIND == "launch-search"``). Applicability is decided
once: ``skel match``/``apply``/``prompt`` report an opportunity only where the conditions
hold *and* the rewrite produces a candidate (``confirm``), and the invariant test
(tests/test_rule_invariant.py) proves conditions and rewrite agree on every example,
fixture, target and a real-corpus sample.

``rule.py`` files are loaded by path under a stable module name (``skel_rule_sk001_<hash of its path>``): the
folder names (``SK001-rsqrt-...``) are not Python identifiers, and a user's rule folder is
not a package. A rule file reads its own code with ``folder_code(__file__)``.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Mapping

from skel.catalog.records import reported
from skel.miner.detectors.base import Check, ConditionResult, Ctx, Hit

SAFETIES = ("safe", "unsafe")
REWRITE_APPLIES = "rewrite-applies"  # the pseudo-condition a confirmed evaluation may add
KERNEL_ONLY = "kernel-level"  # the pseudo-condition a kernel-level rule reports on a helper
KINDS = ("codemod", "template", "launch-search", "pattern")


def folder_code(file: str) -> str:
    """The skeleton code of the folder holding ``file`` (its name starts with it: ``SK001-...``)."""
    return Path(file).resolve().parent.name[:5].upper()


@dataclass(frozen=True)
class Detection:
    """One rule on one kernel: every condition's result, the instances, and the opportunities."""

    conditions: tuple[ConditionResult, ...]
    instances: tuple[Hit, ...]
    opportunities: tuple[Hit, ...]

    @property
    def holds(self) -> bool:
        return all(c.holds for c in self.conditions)


class Rule:
    """Base class of every skeleton rule (see the module docstring for the contract)."""

    code: ClassVar[str] = ""  # set by the loader from the folder (skeleton.toml is the one place it is typed)
    SAFETY: ClassVar[str] = "safe"
    KIND: ClassVar[str] = "codemod"
    LANGUAGES: ClassVar[tuple[str, ...]] = ("triton", "cuda")
    CONDITIONS: ClassVar[Mapping[str, Callable[[Ctx], Check]]] = {}
    rewrite: ClassVar[Callable | None] = None
    # True: the conditions read only the function's own body, so on a jit helper / __device__
    # function they hold wherever it is inlined, and its findings count for the kernels that call
    # it (miner/interproc.py). False: they need the kernel's grid, launch or launcher, which a
    # helper does not have; the rule is judged on the kernels only.
    HELPERS: ClassVar[bool] = True
    # With HELPERS False: True when the rule's instances (a technique already used) read only the
    # function's own body, so that a helper's instances count for its callers even though the
    # opportunity conditions are judged on kernels only.
    HELPER_INSTANCES: ClassVar[bool] = False

    # -- derived metadata ----------------------------------------------------------------------
    @classmethod
    def availability(cls) -> str:
        return "always" if cls.rewrite is not None else "never"

    @classmethod
    def search_last(cls) -> bool:
        """A launch-config search multiplies candidates: it is applied on top of the others, last."""
        return cls.KIND == "launch-search"

    # -- detection -------------------------------------------------------------------------------
    def instances(self, ctx: Ctx) -> list[Hit]:
        return []

    def sites(self, ctx: Ctx) -> list[Hit]:
        return []

    def check(self, cond_id: str, ctx: Ctx) -> Check:
        pred = self.CONDITIONS.get(cond_id)
        if pred is None:
            raise KeyError(f"{self.code}: condition {cond_id!r} has no predicate in its rule")
        key = f"{self.code}:{cond_id}"
        if key not in ctx.cache:
            ctx.cache[key] = pred(ctx)
        return ctx.cache[key]

    def applies_to(self, ctx: Ctx) -> bool:
        return ctx.p.language in self.LANGUAGES

    def evaluate(self, ctx: Ctx, ids: tuple[str, ...] | None = None, confirm: bool = False) -> tuple[ConditionResult, ...]:
        """Every condition (``ids``: the library's order, default the class's), with its evidence.

        ``confirm``: where every condition holds and the rule has a rewrite, the rewrite is run on
        the kernel, and a rewrite that produces no candidate adds the failing pseudo-condition
        ``rewrite-applies`` with its reason, so that what is reported applicable is what the rewrite
        can do (``skel match``, ``apply``, ``prompt``; mining, at corpus scale, does not confirm)."""
        if not self.applies_to(ctx):
            langs = ", ".join(self.LANGUAGES)
            return (ConditionResult("language", False, f"{self.code}'s detector reads {langs} kernels only, not {ctx.p.language}"),)
        if not self.HELPERS and ctx.p.kind == "device-function":
            return (ConditionResult(KERNEL_ONLY, False, f"{ctx.p.name} is a helper with no grid, launch or launcher of "
                                                        f"its own: {self.code} is judged on the kernels that call it"),)
        results = tuple(self.check(cid, ctx).result(cid) for cid in (ids or tuple(self.CONDITIONS)))
        if confirm and self.rewrite is not None and ctx.p.language == "triton" and all(r.holds for r in results):
            reason = self.confirm(ctx.source, ctx.p.name)
            if reason is not None:
                results += (ConditionResult(REWRITE_APPLIES, False,
                                            f"the conditions hold but the rewrite produces no candidate: {reason}"),)
        return results

    def detect(self, ctx: Ctx, every_condition: bool = True) -> Detection:
        """Instances, and opportunities where every condition holds (never at a site already using it).

        ``every_condition=False`` (mining, which keeps the findings only): the conditions are checked in
        order up to the first that fails, and the Detection's conditions end there; the instances and
        opportunities are the same (measured: 40 % of the detectors' time on a file of small kernels)."""
        if not self.applies_to(ctx) or (not self.HELPERS and ctx.p.kind == "device-function"):
            helper_instances = self.applies_to(ctx) and self.HELPER_INSTANCES
            return Detection(self.evaluate(ctx), tuple(self.instances(ctx)) if helper_instances else (), ())
        results = self.evaluate(ctx) if every_condition else self._up_to_first_failure(ctx)
        instances = tuple(self.instances(ctx))
        if not all(r.holds for r in results):
            return Detection(results, instances, ())
        used = {h.line for h in instances}
        sites = tuple(h for h in self.sites(ctx) if h.line not in used)
        contract = ctx.file.exact_contract if self.SAFETY == "unsafe" else None
        if contract:  # the rewrite changes rounding where the code promises bit-exact results: say so
            note = (("caveat", f"the file states a bit-exact contract ({contract}); this rewrite changes rounding"),)
            sites = tuple(Hit(h.line, h.end_line, h.params + note) for h in sites)
        return Detection(results, instances, sites)

    def _up_to_first_failure(self, ctx: Ctx) -> tuple[ConditionResult, ...]:
        results = []
        for cid in self.CONDITIONS:
            results.append(self.check(cid, ctx).result(cid))
            if not results[-1].holds:
                break
        return tuple(results)

    # -- the rewrite, as the one judge of applicability where there is one ----------------------
    def confirm(self, source: str, kernel: str, options=None) -> str | None:
        """None when the rewrite produces a candidate for ``kernel`` of ``source``, else its reason.
        A rule without a rewrite confirms nothing and refuses nothing (None)."""
        if self.rewrite is None:
            return None
        import dataclasses

        from skel.rewriter.base import RewriteOptions

        # one candidate answers the question: a search stops at its first variant that applies
        results = type(self).rewrite(source, dataclasses.replace(options or RewriteOptions(), kernel=kernel,
                                                                 max_variants=1))
        if any(r.applied for r in results):
            return None
        return results[0].reason if results else "the rewrite returned nothing"


def load_rule_class(path: Path, code: str) -> type[Rule]:
    """Import ``path`` (a rule.py) under ``skel_rule_<code>_<path hash>`` and return its one ``Rule`` subclass.

    Raises ``RuleLoadError`` with the file and the reason (an import error, no class, two classes)."""
    name = f"skel_rule_{code.lower()}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuleLoadError(path, None, "cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise RuleLoadError(path, exc.lineno, f"does not parse: {exc.msg}") from None
    except Exception as exc:  # a user's rule must not stop the run: report it
        sys.modules.pop(name, None)
        raise RuleLoadError(path, _line_in(exc, path), f"import failed: {type(exc).__name__}: {exc}") from None
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, Rule) and v is not Rule and v.__module__ == name]
    if len(classes) != 1:
        found = ", ".join(c.__name__ for c in classes) or "none"
        raise RuleLoadError(path, None, f"must define exactly one Rule subclass (found: {found})")
    cls = classes[0]
    cls.code = code
    if cls.rewrite is not None:
        cls.rewrite = staticmethod(gated(cls, cls.rewrite))
    return cls


def gated(cls: type[Rule], raw: Callable) -> Callable:
    """``raw`` run only where the rule's conditions report an opportunity: the conditions decide
    applicability, once; the rewrite says how. Where none holds, the result is a skip naming the
    first failing condition. (The invariant test checks the other direction: where they hold, the
    rewrite must produce a candidate.)"""
    from skel.rewriter.base import SKIPPED, Rewrite, RewriteOptions

    def rewrite(source: str, options: RewriteOptions = RewriteOptions()) -> list:
        why = _no_opportunity(cls, source, options.kernel)
        if why is not None:
            return [Rewrite(cls.code, SKIPPED, source, f"not applicable: {why}", safety=cls.SAFETY)]
        return raw(source, options)

    rewrite.__doc__ = raw.__doc__
    rewrite.raw = raw  # the rewrite alone, for tests of its own refusals
    return rewrite


def _no_opportunity(cls: type[Rule], source: str, kernel: str | None) -> str | None:
    """None when some kernel of ``source`` (``kernel`` only, if named) has an opportunity of the rule."""
    profiles = _profiles(source)
    if isinstance(profiles, str):
        return None  # does not parse: the rewrite reports that itself, as a failed value
    profiles = reported(profiles)  # the kernels (or the helpers of a file without one), as match reports
    rule = cls()
    first = None
    for p in profiles:
        if kernel and p.name != kernel:
            continue
        found = rule.detect(Ctx(p, source))
        if found.opportunities:
            return None
        failing = next((c for c in found.conditions if not c.holds), None)
        if first is None:
            first = f"{p.name}: {failing.id}: {failing.detail}" if failing else \
                f"{p.name}: the conditions hold but no site is left (already applied)"
    return first or "no @triton.jit kernel" + (f" named {kernel}" if kernel else "")


@functools.lru_cache(maxsize=8)
def _profiles(source: str):
    from skel.miner.triton_frontend import profile_source

    try:
        return tuple(profile_source(source, "<rewrite>"))  # kernels and jit helpers: a rewrite may touch both
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"


class RuleLoadError(Exception):
    def __init__(self, path: Path, line: int | None, message: str):
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line or ''}: {message}")


def _line_in(exc: BaseException, path: Path) -> int | None:
    tb = exc.__traceback__
    line = None
    where = Path(path).resolve()
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == where:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
