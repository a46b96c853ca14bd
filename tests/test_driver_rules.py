"""Geometry by driver: what an older NVIDIA driver refuses is planned around (issue 20, part A).

MIG User Guide, "Concepts" (docs/mig-geometry.md §1): "prior to NVIDIA driver release R510, the combination of
a (4 memory, 4 compute) and a (4 memory, 3 compute) profile was not supported" (4g.20gb with 3g.20gb on
A100-40GB). The catalog records it as an exclusion with `min_driver: '510'`; a catalog model stands for a current
driver and does not enforce it, the model `GpuModel.for_driver` makes for an older host does; profiles an older
driver lacks (`min_driver` of a profile) are left out unless the host printed its own table. The simulator
(tests/sim) enforces the same rule by its own code, so the two are checked against each other here.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from planner_fixtures import EXACT, profiles, wl
from sim import geometry as simgeo
from sim.fleet import write_host

from migplan.adapters.solver import PulpSolver
from migplan.catalog import Catalog, builtin_catalog
from migplan.catalog.cache import _model as cached_model
from migplan.catalog.geometry import Exclusion
from migplan.catalog.layout import Instance, Layout, check_layout, enumerate_layouts, free_placements
from migplan.catalog.loader import load_catalog_file
from migplan.catalog.writer import render_catalog_yaml
from migplan.errors import CatalogError, InputError
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredInstance, Snapshot
from migplan.inventory import Host
from migplan.planner import Plan, plan

CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")
OLD, NEW = "470.57.02", "510.39.01"
BOTH = Layout.parse(["4g.20gb@0", "3g.20gb@4"])


def _together(p: Plan, four: str = "4g.20gb", three: str = "3g.20gb") -> list[tuple[str, int]]:
    """GPUs whose target holds both profiles of the R510 rule."""
    return [(g.host, g.index) for g in p.gpus if g.target is not None
            and {four, three} <= {i.profile for i in g.target.instances}]


# --- the catalog and the layout rules ---------------------------------------------------------------

@pytest.mark.parametrize(("model", "four", "three"), [("A100-SXM4-40GB", "4g.20gb", "3g.20gb"),
                                                     ("A100-SXM4-80GB", "4g.40gb", "3g.40gb"),
                                                     ("A800-80GB", "4g.40gb", "3g.40gb")])
def test_the_a100_family_records_the_r510_rule(model: str, four: str, three: str) -> None:
    m = CAT.get(model)
    assert [(e.profiles, e.min_driver) for e in m.exclusions] == [((four, three), "510")]
    assert m.enforced_exclusions == () and m.for_driver("535.129.03") is m
    both = Layout.parse([f"{four}@0", f"{three}@4"])
    assert check_layout(m, both) == []
    old = m.for_driver(OLD)
    assert old.id.startswith(f"{model}@host-") and old.base_id == model and not old.aliases and not old.smi_names
    (c,) = check_layout(old, both)
    assert c.rule == "combination" and c.instances == both.instances
    assert f"{four} and {three} may not share a GPU" in c.message and "R510" in c.message and OLD in c.message


def test_models_whose_mig_needs_a_newer_driver_record_no_such_rule() -> None:
    """Hopper and later need R525 or newer for MIG at all (MIG UG "Deployment Considerations"); A30 has no 3g."""
    for m in CAT:
        if m.base_id not in ("A100-SXM4-40GB", "A100-SXM4-80GB", "A800-80GB"):
            assert m.exclusions == (), m.id


def test_an_older_driver_enumerates_without_the_combination() -> None:
    old = A100.for_driver(OLD)
    assert BOTH not in enumerate_layouts(old, maximal=True) and BOTH in enumerate_layouts(A100, maximal=True)
    assert not any({"4g.20gb", "3g.20gb"} <= {i.profile for i in lay.instances} for lay in enumerate_layouts(old))
    four = Layout.parse(["4g.20gb@0"])
    assert Instance(4, "3g.20gb") in free_placements(A100, four)
    assert Instance(4, "3g.20gb") not in free_placements(old, four)
    assert Instance(4, "2g.10gb") in free_placements(old, four)
    # 4g with smaller instances and 3g with 3g stay valid under the old driver
    assert check_layout(old, Layout.parse(["4g.20gb@0", "2g.10gb@4", "1g.5gb@6"])) == []
    assert check_layout(old, Layout.parse(["3g.20gb@0", "3g.20gb@4"])) == []


def test_for_driver_keeps_a_hosts_own_table_and_a_layout_the_driver_made() -> None:
    old = A100.for_driver(OLD)
    assert not old.has_profile("1g.10gb")  # min_driver 525
    own = A100.for_driver(OLD, own_table=True)  # the host printed its -lgip: its profiles stay
    assert own.has_profile("1g.10gb") and own.enforced_exclusions and own.id != old.id
    assert A100.for_driver(None).enforced_exclusions  # unknown: the oldest
    # a GPU already holding 4g + 3g runs a driver that lifted the rule (an unknown driver, an old record)
    made = A100.for_host(None, ["4g.20gb", "3g.20gb"])
    assert made.enforced_exclusions == () and check_layout(made, BOTH) == [] and made.lifted_by(["3g.20gb"]) is None
    assert A100.for_host(OLD, ["4g.20gb", "2g.10gb"]) == old


def test_a_bare_branch_is_its_first_release() -> None:
    assert A100.for_driver("510").enforced_exclusions == () and A100.for_driver("470").enforced_exclusions
    with pytest.raises(CatalogError, match="not a driver version"):
        A100.for_driver("R5x0")


OVERRIDE = """\
version: 1
models:
  - id: TEST-8
    architecture: ampere
    memory_slices: 8
    compute_slices: 7
    profiles:
      - {{name: 1g.5gb, id: 19, compute_slices: 1, memory_slices: 1, memory_mib: 4864, max_count: 7,
         sm_count: 14, starts: [0, 1, 2, 3, 4, 5, 6]}}
      - {{name: 3g.20gb, id: 9, compute_slices: 3, memory_slices: 4, memory_mib: 19968, max_count: 2,
         sm_count: 42, starts: [0, 4]}}
      - {{name: 4g.20gb, id: 5, compute_slices: 4, memory_slices: 4, memory_mib: 19968, max_count: 1,
         sm_count: 56, starts: [0]}}
      - {{name: 7g.40gb, id: 0, compute_slices: 7, memory_slices: 8, memory_mib: 40192, max_count: 1,
         sm_count: 98, starts: [0]}}
    exclusions:
{rules}
"""

def test_override_files_carry_exclusions_and_write_them_back(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(OVERRIDE.format(rules="      - {profiles: [4g.20gb, 3g.20gb], min_driver: '510', reason: UG}\n"
                                       "      - {profiles: [1g.5gb, 7g.40gb]}"))
    (m,) = load_catalog_file(f)
    assert m.exclusions == (Exclusion(("4g.20gb", "3g.20gb"), "510", "UG"), Exclusion(("1g.5gb", "7g.40gb")))
    assert [e.profiles for e in m.enforced_exclusions] == [("1g.5gb", "7g.40gb")]  # no min_driver: always
    again = tmp_path / "again.yaml"
    again.write_text(render_catalog_yaml([m.for_driver(OLD)]))
    (back,) = load_catalog_file(again)
    assert back == m.for_driver(OLD) and len(back.enforced_exclusions) == 2
    assert cached_model(dataclasses.asdict(m)) == m  # the catalog cache's JSON form keeps them


@pytest.mark.parametrize(("rules", "error"), [
    ("      - {profiles: [4g.20gb, 2g.10gb]}", "'2g.10gb' is not a plain profile"),
    ("      - {profiles: [4g.20gb]}", "two or more different profiles"),
    ("      - {profiles: [4g.20gb, 4g.20gb]}", "two or more different profiles"),
    ("      - {profiles: [4g.20gb, 3g.20gb], min_driver: five-ten}", "not a driver version"),
    ("      - {profiles: [4g.20gb, 3g.20gb], when: always}", "when"),
])
def test_bad_exclusions_are_refused_with_their_line(tmp_path: Path, rules: str, error: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(OVERRIDE.format(rules=rules))
    with pytest.raises(InputError, match=error) as err:
        load_catalog_file(f)
    assert err.value.line == 17  # the rule's own line


# --- offline: the inventory's driver ------------------------------------------------------------------

def _inventory_plan(tmp_path: Path, driver: str | None) -> Plan:
    from migplan.inventory import load_inventory
    from migplan.model.state import state_from_inventory

    inv = tmp_path / "inv.yaml"
    extra = f"    driver: {driver!r}\n" if driver else ""
    inv.write_text(f"version: 1\nhosts:\n  h:\n{extra}    gpus: {{model: A100-SXM4-40GB, count: 2, mig: true}}\n")
    st = state_from_inventory(load_inventory(str(inv), CAT), CAT)
    return plan(st, profiles(wl("big", 15000, 0.5), wl("mid", 15000, 0.4)), Catalog(CAT.models + st.models), EXACT,
                PulpSolver(time_limit=30))


def test_offline_plans_follow_the_inventory_driver(tmp_path: Path) -> None:
    """A 4-slice and a 3-slice workload share one A100 on R510+ (4g@0 + 3g@4); before R510 they need two."""
    for driver, gpus in ((OLD, 2), (None, 2), (NEW, 1), ("535.129.03", 1)):
        p = _inventory_plan(tmp_path, driver)
        assert p.summary.workloads_placed == 2 and p.summary.gpus_used == gpus, driver
        assert bool(_together(p)) is (gpus == 1), driver


def test_an_inventory_layout_holding_the_combination_is_planned_as_a_newer_driver(tmp_path: Path) -> None:
    from migplan.inventory import load_inventory
    from migplan.model.state import state_from_inventory

    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nhosts:\n  h:\n    gpus:\n"
                   "      - {index: 0, model: A100-SXM4-40GB, mig: true, layout: [4g.20gb@0, 3g.20gb@4]}\n"
                   "      - {index: 1, model: A100-SXM4-40GB, mig: true, layout: []}\n")
    st = state_from_inventory(load_inventory(str(inv), CAT), CAT)
    models = {m.id: m for m in (*st.models, *CAT.models)}
    held, empty = (models[g.model] for g in st.gpus)
    assert held.enforced_exclusions == () and empty.enforced_exclusions  # no driver: the oldest, but GPU 0 shows more
    assert check_layout(held, BOTH) == []


# --- live: discovery on the simulator -----------------------------------------------------------------

def _discovered(tmp_path: Path, driver: str, gpus: int = 2, layouts: object = None) -> Snapshot:
    state = write_host(tmp_path / f"h-{driver}.json", "A100-SXM4-40GB", gpus, layouts=layouts, driver_version=driver)
    return Snapshot((discover_host(sim_runner.local(state), Host(name="h1", address="h1"), CAT),))


def _plan(snap: Snapshot) -> Plan:
    st = snap.fleet_state(catalog=CAT)
    return plan(st, profiles(wl("big", 15000, 0.5), wl("mid", 15000, 0.4)), Catalog(CAT.models + st.models), EXACT,
                PulpSolver(time_limit=30))


@pytest.mark.slow
def test_a_simulated_r470_host_is_never_planned_4g_next_to_3g(tmp_path: Path) -> None:
    snap = _discovered(tmp_path, OLD)
    assert snap.hosts[0].gpus[0].driver_version == OLD
    st = snap.fleet_state(catalog=CAT)
    (own,) = st.models
    assert {g.model for g in st.gpus} == {own.id} and own.enforced_exclusions
    assert own.has_profile("1g.10gb")  # the host's own -lgip lists it (the simulator prints one table for all drivers)
    p = _plan(snap)
    assert p.summary.workloads_placed == 2 and p.summary.gpus_used == 2 and _together(p) == []
    from migplan.documents import load_plan, write_plan

    write_plan(tmp_path / "plan.json", p)
    again = load_plan(tmp_path / "plan.json", CAT)  # the plan carries the R470 model, rule included
    assert again == p and [m.enforced_exclusions for m in again.models] == [own.enforced_exclusions]
    for g in p.gpus:  # what the plan creates, the simulated R470 driver creates too
        placed = [(i.profile, i.start) for i in (g.target.instances if g.target is not None else ())]
        assert simgeo.conflicts(simgeo.builtin_models()["A100-SXM4-40GB"], placed, OLD) == [], g.target
    # the catalog alone (the driver ignored) packs both onto one GPU, which the R470 simulator refuses
    blind = plan(snap.fleet_state(), profiles(wl("big", 15000, 0.5), wl("mid", 15000, 0.4)), CAT, EXACT,
                 PulpSolver(time_limit=30))
    ((host, index),) = _together(blind)
    target = next(g.target for g in blind.gpus if (g.host, g.index) == (host, index))
    assert target is not None
    placed = [(i.profile, i.start) for i in target.instances]
    assert [r for r, _ in simgeo.conflicts(simgeo.builtin_models()["A100-SXM4-40GB"], placed, OLD)] == ["combination"]


@pytest.mark.slow
def test_a_simulated_r510_host_still_may(tmp_path: Path) -> None:
    snap = _discovered(tmp_path, NEW)
    st = snap.fleet_state(catalog=CAT)
    assert st.models == () and {g.model for g in st.gpus} == {"A100-SXM4-40GB"}
    p = _plan(snap)
    assert p.summary.gpus_used == 1 and len(_together(p)) == 1


def test_a_snapshot_without_a_driver_is_planned_as_the_oldest_unless_a_layout_says_more() -> None:
    gpu = DiscoveredGpu(0, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", mig_current=True, mig_pending=True)
    unknown = gpu.planning_model(CAT)
    assert unknown is not None and unknown.enforced_exclusions and not unknown.has_profile("1g.10gb")
    held = dataclasses.replace(gpu, instances=tuple(DiscoveredInstance(i) for i in BOTH.instances))
    made = held.planning_model(CAT)
    assert made is not None and made.enforced_exclusions == () and check_layout(made, BOTH) == []
    assert dataclasses.replace(gpu, driver_version="535.129.03").planning_model(CAT) is A100


@pytest.mark.parametrize("driver", [OLD, "460.91.03", NEW, "535.129.03"])
def test_migplan_and_the_simulator_refuse_the_same_layouts(driver: str) -> None:
    """Every layout of the current A100-40GB model: refused by migplan's model of `driver` exactly when the
    simulator, by its own rule, refuses it on a host with that driver."""
    sim = simgeo.builtin_models()["A100-SXM4-40GB"]
    ours = A100.for_driver(driver, own_table=True)
    for lay in enumerate_layouts(A100):
        placed = [(i.profile, i.start) for i in lay.instances]
        theirs = [r for r, _ in simgeo.conflicts(sim, placed, driver)]
        assert ([c.rule for c in check_layout(ours, lay)] == ["combination"]) is (theirs == ["combination"]), lay


@pytest.mark.slow
def test_apply_refuses_a_layout_the_hosts_driver_refuses_before_running_anything(tmp_path: Path) -> None:
    """A plan made for a current driver (4g + 3g on one GPU) applied to a host whose driver is R470 (downgraded
    since, or planned from the catalog alone): refused from the host's own rules, no mutating command run."""
    from sim.fleet import read_state

    from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
    from migplan.fleet.steps import is_read_only

    snap = _discovered(tmp_path, OLD)
    blind = plan(snap.fleet_state(), profiles(wl("big", 15000, 0.5), wl("mid", 15000, 0.4)), CAT, EXACT,
                 PulpSolver(time_limit=30))
    assert len(_together(blind)) == 1
    state = tmp_path / f"h-{OLD}.json"
    host = Host(name="h1", address="h1", lock_file=str(tmp_path / "lock"), state_dir=str(tmp_path / "etc"))
    res = apply_host(sim_runner.local(state), host, list(blind.gpus), CAT, ApplyOptions())
    refused = [g for g in res.gpus if g.outcome is GpuOutcome.REFUSED]
    assert len(refused) == 1 and "driver refuses" in refused[0].reason, res.gpus
    assert not [a for a in read_state(state)["log"] if not is_read_only(["nvidia-smi", *a])]
