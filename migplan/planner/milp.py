"""A small solver-neutral mixed-integer program and the Solver interface (pure).

The formulation is built here as plain data; `migplan.adapters.solver` (the only module that imports
PuLP) turns it into a PuLP problem. Tests can pass any object with the `Solver` shape.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from migplan.solvers import SOLVERS as SOLVERS  # the back ends `migplan.adapters.solver` implements (re-exported)

Terms = dict[int, float]


@dataclass(frozen=True)
class SizeLimit:
    """The most variables, rows and nonzero coefficients a `Milp` may grow to (None: no limit)."""

    variables: int | None = None
    rows: int | None = None
    nonzeros: int | None = None


class ModelTooLarge(Exception):  # a signal to the formulation, which reports a PlanError
    """Raised by `Milp.var`/`Milp.add` the moment the model would pass its `SizeLimit`."""

    def __init__(self, what: str, limit: int, variables: int, rows: int, nonzeros: int) -> None:
        super().__init__(f"more than {limit:,} {what}")
        self.what, self.limit = what, limit
        self.variables, self.rows, self.nonzeros = variables, rows, nonzeros


@dataclass
class Milp:
    """minimise  c.x  s.t.  each labelled row  a.x (<=|>=|==) b,  lb <= x <= ub,  some x integer.

    `limit` is checked while the model is built, so an oversized model stops before it fills memory."""

    names: list[str] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float | None] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    rows: list[tuple[str, Terms, str, float]] = field(default_factory=list)
    objective: Terms = field(default_factory=dict)
    constant: float = 0.0
    limit: SizeLimit = field(default_factory=SizeLimit)
    nonzeros: int = 0  # coefficients in all rows

    def _too_large(self, what: str, limit: int) -> ModelTooLarge:
        return ModelTooLarge(what, limit, len(self.names), len(self.rows), self.nonzeros)

    def var(self, name: str, *, lb: float = 0.0, ub: float | None = None, integer: bool = True) -> int:
        if self.limit.variables is not None and len(self.names) >= self.limit.variables:
            raise self._too_large("variables", self.limit.variables)
        self.names.append(name)
        self.lower.append(lb)
        self.upper.append(ub)
        self.integer.append(integer)
        return len(self.names) - 1

    def add(self, label: str, terms: Iterable[tuple[int, float]], sense: str, rhs: float) -> None:
        """One labelled row; coefficients of a repeated variable are summed."""
        row: Terms = {}
        for v, c in terms:
            row[v] = row.get(v, 0.0) + c
        row = {v: c for v, c in row.items() if c != 0}
        if self.limit.rows is not None and len(self.rows) >= self.limit.rows:
            raise self._too_large("rows", self.limit.rows)
        if self.limit.nonzeros is not None and self.nonzeros + len(row) > self.limit.nonzeros:
            raise self._too_large("nonzero coefficients", self.limit.nonzeros)
        self.nonzeros += len(row)
        if not row:
            ok = {"<=": rhs >= 0, ">=": rhs <= 0, "==": rhs == 0}[sense]
            if not ok:
                row = {}
                self.rows.append((label, row, sense, rhs))  # kept so the solver reports infeasible
            return
        self.rows.append((label, row, sense, rhs))

    def cost(self, v: int, c: float) -> None:
        self.objective[v] = self.objective.get(v, 0.0) + c

    def evaluate(self, values: list[float]) -> float:
        return self.constant + sum(c * values[v] for v, c in self.objective.items())

    def violations(self, values: list[float], tol: float = 1e-6) -> list[str]:
        """Labels of rows or bounds the values break (a plain-Python re-check of the solver's answer)."""
        bad = []
        for label, row, sense, rhs in self.rows:
            lhs = sum(c * values[v] for v, c in row.items())
            if (sense == "<=" and lhs > rhs + tol) or (sense == ">=" and lhs < rhs - tol) or (
                    sense == "==" and abs(lhs - rhs) > tol):
                bad.append(label)
        for v, x in enumerate(values):
            ub = self.upper[v]
            if x < self.lower[v] - tol or (ub is not None and x > ub + tol):
                bad.append(f"bound:{self.names[v]}")
        return bad


class SolveStatus(str, enum.Enum):
    """How a solve ended (PuLP's `status` and `sol_status`, then the solver's own log or model status): never a
    guess. Only OPTIMAL and INFEASIBLE are proofs; a stop without a proof says which limit stopped it."""

    OPTIMAL = "optimal"  # proven: the objective meets a proven bound
    WITHIN_GAP = "within-gap"  # an incumbent, stopped on the requested relative/absolute gap (its gap is known)
    TIME_LIMIT = "time-limit"  # an incumbent, stopped at the time limit (gap against the bound, or bound unknown)
    NO_SOLUTION = "no-solution"  # stopped (time limit) before any incumbent: nothing is proven
    INFEASIBLE = "infeasible"  # proven infeasible by the solver (CBC's log, HiGHS's model status), never assumed
    UNBOUNDED = "unbounded"
    ERROR = "error"

    @property
    def has_solution(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.WITHIN_GAP, SolveStatus.TIME_LIMIT)


# statuses plan files of versions 3 and 4 were written with, still read as they were written: "feasible" was
# an incumbent stopped on either limit (which one was not recorded), "not-solved" no incumbent
LEGACY_STATUSES = frozenset({"feasible", "not-solved"})


@dataclass(frozen=True)
class SolveResult:
    status: SolveStatus
    values: tuple[float, ...] = ()
    objective: float | None = None
    bound: float | None = None  # best proven lower bound on the objective
    time_s: float = 0.0
    solver: str = ""
    message: str = ""

    @property
    def gap(self) -> float | None:
        """Relative gap (objective - bound) / max(|objective|, 1e-9)."""
        if self.objective is None or self.bound is None:
            return None
        return max(0.0, self.objective - self.bound) / max(abs(self.objective), 1e-9)


class Solver(Protocol):
    name: str

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        """Solve `milp` (its LP relaxation when `relax`)."""
        ...


class SolveHandle(Protocol):
    """A solve under way (a solver's optional `start`): its result, or stop it."""

    def result(self) -> SolveResult: ...

    def cancel(self) -> None: ...


class Deferred:
    """A handle that solves when its result is asked for (a solver that cannot work in the background)."""

    def __init__(self, solver: Solver, milp: Milp, relax: bool) -> None:
        self.solver, self.milp, self.relax = solver, milp, relax

    def result(self) -> SolveResult:
        return self.solver.solve(self.milp, relax=self.relax)

    def cancel(self) -> None:
        pass


def start_solve(solver: Solver, milp: Milp, *, relax: bool = False) -> SolveHandle:
    """`solver.start(milp)` when the solver can work while its caller goes on (CBC runs as a child process),
    else a handle that solves when its result is asked for. `milp` must not change until then."""
    start = getattr(solver, "start", None)
    if start is not None:
        return start(milp, relax=relax)  # type: ignore[no-any-return]  # a solver's optional start() returns a SolveHandle
    return Deferred(solver, milp, relax)
