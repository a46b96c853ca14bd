"""Small 0/1 programs for the solver tests, and brute force over every 0/1 point as their independent oracle."""

from __future__ import annotations

import itertools
import random

from migplan.planner.milp import Milp


def cover_milp(n: int = 14, rows: int = 3, seed: int = 20) -> Milp:
    """`n` binaries under `rows` covering rows (each: at least half the total weight): the LP optimum takes
    fractions of items, and with 14 x 3 CBC's first incumbent (176-ish) is not the optimum (103)."""
    r = random.Random(seed)
    m = Milp()
    xs = [m.var(f"x{i}", ub=1) for i in range(n)]
    for j in range(rows):
        w = [r.randint(5, 40) for _ in xs]
        m.add(f"cover{j}", [(x, wi) for x, wi in zip(xs, w, strict=True)], ">=", sum(w) // 2 + 1)
    for x in xs:
        m.cost(x, r.randint(5, 40))
    return m


def brute_force_optimum(m: Milp) -> float:
    """The least objective over every 0/1 point that breaks no row (inf when there is none)."""
    return min((m.evaluate(list(bits)) for bits in itertools.product((0.0, 1.0), repeat=len(m.names))
                if not m.violations(list(bits))), default=float("inf"))
