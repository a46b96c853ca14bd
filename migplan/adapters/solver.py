"""The solver adapter (the only module that imports PuLP): translate a `Milp`, solve it, read the answer.

This is outside the pure core because solving is I/O: PuLP writes the model to a temporary
directory, CBC runs as a child process (PuLP's bundled `cbc` binary) and writes its log there, and
file descriptor 1 is pointed at stderr while HiGHS (in-process) prints its banner, so that stdout
keeps carrying only migplan's data. The temporary directory is removed when the solve ends. The
planner sees none of this: it calls `Solver.solve(milp)` (`migplan.planner.milp`) and re-checks
every row of the answer itself.

Status is taken from PuLP's `status` and `sol_status` together (PuLP reports "Optimal" after a time
limit when an incumbent exists; `sol_status == 2` says it is not proven). CBC exposes no bound through
PuLP, so its log is parsed ("Objective value", "Lower bound", "Continuous objective value"); HiGHS
gives `mip_dual_bound` directly.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pulp

from migplan.errors import InputError
from migplan.planner.milp import Milp, SolveResult, SolveStatus

SOLVERS = ("cbc", "highs")

if hasattr(pulp, "set_v4_migration_warnings"):
    pulp.set_v4_migration_warnings(False)


def available() -> list[str]:
    """Solvers usable here: cbc (bundled with PuLP 3.x) and highs (when highspy is installed)."""
    names = set(pulp.listSolvers(onlyAvailable=True))
    out = []
    if names & {"PULP_CBC_CMD", "COIN_CMD"}:
        out.append("cbc")
    if "HiGHS" in names:
        out.append("highs")
    return out


def _status(status: int, sol_status: int) -> SolveStatus:
    if sol_status == pulp.LpSolutionOptimal and status == pulp.LpStatusOptimal:
        return SolveStatus.OPTIMAL
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return SolveStatus.FEASIBLE
    if status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return SolveStatus.INFEASIBLE
    if status == pulp.LpStatusUnbounded or sol_status == pulp.LpSolutionUnbounded:
        return SolveStatus.UNBOUNDED
    return SolveStatus.NOT_SOLVED


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Solver libraries write banners to file descriptor 1 (HiGHS prints "Running HiGHS ..." even with
    output off); stdout carries migplan's data (`-o json`), so point fd 1 at stderr while solving."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (embedded use): nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


def parse_cbc_log(text: str) -> tuple[float | None, float | None]:
    """(objective, lower bound) from a CBC log; the root LP value is a valid bound when nothing better is printed."""
    obj = re.search(r"^Objective value:\s+" + _NUM, text, re.M)
    bound = re.search(r"^Lower bound:\s+" + _NUM, text, re.M)
    if bound is None:
        bound = re.search(r"Continuous objective value is\s+" + _NUM, text)
    return (float(obj.group(1)) if obj else None, float(bound.group(1)) if bound else None)


@dataclass
class PulpSolver:
    """`Solver` over PuLP. `threads=1` keeps CBC deterministic (same input, same plan)."""

    name: str = "cbc"
    time_limit: float | None = 60.0
    gap: float | None = 0.0001
    gap_abs: float | None = None  # stop once this close to the bound (e.g. just under one GPU's weight)
    threads: int = 1
    msg: bool = False

    def __post_init__(self) -> None:
        if self.name not in SOLVERS:
            raise InputError(f"unknown solver {self.name!r}", hint=f"use one of: {', '.join(SOLVERS)}")
        if self.name not in available():
            raise InputError(f"solver {self.name!r} is not available here",
                             hint="install HiGHS with 'pip install highspy'" if self.name == "highs" else None)

    def _build(self, milp: Milp, relax: bool) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
        prob = pulp.LpProblem("migplan", pulp.LpMinimize)
        xs = []
        for i in range(len(milp.names)):
            cat = pulp.LpInteger if milp.integer[i] and not relax else pulp.LpContinuous
            xs.append(prob.add_variable(f"x{i}", lowBound=milp.lower[i], upBound=milp.upper[i], cat=cat))
        prob += pulp.LpAffineExpression([(xs[v], c) for v, c in milp.objective.items()], constant=milp.constant)
        for k, (label, row, sense, rhs) in enumerate(milp.rows):
            expr = pulp.LpAffineExpression([(xs[v], c) for v, c in row.items()])
            op = {"<=": pulp.LpConstraintLE, ">=": pulp.LpConstraintGE, "==": pulp.LpConstraintEQ}[sense]
            prob += pulp.LpConstraint(expr, op, rhs=rhs, name=f"c{k}_{re.sub(r'[^A-Za-z0-9_]', '_', label)[:60]}")
        return prob, xs

    def _backend(self, log_path: str | None) -> pulp.LpSolver:
        if self.name == "highs":
            return pulp.HiGHS(msg=self.msg, timeLimit=self.time_limit, gapRel=self.gap, gapAbs=self.gap_abs,
                              threads=self.threads, random_seed=7)
        return pulp.PULP_CBC_CMD(msg=self.msg, timeLimit=self.time_limit, gapRel=self.gap, gapAbs=self.gap_abs,
                                 threads=self.threads, logPath=log_path, _skip_v4_deprecation=True)

    def _bound(self, prob: pulp.LpProblem, log: str, status: SolveStatus, objective: float | None) -> float | None:
        if status == SolveStatus.OPTIMAL and objective is not None and not self.gap and not self.gap_abs:
            return objective
        if self.name == "highs":
            try:
                info = prob.solverModel.getInfo()  # its own objective may lack PuLP's constant: use the difference
                return None if objective is None else objective - max(
                    0.0, float(info.objective_function_value) - float(info.mip_dual_bound))
            except Exception:  # noqa: BLE001 - an older highspy without the info field: no bound, not an error
                return objective if status == SolveStatus.OPTIMAL else None
        if status == SolveStatus.OPTIMAL and re.search(r"^Result - Optimal solution found\s*$", log, re.M):
            return objective
        obj_log, bound = parse_cbc_log(log)
        if bound is None or objective is None:
            return bound
        # CBC's numbers may leave out the objective constant: take its gap, not its absolute bound
        return objective - max(0.0, (obj_log if obj_log is not None else objective) - bound)

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        prob, xs = self._build(milp, relax)
        with tempfile.TemporaryDirectory(prefix="migplan-") as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            log_path = os.path.join(tmp, "cbc.log") if self.name == "cbc" else None
            try:
                with _stdout_to_stderr():
                    prob.solve(self._backend(log_path))
            except pulp.PulpSolverError as err:
                return SolveResult(SolveStatus.ERROR, solver=self.name, message=str(err))
            except KeyError as err:
                # PuLP 3.3's HiGHS status map lacks statuses newer highspy returns (kSolutionLimit,
                # kMemoryLimit, kHighsInterrupt; docs/sources.md §3): report, never crash.
                return SolveResult(SolveStatus.ERROR, solver=self.name, message=f"unknown solver status {err}")
            log = ""
            if log_path and os.path.exists(log_path):
                with open(log_path, encoding="utf-8", errors="replace") as fh:
                    log = fh.read()
        status = _status(prob.status, prob.sol_status)
        values = tuple(float(x.varValue or 0.0) for x in xs) if status.has_solution else ()
        objective = milp.evaluate(list(values)) if values else None
        bound = self._bound(prob, log, status, objective) if values else None
        if relax and objective is not None:
            bound = objective
        return SolveResult(status, values, objective, bound, float(prob.solutionTime or 0.0), self.name,
                           f"pulp status={pulp.LpStatus[prob.status]} sol_status={prob.sol_status}")
