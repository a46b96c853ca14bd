"""mig-parted configs: NVIDIA's schema, NVIDIA's shipped configs, the exports and the round trip.

Oracles independent of migplan: the schema checker below is written from mig-parted's
`api/spec/v1/spec.go` and `pkg/types/mig_config.go` (NVIDIA/mig-parted @bd7160f); placements are
checked with the nvidia-smi simulator's own geometry (tests/sim/geometry.py); the creation-order
oracle is a brute force over every order and every placement on that geometry.
"""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim import geometry as sim
from typer.testing import CliRunner

from migplan import mig_parted, yamldoc
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.cli.app import app
from migplan.commands import export as ex
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.inventory import load_inventory

CAT = builtin_catalog()
ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "mig_parted"
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


# --- the schema as mig-parted checks it (independent of migplan) ----------------------------------

# go-nvlib parseMigProfile grammar: [<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr]
_PROFILE = re.compile(r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb([+-][A-Za-z0-9.]+(,[A-Za-z0-9.]+)*)?$")


def schema_errors(doc: Any) -> list[str]:
    """What mig-parted's Spec/MigConfigSpec UnmarshalJSON and AssertValidFormat would refuse."""
    errs: list[str] = []
    if not isinstance(doc, dict) or doc.get("version") != "v1":
        return ["version must be v1"]
    errs += [f"unexpected field {k}" for k in doc if k not in ("version", "mig-configs")]
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        return [*errs, "at least one entry in mig-configs is required"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            errs.append(f"{name}: at least one entry required")
            continue
        for e in entries:
            errs += [f"{name}: unexpected field {k}" for k in e if k not in
                     ("device-filter", "devices", "mig-enabled", "mig-devices")]
            if "devices" not in e or "mig-enabled" not in e:
                errs.append(f"{name}: missing required field")
                continue
            d = e["devices"]
            if not (d == "all" or (isinstance(d, list) and all(isinstance(i, int) for i in d))):
                errs.append(f"{name}: devices {d!r}")
            if not isinstance(e["mig-enabled"], bool):
                errs.append(f"{name}: mig-enabled not a bool")
            md = e.get("mig-devices")
            if e["mig-enabled"] and md is None:
                errs.append(f"{name}: mig-devices required when enabled")
            if not e["mig-enabled"] and md:
                errs.append(f"{name}: MIG devices included when disabled")
            if md:
                for p, n in md.items():
                    if not _PROFILE.match(p) or not isinstance(n, int) or n < 0:
                        errs.append(f"{name}: {p}: {n}")
                if not any(md.values()):
                    errs.append(f"{name}: all counts are 0")
    return errs


# --- a plan of the example fleet ------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", INV, "-p", PROF, "--out", str(out), "-o", "json"])
    assert r.exit_code == 0, r.output
    return out


def _export(plan_file: Path, **kw: Any) -> ex.Export:
    plan = load_plan(plan_file, CAT)
    return ex.build_gpu_operator(plan, CAT, **kw)


# --- NVIDIA's shipped configs ---------------------------------------------------------------------

def test_nvidia_example_config_names_parse() -> None:
    configs = mig_parted.parse_spec(yamldoc.load(DATA / "mig-parted-examples.yaml"))
    assert list(configs) == ["all-disabled", "all-enabled", "all-1g.5gb", "all-1g.5gb.me", "all-balanced",
                             "custom-config"]
    assert configs["all-enabled"][0].mig_enabled and configs["all-enabled"][0].counts() == {}
    custom = configs["custom-config"]
    assert [e.devices for e in custom] == [(0, 1, 2, 3), (4,), (5,), (6,), (7,)]
    assert custom[4].counts() == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert configs["all-1g.5gb.me"][0].counts() == {"1g.5gb+me": 1}


def test_gpu_operator_default_configmap_excerpt_parses() -> None:
    configs, name, ns = ex.parse_configmap(yamldoc.load(DATA / "gpu-operator-excerpt.yaml"))
    assert (name, ns) == ("default-mig-parted-config", "gpu-operator")
    assert list(configs) == ["all-disabled", "all-1g.10gb", "all-3g.40gb", "all-balanced"]
    a100_40 = CAT.get("A100-SXM4-40GB")
    h100 = CAT.get("H100-SXM5-80GB")
    picked = [e for e in configs["all-1g.10gb"] if e.selects(0, a100_40)]
    assert [e.counts() for e in picked] == [{"1g.10gb": 4}]  # the device-filter picks the 40GB entry
    assert [e.counts() for e in configs["all-1g.10gb"] if e.selects(0, h100)] == [{"1g.10gb": 7}]
    assert configs["all-balanced"][2].device_filter == ("0x20B710DE",)  # a plain string filter


@pytest.mark.parametrize("model_id,config,counts", [
    ("A100-SXM4-40GB", "all-1g.10gb", {"1g.10gb": 4}),
    ("H100-SXM5-80GB", "all-1g.10gb", {"1g.10gb": 7}),
    ("A100-SXM4-80GB", "all-balanced", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    ("A30", "all-balanced", {"1g.6gb": 2, "2g.12gb": 1}),
    ("A100-SXM4-40GB", "all-balanced", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
])
def test_shipped_configs_read_as_declared_layouts(tmp_path: Path, model_id: str, config: str,
                                                  counts: dict[str, int]) -> None:
    doc = yaml.safe_load((DATA / "gpu-operator-excerpt.yaml").read_text())
    (tmp_path / "mig.yaml").write_text(doc["data"]["config.yaml"])
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        hosts:
          gpu01:
            gpus: {{model: {model_id}, count: 2}}
            mig_parted: {{file: mig.yaml, config: {config}}}
        """))
    host = load_inventory(inv, CAT).hosts[0]
    model = sim.find_model(model_id)
    for g in host.gpus:
        assert g.mig_enabled and g.layout is not None
        assert dict(g.layout.profile_counts()) == counts
        assert sim.conflicts(model, [(i.profile, i.start) for i in g.layout.instances]) == []


# --- schema refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,needle", [
    ("mig-configs: {a: [{devices: all, mig-enabled: false}]}", "version"),
    ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "unknown version"),
    ("version: v1\nextra: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "unknown key 'extra'"),
    ("version: v1\nmig-configs: {a: []}", "at least one entry in 'a'"),
    ("version: v1\nmig-configs: {a: [{mig-enabled: false}]}", "'devices'"),
    ("version: v1\nmig-configs: {a: [{devices: all}]}", "'mig-enabled'"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}", "'mig-devices' when 'mig-enabled'"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}",
     "MIG devices included"),
    ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}", "devices must be 'all'"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1x.5gb: 1}}]}",
     "not a MIG profile name"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 0}}]}", "are 0"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: -1}}]}", "1g.5gb"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, colour: red}]}", "unknown key 'colour'"),
])
def test_schema_refusals_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "mig.yaml"
    f.write_text(text + "\n")
    with pytest.raises(InputError) as err:
        mig_parted.parse_spec(yamldoc.load(f))
    assert needle in str(err.value) and str(f) in str(err.value)
    assert schema_errors(yaml.safe_load(text)), "the independent checker must refuse it too"


def test_a_malformed_device_filter_is_refused_where_mig_parted_would_match_nothing(tmp_path: Path) -> None:
    """mig-parted ignores the parse error of a filter (`MatchesDeviceFilter`: `newDeviceID, _ :=`), so the
    entry silently selects no GPU; migplan says so instead."""
    text = "version: v1\nmig-configs: {a: [{devices: all, device-filter: 20B0, mig-enabled: false}]}\n"
    f = tmp_path / "mig.yaml"
    f.write_text(text)
    with pytest.raises(InputError, match="is not a PCI ID filter"):
        mig_parted.parse_spec(yamldoc.load(f))
    assert schema_errors(yaml.safe_load(text)) == []


# --- export gpu-operator --------------------------------------------------------------------------

@pytest.mark.slow
def test_exported_configmap_meets_the_schema(plan_file: Path) -> None:
    export = _export(plan_file)
    docs = list(yaml.safe_load_all(ex.manifest(export)))
    cm, nodes = docs[0], docs[1:]
    assert cm["kind"] == "ConfigMap" and cm["metadata"] == {"name": "migplan-mig-config", "namespace": "gpu-operator"}
    spec = yaml.safe_load(cm["data"]["config.yaml"])
    assert schema_errors(spec) == []
    assert "not placements" in cm["data"]["config.yaml"]  # the note travels with the config
    plan = load_plan(plan_file, CAT)
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted({g.host for g in plan.gpus})
    for n in nodes:
        value = n["metadata"]["labels"]["nvidia.com/mig.config"]
        assert value in spec["mig-configs"]
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", value)  # a label value


def test_export_gives_each_gpu_its_planned_counts(plan_file: Path) -> None:
    """Per node, the config selected by the label gives each GPU the target's counts (held GPUs untouched)."""
    export = _export(plan_file)
    spec = yaml.safe_load(ex.config_text(export))["mig-configs"]
    plan = load_plan(plan_file, CAT)
    label = dict(export.nodes)
    for g in plan.gpus:
        entries = [e for e in spec[label[g.host]] if e["devices"] == "all" or g.index in e["devices"]]
        if g.hold is not None:
            assert entries == []
            continue
        assert len(entries) == 1
        if g.target is None:
            assert entries[0]["mig-enabled"] is False
        else:
            assert entries[0]["mig-devices"] == dict(g.target.profile_counts())


def test_names_are_stable_and_follow_content(plan_file: Path) -> None:
    a, b = _export(plan_file), _export(plan_file)
    assert a.nodes == b.nodes and list(a.configs) == list(b.configs)
    one = (mig_parted.gpu_entry(None, Layout.parse(["1g.5gb@0"])),)
    two = (mig_parted.gpu_entry(None, Layout.parse(["1g.5gb@6"])),)  # same counts, other placement
    other = (mig_parted.gpu_entry(None, Layout.parse(["3g.20gb@0"])),)
    assert mig_parted.config_name(one) == mig_parted.config_name(two) != mig_parted.config_name(other)
    assert len(mig_parted.config_name(one)) <= 63


def test_existing_configs_are_kept_and_equal_content_reuses_the_name(plan_file: Path, tmp_path: Path) -> None:
    first = _export(plan_file)
    node, ours = first.nodes[0]
    existing = {"all-disabled": (mig_parted.Entry(None, False),), "hand-made": first.configs[ours]}
    again = _export(plan_file, existing=existing)
    assert "all-disabled" in again.configs and again.kept == ("all-disabled",)
    assert dict(again.nodes)[node] == "hand-made"  # same content: the operator's name is used
    assert ours not in again.configs
    clash = {ours: (mig_parted.Entry(None, False),)}
    with pytest.raises(InputError, match="already has a config"):
        _export(plan_file, existing=clash)


def test_an_nvidia_default_config_stands_for_a_node_it_fits(plan_file: Path) -> None:
    """A node of H100s planned as 7 x 1g.10gb each is labelled with NVIDIA's own all-1g.10gb (whose
    device-filter entry gives exactly that), not with a new config; a node it does not fit gets ours."""
    from dataclasses import replace

    from migplan.model.gpu_plan import GpuPlan
    from migplan.model.state import GpuState

    seven = Layout.parse([f"1g.10gb@{s}" for s in range(7)])
    three = Layout.parse(["3g.40gb@0", "3g.40gb@4"])
    gpus = [GpuPlan(GpuState("h1", i, "H100-SXM5-80GB", mig_enabled=True, layout=seven), seven, ()) for i in (0, 1)]
    gpus.append(GpuPlan(GpuState("h2", 0, "H100-SXM5-80GB", mig_enabled=True, layout=three), seven, ()))
    gpus.append(GpuPlan(GpuState("h2", 1, "H100-SXM5-80GB", mig_enabled=True, layout=three), three, ()))
    plan = replace(load_plan(plan_file, CAT), gpus=tuple(gpus), models=())
    existing = ex.parse_configmap(yamldoc.load(DATA / "gpu-operator-excerpt.yaml"))[0]
    export = ex.build_gpu_operator(plan, CAT, existing=existing)
    labels = dict(export.nodes)
    assert labels["h1"] == "all-1g.10gb" and labels["h2"].startswith("migplan-")
    assert export.ours == ("all-1g.10gb", labels["h2"])
    assert [e.counts() for e in export.configs[labels["h2"]]] == [{"1g.10gb": 7}, {"3g.40gb": 2}]


def test_cli_sh_script_labels_every_node(plan_file: Path, tmp_path: Path) -> None:
    cm = tmp_path / "cm.yaml"
    cm.write_text((DATA / "gpu-operator-excerpt.yaml").read_text())
    r = CliRunner().invoke(app, ["export", "gpu-operator", str(plan_file), "-o", "sh", "--existing", str(cm)])
    assert r.exit_code == 0, r.output
    export = _export(plan_file, existing=ex.parse_configmap(yamldoc.load(cm))[0])
    for node, config in export.nodes:
        assert f"kubectl label node {node} nvidia.com/mig.config={config} --overwrite" in r.stdout
    assert "name: default-mig-parted-config" in r.stdout  # the existing ConfigMap's name by default
    assert "all-balanced:" in r.stdout and "all-1g.10gb:" in r.stdout  # kept
    assert "not placements" in r.stderr


def test_a_plan_host_that_is_no_kubernetes_node_name_is_refused(plan_file: Path) -> None:
    from dataclasses import replace

    plan = load_plan(plan_file, CAT)
    g = plan.gpus[0]
    bad = replace(plan, gpus=(replace(g, observed=replace(g.observed, host="GPU_A100_01")),))
    with pytest.raises(InputError, match="'GPU_A100_01' is not a Kubernetes name"):
        ex.build_gpu_operator(bad, CAT)
    with pytest.raises(InputError, match="not a Kubernetes name"):
        ex.build_gpu_operator(plan, CAT, name="Bad_Name")
    with pytest.raises(InputError, match="namespace"):
        ex.build_gpu_operator(plan, CAT, namespace="a.b")


# --- export mig-parted --host and the round trip -------------------------------------------------

def test_round_trip_plan_export_read_back(plan_file: Path, tmp_path: Path) -> None:
    """plan -> export mig-parted per host -> an inventory reading those files -> the same counts per GPU."""
    plan = load_plan(plan_file, CAT)
    hosts = sorted({g.host for g in plan.gpus})
    lines = ["version: 1", "hosts:"]
    for h in hosts:
        out = tmp_path / f"{h}.yaml"
        r = CliRunner().invoke(app, ["export", "mig-parted", str(plan_file), "--host", h, "--out", str(out)])
        assert r.exit_code == 0, r.output
        spec = yaml.safe_load(out.read_text())
        assert schema_errors(spec) == []
        (name,) = spec["mig-configs"]
        assert f"nvidia-mig-parted apply -f {out} -c {name}" in r.stderr
        gpus = [g for g in plan.gpus if g.host == h]
        lines += [f"  {h}:", "    gpus:"]
        lines += [f"      - {{index: {g.index}, model: {g.model}}}" for g in gpus]
        lines += [f"    mig_parted: {{file: {out.name}, config: {name}}}"]
    inv_file = tmp_path / "inventory.yaml"
    inv_file.write_text("\n".join(lines) + "\n")
    inv = load_inventory(inv_file, CAT)
    for g in plan.gpus:
        declared = inv.host(g.host).gpu(g.index)  # type: ignore[union-attr]
        assert declared is not None
        if g.hold is not None:
            assert declared.layout is None and declared.mig_enabled is None  # left out of the config
        elif g.target is None:
            assert declared.mig_enabled is False
        else:
            assert declared.layout is not None
            assert declared.layout.profile_counts() == g.target.profile_counts()
            model = sim.find_model(g.model)
            assert sim.conflicts(model, [(i.profile, i.start) for i in declared.layout.instances]) == []


def test_mig_parted_export_unknown_host(plan_file: Path) -> None:
    r = CliRunner().invoke(app, ["export", "mig-parted", str(plan_file), "--host", "nope"])
    assert r.exit_code == 2 and "has no host 'nope'" in r.stderr


@pytest.mark.parametrize("body,needle", [
    ("mig_parted: {file: missing.yaml, config: x}", "file not found"),
    ("mig_parted: {file: mig.yaml, config: nope}", "has no config 'nope'"),
    ("mig_parted: {file: mig.yaml, config: impossible}", "cannot be placed on A100-SXM4-40GB"),
    ("mig_parted: {file: mig.yaml, config: far}", "names GPU 5"),
    ("mig_parted: {file: mig.yaml, config: twice}", "selected by entries 0 and 1"),
    ("mig_parted: {file: mig.yaml, config: h100only}", "has no MIG profile '1g.10gb+me'"),
])
def test_inventory_mig_parted_errors_name_file_and_key(tmp_path: Path, body: str, needle: str) -> None:
    (tmp_path / "mig.yaml").write_text(textwrap.dedent("""\
        version: v1
        mig-configs:
          impossible:
            - devices: all
              mig-enabled: true
              mig-devices: {"3g.20gb": 2, "1g.5gb": 1}
          far:
            - devices: [5]
              mig-enabled: false
          twice:
            - devices: all
              mig-enabled: false
            - devices: [0]
              mig-enabled: false
          h100only:
            - devices: all
              mig-enabled: true
              mig-devices: {"1g.10gb+me": 1}
        """))
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"version: 1\nhosts:\n  gpu01:\n    gpus: {{model: A100-SXM4-40GB, count: 2}}\n    {body}\n")
    with pytest.raises(InputError) as err:
        load_inventory(inv, CAT)
    assert needle in str(err.value)
    assert str(tmp_path) in str(err.value)  # the inventory or the mig-parted file, with its line


# --- counts, not placements: creatability --------------------------------------------------------

def test_known_order_cases() -> None:
    a100 = CAT.get("A100-SXM4-40GB")
    # MIG User Guide: "-cgi 19,19,14,9 fails ... 3g.20gb must be specified first": not safe in every order
    assert mig_parted.creation_risk(a100, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}).risk == "placement"
    assert mig_parted.creation_risk(a100, {"1g.5gb": 7}).risk == "none"
    r = mig_parted.creation_risk(a100, {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1})
    assert (r.risk, r.safe_order) == ("order", ("4g.20gb", "2g.10gb", "1g.5gb"))
    assert mig_parted.creation_risk(a100, {"3g.20gb": 2, "1g.5gb": 1}).risk == "impossible"
    assert mig_parted.place_counts(a100, {"3g.20gb": 2, "1g.5gb": 1}) is None


@cache
def _outcomes(model_id: str, order: tuple[str, ...], placed: frozenset[tuple[str, int]]) -> frozenset[bool]:
    """Brute force on the simulator's geometry: can creating `order` from `placed` succeed / fail, over
    every start the rules allow at every step?"""
    if not order:
        return frozenset({True})
    model = sim.find_model(model_id)
    prof = model.profile(order[0])
    assert prof is not None
    nxt = [s for s in prof.starts if not sim.conflicts(model, [*placed, (order[0], s)])]
    if not nxt:
        return frozenset({False})
    return frozenset().union(*(_outcomes(model_id, order[1:], placed | {(order[0], s)}) for s in nxt))


def _oracle(model_id: str, multiset: tuple[str, ...]) -> str:
    results = [_outcomes(model_id, o, frozenset()) for o in set(itertools.permutations(multiset))]
    if all(r == {True} for r in results):
        return "none"
    if any(r == {True} for r in results):
        return "order"
    return "placement" if any(True in r for r in results) else "impossible"


@pytest.mark.slow
@pytest.mark.parametrize("model_id", ["A100-SXM4-40GB", "A30", "H100-SXM5-80GB"])
def test_creation_risk_agrees_with_a_brute_force_oracle(model_id: str) -> None:
    model = CAT.get(model_id)
    seen = set()
    for lay in enumerate_layouts(model, profiles=[p.name for p in model.profiles]):
        counts = tuple(sorted(lay.profile_counts().items()))
        if not counts or counts in seen or sum(n for _, n in counts) > 4:
            continue
        seen.add(counts)
        multiset = tuple(p for p, n in counts for _ in range(n))
        assert mig_parted.creation_risk(model, dict(counts)).risk == _oracle(model_id, multiset), counts
    assert len(seen) >= 10


def test_plan_drift_kinds() -> None:
    a = Layout.parse(["3g.20gb@4", "1g.5gb@0"])
    moved = Layout.parse(["3g.20gb@4", "1g.5gb@3"])
    other = Layout.parse(["3g.20gb@0"])
    targets = {("h", 0): a, ("h", 1): a, ("h", 2): a, ("h", 3): None, ("h", 4): a}
    got = mig_parted.plan_drift([("h", 0, moved), ("h", 1, other), ("h", 2, None), ("h", 3, None), ("h", 4, a),
                                 ("x", 0, a)], targets)
    assert [(d.index, d.kind) for d in got] == [(0, "placement"), (1, "counts"), (2, "mode")]
    assert "same profile counts, other placements" in got[0].message and "1g.5gb@3" in got[0].message


# --- after the MIG manager has run: `status --plan` shows other placements -------------------------

def _mig_manager(model_id: str, counts: dict[str, int]) -> list[tuple[str, int]]:
    """A stand-in for mig-parted on the driver: instances created largest first, each at the highest free
    start (the MIG User Guide's A100 examples fill from the high end), on the simulator's geometry."""
    model = sim.find_model(model_id)
    placed: list[tuple[str, int]] = []
    order = sorted((p for p, n in counts.items() for _ in range(n)),
                   key=lambda p: -(model.profile(p).memory_slices))  # type: ignore[union-attr]
    for p in order:
        prof = model.profile(p)
        assert prof is not None
        start = next(s for s in sorted(prof.starts, reverse=True) if not sim.conflicts(model, [*placed, (p, s)]))
        placed.append((p, start))
    return placed


# Not slow though it takes about 5 s: the inner loop's one in-process run of `discover` and `status` (cli/fleet.py).
def test_status_with_a_plan_shows_other_placements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim_runner
    from sim.fleet import host_state, write_state

    state = tmp_path / "h.json"
    st = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[Layout.parse(["3g.20gb@0", "1g.5gb@4"]), None])
    st["gpus"][1].update(mig_current=False, mig_pending=False, gpu_instances=[])
    write_state(state, st)
    sim_runner.serve(monkeypatch, state)  # the CLI builds its own runner
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "hosts": {"h1": {
        "connection": "local", "discover": True, "lock_file": str(tmp_path / "lock")}}}))
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": [
        {"name": "a", "memory_mib": {"p50": 15000, "p95": 15000, "p99": 15000, "max": 15000},
         "compute": {"p50": 0.2, "p95": 0.3, "max": 0.3}},
        {"name": "b", "memory_mib": {"p50": 3000, "p95": 3000, "p99": 3000, "max": 3000},
         "compute": {"p50": 0.05, "p95": 0.1, "max": 0.1}}]}))
    cli = CliRunner()
    snap, plan_file = tmp_path / "snap.json", tmp_path / "plan.json"
    kh = ["--known-hosts", str(tmp_path / "kh")]
    assert cli.invoke(app, ["discover", "-i", str(inv), "--out", str(snap), *kh]).exit_code == 0
    r = cli.invoke(app, ["propose", "--snapshot", str(snap), "-p", str(prof), "--out", str(plan_file)])
    assert r.exit_code == 0, r.output
    plan = load_plan(plan_file, CAT)
    # what the MIG manager makes of the exported counts
    after, expected = [], []
    for g in sorted(plan.gpus, key=lambda g: g.index):
        if g.target is None:
            after.append(None)
            continue
        placed = _mig_manager(g.model.split("@")[0], dict(g.target.profile_counts()))
        lay = Layout.parse([f"{p}@{s}" for p, s in placed])
        after.append(lay)
        if lay != g.target:
            expected.append(g.index)
    assert expected, "the stand-in must place at least one GPU otherwise than the plan for this test"
    st = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[lay or Layout() for lay in after])
    for i, lay in enumerate(after):
        if lay is None:
            st["gpus"][i].update(mig_current=False, mig_pending=False, gpu_instances=[])
    write_state(state, st)
    r = cli.invoke(app, ["status", "-i", str(inv), "--plan", str(plan_file), *kh])
    assert r.exit_code == 0, r.output
    for i in expected:
        assert f"differs from plan: GPU {i}: same profile counts, other placements than the plan" in r.stdout
    r = cli.invoke(app, ["status", "-i", str(inv), "--plan", str(plan_file), "-o", "json", *kh])
    data = json.loads(r.stdout)
    assert data["summary"]["plan_drift"] == len(expected)
    r = cli.invoke(app, ["discover", "-i", str(inv), "--plan", str(plan_file), *kh])
    assert r.exit_code == 0, r.output
    for i in expected:
        assert f"h1: differs from plan: GPU {i}: same profile counts, other placements" in r.stderr


def test_ansible_group_variable_names_a_mig_parted_config(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "site.yaml").write_text((DATA / "mig-parted-examples.yaml").read_text())
    inv = tmp_path / "hosts.yaml"
    inv.write_text(textwrap.dedent("""\
        all:
          children:
            gpu:
              vars:
                migplan_gpus: {model: A100-SXM4-40GB, count: 8}
                migplan_mig_parted: {file: configs/site.yaml, config: custom-config}
              hosts:
                g1:
                g2:
                  migplan_mig_parted: {file: configs/site.yaml, config: all-1g.5gb}
        """))
    hosts = {h.name: h for h in load_inventory(inv, CAT).hosts}
    g1 = [g.layout.profile_counts() if g.layout is not None else None for g in hosts["g1"].gpus]
    assert g1[:4] == [None] * 4 and [g.mig_enabled for g in hosts["g1"].gpus[:4]] == [False] * 4
    assert [dict(c or {}) for c in g1[4:]] == [{"1g.5gb": 7}, {"2g.10gb": 3}, {"3g.20gb": 2},
                                               {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}]
    assert all(dict(g.layout.profile_counts()) == {"1g.5gb": 7} for g in hosts["g2"].gpus if g.layout)
    assert len([g for g in hosts["g2"].gpus if g.layout]) == 8
