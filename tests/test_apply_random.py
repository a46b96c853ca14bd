"""Random plans across mixed models (A30, A100-40GB, A100-80GB, H100): hosts start partitioned at random
(or with MIG off), the real planner (CBC) re-partitions them for random workloads, apply runs, discovery reads
the hosts back, and every GPU equals its plan, with each instance the plan keeps untouched (the same GPU
instance id before and after). A seeded generator: the same cases every run, bounded time."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from planner_fixtures import EXACT, profiles, wl
from sim.fleet import host_state, read_state, write_state
from sim_runner import InProcess

from migplan.adapters.solver import PulpSolver
from migplan.catalog import Catalog, builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host
from migplan.planner import plan

# every seed plans a random fleet with CBC, applies and discovers it: seconds each
pytestmark = pytest.mark.slow

CAT = builtin_catalog()
MODELS = ("A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB")
SEEDS = range(20)


def _case(seed: int, tmp: Path) -> tuple[dict[str, Path], list[Any]]:
    rng = random.Random(seed)
    states: dict[str, Path] = {}
    for h in range(rng.randint(2, 3)):
        model = rng.choice(MODELS)
        n = rng.randint(1, 2)
        layouts: list[Layout | None] = []
        for _ in range(n):
            options = enumerate_layouts(CAT.get(model))
            layouts.append(None if rng.random() < 0.2 else rng.choice(options))
        st = host_state(model, n, hostname=f"h{h}", layouts=[lay or Layout() for lay in layouts])
        for gpu, lay in zip(st["gpus"], layouts, strict=True):
            if lay is None:
                gpu.update(mig_current=False, mig_pending=False, gpu_instances=[])
        states[f"h{h}"] = write_state(tmp / f"h{h}.json", st)
    sizes = sorted({p.memory_mib for m in MODELS for p in CAT.get(m).profiles})
    work = [wl(f"w{i}", max(512, rng.choice(sizes) - rng.randint(100, 1500))) for i in range(rng.randint(3, 9))]
    return states, work


def _gi_ids(path: Path) -> dict[tuple[int, int, int], int]:
    """(GPU, profile id, start) -> GPU instance id, from the simulator's own state."""
    return {(g["index"], gi["profile_id"], gi["start"]): gi["id"] for g in read_state(path)["gpus"]
            for gi in g["gpu_instances"]}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_mixed_fleet_plan_apply_discover_compare(tmp_path: Path, seed: int) -> None:
    states, work = _case(seed, tmp_path)
    p, catalog, hosts = _plan_case(states, work)
    before = {n: _gi_ids(path) for n, path in states.items()}
    for name, path in states.items():
        mine = [g for g in p.gpus if g.host == name]
        res = apply_host(InProcess(path), hosts[name], mine, catalog, ApplyOptions())  # type: ignore[arg-type]
        assert {r.outcome for r in res.gpus} <= {GpuOutcome.APPLIED, GpuOutcome.UNCHANGED}, (seed, name, res)
        for r in res.gpus:
            gp = p.gpu(name, r.gpu)
            assert gp is not None and (r.outcome is GpuOutcome.UNCHANGED) == (not gp.actions)
    again = Snapshot(tuple(discover_host(InProcess(path), hosts[n], CAT) for n, path in states.items()))
    for h in again.hosts:
        for g in h.gpus:
            gp = p.gpu(h.name, g.index)
            assert gp is not None and g.layout == gp.target, (seed, h.name, g.index, g.layout, gp.target)
    for name, path in states.items():
        after = _gi_ids(path)
        for g in (g for g in p.gpus if g.host == name and g.current is not None and g.target is not None):
            model = catalog.get(g.model)
            for inst in set(g.current.instances) & set(g.target.instances):  # type: ignore[union-attr]
                key = (g.index, model.profile(inst.profile).id, inst.start)
                assert after[key] == before[name][key], (seed, name, g.index, inst)  # kept: never re-created


def _plan_case(states: dict[str, Path], work: list[Any]) -> tuple[Any, Catalog, dict[str, Host]]:
    hosts = {name: Host(name=name, address=name) for name in states}
    snap = Snapshot(tuple(discover_host(InProcess(p), hosts[n], CAT) for n, p in states.items()))
    fs = snap.fleet_state(catalog=CAT)
    catalog = Catalog((*fs.models, *CAT.models))
    return plan(fs, profiles(*work), catalog, EXACT, PulpSolver(time_limit=20)), catalog, hosts


def test_the_random_cases_cover_every_model_and_repartition_partitioned_gpus(tmp_path: Path) -> None:
    """The generator is not vacuous: the seeds reach all four models, start partitioned and MIG-off, and their
    plans change GPUs, change MIG modes and keep instances on GPUs they re-partition."""
    models, changed, mode, kept = set(), 0, 0, 0
    for seed in SEEDS:
        (tmp_path / str(seed)).mkdir()
        states, work = _case(seed, tmp_path / str(seed))
        p, _, _ = _plan_case(states, work)
        for g in p.gpus:
            models.add(g.model.split("@")[0])
            changed += bool(g.actions)
            mode += (g.current is None) != (g.target is None)
            if g.actions and g.current is not None and g.target is not None:
                kept += len(set(g.current.instances) & set(g.target.instances))
    assert models == set(MODELS) and changed >= 20 and mode >= 5 and kept >= 3, (models, changed, mode, kept)
