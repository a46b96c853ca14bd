"""Convergence as a property (issue 20): for stationary demand, the second and every later replan changes
nothing and exits 0, over random fleets and demand on the nvidia-smi simulator.

Each seed draws 1-3 hosts of 1-3 A100-40GB or A30 GPUs (each MIG off, empty, or with an idle layout of
its own) and 2-7 workloads. After the first run, the workloads split into three kinds: some start at
once where the apply put them (their processes appear on the simulator, their profiles gain the observed
place), some start late (at the third run), and some never start (their profiles never say where they
run: only the host's assignments.json does). Before the fifth run the history store "restarts": every
profile loses its observed place. Runs go 1 h, 25 h (past the cool-down), 49 h and 73 h after the first.
Checked: every later run exits 0 with no mutating nvidia-smi command on any host, and no workload the
first run placed is left out. The count of seeds and runs is printed.
"""

from __future__ import annotations

import datetime as dt
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import flat_workload, write_profiles
from sim.fleet import host_state, read_state, write_state

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import enumerate_layouts
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import EXIT_APPLIED, EXIT_NOTHING, ReplanRequest, replan
from migplan.fleet.steps import is_read_only

CAT = builtin_catalog()
T0 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc)
SEEDS = 12
LATER = (1, 25, 49, 73)  # hours after the first run


def _fleet(rng: random.Random, paths: Sequence[Path]) -> dict[str, Path]:
    """1-3 hosts (named h0, h1, ...) written to the first of `paths`."""
    states = {}
    for h in range(rng.randint(1, 3)):
        name = f"h{h}"
        model = rng.choice(["A100-SXM4-40GB", "A30"])
        n = rng.randint(1, 3)
        layouts: list[Any] = []
        for _ in range(n):
            kind = rng.random()
            layouts.append(None if kind < 0.4 else [] if kind < 0.6 else
                           rng.choice(enumerate_layouts(CAT.get(model), maximal=True)).as_list())
        st = host_state(model, n, hostname=name, layouts=[x if x else None for x in layouts])
        for g, lay in zip(st["gpus"], layouts, strict=True):
            if lay is None:
                g.update(mig_current=False, mig_pending=False, gpu_instances=[])
        states[name] = write_state(paths[h], st)
    return states


def _profiles(path: Path, demand: dict[str, int], observed: dict[str, dict[str, Any]]) -> None:
    write_profiles(path, [flat_workload(n, m, **({"observed": observed[n]} if n in observed else {}))
                          for n, m in sorted(demand.items())])


def _start(states: dict[str, Path], placed: Any, names: set[str], when: dt.datetime,
           observed: dict[str, dict[str, Any]]) -> None:
    """The workloads `names` start where the plan put them: a process on the simulator, an observed place."""
    for w in placed:
        if w.name not in names:
            continue
        st = read_state(states[w.host])
        gpu = st["gpus"][w.gpu]
        obs: dict[str, Any] = {"host": w.host, "gpu": w.gpu, "last_seen": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        proc = {"pid": 5000 + len(gpu["processes"]) + 100 * w.gpu, "name": w.name, "used_memory_mib": 1000,
                "gi": None, "ci": None}
        if w.instance:
            prof, start = w.instance.split("@")
            gi = next(g for g in gpu["gpu_instances"] if g["start"] == int(start))
            proc.update(gi=gi["id"], ci=gi["cis"][0]["id"])
            obs.update(mig_profile=prof, mig_start=int(start))
        gpu["processes"].append(proc)
        write_state(states[w.host], st)
        observed[w.name] = obs


def _mutations(states: dict[str, Path]) -> int:
    return sum(1 for p in states.values() for a in read_state(p)["log"] if not is_read_only(["nvidia-smi", *a]))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_stationary_demand_converges_after_the_first_run(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    states = _fleet(rng, [tmp_path / f"h{i}.json" for i in range(3)])
    hosts = {name: {"connection": "local", "discover": True, "lock_file": str(tmp_path / f"{name}.lock"),
                    "state_dir": str(tmp_path / f"{name}-etc")} for name in states}
    print(converge(tmp_path, rng, states, hosts, FleetRequest(),
                   sim_runner.connect(states)))


def converge(tmp_path: Path, rng: random.Random, states: dict[str, Path], hosts: dict[str, Any], fleet: FleetRequest,
             connect: Callable[[Any], Any] | None) -> str:
    """The property for one drawn fleet (see the module notes); the line that says what was checked."""
    seed = rng.random()
    demand = {f"w{i}": rng.choice([3000, 4500, 9000, 15000, 19000, 30000]) for i in range(rng.randint(2, 7))}
    inv = {"version": 1, "hosts": hosts}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "version": 1, "inventory": "inv.yaml", "profiles": "profiles.yaml",
        "planner": {"headroom": 0.0, "headroom_min_mib": 0}}))
    observed: dict[str, dict[str, Any]] = {}
    _profiles(tmp_path / "profiles.yaml", demand, observed)

    def run(hours: int):  # type: ignore[no-untyped-def]
        ctx = build_context(str(tmp_path / "config.yaml"), None, None)
        return replan(ctx, ReplanRequest(fleet=fleet, state_dir=str(tmp_path / "state")),
                      now=T0 + dt.timedelta(hours=hours), connect=connect)

    first = run(0)
    assert first.exit_code in (EXIT_APPLIED, EXIT_NOTHING), first.line
    placed = [w for w in first.plan.workloads if w.status == "placed"]  # type: ignore[union-attr]
    names = sorted(w.name for w in placed)
    rng.shuffle(names)
    now_start, late = set(names[: len(names) // 3]), set(names[len(names) // 3: 2 * len(names) // 3])
    _start(states, placed, now_start, T0 + dt.timedelta(minutes=30), observed)
    _profiles(tmp_path / "profiles.yaml", demand, observed)
    before = _mutations(states)
    for k, hours in enumerate(LATER):
        if k == 1:
            _start(states, placed, late, T0 + dt.timedelta(hours=hours - 1), observed)
            _profiles(tmp_path / "profiles.yaml", demand, observed)
        if k == 3:  # the history store restarts: no profile knows where its workload runs
            _profiles(tmp_path / "profiles.yaml", demand, {})
        again = run(hours)
        assert again.exit_code == EXIT_NOTHING, (seed, hours, again.line)
        assert _mutations(states) == before, (seed, hours, again.line)
        kept = {w.name for w in again.plan.workloads if w.status == "placed"}  # type: ignore[union-attr]
        assert {w.name for w in placed} <= kept, (seed, hours, sorted({w.name for w in placed} - kept))
    return (f"{len(states)} host(s), {len(demand)} workloads ({len(placed)} placed: {len(now_start)} start at "
            f"once, {len(late)} late, {len(placed) - len(now_start) - len(late)} never); {len(LATER)} later runs "
            f"changed nothing (draw {seed:.3f})")
