"""Discovery over real SSH against simulated hosts: every catalog model, MIG on/off/pending, busy
instances, failures per host, and hostile output that must stay data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import Fleet
from sim import geometry_inferred
from simhosts import MODELS, Proc, mixed_layout, read, state, write

from migplan import smi
from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.documents import load_snapshot, load_snapshot_state, write_snapshot
from migplan.fleet.discover import discover_fleet, inventory_drift
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Inventory, load_inventory

CATALOG = builtin_catalog()
# Every command discovery may run: the argv the smi builders make, nothing else.
# Discovery only reads: these are every command it may run (the profile tables are read for MIG GPUs; the
# listings host-wide in its one batch of reads, per GPU when that batch failed; plain `nvidia-smi` for the
# Processes table).
ALLOWED_ARGV = {tuple(smi.query_gpus()), tuple(smi.list_gpus()), tuple(smi.query_compute_apps()),
                tuple(smi.query_driver_versions()), (smi.NVIDIA_SMI,)} | {
    tuple(f(i)) for i in range(8) for f in (smi.list_gpu_instances, smi.list_compute_instances,
                                            smi.list_gi_profiles, smi.list_gi_placements)} | {
    (smi.NVIDIA_SMI, "mig", x) for x in ("-lgi", "-lci", "-lgip", "-lgipp")}


def discover(fleet: Fleet, inventory: Inventory, **kw: object) -> Snapshot:
    with SshFleet(fleet.options(**kw)) as ssh:
        return discover_fleet(inventory, CATALOG, ssh.runner, parallel=12)


def test_every_catalog_model_partitioned_empty_disabled_and_busy(fleet: Fleet) -> None:
    hosts = {}
    expected = {}
    for i, model in enumerate(MODELS):
        h = fleet.host(i)
        mixed = mixed_layout(model)
        single = Layout.parse([f"{model.full_profile.name}@0"])
        busy = {0: [Proc(1000 + i, start=mixed.instances[1].start)], 1: [Proc(2000 + i, name="train.py",
                                                                             used_memory_mib=777, start=0)],
                3: [Proc(3000 + i, name="whole.py")]}
        write(h.state, state(model, 4, hostname=f"m{i}", layouts=[mixed, single, None, None],
                             mig=[True, True, True, False], busy=busy))
        hosts[f"m{i}"] = fleet.host_entry(h)
        expected[f"m{i}"] = (model, mixed, single)
    inv = load_inventory(fleet.inventory(hosts), CATALOG)
    snap = discover(fleet, inv)
    assert not snap.failed, [h.error for h in snap.failed]
    for name, (model, mixed, single) in expected.items():
        rec = snap.host(name)
        assert rec is not None and [g.model for g in rec.gpus] == [model.id] * 4
        g0, g1, g2, g3 = rec.gpus
        assert (g0.layout, g1.layout, g2.layout, g3.layout) == (mixed, single, Layout(), None)
        # each process is on the GPU instance plain nvidia-smi's Processes table names: the others are idle
        assert g1.busy_instances == single.instances
        assert [(p.pid, p.name, p.used_memory_mib) for i in g1.instances for p in i.processes] == \
            [(2000 + int(name[1:]), "train.py", 777)]
        assert g0.busy_instances == (mixed.instances[1],) and g0.processes == ()
        assert [(i.instance, p.pid) for i in g0.instances for p in i.processes] == [
            (mixed.instances[1], 1000 + int(name[1:]))]
        assert g2.busy_instances == () and not g3.mig_current
        uuids = [c.uuid for i in g0.instances for c in i.compute_instances]
        assert len(uuids) == len(mixed) and all(u and u.startswith("MIG-") for u in uuids)
        # the simulator's own geometry agrees with the catalog, except rows where its host prints more than the
        # least a known driver prints (which the conservative catalog carries): exactly those are noted
        more = [next(q.name for q in model.profiles if q.id == pid)
                for (mid, pid) in geometry_inferred.SMALLEST_KNOWN_MIB if mid == model.id]
        noted = [n for n in rec.notes if "differs from the catalog" in n]
        if more:
            assert [n.split(":")[0] for n in noted] == ["GPU 0", "GPU 1", "GPU 2"], rec.notes  # the MIG-on GPUs
            assert all(f"{p}: memory GiB catalog" in n for n in noted for p in more), rec.notes
            assert all(n.count(": memory GiB catalog") == len(more) for n in noted), rec.notes
        else:
            assert not noted, rec.notes
        assert all(g.table is not None for g in (g0, g1, g2)) and g3.table is None
        log = [tuple(a) for a in read(fleet.server.hosts[int(name[1:])].state)["log"]]
        assert set(log) <= {a[1:] for a in ALLOWED_ARGV}, set(log) - {a[1:] for a in ALLOWED_ARGV}
    fs = snap.fleet_state()
    assert len(fs.gpus) == 4 * len(MODELS) and fs.source == "discovery"
    g = fs.gpu("m0", 0)
    assert g is not None and g.busy == (expected["m0"][1].instances[1],) and g.mig_enabled
    whole, idle = fs.gpu("m0", 3), fs.gpu("m0", 2)
    assert whole is not None and whole.whole_gpu_busy and not whole.mig_enabled
    assert idle is not None and not idle.whole_gpu_busy


def test_pending_mode_changes_and_non_mig_gpus(fleet: Fleet) -> None:
    write(fleet.host(0).state, state("A100-SXM4-40GB", 2, hostname="p", mig=[True, False],
                                     pending={0: False, 1: True}))
    write(fleet.host(1).state, state(None, 1, hostname="t4"))  # a GPU without MIG (T4-like)
    inv = load_inventory(fleet.inventory({"p": fleet.host_entry(fleet.host(0)),
                                          "t4": fleet.host_entry(fleet.host(1))}), CATALOG)
    snap = discover(fleet, inv)
    p, t4 = snap.hosts
    assert p.ok and t4.ok
    assert [(g.mig_current, g.mig_pending, g.mode_change_pending) for g in p.gpus] == [
        (True, False, True), (False, True, True)]
    assert any("pending" in n for n in p.notes)
    states = {(g.host, g.index): g for g in snap.fleet_state()}
    assert states[("p", 0)].mig_pending is False and states[("p", 1)].mig_pending is True
    assert t4.gpus[0].model is None and not t4.gpus[0].mig_capable and ("t4", 0) not in states
    assert any("does not support MIG" in n for n in t4.notes)


def test_unknown_model_names_the_gpu_and_how_to_learn_it(fleet: Fleet, tmp_path: Path) -> None:
    x100 = dataclasses.replace(CATALOG.get("A30"), id="X100-24GB", aliases=(), smi_names=("NVIDIA X100",),
                               pci_device_ids=("0x9999",))
    cat_file = tmp_path / "x100.yaml"
    cat_file.write_text(smi.render_catalog_yaml([x100]))
    write(fleet.host(0).state, state(x100, 1, hostname="x", catalog_files=[str(cat_file)]))
    inv = load_inventory(fleet.inventory({"x": fleet.host_entry(fleet.host(0))}), CATALOG)
    (rec,) = discover(fleet, inv).hosts
    assert rec.error is not None and rec.error.code == "unknown-model"
    assert "GPU 0 (NVIDIA X100" in rec.error.message and "migplan catalog learn --host x" in (rec.error.hint or "")


def test_a_host_down_or_refusing_sudo_does_not_stop_the_others(fleet: Fleet) -> None:
    from sshd import REFUSING_SUDO

    for i in range(3):
        write(fleet.host(i).state, state("H100-SXM5-80GB", 1, hostname=f"h{i}"))
    fleet.host(2).script("sudo", REFUSING_SUDO)
    inv = load_inventory(fleet.inventory({
        "ok": fleet.host_entry(fleet.host(0), become="sudo -n"),
        "down": fleet.host_entry(fleet.host(1), address="127.0.0.254"),
        "nosudo": fleet.host_entry(fleet.host(2), become="sudo -n"),
        "noverify": fleet.host_entry(fleet.host(1)),
    }), CATALOG)
    (fleet.known_hosts).write_text(fleet.known_hosts.read_text().replace(f"[{fleet.host(1).address}]", "[x]"))
    snap = discover(fleet, inv)
    by = {h.name: h for h in snap.hosts}
    assert by["ok"].ok and by["ok"].gpus[0].model == "H100-SXM5-80GB"
    assert by["down"].error is not None and by["down"].error.code == "unreachable"
    assert by["nosudo"].error is not None and by["nosudo"].error.code == "become-failed"
    assert "sudo: a password is required" in by["nosudo"].error.message
    assert by["noverify"].error is not None and by["noverify"].error.code == "host-key-unknown"
    assert [g.host for g in snap.fleet_state()] == ["ok"]


def test_missing_nvidia_smi_and_driver_errors_are_typed(fleet: Fleet) -> None:
    write(fleet.host(0).state, state("A30", 1, hostname="a", nvidia_smi="missing"))
    write(fleet.host(1).state, state("A30", 1, hostname="b", driver_loaded=False))
    write(fleet.host(2).state, state("A30", 1, hostname="c", layouts=[Layout.parse(["2g.12gb@0"])],
                                     faults=[{"match": "-lgi", "error": "Insufficient Permissions"}]))
    inv = load_inventory(fleet.inventory({n: fleet.host_entry(fleet.host(i)) for i, n in enumerate("abc")}), CATALOG)
    a, b, c = discover(fleet, inv).hosts
    assert a.error is not None and a.error.code == "no-nvidia-smi"
    assert b.error is not None and "NVIDIA driver" in b.error.message
    assert c.error is not None and c.error.code == "insufficient-permissions"


A30_LINE = ("0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA A30, 00000000:17:00.0, 24576, Enabled, Enabled, "
            "0x20B710DE")

EVIL_NAMES = r"""#!/bin/sh
printf '%s\n' "$*" >> "$(dirname "$0")/../argv.log"
case "$*" in
  *--query-gpu*) cat <<'EOF'
@EVIL@
EOF
  ;;
  *-L*) cat <<'EOF'
GPU 0: $(touch CANARY) `touch CANARY`; touch CANARY && x (UUID: GPU-11111111-2222-3333-4444-555555555555)
EOF
  ;;
  *--query-compute-apps*) cat <<'EOF'
4242, GPU-11111111-2222-3333-4444-555555555555, 100, $(touch CANARY); rm -rf / #
EOF
  ;;
esac
""".replace("@EVIL@", "0, GPU-11111111-2222-3333-4444-555555555555, $(touch CANARY) `touch CANARY`; touch CANARY && x, "
            "00000000:17:00.0, 15360, [N/A], [N/A], 0x1EB810DE")

def _a30_with_lgi(rows: str) -> str:
    """A hostile host: a well-formed A30 listing whose `-lgi` table carries `rows` (the attack)."""
    return r"""#!/bin/sh
case "$*" in
  *--query-gpu*) echo "@A30@" ;;
  *-L*) echo "GPU 0: NVIDIA A30 (UUID: GPU-11111111-2222-3333-4444-555555555555)" ;;
  *-lgi) cat <<'EOF'
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
@ROWS@
+-------------------------------------------------------+
EOF
  ;;
esac
""".replace("@A30@", A30_LINE).replace("@ROWS@", rows)


EVIL_VALUES = _a30_with_lgi("|   0  MIG 1g.6gb          14  99999999999    0:77     |")
EVIL_OVERLAP = _a30_with_lgi("|   0  MIG 4g.24gb          0        0          0:4     |\n"
                             "+-------------------------------------------------------+\n"
                             "|   0  MIG 1g.6gb          14        3          1:1     |")


EVIL_ESCAPES = "#!/bin/sh\nprintf '0, GPU-1, \\033]0;pwned\\007\\033[2J, x, 1, Enabled, Enabled, 0x1\\n'\n"
EVIL_FLOOD = "#!/bin/sh\nhead -c 40000000 /dev/zero\n"


def test_hostile_output_is_data_or_rejected_never_run(fleet: Fleet) -> None:
    scripts = {"names": EVIL_NAMES, "values": EVIL_VALUES, "overlap": EVIL_OVERLAP, "escapes": EVIL_ESCAPES,
               "flood": EVIL_FLOOD}
    hosts = {}
    for i, (name, text) in enumerate(scripts.items()):
        fleet.host(i).script("nvidia-smi", text)
        hosts[name] = fleet.host_entry(fleet.host(i))
    inv = load_inventory(fleet.inventory(hosts), CATALOG)
    snap = discover(fleet, inv)
    by = {h.name: h for h in snap.hosts}
    # 1. metacharacters are kept as plain data
    names = by["names"]
    assert names.ok and names.gpus[0].model is None
    assert names.gpus[0].name.startswith("$(touch CANARY) `touch CANARY`; touch CANARY")
    assert names.gpus[0].processes[0].name == "$(touch CANARY); rm -rf / #"
    # 2. absurd numbers, 3. an impossible layout, 4. terminal escapes, 5. a flood: rejected per host
    assert by["values"].error is not None and by["values"].error.code == "smi-parse"
    assert "'99999999999' is not a number" in by["values"].error.message
    assert by["overlap"].error is not None and "not a valid A30 layout" in by["overlap"].error.message
    assert by["escapes"].error is not None and "\x1b" not in by["escapes"].error.message
    assert by["flood"].error is not None and by["flood"].error.code == "output-too-large"
    # nothing ran: no canary anywhere a shell could have created it, and only builder argv reached the host
    for base in (Path.cwd(), Path.home(), fleet.host(0).dir, fleet.host(0).bin):
        assert not (base / "CANARY").exists()
    logged = (fleet.host(0).dir / "argv.log").read_text().splitlines()
    assert logged and {tuple(line.split(" ")) for line in logged} <= {a[1:] for a in ALLOWED_ARGV}
    # the snapshot round-trips the hostile text as data
    out = fleet.tmp / "snap.json"
    write_snapshot(out, snap)
    again = load_snapshot(out, CATALOG)
    assert again.host("names") == names


def test_snapshot_round_trip_and_strict_loading(fleet: Fleet, tmp_path: Path) -> None:
    model = CATALOG.get("A100-SXM4-80GB")
    write(fleet.host(0).state, state(model, 2, hostname="r", layouts=[mixed_layout(model), None],
                                     busy={0: [Proc(7, start=mixed_layout(model).instances[0].start)]}))
    inv = load_inventory(fleet.inventory({"r": fleet.host_entry(fleet.host(0)),
                                          "gone": fleet.host_entry(fleet.host(1), address="127.0.0.254")}), CATALOG)
    snap = discover(fleet, inv)
    for suffix in ("json", "yaml"):
        path = tmp_path / f"snap.{suffix}"
        write_snapshot(path, snap)
        assert load_snapshot_state(path).fingerprint() == snap.fleet_state().fingerprint()
        assert load_snapshot_state(path).source == f"snapshot:{path}"
        full = load_snapshot(path)
        assert full == snap and [h.name for h in full.failed] == ["gone"]
    text = (tmp_path / "snap.json").read_text()
    bad = {
        "unknown key": text.replace('"pci_bus_id"', '"pci_bus"', 1),
        "unsupported snapshot version": text.replace('"version": 1', '"version": 3'),  # 2: with vGPU records
        "invalid layout": text.replace('"start": 0', '"start": 1', 1),
        "unknown GPU model": text.replace('"model": "A100-SXM4-80GB"', '"model": "Z9"', 1),
    }
    for needle, doc in bad.items():
        p = tmp_path / "bad.json"
        p.write_text(doc)
        with pytest.raises(Exception, match=needle) as err:
            load_snapshot_state(p)
        assert "bad.json:" in str(err.value)


def test_inventory_drift(fleet: Fleet, tmp_path: Path) -> None:
    write(fleet.host(0).state, state("A30", 2, hostname="d", layouts=[Layout.parse(["2g.12gb@0"]), None],
                                     mig=[True, False]))
    entry = fleet.host_entry(fleet.host(0), discover=False,
                             gpus=[{"index": 0, "model": "A30", "layout": ["4g.24gb@0"]},
                                   {"index": 2, "model": "A30", "mig": False}])
    inv = load_inventory(fleet.inventory({"d": entry}), CATALOG)
    (rec,) = discover(fleet, inv).hosts
    drift = inventory_drift(inv.hosts[0], rec)
    assert "GPU 0: layout is 2g.12gb@0, inventory says 4g.24gb@0" in drift
    assert "GPU 2: declared (A30) but not found" in drift
    assert any(d.startswith("GPU 1: found (A30) but not in the inventory") for d in drift)
