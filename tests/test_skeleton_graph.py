"""The skeleton graph (networkx): enablers before what they enable, conflicts never combined, cycles tolerated."""
from __future__ import annotations

from dataclasses import dataclass

from skel.skeletons.library import load_library
from skel.catalog.skeleton_graph import any_conflict, enables_graph, topological


@dataclass(frozen=True)
class Sk:
    enables: tuple = ()
    conflicts: tuple = ()


class Lib(dict):
    def get(self, code):  # the Library's lookup
        return dict.get(self, code)


def test_the_shipped_library_orders_enablers_first():
    lib = load_library()
    codes = [s.code for s in lib]
    order = topological(codes, lib)
    assert sorted(order) == sorted(codes)
    g = enables_graph(codes, lib)
    assert g.number_of_edges() >= 1
    for a, b in g.edges:
        assert order.index(a) < order.index(b), f"{a} enables {b} but comes after it"


def test_order_ties_conflicts_and_cycles():
    lib = Lib(A=Sk(), B=Sk(enables=("A",)), C=Sk(conflicts=("D",)), D=Sk(), E=Sk(enables=("F",)), F=Sk(enables=("E",)))
    assert topological(["A", "B", "C", "D"], lib) == ["B", "A", "C", "D"]  # B enables A; the rest by code
    assert any_conflict(("C", "D"), lib) and any_conflict(("D", "A", "C"), lib) and not any_conflict(("A", "B"), lib)
    assert topological(["F", "E", "A"], lib) == ["A", "E", "F"]  # a cycle: kept together, in code order
