"""The skeleton graph (networkx): "A enables B" is an edge A -> B (apply A first), "A conflicts with B" an
undirected edge; both are data in each skeleton.toml, never code. Composition (rewriter.candidates) orders
skeletons along the enables edges and never combines two that conflict.
"""
from __future__ import annotations

import itertools

import networkx as nx


def _graph(g: nx.Graph, codes, library, field: str):
    """``codes`` as nodes of ``g``, an edge wherever a skeleton's ``field`` names another of them."""
    g.add_nodes_from(codes)
    for a in codes:
        sk = library.get(a)
        for b in (getattr(sk, field) if sk else ()):
            if b in g and b != a:
                g.add_edge(a, b)
    return g


def enables_graph(codes, library) -> nx.DiGraph:
    """``codes`` as nodes, an edge A -> B wherever A enables B (both among ``codes``)."""
    return _graph(nx.DiGraph(), codes, library, "enables")


def conflicts_graph(codes, library) -> nx.Graph:
    """``codes`` as nodes, an undirected edge wherever one conflicts with the other."""
    return _graph(nx.Graph(), codes, library, "conflicts")


def topological(codes, library) -> list[str]:
    """``codes`` with every enabler before what it enables, ties (and skeletons in a cycle, which
    ``skel catalog check`` should not let through) in code order."""
    g = enables_graph(sorted(set(codes)), library)
    if nx.is_directed_acyclic_graph(g):
        return list(nx.lexicographical_topological_sort(g))
    dag = nx.condensation(g)
    members = {n: sorted(dag.nodes[n]["members"]) for n in dag}
    return [c for n in nx.lexicographical_topological_sort(dag, key=lambda n: members[n][0]) for c in members[n]]


def any_conflict(codes, library) -> bool:
    g = conflicts_graph(list(codes), library)
    return any(g.has_edge(a, b) for a, b in itertools.combinations(codes, 2))
