"""Progress on stderr: CBC's log read for the incumbent and bound (real CBC 2.10 text and real solves), the
reporter's policy (a terminal's live line, plain lines when asked, nothing on a non-terminal by default,
--quiet) and `migplan propose` with the options, end to end on the bundled example."""

from __future__ import annotations

import io
import json
import os
import pty
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import migplan_cli

from migplan.adapters import cbc_progress
from migplan.adapters.cbc_progress import SolveProgress, fold, parse_line
from migplan.adapters.solver import PulpSolver
from migplan.cli.progress import Mode, Reporter, choose_mode
from migplan.commands.context import build_context
from migplan.commands.propose import BUILDING, READING, WRITING, ProposeRequest, propose
from migplan.planner.milp import Milp, SolveStatus
from migplan.planner.planner import CHECKING, SOLVING

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")

# From PuLP's bundled CBC 2.10.3 (`cbc k.mps -sec 8 -solve -printingOptions all`) on a 400-column, 25-row
# binary knapsack that stopped on its time limit (a selection of its lines; trailing blanks removed).
REAL_LOG = """\
Welcome to the CBC MILP Solver
Version: 2.10.3
Problem k has 25 rows, 400 columns and 10000 elements
Coin0008I k read with 0 errors
seconds was changed from 1e+100 to 8
Continuous objective value is -9227.92 - 0.00 seconds
Cgl0004I processed model has 25 rows, 400 columns (400 integer (400 of which binary)) and 10000 elements
Cutoff increment increased from 1e-05 to 0.9999
Cbc0038I Initial state - 9 integers unsatisfied sum - 2.0544
Cbc0038I Solution found of -9181
Cbc0038I Mini branch and bound improved solution from -9181 to -9190 (0.01 seconds)
Cbc0038I Pass   1: suminf.    0.22446 (1) obj. -9194.69 iterations 11
Cbc0038I After 0.03 seconds - Feasibility pump exiting with objective of -9190 - took 0.03 seconds
Cbc0012I Integer solution of -9190 found by feasibility pump after 0 iterations and 0 nodes (0.03 seconds)
Cbc0031I 4 added rows had average density of 400
Cbc0013I At root node, 4 cuts changed objective from -9227.921 to -9227.8331 in 3 passes
Cbc0014I Cut generator 0 (Probing) - 0 row cuts average 0.0 elements, 0 column cuts (0 active)  in 0.000 seconds \
- new frequency is -100
Cbc0010I After 0 nodes, 1 on tree, -9190 best solution, best possible -9227.8331 (0.03 seconds)
Cbc0016I Integer solution of -9192 found by strong branching after 2090 iterations and 501 nodes (0.84 seconds)
Cbc0016I Integer solution of -9204 found by strong branching after 3130 iterations and 745 nodes (4.33 seconds)
Cbc0010I After 1000 nodes, 341 on tree, -9204 best solution, best possible -9227.8331 (4.53 seconds)
Cbc0010I After 11000 nodes, 404 on tree, -9204 best solution, best possible -9227.8331 (7.75 seconds)
Cbc0020I Exiting on maximum time
Cbc0005I Partial search - best objective -9204 (best possible -9227.8331), took 787657 iterations and 286092 \
nodes (8.00 seconds)
Cbc0032I Strong branching done 37940 times (154237 iterations), fathomed 1974 nodes and fixed 4180 variables
Result - Stopped on time limit
Objective value:                -9204.00000000
Lower bound:                    -9227.833
"""


def _upto(marker: str) -> str:
    """REAL_LOG up to and including the line that starts with `marker`."""
    lines = REAL_LOG.splitlines(keepends=True)
    end = next(i for i, ln in enumerate(lines) if ln.startswith(marker))
    return "".join(lines[:end + 1])


# -- the parser, on real CBC text --------------------------------------------------------------------------

def test_root_lp_gives_the_first_bound_and_no_incumbent() -> None:
    p = fold(_upto("Continuous objective value"))
    assert p == SolveProgress(incumbent=None, bound=-9227.92, nodes=None, seconds=0.0)


def test_heuristic_lines_are_not_an_incumbent_until_cbc_reports_one() -> None:
    # "Solution found of -9181" and the mini branch and bound are the pump's own, before CBC takes a solution
    assert fold(_upto("Cbc0038I After 0.03 seconds")).incumbent is None
    p = fold(_upto("Cbc0012I"))
    assert (p.incumbent, p.bound, p.nodes) == (-9190.0, -9227.92, 0)


def test_root_cuts_raise_the_bound() -> None:
    assert fold(_upto("Cbc0013I")).bound == -9227.8331


def test_status_lines_give_nodes_incumbent_and_bound() -> None:
    p = fold(_upto("Cbc0010I After 1000 nodes"))
    assert p == SolveProgress(incumbent=-9204.0, bound=-9227.8331, nodes=1000, seconds=4.53)
    assert p.gap == pytest.approx((9227.8331 - 9204) / 9204)


def test_strong_branching_solutions_are_incumbents() -> None:
    p = fold(_upto("Cbc0016I Integer solution of -9192"))
    assert (p.incumbent, p.nodes, p.seconds) == (-9192.0, 501, 0.84)


def test_the_partial_search_line_ends_with_the_final_figures() -> None:
    assert fold(REAL_LOG) == SolveProgress(incumbent=-9204.0, bound=-9227.8331, nodes=286092, seconds=8.0)


def test_no_incumbent_yet_is_1e50_in_cbc_words() -> None:
    # CBC 2.10 on an infeasible market-split model: it searched without ever finding a solution
    start = SolveProgress(bound=0.0)
    p = parse_line("Cbc0010I After 1000 nodes, 9 on tree, 1e+50 best solution, best possible 0 (1.35 seconds)", start)
    assert p == SolveProgress(incumbent=None, bound=0.0, nodes=1000, seconds=1.35)
    done = parse_line("Cbc0001I Search completed - best objective 1e+50, took 1111812 iterations and 676856 nodes "
                      "(5.00 seconds)", p)
    assert (done.incumbent, done.bound, done.nodes) == (None, None, 676856)


def test_a_completed_search_is_its_own_bound() -> None:
    p = parse_line("Cbc0001I Search completed - best objective -2721, took 5130 iterations and 572 nodes "
                   "(0.20 seconds)", SolveProgress(incumbent=-2721.0, bound=-2727.7))
    assert (p.incumbent, p.bound, p.gap) == (-2721.0, -2721.0, 0.0)


@pytest.mark.parametrize("line", [
    "Clp0000I Optimal - objective value -9227.92",
    "Cbc0038I Solution found of -9181",
    "Cbc0014I Cut generator 7 (ZeroHalf) - 7 row cuts average 120.0 elements, 0 column cuts (0 active)  in 0.000 "
    "seconds - new frequency is -100",
    "Objective value:                -9204.00000000",
    "Cbc0010I After 1000 nodes, 341 on tree, -92",  # a line CBC is still writing
])
def test_other_lines_change_nothing(line: str) -> None:
    last = SolveProgress(incumbent=-1.0, bound=-2.0, nodes=3, seconds=4.0)
    assert parse_line(line, last) is last


# -- the watch, on real CBC solves ------------------------------------------------------------------------

def _knapsack(n: int = 120, m: int = 12, constant: float = 5000.0) -> Milp:
    """A binary multi-knapsack whose LP relaxation is fractional: CBC branches (about 600 nodes)."""
    rnd = random.Random(3)
    milp = Milp()
    xs = [milp.var(f"x{i}", lb=0, ub=1) for i in range(n)]
    weights = [[rnd.randint(40, 60) for _ in range(n)] for _ in range(m)]
    milp.objective = {x: -float(rnd.randint(10, 80)) for x in xs}
    milp.constant = constant
    for j, row in enumerate(weights):
        milp.add(f"c{j}", [(x, float(w)) for x, w in zip(xs, row, strict=True)], "<=", float(sum(row) // 3))
    return milp


def test_a_cbc_search_reports_its_figures_with_the_objective_constant() -> None:
    seen: list[SolveProgress] = []
    res = PulpSolver(time_limit=60, gap=0, gap_abs=None, progress=seen.append).solve(_knapsack())
    assert res.status is SolveStatus.OPTIMAL and res.objective is not None
    # the log is read once more when CBC has ended: its last figures are always reported
    assert seen and seen[-1].incumbent == pytest.approx(res.objective) and seen[-1].bound == seen[-1].incumbent
    assert all(p.bound is None or p.incumbent is None or p.bound <= p.incumbent + 1e-6 for p in seen)
    assert res.objective == 2279  # CBC's own objective is -2721: the model's constant 5000 was added back


def test_a_bound_lp_reports_nothing() -> None:
    seen: list[SolveProgress] = []
    res = PulpSolver(time_limit=60, progress=seen.append).solve(_knapsack(), relax=True)
    assert res.status is SolveStatus.OPTIMAL and seen == []


def test_cbc_is_line_buffered_where_stdbuf_exists() -> None:
    stdbuf = shutil.which("stdbuf")
    if stdbuf is None:
        pytest.skip("no coreutils stdbuf here")
    assert cbc_progress.line_buffered(["cbc", "m.mps"]) == [stdbuf, "-oL", "cbc", "m.mps"]


def test_without_stdbuf_cbc_runs_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cbc_progress, "_stdbuf", lambda: None)
    assert cbc_progress.line_buffered(["cbc", "m.mps"]) == ["cbc", "m.mps"]
    seen: list[SolveProgress] = []
    res = PulpSolver(time_limit=60, gap=0, progress=seen.append).solve(_knapsack())
    assert res.status is SolveStatus.OPTIMAL and seen and seen[-1].incumbent == pytest.approx(res.objective)


# -- the reporter's policy ----------------------------------------------------------------------------------

class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_policy_follows_the_options_and_the_terminal() -> None:
    tty, pipe = Tty(), io.StringIO()
    assert [choose_mode(False, None, tty), choose_mode(False, None, pipe)] == [Mode.LIVE, Mode.NOTES]
    assert [choose_mode(False, True, tty), choose_mode(False, True, pipe)] == [Mode.LIVE, Mode.PLAIN]
    assert [choose_mode(False, False, tty), choose_mode(True, None, tty)] == [Mode.NOTES, Mode.QUIET]


def test_a_terminal_gets_a_live_line_once_the_run_takes_a_second() -> None:
    out, clock = Tty(), Clock()
    rep = Reporter(Mode.LIVE, out, clock=clock, ticker=False, width=200)
    rep.phase(READING)
    clock.t += 0.5
    rep.phase(BUILDING)
    rep.tick()
    assert out.getvalue() == ""  # under a second: nothing yet
    clock.t += 0.7
    rep.tick()
    assert out.getvalue() == f"\r{BUILDING} 0.7s (total 1.2s)\x1b[K"
    rep.detail("model: 10 variables")  # printed above the live line, which is drawn again
    rep.phase(SOLVING)
    clock.t += 2.0
    rep.solving(SolveProgress(incumbent=812.0, bound=773.0, nodes=501))
    text = out.getvalue()
    assert "\r\x1b[Kmodel: 10 variables\n\r" in text
    assert text.endswith(f"\r{SOLVING} 2.0s: incumbent 812, bound 773, gap 4.80%, 501 nodes (total 3.2s)\x1b[K")
    rep.close()
    assert out.getvalue().endswith("\x1b[K\r\x1b[K")  # cleared: the next output starts on a clean line


def test_a_live_line_is_cut_to_the_terminal_width() -> None:
    out, clock = Tty(), Clock()
    rep = Reporter(Mode.LIVE, out, clock=clock, ticker=False, width=30)
    clock.t += 2
    rep.phase(CHECKING)
    assert out.getvalue() == "\r" + f"{CHECKING} 0.0s (total 2.0s)"[:29] + "\x1b[K"


def test_a_quick_run_on_a_terminal_leaves_no_control_characters() -> None:
    out = Tty()
    with Reporter(Mode.LIVE, out, clock=Clock(), ticker=False) as rep:
        rep.phase(READING)
        rep.note("plan written to p.json")
    assert out.getvalue() == "plan written to p.json\n"


def _a_run(rep: Reporter, clock: Clock) -> None:
    with rep:
        rep.phase(READING)
        rep.note("warning: 1 host(s) declare no GPUs")
        clock.t += 0.25
        rep.phase(BUILDING)
        rep.detail("model: 10 variables")
        rep.phase(SOLVING)
        clock.t += 1.0
        rep.solving(SolveProgress(incumbent=812.0, bound=773.0))
        rep.solving(SolveProgress(incumbent=800.0, bound=773.0))  # within PLAIN_EVERY_S: not printed
        rep.detail("solver cbc: optimal in 1.00s")
        rep.phase(CHECKING)
        rep.phase(WRITING)
        rep.note("plan written to p.json")


def test_a_non_terminal_gets_notes_and_warnings_only_by_default() -> None:
    out, clock = io.StringIO(), Clock()
    _a_run(Reporter(choose_mode(False, None, out), out, clock=clock), clock)
    assert out.getvalue() == "warning: 1 host(s) declare no GPUs\nplan written to p.json\n"


def test_progress_asked_for_on_a_non_terminal_is_plain_lines() -> None:
    out, clock = io.StringIO(), Clock()
    _a_run(Reporter(choose_mode(False, True, out), out, clock=clock), clock)
    assert out.getvalue().splitlines() == [
        f"[   0.00s] {READING}", "warning: 1 host(s) declare no GPUs", f"[   0.25s] {BUILDING}",
        "model: 10 variables", f"[   0.25s] {SOLVING}", f"[   1.25s] {SOLVING}: incumbent 812, bound 773, gap 4.80%",
        "solver cbc: optimal in 1.00s", f"[   1.25s] {CHECKING}", f"[   1.25s] {WRITING}", "plan written to p.json",
        "[   1.25s] done"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_quiet_keeps_only_warnings_and_errors() -> None:
    out, clock = Tty(), Clock()
    rep = Reporter(choose_mode(True, None, out), out, clock=clock)
    _a_run(rep, clock)
    rep.detail("error: something the planner could not do")
    assert out.getvalue() == "warning: 1 host(s) declare no GPUs\nerror: something the planner could not do\n"


def test_a_failed_run_ends_without_done() -> None:
    out, clock = io.StringIO(), Clock()
    with pytest.raises(RuntimeError), Reporter(Mode.PLAIN, out, clock=clock) as rep:
        rep.phase(SOLVING)
        raise RuntimeError("boom")
    assert out.getvalue() == f"[   0.00s] {SOLVING}\n"


def test_a_closed_stderr_stops_progress_not_the_run() -> None:
    out = io.StringIO()
    rep = Reporter(Mode.PLAIN, out, clock=Clock())
    out.close()
    rep.phase(SOLVING)
    rep.note("plan written to p.json")
    rep.close()  # nothing raised


# -- the commands layer and `migplan propose` ----------------------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def phase(self, name: str) -> None:
        self.events.append(("phase", name))

    def detail(self, message: str) -> None:
        self.events.append(("detail", message))

    def solving(self, figures: SolveProgress) -> None:
        self.events.append(("solving", figures))


def test_propose_tells_its_phases_in_order_and_the_planner_lines_as_details(tmp_path: Path) -> None:
    notes: list[str] = []
    rec = Recorder()
    out = tmp_path / "plan.json"
    propose(build_context(None, None, "json"), ProposeRequest(inventory=INV, profiles=PROF, out=str(out)),
            report=notes.append, progress=rec)
    phases = [v for k, v in rec.events if k == "phase"]
    assert phases == [READING, BUILDING, SOLVING, CHECKING, WRITING]
    details = [str(v) for k, v in rec.events if k == "detail"]
    assert details[0].startswith("model:") and details[1].startswith("solver cbc:")
    assert notes == [f"plan written to {out}"]  # notes stay notes


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


def test_propose_with_progress_prints_plain_phases_and_keeps_stdout_data(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.json"
    r = run("propose", "-i", INV, "-p", PROF, "-o", "json", "--out", str(out), "--progress")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["solve"]["solver"] == "cbc"
    lines = r.stderr.splitlines()
    stamped = [ln.split("] ", 1)[1] for ln in lines if ln.startswith("[")]
    assert stamped == [READING, BUILDING, SOLVING, CHECKING, WRITING, "done"]
    assert any(ln.startswith("model:") for ln in lines) and any(ln.startswith("solver cbc: optimal in") for ln in lines)
    assert f"plan written to {out}" in lines and "\r" not in r.stderr and "\x1b" not in r.stderr


def test_propose_by_default_off_a_terminal_prints_notes_only(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.json"
    r = run("propose", "-i", INV, "-p", PROF, "-o", "json", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert r.stderr == f"plan written to {out}\n"


def test_propose_quiet_prints_nothing_but_warnings(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", PROF, "-o", "json", "--out", str(tmp_path / "plan.json"), "-q")
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and json.loads(r.stdout)["solve"]["status"] == "optimal"
    # a host that declares no GPUs is a warning: it is printed with --quiet too
    w = run("propose", "-i", str(ROOT / "inventory" / "ansible-example.yaml"), "-p", PROF, "--quiet")
    assert w.exit_code == 0, w.output
    assert w.stderr.startswith("warning: ") and "left out of this plan: gpu-h100-01" in w.stderr
    assert len(w.stderr.splitlines()) == 1


def test_propose_quiet_still_prints_errors(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", str(tmp_path / "none"), "-q")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "no such file or directory" in r.stderr


def test_quiet_and_progress_together_are_refused(run) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", PROF, "-q", "--progress")
    assert r.exit_code == 2 and "--quiet and --progress contradict" in r.stderr and r.stdout == ""


def test_on_a_real_terminal_the_planner_lines_show_and_a_live_line_is_always_cleared(tmp_path: Path) -> None:
    # stderr a pty (a terminal): the planner's lines as before; a live line, if the run took long enough to
    # draw one, is drawn and cleared in place ("\r" ... "\x1b[K") and never left on the screen
    leader, follower = pty.openpty()
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": "200"}
    try:
        proc = subprocess.run([sys.executable, "-m", "migplan.cli.app", "propose", "-i", INV, "-p", PROF, "-o",
                               "json"], stdout=subprocess.PIPE, stderr=follower, env=env, check=False, timeout=120)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    err = b"".join(chunks).decode().replace("\r\n", "\n")  # "\r\n": the terminal's own newline
    assert proc.returncode == 0, err
    drawn = re.sub(r"\r[^\r\n]*\x1b\[K", "", err)  # every live line drawn or cleared
    lines = drawn.splitlines()
    assert any(ln.startswith("model:") for ln in lines) and any(ln.startswith("solver cbc: optimal in") for ln in lines)
    assert "\x1b" not in drawn and "\r" not in drawn
    assert not err.rstrip("\n").endswith("\x1b[K") or err.rstrip("\n").endswith("\r\x1b[K")  # left cleared
