"""VM workloads as demand (issue 26, "Demand"): the profile schema (`kind: vm`, vGPU pins), `nvidia-smi vgpu -q` parsed
from the verbatim samples and from hostile text, `collect --local --vgpu` on the simulated vGPU host (tests/sim_vgpu)
into the history store, the roll-up into `kind: vm` profiles, and propose leaving VMs out of the MIG plan."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import migplan_cli
from sim_vgpu import fleet as vf
from typer.testing import CliRunner

from migplan.adapters.history_store import HistoryStore, read_samples
from migplan.adapters.runner import LocalRunner
from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.catalog.vgpu import smi_type_name
from migplan.cli.app import app
from migplan.commands.collect import LocalSettings, collect_local
from migplan.errors import InputError
from migplan.history.identity import vm_workload
from migplan.history.rollup import rollup
from migplan.history.samples import Place, Sample
from migplan.planner import Policy
from migplan.planner.vm_demand import check_pins, split_vms, vm_demand
from migplan.profiles import KIND_PROCESS, KIND_VM, check_models, load_profiles
from migplan.smi.errors import SmiParseError
from migplan.smi.vgpu import parse_vgpu_query
from tests.fake_nvml import FakeNvml

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
INV = str(ROOT / "inventory" / "example.yaml")
T0 = 1_793_491_200.0
UUID = "10a12241-1e83-4b70-bc59-a33d7c6d063c"

VMS = f"""version: 1
workloads:
  - name: vm:infer-01
    kind: vm
    observed: {{host: kvm01, gpu: 0, gpu_model: A100-SXM4-40GB, mig_profile: 3g.20gb, vgpu_type: A100X-3-20C,
               vm_uuid: {UUID.upper()}}}
    memory_mib: {{p50: 9000, p95: 11000, p99: 11800, max: 12000}}
    compute: {{p50: 0.1, p95: 0.2, max: 0.3}}
  - name: vm:chat-02
    kind: vm
    observed: {{host: kvm01, gpu: 1, gpu_model: L4, vgpu_type: NVIDIA L4-8C}}
    memory_mib: {{p50: 5000, p95: 6000, p99: 6100, max: 6200}}
    min_vgpu_type: L4-12C
  - name: vm:pinned
    kind: vm
    vgpu_type: GRID L4-4C
    memory_mib: {{p50: 5000, p95: 6000, p99: 6100, max: 6200}}
"""


def _write(tmp_path: Path, text: str, name: str = "vms.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- the profile schema --------------------------------------------------------------------------------------------

def test_vm_profiles_read_with_their_types(tmp_path: Path) -> None:
    ws = {w.name: w for w in load_profiles(_write(tmp_path, VMS))}
    infer, chat, pinned = ws["vm:infer-01"], ws["vm:chat-02"], ws["vm:pinned"]
    assert infer.kind == KIND_VM and infer.is_vm and infer.observed.vgpu_type == "A100X-3-20C"
    assert infer.observed.vm_uuid == UUID  # written in capitals, kept in the one form
    assert chat.observed.vgpu_type == "L4-8C" and chat.min_vgpu_type == "L4-12C"  # nvidia-smi's prefix dropped
    assert pinned.vgpu_type == "L4-4C" and pinned.min_vgpu_type is None
    # a VM on a GPU without MIG (L4) names the vGPU board's GPU: accepted for a VM, as it is no MIG model
    check_models(load_profiles(_write(tmp_path, VMS)), builtin_catalog())


def test_profiles_without_vms_read_as_before() -> None:
    ws = list(load_profiles(ROOT / "profiles" / "example"))
    assert ws and all(w.kind == KIND_PROCESS and not w.is_vm and w.vgpu_type is None for w in ws)
    assert all(w.observed.vgpu_type is None and w.observed.vm_uuid is None for w in ws)


def test_process_with_an_l4_model_is_still_refused(tmp_path: Path) -> None:
    """Only a VM may name a GPU the MIG catalog lacks: a process's misspelt model still fails."""
    p = _write(tmp_path, "version: 1\nworkloads:\n  - name: a\n    observed: {gpu_model: L4}\n"
                         "    memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}\n")
    with pytest.raises(InputError, match="unknown GPU model 'L4'"):
        check_models(load_profiles(p), builtin_catalog())


BASE = "version: 1\nworkloads:\n  - name: vm:x\n    memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}\n"


@pytest.mark.parametrize(("extra", "line", "key", "message"), [
    ("    kind: container\n", 5, "kind", "kind 'container' is not one of process, vm"),
    ("    vgpu_type: L4-8C\n", 5, "vgpu_type", "vgpu_type is for virtual machines"),
    ("    kind: process\n    min_vgpu_type: L4-8C\n", 6, "min_vgpu_type", "min_vgpu_type is for virtual machines"),
    ("    observed: {vgpu_type: L4-8C}\n", 5, "observed.vgpu_type", "vgpu_type is for virtual machines"),
    ("    observed:\n      places: [{vm_uuid: " + UUID + "}]\n", 6, "observed.places[0].vm_uuid",
     "vm_uuid is for virtual machines"),
    ("    kind: vm\n    min_profile: 2g.10gb\n", 6, "min_profile", "a VM is given a vGPU type, not a MIG instance"),
    ("    kind: vm\n    vgpu_type: L4-8C\n    min_vgpu_type: L4-4C\n", 7, "min_vgpu_type", "not both"),
    ("    kind: vm\n    vgpu_type: A100-3-20X\n", 6, "vgpu_type", "'A100-3-20X' is not a vGPU type name"),
    ("    kind: vm\n    vgpu_type: 12\n", 6, "vgpu_type", "'12' is not a vGPU type name"),
    ("    kind: vm\n    observed: {vm_uuid: not-a-uuid}\n", 6, "observed.vm_uuid", "is not a VM UUID"),
    ("    kind: vm\n    observed: {vgpu_type: 'L4-8C; rm -rf /'}\n", 6, "observed.vgpu_type", "not a vGPU type name"),
])
def test_hostile_vm_profiles_name_file_line_and_key(tmp_path: Path, extra: str, line: int, key: str,
                                                   message: str) -> None:
    p = _write(tmp_path, BASE + extra)
    with pytest.raises(InputError) as err:
        load_profiles(p)
    text = str(err.value)
    assert f"{p}:{line}" in text and key in text and message in text, text


# --- `nvidia-smi vgpu -q` ------------------------------------------------------------------------------------------

def _sample(rel: str) -> str:
    raw = (DATA / rel).read_bytes()
    return raw.decode("utf-8")  # byte for byte as printed: trailing blanks, no normalising


def test_both_drivers_read_with_nvidias_bare_type_name() -> None:
    """Driver 510 (colon at column 38) and 525 (column 42, blank values with their trailing blanks) read alike; collect
    records the type by NVIDIA's bare name (the `GRID `/`NVIDIA ` prefix dropped: catalog.vgpu.smi_type_name). The
    fields themselves are tests/test_vgpu_parse.py's."""
    [p40] = parse_vgpu_query(_sample("vgpu/q_p40_types_510_two_active.txt"))
    assert [(smi_type_name(v.type_name), v.vm_uuid) for v in p40.vgpus] == [("P40-6Q", UUID)] * 2  # one VM, two vGPUs
    text = _sample("vgpu_sim/vgpu_q_525.txt")
    assert "        VM UUID                           : \n" in text  # the blank value as the driver prints it
    [gpu] = parse_vgpu_query(text)
    [v] = gpu.vgpus
    assert (smi_type_name(v.type_name), v.vm_uuid, v.gpu_util_pct) == ("RTXA6000-2Q", None, 0)
    assert vm_workload(v.vm_name, v.vm_uuid, v.vgpu_id) == "vm:win10test"  # QEMU's -name options dropped


def _p40(old: str, new: str, count: int = 1) -> str:
    text = _sample("vgpu/q_p40_types_510_two_active.txt")
    assert old in text
    return text.replace(old, new, count)


@pytest.mark.parametrize(("text", "message"), [  # cases of tests/test_vgpu_parse.py are not repeated here
    (_p40("Used                          : 0 MiB", "Used                          : lots"), "is not an amount of MiB"),
    (_p40("Used                          : 0 MiB", "Used                          : 9000 MiB"),
     "line 21: 9000 MiB used of a 6144 MiB frame buffer"),
    (_p40("Used                          : 0 MiB", "Used                          : 99999999999 MiB"),
     "is not an amount of MiB"),
    (_p40("Gpu                           : 0 %", "Gpu                           : 250 %"), "out of range 0..100"),
    (_p40("        vGPU Name                         : GRID P40-6Q\n", ""), "vGPU 3251634329 has no 'vGPU Name'"),
    (_p40("GPU 00000000:82:00.0", "GPU ../../etc"), "'../../etc' is not a PCI bus id"),
    (_p40("VM UUID                           : 10a12241", "VM UUID                           : zz"), "is not a UUID"),
    (_p40("        VM Name                           : y-k8s-n-1\n",
          "        VM Name                           : y-k8s-n-1\n        VM Name                           : other\n"),
     "line 6: 'VM Name' twice for vGPU 3251634329"),
    (_p40("Gpu                           : 0 %", "Gpu                           : 0 %\n            Gpu : 1 %"),
     "'Utilization/Gpu' twice for vGPU 3251634329"),
    (_p40("    Active vGPUs                          : 2\n", ""), "GPU 00000000:82:00.0 has no 'Active vGPUs' line"),
    ("No supported devices in vGPU mode\n", "line 1: no GPU of this host is in vGPU mode"),
    ("<html>503</html>\n", "line 1: expected 'GPU <PCI bus id>'"),
    ("GPU 00000000:82:00.0\n    Active vGPUs : 0\n    {{weird}}\n", "line 3: neither a field nor a section title"),
])
def test_parser_refuses_hostile_text(text: str, message: str) -> None:
    with pytest.raises(SmiParseError, match=message.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
        parse_vgpu_query(text)


def test_vm_workload_names() -> None:
    assert vm_workload("infer-01", UUID, 7) == "vm:infer-01"
    assert vm_workload(None, UUID, 7) == f"vm:{UUID}"
    assert vm_workload(None, None, 7) == "vm:vgpu-7"
    assert vm_workload("guest=a,,b,debug-threads=on", None, 7, nth=2) == "vm:a_b:vgpu2"


# --- collect --local --vgpu on the simulated vGPU host --------------------------------------------------------------

def _kvm_host(tmp_path: Path) -> tuple[Path, str, str]:
    """A KVM host: GPU 0 an A100 HGX 40GB in MIG mode with one MIG-backed A100X-3-20C VM, GPU 1 an L4 with a
    time-sliced L4-8C VM whose QEMU name carries options."""
    p = vf.write_host(tmp_path / "kvm01.json", ["A100-SXM4-40GB", "L4"], vfs_enabled=True, hostname="kvm01",
                      layouts=[["3g.20gb@4", "2g.10gb@0", "2g.10gb@2"], None])
    a = vf.add_vgpu(p, 0, "A100X-3-20C")
    vf.vm_start(p, a, "infer-01", uuid=UUID, fb_used_mib=9000, util=40)
    b = vf.add_vgpu(p, 1, "L4-8C")
    vf.vm_start(p, b, "chat-02,debug-threads=on", fb_used_mib=5000, util=25)
    return p, a, b


def _collect(p: Path, history: Path, fake: FakeNvml) -> None:
    collect_local(LocalSettings(history=str(history), host="kvm01", vgpu=True), builtin_catalog(), nvml=fake,
                  now=lambda: fake.now, runner=LocalRunner(env=vf.sim_env(p)))


def test_collect_on_a_vgpu_host_rolls_up_into_vm_profiles(tmp_path: Path) -> None:
    p, a, b = _kvm_host(tmp_path)
    history = tmp_path / "history"
    fake = FakeNvml([], now=T0)  # the host's NVML sees no compute process: the VMs are vGPUs
    for k in range(3):
        vf.vm_set(p, a, fb_used_mib=9000 + 1000 * k)  # infer-01 grows: its peak is the last run's
        _collect(p, history, fake)
        fake.advance(60)
    got = list(read_samples(history))
    assert {s.workload for s in got} == {"vm:infer-01", "vm:chat-02"} and len(got) == 6
    infer = next(s for s in got if s.workload == "vm:infer-01")
    assert infer.place == Place("kvm01", 0, "A100-SXM4-40GB", "3g.20gb", None, "A100X-3-20C", UUID)
    assert infer.util_pct == 40.0 and infer.source == "nvidia-smi-vgpu"

    out = tmp_path / "profiles"
    built = CliRunner().invoke(app, ["profiles", "build", "--history", str(history), "--out", str(out)])
    assert built.exit_code == 0, built.output
    doc = (out / "kvm01.yaml").read_text()
    assert "  kind: vm\n" in doc
    ws = {w.name: w for w in load_profiles(out)}
    vm, chat = ws["vm:infer-01"], ws["vm:chat-02"]
    assert vm.is_vm and vm.observed.vgpu_type == "A100X-3-20C" and vm.observed.vm_uuid == UUID
    assert (vm.observed.gpu, vm.observed.gpu_model, vm.observed.mig_profile) == (0, "A100-SXM4-40GB", "3g.20gb")
    assert vm.memory.max == 11000 and vm.observed.places[0].vgpu_type == "A100X-3-20C"
    assert vm.compute.known  # 40% of the 3g.20gb instance, as a share of the A100
    assert chat.is_vm and (chat.observed.gpu, chat.observed.gpu_model, chat.observed.vgpu_type) == (1, "L4", "L4-8C")
    assert chat.memory.max == 5000 and chat.observed.vm_uuid is None
    check_models(load_profiles(out), builtin_catalog())  # propose accepts them


def test_collect_vgpu_on_a_host_without_the_vgpu_manager_is_a_clear_error(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "bare.json", "L4", manager=False)
    with pytest.raises(InputError, match="--vgpu: 'nvidia-smi vgpu -q' failed") as err:
        _collect(p, tmp_path / "history", FakeNvml([], now=T0))
    assert "leave --vgpu out" in str(err.value)


def test_vgpu_needs_local() -> None:
    r = CliRunner().invoke(app, ["collect", "--inventory", INV, "--vgpu"])
    assert r.exit_code == 2 and "--vgpu goes with --local" in r.output


def test_a_store_written_before_the_vm_columns_reads_and_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store, store.run(T0, "nvml") as run:
        from migplan.adapters.history_store import StoredSample

        run.add([StoredSample(Sample(T0, "chat", 100.0, None, Place("h", 0, "A100-SXM4-40GB")))])
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE places DROP COLUMN vgpu_type")
    db.execute("ALTER TABLE places DROP COLUMN vm_uuid")
    db.commit()
    db.close()
    with HistoryStore(path, readonly=True) as old:
        assert [s.place for s in old.iter_samples()] == [Place("h", 0, "A100-SXM4-40GB")]
    with HistoryStore(path) as store:  # the next run adds them
        assert {"vgpu_type", "vm_uuid"} <= store._place_columns()


# --- roll-up -------------------------------------------------------------------------------------------------------

def test_rollup_writes_kind_vm_only_for_vms() -> None:
    vm = Place("kvm01", 1, "L4", None, None, "L4-8C", UUID)
    proc = Place("gpu01", 0, "A100-SXM4-40GB", "3g.20gb", 0)
    samples = [Sample(T0 + i, "vm:chat", 4000.0 + i, None, vm) for i in range(3)]
    samples += [Sample(T0 + i, "chat", 4000.0, None, proc) for i in range(3)]
    docs = {p.name: p.document for p in rollup(samples, builtin_catalog()).profiles}
    assert list(docs["vm:chat"])[:3] == ["name", "kind", "observed"] and docs["vm:chat"]["kind"] == "vm"
    observed = docs["vm:chat"]["observed"]
    assert isinstance(observed, dict) and observed["vgpu_type"] == "L4-8C" and observed["gpu_model"] == "L4"
    assert "kind" not in docs["chat"]  # a process's document is as it always was
    assert "vgpu_type" not in json.dumps(docs["chat"])


# --- propose -------------------------------------------------------------------------------------------------------

def test_vm_demand_sizes_by_the_planners_rule(tmp_path: Path) -> None:
    vcat = builtin_vgpu_catalog()
    ws = {w.name: w for w in load_profiles(_write(tmp_path, VMS))}
    fallback = next(iter(builtin_catalog()))
    infer = vm_demand(ws["vm:infer-01"], Policy(), vcat, fallback)
    assert infer.need_mib == 13200 and infer.vgpu_type == "A100X-3-20C"  # 12000 + 10%: the MIG-backed 20 GB type
    tight = vm_demand(ws["vm:infer-01"], Policy(headroom=0.0, headroom_min_mib=0), vcat, fallback)
    assert tight.need_mib == 12000 and tight.vgpu_type == "A100X-3-20C"
    chat = vm_demand(ws["vm:chat-02"], Policy(), vcat, fallback)
    assert chat.need_mib == 6820 and chat.vgpu_type == "L4-12C"  # L4-8C would hold it; min_vgpu_type is 12C
    pinned = vm_demand(ws["vm:pinned"], Policy(), vcat, fallback)
    assert pinned.vgpu_type == "L4-4C" and "less than the 6820 MiB" in pinned.note
    rest, vms = split_vms(load_profiles(ROOT / "profiles" / "example"))
    assert vms == () and len(rest) == 40


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


def _plan(stdout: str) -> dict[str, object]:
    doc = json.loads(stdout)
    doc.pop("created_at", None)
    doc["solve"].pop("time_s", None)
    return doc


def test_propose_lists_vms_as_not_planned_and_plans_the_rest_as_before(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for f in (ROOT / "profiles" / "example").glob("*.yaml"):
        (profiles / f.name).write_text(f.read_text())
    _write(profiles, VMS, "zz-vms.yaml")
    with_vms = run("propose", "-i", INV, "-p", str(profiles), "-o", "json")
    without = run("propose", "-i", INV, "-p", str(ROOT / "profiles" / "example"), "-o", "json")
    assert with_vms.exit_code == 0 and without.exit_code == 0, with_vms.output
    assert _plan(with_vms.stdout) == _plan(without.stdout)  # the VMs change nothing of the MIG plan
    assert "vm:" not in with_vms.stdout
    err = with_vms.stderr
    assert "3 VM workload(s) (kind: vm) not planned: no hypervisor host" in err
    assert "vm:chat-02 on kvm01/1 as L4-8C: needs 6820 MiB of frame buffer: L4-12C (L4)" in err
    assert "pinned L4-4C holds 4096 MiB, less than the 6820 MiB it needs" in err
    assert "not planned" not in without.stderr


def test_propose_refuses_a_pin_the_vgpu_catalog_lacks(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _write(tmp_path, VMS.replace("vgpu_type: GRID L4-4C", "vgpu_type: L4-7C"))
    r = run("propose", "-i", INV, "-p", str(p))
    assert r.exit_code == 2, r.output
    assert f"{p}:14" in r.stderr and "workload 'vm:pinned': vgpu_type" in r.stderr  # the workload's line
    assert "vGPU type 'L4-7C' is not in migplan's vGPU catalog" in r.stderr and "L4-8C" in r.stderr
    with pytest.raises(InputError, match="no vGPU board has the prefix 'Z9'"):
        check_pins(split_vms(load_profiles(_write(tmp_path, VMS.replace("L4-12C", "Z9-12C"))))[1],
                   builtin_vgpu_catalog())


def test_replan_leaves_vms_out_with_one_event_line(tmp_path: Path) -> None:
    from migplan.commands.vms import without_vms

    profiles = load_profiles(_write(tmp_path, VMS))
    lines: list[str] = []
    rest, demands = without_vms(profiles, None, builtin_catalog(), lines.append)
    assert len(rest) == 0 and demands == []
    assert lines == ["info: event=vms-not-planned workloads=3 vm:infer-01 vm:chat-02 vm:pinned"]
    example = load_profiles(ROOT / "profiles" / "example")
    assert without_vms(example, None, builtin_catalog(), lines.append)[0] is example and len(lines) == 1


def test_profiles_show_marks_vms(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = _write(tmp_path, VMS)
    table = run("profiles", "show", "-p", str(p))
    assert table.exit_code == 0, table.output
    assert "vGPU L4-8C" in table.stdout and "vm min=L4-12C" in table.stdout and "vm vgpu=L4-4C" in table.stdout
    data = {d["name"]: d for d in json.loads(run("profiles", "show", "-p", str(p), "-o", "json").stdout)}
    assert data["vm:infer-01"]["kind"] == "vm" and data["vm:infer-01"]["observed"]["vgpu_type"] == "A100X-3-20C"
    example = json.loads(run("profiles", "show", "-p", str(ROOT / "profiles" / "example"), "-o", "json").stdout)
    assert all("kind" not in d and "vgpu_type" not in d["observed"] for d in example)  # as it was


def test_install_writes_the_sampler_with_vgpu() -> None:
    from migplan.commands.collect import InstallRequest, sampler_files

    [cron] = sampler_files(InstallRequest(vgpu=True)).values()
    assert "collect --local --quiet --history /var/lib/migplan/history --vgpu 2>&1" in cron
    [plain] = sampler_files(InstallRequest()).values()
    assert "--vgpu" not in plain  # a bare-metal host's line is as it was
    service = sampler_files(InstallRequest(vgpu=True, timer=True))["/etc/systemd/system/migplan-collect.service"]
    assert ("ExecStart=/usr/local/bin/migplan collect --local --quiet --history /var/lib/migplan/history --vgpu\n"
            in service)


def test_backtest_leaves_vms_out_of_a_mixed_history(tmp_path: Path) -> None:
    """A history with VMs (an L4, a GPU without MIG) and a process: the process is backtested, the VMs are named as
    not backtested (a VM is given a vGPU type, not a MIG instance), never 'unknown GPU model L4'."""
    from migplan.adapters.history_store import StoredSample

    vm = Place("kvm01", 1, "L4", None, None, "L4-8C", None)
    proc = Place("gpu01", 0, "A100-SXM4-40GB", "3g.20gb", 0)
    with HistoryStore(tmp_path / "history.sqlite") as store:
        for i in range(240):
            with store.run(T0 + 60 * i, "nvml") as run_:
                run_.add([StoredSample(Sample(T0 + 60 * i, "vm:chat", 4000.0 + i % 7, 20.0, vm)),
                          StoredSample(Sample(T0 + 60 * i, "chat", 8000.0 + i % 5, None, proc))])
    r = CliRunner().invoke(app, ["backtest", "--history", str(tmp_path), "--train", "2h", "--test", "2h",
                                 "--policy", "max+10%"])
    assert r.exit_code == 0, r.output
    assert "not backtested (kind: vm, vGPU types are not planned yet): 1 workload(s): vm:chat" in r.stdout
    assert "not sized (no sample in the training window)" not in r.stdout
    doc = json.loads(CliRunner().invoke(app, ["backtest", "--history", str(tmp_path), "--train", "2h", "--test", "2h",
                                              "--policy", "max+10%", "-o", "json"]).stdout)
    assert doc["vms"] == ["vm:chat"] and {w["workload"] for w in doc["workloads"]} == {"chat"}


def test_replan_reads_profiles_without_vms_for_both_of_its_paths(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """replan (and replan --via gpu-operator, which reads its profiles through the same `_profiles`) never plans a
    VM as a process."""
    import datetime as dt

    from migplan.commands.context import build_context
    from migplan.commands.replan import ReplanRequest, _profiles

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MIGPLAN_CONFIG", raising=False)
    p = _write(tmp_path, VMS + "  - name: chat\n    memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}\n")
    lines: list[str] = []
    got = _profiles(build_context(None, None, None), ReplanRequest(profiles=str(p)), dt.datetime.now(dt.timezone.utc),
                    lines.append)
    assert [w.name for w in got] == ["chat"]
    assert "info: event=vms-not-planned workloads=3 vm:infer-01 vm:chat-02 vm:pinned" in lines
