"""Integer polynomials over named factors: the shape of a pointer's address arithmetic.

``(i_n * T * H + i_h) * K + o_k`` expands to ``i_n*T*H*K + i_h*K + o_k``: a mapping from monomials
(sorted tuples of factor names) to integer coefficients. Address offsets in kernels are sums of an
index times a stride, and strides are products of sizes, so this small algebra is enough to read
a tensor's layout off the code that indexes it.
"""
from __future__ import annotations

from dataclasses import dataclass

Monomial = tuple[str, ...]


@dataclass(frozen=True)
class Poly:
    terms: tuple[tuple[Monomial, int], ...] = ()

    @staticmethod
    def const(value: int) -> "Poly":
        return Poly((((), value),)) if value else Poly()

    @staticmethod
    def atom(name: str) -> "Poly":
        return Poly((((name,), 1),))

    def as_dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    @staticmethod
    def of(mapping: dict[Monomial, int]) -> "Poly":
        return Poly(tuple(sorted((m, c) for m, c in mapping.items() if c)))

    def __add__(self, other: "Poly") -> "Poly":
        out = self.as_dict()
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Poly.of(out)

    def __neg__(self) -> "Poly":
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.of(out)

    def contains(self, part: "Poly") -> bool:
        mine = self.as_dict()
        return bool(part.terms) and all(mine.get(m) == c for m, c in part.terms)

    def replace(self, part: "Poly", name: str) -> "Poly":
        """``part`` (all of whose terms this holds) replaced by the atom ``name``."""
        return self - part + Poly.atom(name)

    def rename(self, mapping: dict[str, str]) -> "Poly":
        out: dict[Monomial, int] = {}
        for m, c in self.terms:
            key = tuple(sorted(mapping.get(f, f) for f in m))
            out[key] = out.get(key, 0) + c
        return Poly.of(out)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        return " + ".join(("*".join(m) or "1") if c == 1 else f"{c}*{'*'.join(m) or '1'}" for m, c in self.terms)
