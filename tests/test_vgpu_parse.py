"""The vGPU host's parsers and argv builders (migplan.smi.vgpu, migplan.smi.sysfs) on the verbatim samples of
tests/data/vgpu and tests/data/vgpu_sim, byte for byte as printed, and on hostile output (issue 26, Discovery)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migplan.smi import SmiCommandError, SmiParseError, sysfs
from migplan.smi import vgpu as sv

DATA = Path(__file__).parent / "data"


def sample(name: str) -> str:
    return (DATA / name).read_bytes().decode()


# --- the summary ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "driver", "gpu", "vgpus"), [
    ("vgpu/plain_t4_470_idle.txt", "470.63", (0, "Tesla T4", "00000000:C1:00.0"), []),
    ("vgpu/plain_t4_470_one_t4_4c.txt", "470.63", (0, "Tesla T4", "00000000:C1:00.0"),
     [(3251634198, "GRID T4-4C", "instance-000000d5")]),
    ("vgpu/plain_p40_types_510_two_active.txt", "510.85.03", (0, "NVIDIA Graphics Device", "00000000:82:00.0"),
     [(3251634243, "GRID P40-6Q", "y-k8s-n-1"), (3251634251, "GRID P40-6Q", "y-k8s-n-2")]),
    ("vgpu_sim/vgpu_summary_450_idle.txt", "450.156", (0, "T1000", "00000000:01:00.0"), []),
    ("vgpu_sim/vgpu_summary_525_idle.txt", "525.147.01", (0, "NVIDIA GeForce RTX 408...", "00000000:01:00.0"), []),
    ("vgpu_sim/vgpu_summary_525_active.txt", "525.147.01", (0, "NVIDIA GeForce RTX 408...", "00000000:01:00.0"),
     [(3251634190, "NVIDIA RTXA...", "win10test,debug-...")]),
])
def test_summary_samples(name: str, driver: str, gpu: tuple[int, str, str], vgpus: list[tuple[int, str, str]]) -> None:
    s = sv.parse_vgpu_summary(sample(name))
    assert s.driver_version == driver
    assert [(g.index, g.name, g.pci_bus_id) for g in s.gpus] == [gpu]
    assert [(v.vgpu_id, v.type_name, v.vm) for v in s.gpus[0].vgpus] == vgpus


def test_no_vgpu_message_is_recognised_and_is_no_summary() -> None:
    assert sv.is_no_vgpu("No supported devices in vGPU mode\n")
    assert not sv.is_no_vgpu(sample("vgpu/plain_t4_470_idle.txt"))
    with pytest.raises(SmiParseError, match="time line nor the table"):
        sv.parse_vgpu_summary("No supported devices in vGPU mode\n")


# --- -q -----------------------------------------------------------------------------------------------------------

def test_query_two_active_p40_vgpus() -> None:
    (gpu,) = sv.parse_vgpu_query(sample("vgpu/q_p40_types_510_two_active.txt"))
    assert gpu.pci_bus_id == "00000000:82:00.0"
    a, b = gpu.vgpus
    assert (a.vgpu_id, a.type_name, a.type_id, a.vm_name, a.vm_uuid) == (
        3251634329, "GRID P40-6Q", 50, "y-k8s-n-1", "10a12241-1e83-4b70-bc59-a33d7c6d063c")
    assert (a.mdev_uuid, a.gpu_instance_id, a.fb_total_mib, a.fb_used_mib, a.gpu_util_pct) == (
        "334855e2-079b-11ee-9fc9-83e0dccb6713", None, 6144, 0, 0)
    assert b.vgpu_id == 3251634341 and b.mdev_uuid == "33485650-079b-11ee-9fca-8f6415d2734c"


def test_query_525_with_an_empty_vm_uuid_and_a_comma_in_the_vm_name() -> None:
    (gpu,) = sv.parse_vgpu_query(sample("vgpu_sim/vgpu_q_525.txt"))
    (v,) = gpu.vgpus
    assert (v.vgpu_id, v.type_name, v.type_id, v.vm_name, v.vm_uuid, v.fb_total_mib) == (
        3251634190, "NVIDIA RTXA6000-2Q", 525, "win10test,debug-threads=on", None, 2048)


def test_query_none_active() -> None:
    assert [(g.pci_bus_id, g.vgpus) for g in sv.parse_vgpu_query(sample("vgpu/q_510_none_active.txt"))] == [
        ("00000000:82:00.0", ())]


# --- -s / -c ------------------------------------------------------------------------------------------------------

def test_supported_plain_p4_in_the_drivers_order() -> None:
    (gpu,) = sv.parse_vgpu_types(sample("vgpu_sim/vgpu_s_p4_460.txt"))
    names = [t.name for t in gpu.types]
    assert names[:3] == ["GRID P4-1B", "GRID P4-1Q", "GRID P4-2Q"] and names[-2:] == ["GRID P4-8C", "GRID P4-4C"]
    assert len(names) == 14 and all(t.type_id is None for t in gpu.types)


def test_supported_verbose_rtx_pro_6000() -> None:
    (gpu,) = sv.parse_vgpu_types(sample("vgpu/s_v_rtxpro6000_580_excerpt.txt"))
    assert [(t.name, t.type_id, t.fb_mib, t.max_instances, t.gi_profile_id) for t in gpu.types] == [
        ("NVIDIA RTX Pro 6000 Blackwell DC-2B", 0x5EE, 2048, 32, None),
        ("NVIDIA RTX Pro 6000 Blackwell DC-4Q", 0x5F1, 4096, 24, None),
        ("NVIDIA RTX Pro 6000 Blackwell DC-48Q", 0x604, 49152, 2, None),
        ("NVIDIA RTX Pro 6000 Blackwell DC-1-2Q", 0x60A, 2048, 48, 19)]


# --- sysfs --------------------------------------------------------------------------------------------------------

def test_creatable_vgpu_types_of_an_l40s_vf() -> None:
    rows = sysfs.parse_creatable_vgpu_types(sample("vgpu_sim/creatable_vgpu_types_l40s.txt"))
    assert rows[0] == (1145, "NVIDIA L40S-1B") and rows[-1] == (2164, "NVIDIA L40S-3B") and len(rows) == 23
    assert sysfs.parse_creatable_vgpu_types("ID    : vGPU Name\n") == []


def test_mdev_types_of_an_a2_vf_and_the_t4_listing() -> None:
    root = DATA / "vgpu_sim" / "mdev_supported_types_a2_vf"
    listing = "".join(f"{p.name}\n" for p in sorted(root.iterdir()))
    ids = sysfs.mdev_type_ids(sysfs.parse_listing(listing, "ls"))
    assert ids == list(range(742, 757))
    assert sysfs.parse_one_line((root / "nvidia-754" / "name").read_text(), "name").startswith("NVIDIA A2-")
    assert sysfs.parse_count((root / "nvidia-754" / "available_instances").read_text(), "available_instances") >= 0
    # the T4 sample is `ls` in columns: its names, split, are the T4's type ids
    t4 = sysfs.mdev_type_ids(sample("vgpu/sysfs_t4_470_mdev_supported_types.txt").split())
    assert t4[:2] == [222, 223] and t4[-3:] == [319, 320, 321]


def test_current_type_gpu_instance_and_links() -> None:
    assert sysfs.parse_current_vgpu_type("465\n") == 465 and sysfs.parse_current_vgpu_type("0\n") == 0
    assert sysfs.parse_gpu_instance_id("") is None and sysfs.parse_gpu_instance_id("3\n") == 3
    links = sysfs.parse_links("../0000:17:00.4\n../0000:17:00.5\n", 2, "readlink")
    assert [sysfs.link_bdf(sysfs.component(x), "r") for x in links] == ["0000:17:00.4", "0000:17:00.5"]
    target = "../../pci/devices/0000:c1:00.0/ae61c4f4-cf84-aae6-3c4b-6728a89ea4ed"
    assert sysfs.component(target, 2) == "0000:c1:00.0"
    assert sysfs.link_type_id("nvidia-319", "mdev_type") == 319
    assert sysfs.virtfns(["virtfn10", "virtfn2", "sriov_numvfs", "virtfnx"]) == [(2, "virtfn2"), (10, "virtfn10")]


# --- hostile output -----------------------------------------------------------------------------------------------

Q = sample("vgpu/q_p40_types_510_two_active.txt")


@pytest.mark.parametrize(("text", "why"), [
    (Q.replace("Active vGPUs                          : 2", "Active vGPUs                          : 3"),
     "says 3 active vGPUs but lists 2"),
    (Q.replace("3251634341", "3251634329"), "vGPU ID twice"),
    (Q.replace("vGPU Type                         : 50", "vGPU Type                         : 5x0", 1), "not a number"),
    (Q.replace("6144 MiB", "6144 GiB", 1), "not an amount of MiB"),
    (Q.replace("GRID P40-6Q", "GRID P40-6Q; rm -rf /", 1), "not a vGPU type name"),
    (Q.replace("10a12241-1e83-4b70-bc59-a33d7c6d063c", "10a12241-not-a-uuid", 1), "not a UUID"),
    (Q.replace("    vGPU ID                               : 3251634329", "    vGPU ID  : 99999999999"),
     "not a vGPU ID"),
    ("    Active vGPUs : 0\n", "before the first 'GPU' line"),
    ("GPU 00000000:82:00.0\n    Active vGPUs : 0\n\x1b[2J{{{\n", "neither a field nor a section"),
    ("GPU 00000000:82:00.0\n    Active vGPUs : 0\nGPU 00000000:82:00.0\n    Active vGPUs : 0\n", "listed twice"),
    ("GPU 000000:82:00.0\n    Active vGPUs : 0\n", "is not a PCI bus id"),
    ("x" * 4_000_001, "refusing to read it"),
])
def test_hostile_query_output_is_one_clear_error(text: str, why: str) -> None:
    with pytest.raises(SmiParseError, match=why) as err:
        sv.parse_vgpu_query(text)
    assert "nvidia-smi vgpu -q" in str(err.value) and "\x1b" not in str(err.value)


def test_a_vm_name_is_data_bounded_and_printable() -> None:
    text = Q.replace("VM Name                           : y-k8s-n-1",
                     "VM Name                           : evil\x1b[31m$(reboot)" + "n" * 400, 1)
    (gpu,) = sv.parse_vgpu_query(text)
    name = gpu.vgpus[0].vm_name
    assert name is not None and "\x1b" not in name and len(name) <= 256 and name.startswith("evil")


SUMMARY = sample("vgpu/plain_t4_470_one_t4_4c.txt")


@pytest.mark.parametrize(("text", "why"), [
    (SUMMARY.replace("Driver Version: 470.63", "Driver Versoin: 470.63"), "not a line of the vGPU summary"),
    (SUMMARY.replace("3251634198", "32516341989999"), "not a line of the vGPU summary"),
    (SUMMARY + SUMMARY.splitlines(keepends=True)[7], "GPU 0 listed twice"),
    ("garbage\n", "neither the time line nor the table"),
    ("", "printed nothing"),
    ("\n".join(ln for ln in SUMMARY.splitlines() if "NVIDIA-SMI" not in ln), "no 'NVIDIA-SMI"),
])
def test_hostile_summary_is_one_clear_error(text: str, why: str) -> None:
    with pytest.raises(SmiParseError, match=why) as err:
        sv.parse_vgpu_summary(text)
    assert "nvidia-smi vgpu" in str(err.value)


@pytest.mark.parametrize(("text", "why"), [
    ("    GRID P4-1B\n", "before the first 'GPU' line"),
    ("GPU 00000000:01:00.0\n    No vGPU types found\n", "not a vGPU type name"),
    ("GPU 00000000:01:00.0\n    vGPU Type ID : 0xzz\n        Name : NVIDIA L4-4C\n", "not a vGPU type id"),
    ("GPU 00000000:01:00.0\n    vGPU Type ID : 0x10\n        Class : Compute\n", "has no 'Name'"),
    ("GPU 00000000:01:00.0\n        Name : NVIDIA L4-4C\n", "not a line of a vGPU type list"),
    ("GPU 00000000:01:00.0\n" + "    NVIDIA L4-4C\n" * 300, "too many vGPU types"),
])
def test_hostile_type_lists_are_one_clear_error(text: str, why: str) -> None:
    with pytest.raises(SmiParseError, match=why) as err:
        sv.parse_vgpu_types(text, "nvidia-smi vgpu -c")
    assert "nvidia-smi vgpu -c" in str(err.value)


@pytest.mark.parametrize(("parse", "text", "why"), [
    (sysfs.parse_current_vgpu_type, "465\n466\n", "expected one number"),
    (sysfs.parse_current_vgpu_type, "-1\n", "not a number"),
    (sysfs.parse_current_vgpu_type, "99999999\n", "out of range"),
    (sysfs.parse_gpu_instance_id, "x\n", "not a number"),
    (sysfs.parse_creatable_vgpu_types, "1145  : NVIDIA L40S-1B\n", "header"),
    (sysfs.parse_creatable_vgpu_types, "ID    : vGPU Name\nfoo\n", "not an 'ID : vGPU Name' line"),
    (sysfs.parse_creatable_vgpu_types, "ID    : vGPU Name\n1 : a-1B\n1 : b-2B\n", "listed twice"),
])
def test_hostile_sysfs_attributes_are_one_clear_error(parse: object, text: str, why: str) -> None:
    with pytest.raises(SmiParseError, match=why):
        parse(text)  # type: ignore[operator]


def test_hostile_listings_and_links() -> None:
    with pytest.raises(SmiParseError, match="not a sysfs name"):
        sysfs.parse_listing("virtfn0\nevil name; rm\n", "ls")
    with pytest.raises(SmiParseError, match="expected 2 link"):
        sysfs.parse_links("../0000:17:00.4\n", 2, "readlink")
    with pytest.raises(SmiParseError, match="not a PCI address"):
        sysfs.link_bdf("..", "readlink")
    with pytest.raises(SmiParseError, match="not an NVIDIA mdev type"):
        sysfs.link_type_id("nvidia-x", "readlink")


# --- builders -----------------------------------------------------------------------------------------------------

def test_builders_make_argv_from_validated_tokens_only() -> None:
    assert sv.vgpu_summary() == ["nvidia-smi", "vgpu"] and sv.vgpu_query() == ["nvidia-smi", "vgpu", "-q"]
    assert sv.vgpu_supported()[-2:] == ["-s", "-v"] and sv.vgpu_creatable()[-1] == "-c"
    assert sysfs.list_dir(sysfs.pci_path("/", "00000000:17:00.0")) == ["ls", "-1", "--",
                                                                        "/sys/bus/pci/devices/0000:17:00.0"]
    assert sysfs.read_file(sysfs.pci_path("/tmp/h.json.sysroot", "0000:17:00.4", "nvidia", "current_vgpu_type")) == [
        "cat", "--", "/tmp/h.json.sysroot/sys/bus/pci/devices/0000:17:00.4/nvidia/current_vgpu_type"]
    assert sysfs.read_links([sysfs.mdev_devices_path("/", "ae61c4f4-cf84-aae6-3c4b-6728a89ea4ed", "mdev_type")]) == [
        "readlink", "--", "/sys/bus/mdev/devices/ae61c4f4-cf84-aae6-3c4b-6728a89ea4ed/mdev_type"]
    assert sysfs.mdev_type_path("/", "0000:c1:00.0", 319, "name").endswith("/mdev_supported_types/nvidia-319/name")


@pytest.mark.parametrize("call", [
    lambda: sysfs.check_root("relative/sys"),
    lambda: sysfs.check_root("/tmp/../etc"),
    lambda: sysfs.check_root("/tmp/a b"),
    lambda: sysfs.check_root("/tmp/$(reboot)"),
    lambda: sysfs.pci_path("/", "0000:17:00.4; reboot"),
    lambda: sysfs.pci_path("/", "0000:17:00.4", ".."),
    lambda: sysfs.pci_path("/", "0000:17:00.4", "a/b"),
    lambda: sysfs.mdev_devices_path("/", "not-a-uuid"),
    lambda: sysfs.mdev_type_path("/", "0000:c1:00.0", 0, "name"),
    lambda: sysfs.mdev_type_path("/", "0000:c1:00.0", 319, "create"),
    lambda: sysfs.read_file("/sys/../etc/shadow"),
    lambda: sysfs.read_file("sys/bus"),
    lambda: sysfs.read_links([]),
])
def test_builders_refuse_what_they_must_not_put_on_a_command_line(call: object) -> None:
    with pytest.raises(SmiCommandError):
        call()  # type: ignore[operator]


def test_the_vgpu_listings_are_read_only_and_the_setters_are_not() -> None:
    """Discovery's vGPU reads may run during `apply --dry-run` and count as reads in the apply tests' logs; a
    setting such as `vgpu -shm` (heterogeneous mode) may not."""
    from migplan.fleet.steps import is_read_only
    from migplan.smi import vgpu as sv

    for argv in (sv.vgpu_summary(), sv.vgpu_query(), sv.vgpu_supported(), sv.vgpu_creatable(),
                 [*sv.vgpu_supported()[:-1], "-i", "0"], [*sv.vgpu_creatable(), "-i", "3"]):
        assert is_read_only(argv), argv
    for rest in (["-shm", "1"], ["-q", "-q"], ["-i", "x"], ["-i", "0", "-shm"], ["-c", "--reset"]):
        assert not is_read_only(["nvidia-smi", "vgpu", *rest]), rest
