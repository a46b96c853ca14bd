"""The time-limit matrix of `migplan propose --allow-disrupt --gap 0` on a changed fleet (issue 23):
python -m bench.time_limits [--gpus 1000] [--workloads N] [--changed 0.3] [--runs 3] [--limits 1,5,60]
                            [--out bench/results/time-limits.md]

The fleet: bench.generate's mixed-model "small" instance (`--gpus` GPUs, 3.9 workloads per GPU as in
bench/run.py's 1024g-4000w rows) planned from empty and applied (migplan.planner.replay.applied), then
`--changed` of the workloads' demand scaled by 0.5-1.6 (`change_demand`, bench/run.py's "previous" state,
with more of the demand changed so that a 1 s solve at --gap 0 does not prove optimality). The state is written
as a migplan inventory (`{index, model, mig, layout}` per GPU) and a profiles file (documents.write_profiles),
and the real CLI runs in a child process for each limit L, `--runs` times, in two conditions:

    migplan propose -i INVENTORY -p PROFILES --allow-disrupt --time-limit L --gap 0 -o json --out PLAN

* idle: nothing else runs;
* loaded: os.cpu_count() busy-loop children (`python -c 'while True: pass'`) run throughout, then are killed.

Recorded per run: exit code, wall time, the plan's solve.status, solve.gap and solve.fallback (absent: none),
whether stderr holds the word "infeasible" and whether it holds a traceback. Each run is classified as
"plan (STATUS)", "greedy fallback", "no plan (clear message)" (non-zero exit, no plan written, a message on
stderr, no traceback), or "BAD: infeasible printed" / "BAD: crash (traceback)" / "BAD: hung" / "BAD: no plan,
no message" / "BAD: exit E with a plan". The model is always feasible (with --allow-disrupt any workload may be
left out), so "infeasible" printed is always wrong. Nothing is asserted; the table goes to stdout and to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the console script's own entry point, from this checkout (no installed `migplan` on PATH is needed)
MIGPLAN = [sys.executable, "-c", "import sys; from migplan.cli.app import main; sys.argv[0] = 'migplan'; main()"]
INFEASIBLE = re.compile(r"\binfeasible\b", re.I)  # the word, not "infeasibility not proven"
TRACEBACK = "Traceback (most recent call last)"
DRIVER = "550.54.15"
WORKLOADS_PER_GPU = 3.9  # 4000 workloads on 1024 GPUs (bench/run.py)


@dataclass
class Run:
    limit: float
    condition: str
    exit: int | None  # None: killed after the wall-clock guard
    wall_s: float
    status: str | None
    gap: float | None
    fallback: str | None
    infeasible: bool
    traceback: bool
    last_line: str  # stderr's last line, for the per-run table

    @property
    def verdict(self) -> str:
        if self.traceback:
            return "BAD: crash (traceback)"
        if self.infeasible:
            return "BAD: infeasible printed"
        if self.exit is None:
            return "BAD: hung"
        if self.status is not None:
            if self.fallback is not None:
                return "greedy fallback" if self.fallback == "greedy" else f"{self.fallback} fallback"
            return f"plan ({self.status})" if self.exit == 0 else f"BAD: exit {self.exit} with a plan"
        if self.exit != 0 and self.last_line:
            return "no plan (clear message)"
        return "BAD: no plan, no message"


def _env() -> dict[str, str]:
    # no MIGPLAN_* from the caller's shell (a config, an output format) changes what is measured
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGPLAN_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def build_fleet(gpus: int, workloads: int, changed: float, seed: int) -> tuple[object, object, str]:
    """The applied-then-changed fleet: (state, profiles, a line describing how it was built)."""
    from bench.generate import Spec, change_demand, generate
    from migplan.adapters.solver import PulpSolver
    from migplan.catalog import builtin_catalog
    from migplan.planner import Policy, plan
    from migplan.planner.replay import applied

    spec = Spec(gpus, workloads, "mixed", "small", "empty", seed)
    state, ps = generate(spec)
    t0 = time.perf_counter()
    first = plan(state, ps, builtin_catalog(), Policy(), PulpSolver(time_limit=30), lower_bound=False)
    secs = time.perf_counter() - t0
    state, ps = applied(state, ps, first)
    ps = change_demand(ps, changed, seed)
    return state, ps, (f"{spec.name} planned from empty ({first.solve.status}, {secs:.1f} s, "
                       f"{first.summary.gpus_used} GPUs used), applied, then {changed:.0%} of the demand changed")


def write_inputs(state, ps, directory: Path) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """The state as a migplan inventory and the workloads as a profiles file, as `propose` reads them."""
    from migplan.documents import write_profiles

    hosts: dict[str, list[str]] = {}
    for g in state.gpus:
        if g.mig_enabled and g.layout is not None:
            gpu = f"{{index: {g.index}, model: {g.model}, mig: true, layout: [{', '.join(g.layout.as_list())}]}}"
        else:
            gpu = f"{{index: {g.index}, model: {g.model}, mig: false}}"
        hosts.setdefault(g.host, []).append(gpu)
    # a driver that has every catalog profile (the newest min_driver is R525): without one, offline planning
    # offers only the profiles every driver has, and the applied plan's 1g.10gb instances would be refused
    lines = ["# Generated by bench/time_limits.py (deterministic).", "version: 1", "", "vars:",
             f'  driver: "{DRIVER}"', "", "hosts:"]
    for n, (host, items) in enumerate(hosts.items()):
        lines += [f"  {host}:", f"    address: 10.0.{n >> 8 & 255}.{n & 255}", "    gpus:"]
        lines += [f"      - {gpu}" for gpu in items]
    inventory, profiles = directory / "inventory.yaml", directory / "profiles.yaml"
    inventory.write_text("\n".join(lines) + "\n")
    write_profiles(profiles, ps.workloads)
    return inventory, profiles


def command(inventory: Path, profiles: Path, limit: float, out: Path) -> list[str]:
    return [*MIGPLAN, "propose", "-i", str(inventory), "-p", str(profiles), "--allow-disrupt",
            "--time-limit", f"{limit:g}", "--gap", "0", "-o", "json", "--out", str(out)]


def run_once(inventory: Path, profiles: Path, limit: float, condition: str, directory: Path) -> Run:
    out = directory / "plan.json"
    out.unlink(missing_ok=True)
    cmd = command(inventory, profiles, limit, out)
    guard = limit * 3 + 300  # model building and checking come on top of the solver's limit
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=guard, check=False)
        code: int | None = proc.returncode
        err = proc.stderr
    except subprocess.TimeoutExpired as e:
        code = None
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    wall = time.perf_counter() - t0
    status = gap = fallback = None
    if out.exists():
        solve = json.loads(out.read_text()).get("solve", {})
        status, gap, fallback = solve.get("status"), solve.get("gap"), solve.get("fallback")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return Run(limit, condition, code, wall, status, gap, fallback, bool(INFEASIBLE.search(err)),
               TRACEBACK in err, lines[-1].strip() if lines else "")


@contextlib.contextmanager
def load(n: int) -> Iterator[None]:
    """n busy-loop children for the duration of the block, killed (by their own handles) after it."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.5)  # let them reach the loop before the first timed run
        yield
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()


def render(runs: list[Run], limits: list[float], header: list[str]) -> str:
    out = [*header, "",
           "| limit s | condition | runs | verdicts | median wall s | max gap | infeasible printed | tracebacks |",
           "|---|---|---|---|---|---|---|---|"]
    for cond in ("idle", "loaded"):
        for lim in limits:
            rs = [r for r in runs if r.limit == lim and r.condition == cond]
            if not rs:
                continue
            verdicts = ", ".join(f"{v} {n}" for v, n in sorted(Counter(r.verdict for r in rs).items()))
            gaps = [r.gap for r in rs if r.gap is not None]
            max_gap = f"{max(gaps):.4%}" if gaps else "n/a"
            out.append(f"| {lim:g} | {cond} | {len(rs)} | {verdicts} | {statistics.median(r.wall_s for r in rs):.2f} "
                       f"| {max_gap} | {sum(r.infeasible for r in rs)} | {sum(r.traceback for r in rs)} |")
    out += ["", "Per run:", "", "| limit s | condition | exit | wall s | solve.status | solve.gap | fallback | verdict "
            "| stderr's last line |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        gap = f"{r.gap:.4%}" if r.gap is not None else "n/a"
        last = r.last_line.replace("|", "\\|")[:160]
        out.append(f"| {r.limit:g} | {r.condition} | {r.exit if r.exit is not None else 'killed'} | {r.wall_s:.2f} "
                   f"| {r.status or '-'} | {gap} | {r.fallback or 'none'} | {r.verdict} | {last} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--workloads", type=int, default=None, help="default: 3.9 per GPU")
    ap.add_argument("--changed", type=float, default=0.3, help="share of workloads whose demand changes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limits", default="1,5,60", help="solver time limits, seconds, comma-separated")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "time-limits.md"))
    a = ap.parse_args(argv)
    limits = [float(x) for x in a.limits.split(",") if x.strip()]
    workloads = a.workloads if a.workloads is not None else round(a.gpus * WORKLOADS_PER_GPU)
    state, ps, built = build_fleet(a.gpus, workloads, a.changed, a.seed)
    cpus = os.cpu_count() or 1
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="migplan-time-limits-") as tmp:
        inventory, profiles = write_inputs(state, ps, Path(tmp))
        print("command: " + " ".join(["migplan", *command(inventory, profiles, limits[0], Path(tmp) / "plan.json")
                                      [len(MIGPLAN):]]), file=sys.stderr)
        for cond in ("idle", "loaded"):
            with load(cpus) if cond == "loaded" else contextlib.nullcontext():
                for lim in limits:
                    for _ in range(a.runs):
                        r = run_once(inventory, profiles, lim, cond, Path(tmp))
                        print(f"  {lim:g} s {cond}: exit {r.exit}, {r.wall_s:.2f} s, {r.status}, {r.verdict}",
                              file=sys.stderr)
                        runs.append(r)
    header = [f"# propose time limits (issue 23): {datetime.date.today().isoformat()}", "",
              f"Machine: {cpus} CPUs, {platform.platform()}, Python {platform.python_version()}; "
              f"loaded = {cpus} busy-loop processes.",
              f"Fleet: {built} ({a.gpus} GPUs, {workloads} workloads).",
              "Command: `migplan propose -i INVENTORY -p PROFILES --allow-disrupt --time-limit L --gap 0 -o json "
              "--out PLAN`."]
    text = render(runs, limits, header)
    print(text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
