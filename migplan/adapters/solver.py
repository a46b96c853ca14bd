"""The solver adapter (the only module that imports PuLP): translate a `Milp`, solve it, read the answer.

This is outside the pure core because solving is I/O. The planner sees none of it: it calls
`Solver.solve(milp)` (`migplan.planner.milp`) and re-checks every row of the answer itself.

CBC (PuLP's bundled `cbc` binary) runs as a child process that this module starts and owns
(`_OwnedCbc`, a `PULP_CBC_CMD` that uses PuLP's option mapping and status reading but starts the process
itself). The model file is written by `mps_text`, byte for byte what PuLP's MPS writer writes, without
building PuLP's `LpProblem` (`_OwnedCbc.finish_mps` reads the answer as PuLP's `readsol_MPS` does); only an
objective without variables, which PuLP pads with a dummy variable, still goes through PuLP's writer:

* every file of a solve (the `.mps` model, which reaches hundreds of MB on large fleets, the `.sol`
  answer and CBC's log) lives in one `tempfile.TemporaryDirectory` made for that solve, so it is
  removed on every exit: an answer, a solver error, an exception or Ctrl-C;
* the child runs in its own session (`start_new_session=True`: a terminal's Ctrl-C reaches only
  migplan, which decides) and on *any* exception while it runs, KeyboardInterrupt included, its
  process group is sent SIGKILL and reaped before the exception goes on. PuLP's own `solve_CBC`
  keeps no handle a caller could reach, so an interrupted `prob.solve()` left CBC running until its
  time limit, and its files behind. (Not covered: migplan itself being SIGKILLed, or a solve run
  outside the main thread, where Python never sees the Ctrl-C.)
* one thread means no `-threads` option at all. PuLP turns `threads=1` into `-threads 1`, which puts
  CBC 2.10 into its threaded branch and bound with a single worker; that worker waits for work on a
  condition variable in 10 s timed waits (CbcThread.cpp `CbcThread::waitThread`,
  `timedWait(-10)`), and when the tree is closed at the root the master's one wake-up can come
  before the worker waits, so the solve ends only when the 10 s wait times out
  ("Cbc0030I Thread 0 used 0 times, waiting to start 10.000156"). Without the option CBC searches in
  its main thread (deterministic: same input, same plan). More than one thread still passes
  `-threads N` (faster on big models, not deterministic, and open to the same stall).

LP first (`PulpSolver.lp_first`, on by default for CBC): a MILP's LP relaxation is solved first
(`-initialSolve` on the same file); when every integer column of its optimum is integral, that point is
the MILP's proven optimum (the relaxation bounds the MILP from below, and the point is MILP-feasible),
and CBC's search, whose preprocessing and root heuristics took most of a large plan's solve time before
it accepted that same point, is not run. Otherwise the search runs on the same file with what is left of
the time limit. Measured on the planner's models in bench/results/startup-large.md.

HiGHS runs in-process; file descriptor 1 is pointed at stderr while it prints its banner, so that
stdout keeps carrying only migplan's data.

Status: PuLP's `status` and `sol_status` together (PuLP reports "Optimal" after a time limit when an
incumbent exists; `sol_status == 2` says it is not proven), and then the bound: a solve is
`OPTIMAL` only when its objective equals its proven bound (within 1e-6). A solve that stopped early
on the relative or absolute gap (`gapRel`, `gapAbs`; CBC logs "Result - Optimal solution found
(within gap tolerance)", PuLP still says "Optimal") is `WITHIN_GAP`, one stopped by the time limit (CBC's
"Result - Stopped on time limit", HiGHS's kTimeLimit) `TIME_LIMIT`, each with a message saying how far
from the bound it stopped. CBC exposes no bound through PuLP, so its log is parsed ("Objective
value", "Lower bound", "Continuous objective value"); a log saying "Result - Optimal solution found"
(CBC's search completed) is a proof. HiGHS gives `mip_dual_bound` directly. When every costed
variable is integer with an integer cost, the bound is rounded up to the next attainable value.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Import PuLP without letting it import highspy (and numpy with it): ~0.1 s of every CBC run's start-up.
# PuLP 3.3 imports highspy whenever it is installed, even for a CBC solve: `pulp/__init__.py` preloads
# highspy's `_core*.so` (found with `importlib.util.find_spec`) and `pulp.apis.highs_api` runs
# `import highspy` in the body of `class HiGHS`. A `None` in `sys.modules` makes both see "not
# installed" (find_spec returns None, the import raises ImportError); the entry is removed right after,
# so a later `import highspy` works, and `_highs_class` re-runs `highs_api` when HiGHS is asked for.
# When highspy is already imported (or hidden by someone else) nothing is hidden.
_HIDE_HIGHSPY = "highspy" not in sys.modules
if _HIDE_HIGHSPY:
    sys.modules["highspy"] = None  # type: ignore[assignment]  # None in sys.modules: import fails, as Python documents
try:
    import pulp
finally:
    if _HIDE_HIGHSPY and "highspy" in sys.modules and sys.modules["highspy"] is None:
        del sys.modules["highspy"]

from migplan.adapters.cbc_progress import SolveProgress, Watch, line_buffered  # noqa: E402 - as below
from migplan.errors import InputError  # noqa: E402 - after PuLP's import on purpose (above)
from migplan.files import named_oserror  # noqa: E402 - after PuLP's import, as above
from migplan.planner.milp import SOLVERS, Deferred, Milp, SolveHandle, SolveResult, SolveStatus  # noqa: E402 - as above

EPS = 1e-6  # objective and bound closer than this: proven optimal

if hasattr(pulp, "set_v4_migration_warnings"):
    pulp.set_v4_migration_warnings(False)


def _highs_class() -> Any:
    """PuLP's `HiGHS` solver class with highspy really imported (None when highspy is not installed).

    `pulp.apis.highs_api` decided at its import whether highspy exists; if it was imported while highspy
    was hidden (above) its `HiGHS` is the "not available" stub, so the module is run again now that the
    import is allowed. PuLP's own `pulp.HiGHS` name is rebound to the new class too."""
    api = sys.modules["pulp.apis.highs_api"]
    if getattr(api, "highspy", None) is None:
        if importlib.util.find_spec("highspy") is None:
            return None
        api = importlib.reload(api)
        for holder in (pulp, sys.modules.get("pulp.apis")):
            if holder is not None and hasattr(holder, "HiGHS"):
                setattr(holder, "HiGHS", api.HiGHS)  # noqa: B010 - a module attribute, not a typed one
    return api.HiGHS if getattr(api, "highspy", None) is not None else None


def is_available(name: str) -> bool:
    """Whether one solver is usable here; asking about cbc never imports highspy."""
    if name == "cbc":
        return bool(pulp.PULP_CBC_CMD(_skip_v4_deprecation=True).available() or pulp.COIN_CMD().available())
    if name == "highs":
        highs = _highs_class()
        return highs is not None and bool(highs().available())
    return False


def available() -> list[str]:
    """Solvers usable here: cbc (bundled with PuLP 3.x) and highs (when highspy is installed)."""
    return [name for name in SOLVERS if is_available(name)]


def _status(status: int, sol_status: int) -> SolveStatus:
    """PuLP's two fields, provisionally: TIME_LIMIT for an unproven incumbent (`_judge` then tells a gap stop
    from a time stop), INFEASIBLE only as PuLP's word (`_result` keeps it only with the solver's proof)."""
    if sol_status == pulp.LpSolutionOptimal and status == pulp.LpStatusOptimal:
        return SolveStatus.OPTIMAL
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return SolveStatus.TIME_LIMIT
    if status == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return SolveStatus.INFEASIBLE
    if status == pulp.LpStatusUnbounded or sol_status == pulp.LpSolutionUnbounded:
        return SolveStatus.UNBOUNDED
    return SolveStatus.NO_SOLUTION


# CBC's proofs of infeasibility: its search's result line, or CLP's verdict on the LP relaxation (an infeasible
# relaxation proves the MILP infeasible). PuLP reads "Infeasible" from the .sol file's first word, which CBC also
# writes when the time limit stops it before an incumbent (2 of 10 runs on a 1,000-GPU fleet at 1 s): no proof.
_CBC_INFEASIBLE = re.compile(r"^(Result - (Problem proven infeasible|Linear relaxation infeasible)"
                             r"|Problem is infeasible\b)", re.M)
_CBC_TIME = re.compile(r"^Result - Stopped on (time|iterations or time)", re.M)


def cbc_proved_infeasible(text: str) -> bool:
    return _CBC_INFEASIBLE.search(text) is not None


def _highs_status(prob: pulp.LpProblem | None) -> str | None:
    """HiGHS's model status name ("kOptimal", "kInfeasible", "kTimeLimit", ...), None when unknown."""
    try:
        return str(prob.solverModel.getModelStatus()).rsplit(".", 1)[-1] if prob is not None else None
    except Exception:  # no solver model (PuLP failed before it), an older highspy: unknown, not an error
        return None


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


def _printed_resolution(text: str) -> float:
    """Half a unit of the last digit CBC printed the lower bound with ("6885.000": 0.0005)."""
    m = re.search(r"^Lower bound:\s+-?[0-9]*\.([0-9]+)\s*$", text, re.M)
    return 0.5 * 10.0 ** -len(m.group(1)) if m else 0.0


def cbc_proved_optimal(text: str) -> bool:
    """CBC's search completed ("Result - Optimal solution found"), not stopped on a gap, limit or signal."""
    return re.search(r"^Result - Optimal solution found\s*$", text, re.M) is not None


INTEGRAL_TOL = 1e-9  # an LP value this close to an integer counts as that integer (CBC's own tolerance is 1e-6)


def _integral(milp: Milp, values: list[float]) -> tuple[float, ...] | None:
    """The LP relaxation's optimum with its integer columns snapped, when every one of them is integral
    (within INTEGRAL_TOL): then it is also the MILP's optimum, since the relaxation's optimum bounds the MILP
    from below and this point is MILP-feasible; None otherwise."""
    out = list(values)
    for v, x in enumerate(values):
        if milp.integer[v]:
            r = round(x)
            if abs(x - r) > INTEGRAL_TOL:
                return None
            out[v] = float(r)
    return tuple(out)


def _tighten(milp: Milp, bound: float) -> float:
    """With every costed variable integer and every cost integer, objective - constant is a multiple of
    the costs' greatest common divisor: the bound rounds up to the next one."""
    costed = [(v, c) for v, c in milp.objective.items() if c != 0]
    if not costed or any(not milp.integer[v] or abs(c - round(c)) > 1e-9 for v, c in costed):
        return bound
    step = math.gcd(*(abs(round(c)) for _, c in costed))
    return milp.constant + step * math.ceil((bound - milp.constant) / step - EPS)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's process group (its own session) and reap it; a second Ctrl-C cannot leave it behind."""
    killpg = getattr(os, "killpg", None)
    try:
        if killpg is not None:
            killpg(proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        else:  # pragma: no cover - not POSIX
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    while True:
        try:
            proc.wait()
            return
        except KeyboardInterrupt:  # already stopping: finish reaping, the first interrupt is re-raised
            continue


_SENSE_MPS = {"<=": "L", ">=": "G", "==": "E"}


_NAME_SLOT = "\x00" * 8  # a column name's place in a bound line (names are X0000000...: 8 characters or more)


def _mps_bounds(name: str, lo: float | None, up: float | None, integer: bool) -> list[str]:
    """PuLP's `writeMPSBoundLines` for a MIP solver."""
    if lo is not None and lo == up:
        return [f" FX BND       {name:<8}  {lo: .12e}\n"]
    if lo == 0 and up == 1 and integer:
        return [f" BV BND       {name:<8}\n"]
    out = []
    if lo is not None:
        if lo != 0 or (integer and up is None):
            out.append(f" LO BND       {name:<8}  {lo: .12e}\n")
    else:
        out.append(f" {'MI' if up is not None else 'FR'} BND       {name:<8}\n")
    if up is not None:
        out.append(f" UP BND       {name:<8}  {up: .12e}\n")
    return out


def mps_text(milp: Milp, relax: bool = False) -> tuple[str, list[int]] | None:
    """The MPS file PuLP 3.3's `LpProblem.writeMPS(rename=1)` writes for the problem `_build` makes of `milp`,
    byte for byte, without building that problem (`_build` and `writeMPS` took ~0.44 s of CPU at 7,000 GPUs),
    and the `milp` index of each column `X0000000`, `X0000001`, ... in order.

    PuLP's rules, followed here (pulp/mps_lp.py `writeMPS`, `writeMPSColumnLines`, `writeMPSBoundLines`;
    pulp/pulp.py `variables`, `normalisedNames`): only variables that appear in the objective or a row are
    columns, sorted by their PuLP name (`x0`, `x1`, `x10`, ...); rows are `C%07d` in order; a column lists its
    row coefficients in row order, zeros included, then its objective coefficient; integers are bracketed by
    MARKER lines; bounds as PuLP writes them for a MIP solver (PULP_CBC_CMD has mip=True even for an LP).
    None when PuLP would add a dummy objective variable (an objective without variables): the caller then
    lets PuLP write the file. tests/test_solver_mps.py checks the text against PuLP's own writer."""
    if not milp.objective:
        return None
    used: set[int] = set(milp.objective)
    for _, row, _, _ in milp.rows:
        used.update(row)
    order = sorted(used, key=str)  # PuLP sorts variables by name: "x10" before "x2"
    column = {v: f"X{i:07d}" for i, v in enumerate(order)}
    # each entry line is the column's lead, then the row's name and the number: a column's lines are its
    # lead joined with the rest of each line (one C-level join per column, not two concatenations per entry)
    entries: dict[int, list[str]] = {v: [] for v in order}
    rows, rhs = [], []
    text_of: dict[float, str] = {}  # a model repeats a few coefficients (1, -1, a GPU's slices) many times
    for k, (_, row, sense, value) in enumerate(milp.rows):
        cname = f"C{k:07d}"
        rows.append(f" {_SENSE_MPS[sense]}  {cname}\n")
        middle = f"{cname:<8}  "
        for v, c in row.items():
            num = text_of.get(c) if c else None  # 0.0 and -0.0 are one key but print apart: not kept
            if num is None:
                num = f"{c: .12e}\n"
                if c:
                    text_of[c] = num
            entries[v].append(middle + num)
        rhs.append(f"    RHS       {middle}{value if value != 0 else 0: .12e}\n")
    integer = [milp.integer[v] and not relax for v in range(len(milp.names))]
    cols: list[str] = []
    bounds: list[str] = []
    objective = milp.objective
    # A model has a few kinds of bounds: each kind's lines made once with a placeholder as wide as the
    # padded name (repr keys: 0.0 and -0.0 print apart), then given each column's name.
    bound_lines: dict[tuple[str, str, bool], list[str]] = {}
    for v in order:
        name = column[v]
        if integer[v]:
            cols.append("    MARK      'MARKER'                 'INTORG'\n")
        mine = entries[v]
        if mine:
            lead = f"    {name:<8}  "
            cols.append(lead + lead.join(mine))
        if v in objective:
            cols.append(f"    {name:<8}  OBJ       {objective[v]: .12e}\n")
        if integer[v]:
            cols.append("    MARK      'MARKER'                 'INTEND'\n")
        lo, up = milp.lower[v], milp.upper[v]
        kind = (repr(lo), repr(up), integer[v])
        lines = bound_lines.get(kind)
        if lines is None:
            lines = bound_lines[kind] = _mps_bounds(_NAME_SLOT, lo, up, integer[v])
        bounds.extend(line.replace(_NAME_SLOT, name) for line in lines)
    text = "".join(["*SENSE:Minimize\n", "NAME          MODEL\n", "ROWS\n", " N  OBJ\n", *rows, "COLUMNS\n", *cols,
                    "RHS\n", *rhs, "BOUNDS\n", *bounds, "ENDATA\n"])
    return text, order


class _OwnedCbc(pulp.PULP_CBC_CMD):  # type: ignore[misc]  # pulp has no type hints
    """PULP_CBC_CMD with files in `workdir` and a child process this adapter owns (see the module docstring)."""

    def __init__(self, workdir: str, **kwargs: Any) -> None:
        super().__init__(_skip_v4_deprecation=True, **kwargs)
        self.workdir = workdir
        self.tmpDir = workdir  # anything PuLP itself makes goes here too
        self.log_path = os.path.join(workdir, "cbc.log")
        self.returncode: int | None = None
        self.watch: Watch | None = None  # live figures while the child runs (set by _CbcSolve)

    def command(self, mps: str, sol: str, relaxation: bool = False) -> list[str]:
        """CBC's command line, in the order PuLP's `solve_CBC` builds it; `relaxation`: solve only the LP
        relaxation (`-initialSolve`, CBC's "solve to continuous"), integer markers or not."""
        args = [self.path, mps]
        if self.timeLimit is not None:
            args += ["-sec", str(self.timeLimit)]
        for option in [*self.options, *self.getOptions()]:  # the gap options mean nothing to an LP
            args += ("-" + option).split()
        args += ["-solve" if self.mip and not relaxation else "-initialSolve", "-printingOptions", "all",
                 "-solution", sol]
        return args

    def start_mps(self, text: str | None, relaxation: bool = False) -> subprocess.Popen[bytes]:
        """Write the MPS `text` (from `mps_text`; None: keep the file the last call wrote) and start CBC on it
        (`relaxation`: the LP relaxation only, see `command`); `finish_mps` waits for it and reads the answer.
        The caller owns the process (`_stop` it when abandoning it)."""
        if not self.executable(self.path):
            raise pulp.PulpSolverError(f"cannot execute {self.path}")
        mps, sol = os.path.join(self.workdir, "model.mps"), os.path.join(self.workdir, "model.sol")
        if text is not None:
            try:
                with open(mps, "w") as fh:
                    fh.write(text)
            except OSError as err:  # a full disk, `ulimit -f`: say which file (write(2) errors carry no name)
                raise named_oserror(err, "cannot write the solver's model", mps) from None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sol)  # a second solve of the same file must not read the first one's answer
        return self._spawn(mps, sol, relaxation)

    def finish_mps(self, proc: subprocess.Popen[bytes], columns: list[int],
                   count: int) -> tuple[int, int, list[float]]:
        """(PuLP status, PuLP solution status, a value per variable, 0.0 for one that is no column), read as
        PuLP's `readsol_MPS` and `assignVarsVals` would."""
        sol = os.path.join(self.workdir, "model.sol")
        self._wait(proc, sol)
        status, sol_status = self.get_status(sol)
        index = {f"X{i:07d}": v for i, v in enumerate(columns)}
        values = [0.0] * count
        with open(sol) as fh:
            for line in fh:  # PuLP's readsol_MPS: "index name value reduced-cost", "**" before infeasible ones
                if len(line) <= 2:
                    break
                parts = line.split()
                if parts[0] == "**":
                    parts = parts[1:]
                v = index.get(parts[1])
                if v is not None:
                    values[v] = float(parts[2])
        return status, sol_status, values

    def _spawn(self, mps: str, sol: str, relaxation: bool = False) -> subprocess.Popen[bytes]:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            args = self.command(mps, sol, relaxation)
            return subprocess.Popen(line_buffered(args) if self.watch else args, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True)

    def _wait(self, proc: subprocess.Popen[bytes], sol: str) -> None:
        try:
            self.returncode = proc.wait() if self.watch is None else self.watch.wait(proc, self.log_path)
        except BaseException:  # Ctrl-C (KeyboardInterrupt) above all: CBC must not outlive the solve
            _stop(proc)
            raise
        if self.returncode != 0:
            raise pulp.PulpSolverError(f"cbc exited with status {self.returncode}")
        if not os.path.exists(sol):
            raise pulp.PulpSolverError("cbc wrote no solution file")

    def _run(self, mps: str, sol: str, relaxation: bool = False) -> None:
        self._wait(self._spawn(mps, sol, relaxation), sol)

    def actualSolve(self, lp: pulp.LpProblem, **kwargs: Any) -> int:  # PuLP's name
        if not self.executable(self.path):
            raise pulp.PulpSolverError(f"cannot execute {self.path}")
        mps, sol = os.path.join(self.workdir, "model.mps"), os.path.join(self.workdir, "model.sol")
        vs, var_names, con_names, _ = lp.writeMPS(mps, rename=1)
        self._run(mps, sol)
        status, values, _dj, _pi, slacks, sol_status = self.readsol_MPS(sol, lp, vs, var_names, con_names)
        lp.assignVarsVals(values)
        lp.assignConsSlack(slacks, activity=True)
        lp.assignStatus(status, sol_status)
        return int(status)


def _read(path: str, tail: int | None = None) -> str:
    """A log file's text (its last `tail` characters), or "" when there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    return text[-tail:].strip() if tail else text


@dataclass
class PulpSolver:
    """`Solver` over PuLP. One thread (the default) keeps CBC deterministic: same input, same plan.

    `gap` is the relative gap to stop at, `gap_abs` the absolute one (e.g. just under one GPU's
    weight); either stopping before the bound is met gives status WITHIN_GAP, never OPTIMAL."""

    name: str = "cbc"
    time_limit: float | None = 60.0
    gap: float | None = 0.0001
    gap_abs: float | None = None
    threads: int = 1
    msg: bool = False
    # CBC: solve the LP relaxation first and stop there when its optimum is integral (the planner's models
    # usually are at the root): CBC's MILP path spends most of its time in preprocessing and the root
    # heuristics' mini branch and bound before it accepts that same point (0.61 s against 0.08 s at 7,000
    # GPUs, bench/results/startup-large.md). Otherwise the MILP is solved from the same file.
    lp_first: bool = True
    # CBC: called with the search's incumbent and bound while it runs (cbc_progress.Watch); HiGHS, solving
    # in-process, reports none
    progress: Callable[[SolveProgress], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.name not in SOLVERS:
            raise InputError(f"unknown solver {self.name!r}", hint=f"use one of: {', '.join(SOLVERS)}")
        if not is_available(self.name):
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

    def _backend(self, workdir: str) -> pulp.LpSolver:
        if self.name == "highs":
            return _highs_class()(msg=self.msg, timeLimit=self.time_limit, gapRel=self.gap, gapAbs=self.gap_abs,
                              threads=self.threads, random_seed=7)
        # threads=None: no "-threads" option, CBC's serial search (see the module docstring)
        return _OwnedCbc(workdir, msg=self.msg, timeLimit=self.time_limit, gapRel=self.gap, gapAbs=self.gap_abs,
                         threads=self.threads if self.threads > 1 else None)

    def _raw_bound(self, prob: pulp.LpProblem | None, log: str, objective: float) -> tuple[float | None, float]:
        """(a proven lower bound or None, how precisely it is known)."""
        if self.name == "highs" and prob is not None:
            try:
                info = prob.solverModel.getInfo()  # its own objective may lack PuLP's constant: use the difference
                return objective - max(0.0, float(info.objective_function_value) - float(info.mip_dual_bound)), 0.0
            except Exception:  # an older highspy without the info field: no bound, not an error
                return None, 0.0
        if cbc_proved_optimal(log):
            return objective, 0.0
        obj_log, bound = parse_cbc_log(log)
        if bound is None:
            return None, 0.0
        # CBC's numbers may leave out the objective constant: take its gap, not its absolute bound
        return objective - max(0.0, (obj_log if obj_log is not None else objective) - bound), _printed_resolution(log)

    def _judge(self, milp: Milp, prob: pulp.LpProblem | None, log: str, status: SolveStatus,
               objective: float) -> tuple[SolveStatus, float | None, str]:
        """(status, bound, note): OPTIMAL only when the objective meets a proven bound."""
        bound, resolution = self._raw_bound(prob, log, objective)
        timed = self._timed_out(prob, log, status)
        early = SolveStatus.TIME_LIMIT if timed else SolveStatus.WITHIN_GAP
        if bound is None:
            if status is SolveStatus.OPTIMAL and not timed and not self.gap and not self.gap_abs:
                return status, objective, ""  # asked for a proof, and the solver says it has one
            return early, None, ("stopped at the time limit" if timed else "stopped on the gap") + "; bound unknown"
        bound = min(objective, _tighten(milp, bound))
        gap = objective - bound
        if gap <= EPS + resolution:  # the objective meets a proven bound: a proof, however the solver stopped
            return SolveStatus.OPTIMAL, objective, "" if status is SolveStatus.OPTIMAL else (
                "stopped on a limit with the objective at the proven bound")
        rel = gap / max(abs(objective), 1e-9)
        why = "stopped at the time limit" if timed else "stopped"
        return early, bound, f"{why} within gap {gap:g} of the bound {bound:g} ({rel:.4%})"

    def _proved_infeasible(self, prob: pulp.LpProblem | None, log: str) -> bool:
        if self.name == "highs":
            return _highs_status(prob) == "kInfeasible"
        return cbc_proved_infeasible(log)

    def _timed_out(self, prob: pulp.LpProblem | None, log: str, status: SolveStatus) -> bool:
        """Whether the time limit (not the gap) stopped the search: CBC's result line, HiGHS's model status;
        when neither says, an unproven incumbent without a requested gap can only be a time stop."""
        if self.name == "highs":
            name = _highs_status(prob)
            if name is not None:
                return name == "kTimeLimit"
        elif log:
            return _CBC_TIME.search(log) is not None
        return status is SolveStatus.TIME_LIMIT and not self.gap and not self.gap_abs

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        mps = mps_text(milp, relax) if self.name == "cbc" else None
        if mps is not None:
            return _CbcSolve(self, milp, relax, *mps).result()
        prob, xs = self._build(milp, relax)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="migplan-solve-", ignore_cleanup_errors=True) as tmp, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backend = self._backend(tmp)
            try:
                with _stdout_to_stderr():
                    prob.solve(backend)
            except pulp.PulpSolverError as err:
                return self._error(err, backend, t0)
            except KeyError as err:
                # PuLP 3.3's HiGHS status map lacks statuses newer highspy returns (kSolutionLimit,
                # kMemoryLimit, kHighsInterrupt; docs/sources.md §3): report, never crash.
                return SolveResult(SolveStatus.ERROR, solver=self.name, message=f"unknown solver status {err}")
            log = _read(backend.log_path) if isinstance(backend, _OwnedCbc) else ""
        elapsed = float(prob.solutionTime or 0.0) or time.perf_counter() - t0
        values = tuple(float(x.varValue or 0.0) for x in xs)
        return self._result(milp, relax, prob.status, prob.sol_status, values, elapsed, log, prob)

    def start(self, milp: Milp, *, relax: bool = False) -> SolveHandle:
        """`solve(milp, relax=relax)` begun now: CBC runs as a child process while the caller goes on, and
        `result()` waits for it (`cancel()` stops it). Other solvers solve when `result()` is called."""
        mps = mps_text(milp, relax) if self.name == "cbc" else None
        if mps is not None:
            return _CbcSolve(self, milp, relax, *mps)
        return Deferred(self, milp, relax)

    def _error(self, err: Exception, backend: pulp.LpSolver, t0: float) -> SolveResult:
        tail = _read(backend.log_path, 400) if isinstance(backend, _OwnedCbc) else ""
        return SolveResult(SolveStatus.ERROR, solver=self.name, time_s=time.perf_counter() - t0,
                           message=f"{err}" + (f"; cbc log ends: {tail}" if tail else ""))

    def _result(self, milp: Milp, relax: bool, pulp_status: int, sol_status: int, values: tuple[float, ...],
                elapsed: float, log: str, prob: pulp.LpProblem | None) -> SolveResult:
        status = _status(pulp_status, sol_status)
        message = f"pulp status={pulp.LpStatus[pulp_status]} sol_status={sol_status}"
        if status is SolveStatus.INFEASIBLE and not self._proved_infeasible(prob, log):
            status = SolveStatus.NO_SOLUTION  # PuLP's "Infeasible" after a time limit: nothing is proven
            message = "stopped before an incumbent, infeasibility not proven; " + message
        if not status.has_solution:
            return SolveResult(status, (), None, None, elapsed, self.name, message)
        objective = milp.evaluate(list(values))
        if relax:  # an LP: the solver's optimum is its own bound
            return SolveResult(status, values, objective, objective, elapsed, self.name, message)
        status, bound, note = self._judge(milp, prob, log, status, objective)
        return SolveResult(status, values, objective, bound, elapsed, self.name,
                           f"{note}; {message}" if note else message)


class _CbcSolve:
    """A CBC solve under way: its files in one temporary directory, its child process started; `result()`
    waits and reads the answer (then the MILP search when the LP-first step found a fractional optimum),
    `cancel()` kills the child; either removes the files."""

    def __init__(self, owner: PulpSolver, milp: Milp, relax: bool, text: str | None, columns: list[int]) -> None:
        self.owner, self.milp, self.relax, self.columns = owner, milp, relax, columns
        self.t0 = time.perf_counter()
        self.tmp: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(
            prefix="migplan-solve-", ignore_cleanup_errors=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: Exception | None = None
        self.first = owner.lp_first and not relax and any(milp.integer)
        self.backend: _OwnedCbc | None = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                backend = owner._backend(self.tmp.name)
            assert isinstance(backend, _OwnedCbc)
            self.backend = backend
            if owner.progress is not None and not relax:  # the plan's own solve, not a bound's LP
                backend.watch = Watch(owner.progress, offset=milp.constant)
            self.proc = backend.start_mps(text, relaxation=self.first)
        except pulp.PulpSolverError as err:
            self.error = err  # reported by result(), as a synchronous solve reports it
        except BaseException:
            self.cancel()
            raise

    def result(self) -> SolveResult:
        owner, milp, backend, n = self.owner, self.milp, self.backend, len(self.milp.names)
        try:
            if self.error is not None or self.proc is None or backend is None:
                err = self.error or pulp.PulpSolverError("cbc did not start")
                return owner._error(err, backend or pulp.LpSolver(), self.t0)
            try:
                status, sol_status, values = backend.finish_mps(self.proc, self.columns, n)
                if self.first:
                    # only a proven LP optimum bounds the MILP: an LP stopped on the time limit proves nothing
                    optimal = _status(status, sol_status) is SolveStatus.OPTIMAL
                    integral = _integral(milp, values) if optimal else None
                    if integral is not None:
                        objective = milp.evaluate(list(integral))
                        return SolveResult(SolveStatus.OPTIMAL, integral, objective, objective,
                                           time.perf_counter() - self.t0, owner.name,
                                           "LP relaxation integral: proven optimal at the root; "
                                           f"pulp status={pulp.LpStatus[status]} sol_status={sol_status}")
                    if backend.timeLimit is not None:  # the MILP gets what is left of the time limit
                        backend.timeLimit = max(1.0, float(backend.timeLimit) - (time.perf_counter() - self.t0))
                    self.proc = backend.start_mps(None)  # the same file
                    status, sol_status, values = backend.finish_mps(self.proc, self.columns, n)
            except pulp.PulpSolverError as err:
                return owner._error(err, backend, self.t0)
            log = _read(backend.log_path)
            elapsed = time.perf_counter() - self.t0
            return owner._result(milp, self.relax, status, sol_status, tuple(values), elapsed, log, None)
        finally:
            self.cancel()

    def cancel(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _stop(self.proc)
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None
