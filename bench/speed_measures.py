"""What each speed measure of migplan buys: the run it speeds up, with the measure and with it switched off.

    python -m bench.speed_measures                      # every measure this checkout has, 7,000 GPUs
    python -m bench.speed_measures --tree DIR           # the measures of another checkout (e.g. one that
                                                        # still has retired ones), with this script
    python -m bench.speed_measures --fleet DIR --repeat 5 --only yamljson,gc-freeze

Each measure is switched off in a fresh child process by a few lines run before the command (`off` below:
a module flag, a function replaced by the plain one it stands beside, an environment variable), so the
command is otherwise the tree's own. Runs alternate, on then off, `--repeat` pairs per measure; wall and CPU
(user+sys of the child and of everything it waited for: profile workers, CBC) are medians. `buys` is off
minus on; `%` is that share of the run without the measure. `speed` is a fixed pure-Python loop timed just
before each pair (this VM's CPUs are shared and their speed moves; compare rows by it). A measure the tree
does not have (its module or name is missing) is reported as absent, not measured.

The fleet: `--fleet DIR` with `inventory.yaml` and `profiles/` (bench/large_inputs.py writes them), else one
of 7,000 GPUs generated into a temporary directory. The plan for the plan-reading measure is written by the
tree's own `propose --out` first.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Measure:
    name: str
    where: str  # the code, as the table names it
    run: str  # "propose" (read + plan, JSON out), "table" (propose, table out), "load_plan"
    off: str  # Python run in the child before the command: switches the measure off
    needs: str  # "module:attribute" the tree must have for the measure to exist there ("|": one of them)


MEASURES = (
    Measure("yamlplain", "migplan/yamlplain.py (first in yamldoc's compose)", "propose",
            "import migplan.yamldoc as m; m.USE_PLAIN = False", "migplan.yamldoc:USE_PLAIN"),
    Measure("prefetch", "cli/entry.py prefetch_path + profiles.prefetch", "propose",
            "import migplan.cli.entry as m; m.prefetch_path = lambda *a, **k: None", "migplan.cli.entry:prefetch_path"),
    Measure("forked-checks", "adapters/forkmap.py Forked (plan checks on another CPU)", "propose",
            "import migplan.adapters.forkmap as m, migplan.planner.background as b; m.Forked = b.Here",
            "migplan.adapters.forkmap:Forked"),
    Measure("identity-text", "model/state.py _identity_text (fingerprint text field by field)", "propose",
            "import importlib\nfor name in ('migplan.model.state', 'migplan.fleet.state'):\n"
            "    try:\n        m = importlib.import_module(name)\n    except ImportError:\n        continue\n"
            "    if hasattr(m, '_identity_text'): m._identity_text = lambda g, m=m: m._canonical(g.identity())",
            "migplan.model.state:_identity_text|migplan.fleet.state:_identity_text"),
    Measure("quick-statistics", "profiles.py _memory_fast/_compute_fast", "propose",
            "import migplan.profiles as m; m._memory_fast = m._compute_fast = lambda n: None",
            "migplan.profiles:_memory_fast"),
    Measure("parallel-profiles", "adapters/forkmap.py fork_start for large profile sets", "propose",
            "import importlib\nfor name in ('migplan.documents', 'migplan.profiles'):\n"
            "    m = importlib.import_module(name)\n"
            "    if hasattr(m, 'PARALLEL_BYTES'): m.PARALLEL_BYTES = 1 << 62",
            "migplan.adapters.forkmap:fork_start"),
    Measure("paused-gc", "yamldoc.paused_gc (collector paused while documents are built)", "propose",
            "import contextlib, migplan.yamldoc as m; m.paused_gc = contextlib.nullcontext",
            "migplan.yamldoc:paused_gc"),
    Measure("gc-freeze", "gc.freeze() before exit (cli/app.py main)", "propose",
            "import gc; gc.freeze = lambda: None", "migplan:__name__"),
    Measure("jsontext", "migplan/jsontext.py (indented JSON)", "propose",
            "import json, migplan.jsontext as m; m.dumps = lambda v: json.dumps(v, indent=2)",
            "migplan.jsontext:dumps"),
    Measure("plain-grid", "cli/render.py _plain_grid (tables without tabulate)", "table",
            "import migplan.cli.render as m; m._plain_grid = lambda *a, **k: None", "migplan.cli.render:_plain_grid"),
    Measure("catalog-cache", "catalog/cache.py (the shipped catalog as JSON)", "propose",
            "import os; os.environ['MIGPLAN_CACHE_DIR'] = 'none'", "migplan.catalog.cache:load"),
    Measure("yamljson", "migplan/yamljson.py (JSON plans by json.loads)", "load_plan",
            "import importlib\nfor name in ('migplan.yamljson', 'migplan.yamldoc'):\n"
            "    m = importlib.import_module(name)\n"
            "    if hasattr(m, 'USE_JSON'): m.USE_JSON = False",
            "migplan.yamljson:read"),
)


def together(measures: list[Measure]) -> Measure:
    """One measure that switches off all of `measures` in the same child (they must speed up the same run)."""
    runs = {m.run for m in measures}
    if len(runs) != 1:
        raise SystemExit(f"--together: the measures speed up different runs ({', '.join(sorted(runs))})")
    return Measure("+".join(m.name for m in measures), "; ".join(m.where for m in measures), runs.pop(),
                   "\n".join(m.off for m in measures), measures[0].needs)  # each one's checked by main


def entry_point(tree: Path) -> str:
    """The tree's console script ("module:function"), from its pyproject.toml."""
    text = (tree / "pyproject.toml").read_text()
    found = re.search(r'^migplan\s*=\s*"([\w.]+:\w+)"', text, re.M)
    if found is None:
        raise SystemExit(f"{tree}: no `migplan = ...` console script in pyproject.toml")
    return found.group(1)


def _has(tree: Path, needs: str) -> bool:
    places = [tuple(one.split(":")) for one in needs.split("|")]
    code = ("import importlib, sys\nfor module, attr in " + repr(places) + ":\n    try:\n"
            "        if hasattr(importlib.import_module(module), attr): sys.exit(0)\n"
            "    except ImportError:\n        pass\nsys.exit(1)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], env=_env(tree), cwd=str(tree), capture_output=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _child_code(tree: Path, measure: Measure, off: bool, fleet: Path, plan: Path) -> str:
    setup = measure.off if off else ""
    if measure.run == "load_plan":
        return f"{setup}\nfrom migplan import documents\ndocuments.load_plan({str(plan)!r})\n"
    return propose_code(tree, fleet, "table" if measure.run == "table" else "json", setup)


def propose_code(tree: Path, fleet: Path, fmt: str = "json", setup: str = "") -> str:
    """`python -c` code that runs `tree`'s own console script as `migplan propose -o FMT` on `fleet` (its
    inventory.yaml and profiles/), after the lines `setup`."""
    module, _, fn = entry_point(tree).partition(":")
    argv = ["migplan", "propose", "-i", str(fleet / "inventory.yaml"), "-p", str(fleet / "profiles"), "-o", fmt]
    return f"import sys\n{setup}\nsys.argv = {argv!r}\nfrom {module} import {fn} as main\nmain()\n"


def run_child(tree: Path, code: str) -> tuple[float, float]:
    """(wall s, CPU s of the child and everything it waited for)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(tree), cwd=str(tree),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    if proc.returncode != 0:
        raise SystemExit(f"the child failed ({proc.returncode}):\n{code}\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _speed() -> float:
    """Seconds of a fixed pure-Python loop, best of 3 (lower is a faster moment of this VM)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i % 7
        best = min(best, time.perf_counter() - t0)
    return best


def measure(tree: Path, m: Measure, fleet: Path, plan: Path, repeat: int) -> dict[str, float]:
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    speeds = []
    for _ in range(repeat):
        speeds.append(_speed())
        on.append(run_child(tree, _child_code(tree, m, False, fleet, plan)))
        off.append(run_child(tree, _child_code(tree, m, True, fleet, plan)))
    med = statistics.median
    return {"speed": med(speeds), "on_wall": med(w for w, _ in on), "off_wall": med(w for w, _ in off),
            "on_cpu": med(c for _, c in on), "off_cpu": med(c for _, c in off)}


def _row(m: Measure, got: dict[str, float] | None) -> str:
    if got is None:
        return f"| {m.name} | {m.where} | absent in this tree | | | |"
    bw, bc = got["off_wall"] - got["on_wall"], got["off_cpu"] - got["on_cpu"]
    return (f"| {m.name} | {m.where} | {got['speed']:.3f} | {got['on_wall']:.2f} / {got['off_wall']:.2f} | "
            f"{got['on_cpu']:.2f} / {got['off_cpu']:.2f} | {bw:+.2f} s ({100 * bw / got['off_wall']:+.0f}%) wall, "
            f"{bc:+.2f} s ({100 * bc / got['off_cpu']:+.0f}%) CPU |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(ROOT), help="the checkout measured (its migplan through PYTHONPATH)")
    ap.add_argument("--fleet", help="a directory with inventory.yaml and profiles/ [default: 7,000 GPUs, generated]")
    ap.add_argument("--repeat", type=int, default=3, help="on/off pairs per measure")
    ap.add_argument("--only", help="comma-separated measure names")
    ap.add_argument("--together", help="comma-separated measure names switched off at once, as one row (e.g. "
                                       "every measure a round retired, on the tree that still had them)")
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    chosen = [m for m in MEASURES if not args.only or m.name in args.only.split(",")]
    if args.together:
        parts = [m for m in MEASURES if m.name in args.together.split(",")]
        missing = [m.name for m in parts if not _has(tree, m.needs)]
        if missing:
            raise SystemExit(f"--together: {tree} lacks {', '.join(missing)}")
        chosen = [together(parts)]
    work = Path(tempfile.mkdtemp(prefix="speed-measures-"))
    try:
        if args.fleet:
            fleet = Path(args.fleet)
        else:
            from bench.large_inputs import write_instance

            fleet = work / "fleet"
            fleet.mkdir()
            write_instance(7000, str(fleet))
        plan = work / "plan.json"
        if any(m.run == "load_plan" for m in chosen):
            module, _, fn = entry_point(tree).partition(":")
            argv = ["migplan", "propose", "-i", str(fleet / "inventory.yaml"), "-p", str(fleet / "profiles"),
                    "--out", str(plan)]
            run_child(tree, f"import sys\nsys.argv = {argv!r}\nfrom {module} import {fn} as main\nmain()\n")
        print(f"tree {tree} (console script {entry_point(tree)}), fleet {fleet}, {args.repeat} pairs each, "
              f"load average {os.getloadavg()[0]:.1f}")
        print("| measure | code | speed s | wall s: on / off | CPU s: on / off | buys |")
        print("|---|---|---|---|---|---|")
        for m in chosen:
            got = measure(tree, m, fleet, plan, args.repeat) if _has(tree, m.needs) else None
            print(_row(m, got), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
