"""``Scope``: what a straight-line read of Python code knows (values, defining texts, nodes).

The launch reader (``triton_launch``) reads the module's top-level statements once, then, per
launch, the launching function up to the launch, and each ``if`` as two arms merged after. Each
of those is a layer over the one below: a function's scope does not copy the module's names, an
arm does not copy the function's, and merging two arms looks at the names they changed. Over a
file with thousands of module constants and launchers that is what keeps the read linear.

A merge must still give what merging every visible name would (``merge_names``): a name neither
arm touched changes only when its value is not equal to itself (a NaN becomes its text). Such
names are tracked as they are written, so finding them costs nothing per merge.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Callable, Iterator


class Layer(MutableMapping):
    """A mapping over another: writes and deletions stay in this layer, reads fall through."""

    __slots__ = ("base", "own", "gone", "on_change")

    def __init__(self, base: "Layer | None" = None, on_change: Callable[[str], None] | None = None):
        self.base, self.own, self.gone = base, {}, set()
        self.on_change = on_change

    def __getitem__(self, key: str) -> Any:
        layer = self
        while layer is not None:
            own = layer.own
            if key in own:
                return own[key]
            if key in layer.gone:
                break
            layer = layer.base
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        layer = self
        while layer is not None:
            if key in layer.own:
                return True
            if key in layer.gone:
                return False
            layer = layer.base
        return False

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: Any) -> None:
        self.own[key] = value
        self.gone.discard(key)
        if self.on_change:
            self.on_change(key)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self.own.pop(key, None)
        if self.base is not None and key in self.base:
            self.gone.add(key)
        if self.on_change:
            self.on_change(key)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        layer = self
        while layer is not None:
            for key in layer.own:
                if key not in seen:
                    seen.add(key)
                    yield key
            seen |= layer.gone
            layer = layer.base

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def touched(self) -> set[str]:
        return set(self.own) | self.gone


class Scope:
    """Resolved values (``env``), defining texts of unresolved names (``texts``) and the last
    defining expression of each (``nodes``); ``child()`` is a layer over this one."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent = parent
        root = parent is None
        self._dirty: set[str] = set()  # root only: names written since the quirks were last looked at
        self._quirks: set[str] = set()
        note = self._dirty.add if root else None
        self.env = Layer(None if root else parent.env, note)
        self.texts = Layer(None if root else parent.texts, note)
        self.nodes = Layer(None if root else parent.nodes, note)

    def child(self) -> "Scope":
        return Scope(self)

    def touched(self) -> set[str]:
        return self.env.touched() | self.texts.touched() | self.nodes.touched()

    def merge_names(self, a: "Scope", b: "Scope") -> set[str]:
        """The names a merge of arms ``a`` and ``b`` into this scope can change."""
        armed = a.touched() | b.touched()
        names = set(armed)
        scope = self
        while scope is not None:
            if scope.parent is None:
                for key in scope._dirty:  # kept up to date as the root is written
                    (scope._quirks.add if scope._quirk(key) else scope._quirks.discard)(key)
                scope._dirty.clear()
                names |= scope._quirks
            else:
                names |= scope.touched()
            scope = scope.parent
        return {n for n in names if n in armed or self._quirk(n)}

    def _quirk(self, key: str) -> bool:
        """A value not equal to itself (NaN): a merge turns it into its text even when no arm wrote it."""
        if key in self.env:
            value = self.env[key]
            return value != value
        return False
