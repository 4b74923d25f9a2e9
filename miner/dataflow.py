"""Questions over a kernel's dataflow graph (``KernelProfile.dataflow``).

Node names (set by the frontends, see ``triton_body``):
- ``NAME`` - a kernel parameter (``V``, ``q``);
- ``NAME@LINE`` - the value assigned to ``NAME`` at ``LINE`` (``b_q@157``; a loop
  variable is defined at its ``for`` line; ``b_h *= x`` defines ``b_h@LINE``);
- ``pid:AXIS`` - ``tl.program_id(AXIS)`` (``blockIdx.x`` is ``pid:0`` in CUDA);
- ``load@LINE`` / ``store@LINE`` / ``atomic@LINE`` (``#2``, ``#3`` for more on one line) -
  a memory operation; its address is the separate node ``load@LINE:addr``.
An edge ``a -> b`` means b is computed from a. Values carried around a loop's back
edge form cycles (``p_q@219 -> p_q@219``).

These helpers are pure Python (no networkx) because mining calls them per kernel.
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

from skel.catalog.records import KernelProfile, Loop, MemOp

_LINE = re.compile(r"@(\d+)")


def node_var(node: str) -> str:
    """``b_q@157`` -> ``b_q``; ``pid:0`` -> ``pid:0``; ``V`` -> ``V``."""
    return node.split("@", 1)[0]


def node_line(node: str) -> int | None:
    m = _LINE.search(node)
    return int(m.group(1)) if m else None


class Graph:
    """Adjacency over an edge list, with the reachability queries the miner needs."""

    def __init__(self, edges: Iterable[tuple[str, str]]):
        self.succ: dict[str, set[str]] = defaultdict(set)
        self.pred: dict[str, set[str]] = defaultdict(set)
        self.nodes: set[str] = set()
        for a, b in edges:
            self.succ[a].add(b)
            self.pred[b].add(a)
            self.nodes.update((a, b))

    def ancestors(self, starts: Iterable[str]) -> set[str]:
        return _reach(starts, self.pred)

    def descendants(self, starts: Iterable[str]) -> set[str]:
        return _reach(starts, self.succ)


def _reach(starts: Iterable[str], adj: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(starts)
    while stack:
        n = stack.pop()
        for m in adj.get(n, ()):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def _graph(profile_or_graph) -> Graph:
    if isinstance(profile_or_graph, Graph):
        return profile_or_graph
    return Graph(profile_or_graph.dataflow)


def resolve_nodes(profile: KernelProfile, node_or_var: str, graph: Graph | None = None) -> set[str]:
    """A node name as is; a bare variable name -> all its definitions (``i_v`` -> {``i_v@86``}).

    A role ("v-tile", "head") names the variables the frontend gave that role.
    """
    g = graph or _graph(profile)
    if node_or_var in g.nodes and ("@" in node_or_var or ":" in node_or_var or node_or_var in profile_param_names(profile)):
        return {node_or_var}
    role_vars = {v for ax in profile.program_axes for v, r in ax.roles if r == node_or_var}
    names = role_vars or {node_or_var}
    return {n for n in g.nodes if node_var(n) in names and ("@" in n or n in names)}


def profile_param_names(profile: KernelProfile) -> set[str]:
    return {p.name for p in profile.params}


def depends_on(profile: KernelProfile, node_or_var: str, source: str) -> bool:
    """Whether (any definition of) ``node_or_var`` is computed, transitively, from ``source``.

    ``source`` may be a node, a variable, a parameter, ``pid:0``, or a role such as "v-tile".
    """
    g = _graph(profile)
    targets = resolve_nodes(profile, node_or_var, g)
    sources = resolve_nodes(profile, source, g)
    if not targets or not sources:
        return False
    return bool(g.ancestors(targets) & sources)


def independent_of_axis(profile: KernelProfile, role_or_var: str) -> list[tuple[str, int]]:
    """Values (variable, line) that do not depend on the given program-id role or variable.

    With "v-tile": what every V-tile program of a head computes identically, i.e. the
    work each of the NV programs repeats. Only assigned variables are listed (not
    parameters, memory-op nodes or loop variables of loops whose bounds are independent).
    Empty when the role or variable is unknown (nothing can be said).
    """
    g = _graph(profile)
    sources = resolve_nodes(profile, role_or_var, g)
    if not sources:
        return []
    dependent = g.descendants(sources) | sources
    out = []
    for n in g.nodes:
        if "@" not in n or ":" in n or n.startswith(("load@", "store@", "atomic@")) or n in dependent:
            continue
        out.append((node_var(n), node_line(n) or 0))
    return sorted(set(out), key=lambda t: (t[1], t[0]))


def loop_variant_nodes(graph: Graph, line: int, end_line: int, var: str | None) -> set[str]:
    """Nodes inside the loop span whose value changes from one iteration to the next.

    Seeds: the loop variable, and every in-loop node on a cycle of in-loop nodes (a
    value carried around the back edge: ``p_q += H * K``, ``b_h *= ...``); then
    everything inside the loop computed from a seed.
    """
    inside = {n for n in graph.nodes if (ln := node_line(n)) is not None and line <= ln <= end_line}
    seeds = {f"{var}@{line}"} & inside if var else set()
    seeds |= _on_cycles(inside, graph.succ)
    variant = set(seeds)
    stack = list(seeds)
    while stack:
        n = stack.pop()
        for m in graph.succ.get(n, ()):
            if m in inside and m not in variant:
                variant.add(m)
                stack.append(m)
    return variant


def _on_cycles(nodes: set[str], succ: dict[str, set[str]]) -> set[str]:
    """Nodes of ``nodes`` lying on a cycle within ``nodes`` (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: set[str] = set()
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, set()) & nodes)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, set()) & nodes))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in succ.get(v, ()):
                    out.update(comp)
    return out


def loop_invariant_loads(profile: KernelProfile, loop: Loop | int) -> list[MemOp]:
    """Loads inside ``loop`` (a Loop or its line) whose address is the same on every iteration.

    Such loads (``tl.load(A_log + i_hv)`` inside the time loop) can be hoisted above
    the loop. Loads inside nested loops count too: invariant with respect to this loop.
    """
    lp = loop if isinstance(loop, Loop) else next((l for l in profile.loops if l.line == loop), None)
    if lp is None:
        return []
    g = _graph(profile)
    variant = loop_variant_nodes(g, lp.line, lp.end_line, lp.var)

    def invariant(m: MemOp) -> bool:
        if m.node and f"{m.node}:addr" in g.nodes:
            return f"{m.node}:addr" not in variant
        # a frontend without memory-op nodes: trust its own flag for the innermost loop only
        return m.loop_line == lp.line and m.loop_invariant

    return [m for m in profile.memops if m.kind == "load" and lp.line <= m.line <= lp.end_line and invariant(m)]
