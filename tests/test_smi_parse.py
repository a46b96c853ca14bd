"""Parsers against every verbatim sample in tests/data/smi (docs/nvidia-smi.md §0-§13), plus hostile input."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from migplan import smi
from migplan.catalog import builtin_catalog
from migplan.catalog.geometry import Engines
from migplan.catalog.layout import Layout
from migplan.errors import MigplanError

DATA = Path(__file__).parent / "data" / "smi"
CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")


def sample(name: str) -> str:
    return (DATA / name).read_text()


# --- -lgi / -lci ------------------------------------------------------------------------------

def test_lgi_driver_535_columns() -> None:
    rows = smi.parse_gpu_instances(sample("lgi_a30.txt"))
    assert rows == [smi.GpuInstanceRow(0, "1g.6gb", 14, 3, 0, 1), smi.GpuInstanceRow(0, "1g.6gb", 14, 4, 1, 1),
                    smi.GpuInstanceRow(0, "2g.12gb", 5, 2, 2, 2)]
    assert smi.layouts_of(rows) == {0: Layout.parse(["1g.6gb@0", "1g.6gb@1", "2g.12gb@2"])}


def test_lgi_old_narrow_columns() -> None:
    rows = smi.parse_gpu_instances(sample("lgi_narrow.txt"))
    assert [(r.profile_name, r.profile_id, r.gi_id, r.start, r.size) for r in rows] == [
        ("3g.20gb", 9, 1, 4, 4), ("3g.20gb", 9, 2, 0, 4)]


def test_lgi_multi_gpu() -> None:
    head, rows = sample("lgi_a30.txt").splitlines()[:5], sample("lgi_a30.txt").splitlines()[5:]
    text = "\n".join(head + rows + [r.replace("|   0  ", "|   1  ", 1) for r in rows]) + "\n"
    layouts = smi.layouts_of(smi.parse_gpu_instances(text))
    assert set(layouts) == {0, 1} and layouts[0] == layouts[1]


def test_lgi_empty_and_mig_disabled() -> None:
    assert smi.parse_gpu_instances(sample("lgi_empty.txt")) == []
    assert smi.parse_compute_instances(sample("lgi_empty.txt")) == []
    assert smi.parse_compute_instances("No compute instances found: Not Found\n") == []
    assert smi.parse_gpu_instances("") == []
    with pytest.raises(smi.MigDisabledError):
        smi.parse_gpu_instances(sample("mig_disabled.txt"))
    with pytest.raises(smi.NotSupportedError):
        smi.parse_gi_profiles(sample("mig_unsupported.txt"))
    with pytest.raises(smi.InvalidArgumentError):
        smi.parse_gpu_instances(sample("lgi_old_driver.txt"))


def test_listing_failures_are_typed() -> None:
    with pytest.raises(smi.InsufficientPermissionsError):
        smi.parse_compute_instances(sample("lci_insufficient_permissions.txt"))
    with pytest.raises(smi.SmiError, match="Unknown Error") as info:
        smi.parse_gi_profiles(sample("lgip_unknown_error.txt"))
    assert type(info.value) is smi.SmiError


def test_lci_with_placement_and_old_format() -> None:
    rows = smi.parse_compute_instances(sample("lci_h100.txt"))
    assert rows == [smi.ComputeInstanceRow(0, 7, "1g.10gb", 0, 0, 0, 1),
                    smi.ComputeInstanceRow(0, 8, "1g.10gb", 0, 0, 0, 1)]
    old = ("+------------------------------------------------------+\n"
           "| GPU     GPU       Name             Profile   Instance |\n"
           "|====================================================|\n"
           "|   0      1       MIG 1c.3g.20gb       0         0     |\n")
    assert smi.parse_compute_instances(old) == [smi.ComputeInstanceRow(0, 1, "1c.3g.20gb", 0, 0)]


# --- -lgip / -lgipp ---------------------------------------------------------------------------

def test_lgip_a100_matches_catalog() -> None:
    rows = smi.parse_gi_profiles(sample("lgip_a100_40gb.txt"))
    assert [r.profile_id for r in rows] == [19, 20, 15, 14, 9, 5, 0]
    for row in rows:
        prof = A100.profile(row.profile_id)
        assert (row.profile_name, row.total, row.free, row.sm_count, row.engines, row.memory_gib) == (
            prof.name, prof.max_count, prof.max_count, prof.sm_count, prof.engines, prof.lgip_gib)
        assert row.p2p is False and f"{row.memory_mib / 1024:.2f}" == row.memory_gib
    assert rows[0].memory_mib == 4864


def test_lgip_wide_81_column_variant() -> None:
    (row,) = smi.parse_gi_profiles(sample("lgip_gb200_wide_head.txt"))
    assert row == smi.ProfileRow(0, "1g.23gb", 19, 7, 7, "22.00", False, 18, Engines(ce=2, dec=1, enc=0, jpeg=1, ofa=0))


@pytest.mark.parametrize(("name", "model"), [("lgipp_a100_40gb.txt", "A100-SXM4-40GB"), ("lgipp_a30.txt", "A30")])
def test_lgipp_matches_catalog(name: str, model: str) -> None:
    m = CAT.get(model)
    rows = smi.parse_gi_placements(sample(name))
    assert {r.profile_id: (r.starts, r.size) for r in rows} == {
        p.id: (p.starts, p.memory_slices) for p in m.profiles}


# --- -L, CSV, action lines ---------------------------------------------------------------------

def test_list_gpus_with_mig_devices() -> None:
    (gpu,) = smi.parse_list_gpus(sample("L_a30.txt"))
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA A30", "GPU-1e44b340-5807-0dbe-62e6-343a6b8b8bcd")
    assert [(d.profile_name, d.device, d.uuid[:12]) for d in gpu.mig_devices] == [
        ("2g.12gb", 0, "MIG-1b8509c0"), ("1g.6gb", 1, "MIG-41b9eab5"), ("1g.6gb", 2, "MIG-55dcd9bd")]


def test_list_gpus_old_r450_uuid_and_sub_ci_names() -> None:
    text = ("GPU 0: A100-SXM4-40GB (UUID: GPU-2fa5cf01-9520-1bc1-995b-cc0c6d9bca7c)\n"
            "  MIG 1c.3g.20gb Device 0: (UUID: MIG-GPU-2fa5cf01-9520-1bc1-995b-cc0c6d9bca7c/1/0)\n"
            "  MIG 1c.3g.40gb  Device  1: (UUID: MIG-c788539f-c1ea-5a36-8b4d-9b07d024b1bb)\n")
    (gpu,) = smi.parse_list_gpus(text)
    assert [(d.profile_name, d.gi_id, d.ci_id) for d in gpu.mig_devices] == [("1c.3g.20gb", 1, 0),
                                                                             ("1c.3g.40gb", None, None)]
    assert smi.parse_list_gpus("No devices were found\n") == []


def test_query_gpus() -> None:
    text = ("0, GPU-1e44b340-5807-0dbe-62e6-343a6b8b8bcd, NVIDIA A30, 00000000:36:00.0, 24576, Enabled, Disabled, "
            "0x20B710DE\n1, GPU-aa, Tesla T4, 00000000:37:00.0, 15360, [N/A], [N/A], 0x1EB810DE\n")
    a30, t4 = smi.parse_query_gpus(text)
    assert (a30.index, a30.name, a30.memory_total_mib, a30.mig_current, a30.mig_pending) == (0, "NVIDIA A30", 24576,
                                                                                             True, False)
    assert a30.mig_change_pending and a30.mig_capable
    assert CAT.match(a30.name, memory_total_mib=a30.memory_total_mib, pci_device_id=a30.pci_device_id).id == "A30"
    assert (t4.mig_current, t4.mig_capable, t4.mig_change_pending) == (None, False, False)


def test_query_csv_verbatim_samples() -> None:
    assert smi.parse_csv(sample("query_gpu_bus_mig.csv"), ["pci.bus_id", "mig.mode.current"]) == [
        {"pci.bus_id": "00000000:36:00.0", "mig.mode.current": "Enabled"}]
    assert smi.parse_csv(sample("query_gpu_noheader.csv"), ["name", "mig.mode.current", "mig.mode.pending"]) == [
        {"name": "NVIDIA CMP 170HX", "mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}]
    units = smi.parse_csv(sample("query_gpu_units.csv"), ["timestamp", "pstate", "temperature.gpu", "utilization.gpu",
                                                          "utilization.memory", "memory.total", "memory.free",
                                                          "memory.used"])
    assert units[0]["memory.total"] == "23028 MiB"
    fields = ["timestamp", "x", "name", "mig.mode.current", "a", "b", "c", "d"]
    t4 = smi.parse_csv(sample("query_gpu_t4_na.csv"), fields)
    assert t4[0]["mig.mode.current"] is None and t4[0]["name"] == "Tesla T4"


def test_compute_apps() -> None:
    assert smi.parse_compute_apps(sample("query_compute_apps_header.csv"), ["process_name", "pid"]) == [
        smi.ComputeApp(1895238, None, None, "/cuda-samples/sample")]
    assert smi.parse_compute_apps(sample("query_compute_apps_noheader.csv"), ["pid", "gpu_uuid", "used_memory"]) == [
        smi.ComputeApp(4339, "GPU-c4dd6ed1-a6a9-9421-b6b4-4cdf657c919e", 480, None)]
    weird = "42, GPU-ab, [N/A], python train.py --lr=1,2; rm -rf / `x`\n"
    (app,) = smi.parse_compute_apps(weird)
    assert app.process_name == "python train.py --lr=1,2; rm -rf / `x`" and app.used_memory_mib is None
    assert smi.parse_compute_apps("") == []


def test_action_lines() -> None:
    acts = smi.parse_actions(sample("cgi_C_success.txt"))
    assert acts[:2] == [smi.CreatedGpuInstance(0, 2, "3g.20gb", 9), smi.CreatedComputeInstance(0, 2, 0, "3g.20gb", 2)]
    partial = smi.parse_actions(sample("cgi_partial_insufficient.txt"))
    assert [a.gi_id for a in partial] == [13, 11, 3]
    assert smi.parse_actions(sample("cci_success.txt"))[2] == smi.CreatedComputeInstance(0, 2, 2, "1c.3g.20gb", 0)
    old = "Successfully created compute instance on GPU  0 GPU instance ID  1 using profile MIG 1c.3g.20gb (ID  0)\n"
    assert smi.parse_actions(old) == [smi.CreatedComputeInstance(0, 1, None, "1c.3g.20gb", 0)]
    assert smi.parse_actions(sample("dci_success.txt"))[1] == smi.Destroyed(0, 1, 1)
    assert smi.parse_actions(sample("dgi_success.txt")) == [smi.Destroyed(0, 1), smi.Destroyed(0, 2)]
    assert smi.parse_actions(sample("dgi_in_use.txt")) == []


# --- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "cls", "gpu"), [
    ("cgi_partial_insufficient.txt", smi.InsufficientResourcesError, 0),
    ("cgi_limit_insufficient.txt", smi.InsufficientResourcesError, 0),
    ("cgi_in_use.txt", smi.InUseError, 0),
    ("cgi_invalid_argument.txt", smi.InvalidArgumentError, 0),
    ("dgi_in_use.txt", smi.InUseError, 0),
    ("mig_disable_in_use.txt", smi.InUseError, None),
    ("gpu_reset_not_supported.txt", smi.NotSupportedError, None),
    ("lgi_empty.txt", smi.NotFoundError, None),
    ("mig_disabled.txt", smi.MigDisabledError, None),
    ("lci_insufficient_permissions.txt", smi.InsufficientPermissionsError, None),
    ("lgip_unknown_error.txt", smi.SmiError, None),
])
def test_classify_by_text(name: str, cls: type[smi.SmiError], gpu: int | None) -> None:
    err = smi.classify_failure(["nvidia-smi", "mig", "-lgi"], 255, sample(name), "")
    assert type(err) is cls and err.gpu == gpu and err.returncode == 255
    assert isinstance(err, MigplanError) and "nvidia-smi mig -lgi" in str(err)


def test_classify_gpu_from_argv_and_stderr_and_code_fallback() -> None:
    err = smi.classify_failure(smi.create_gpu_instances(3, [(9, 0)]), 23, "", "weird\n")
    assert type(err) is smi.InsufficientResourcesError and err.gpu == 3 and err.argv[-1] == "9:0"
    assert smi.classify_failure(["nvidia-smi", "--id=2", "-r"], 4, "", "").gpu == 2
    assert type(smi.classify_failure([], 6, "", "")) is smi.NotFoundError
    assert type(smi.classify_failure([], 1, "", "")) is smi.SmiError
    assert type(smi.classify_failure([], None, "", "Not Supported")) is smi.NotSupportedError


def test_classify_cleans_hostile_output() -> None:
    err = smi.classify_failure(["nvidia-smi"], 255, "\x1b[2J\x1b]0;pwned\x07Failed: " + "A" * 10_000, "")
    assert "\x1b" not in str(err) and "\x07" not in str(err) and len(str(err)) < 600


# --- hostile input ----------------------------------------------------------------------------

PARSERS: list[Callable[[str], object]] = [
    smi.parse_gpu_instances, smi.parse_compute_instances, smi.parse_gi_profiles, smi.parse_gi_placements,
    smi.parse_list_gpus, smi.parse_query_gpus, smi.parse_compute_apps, smi.parse_actions,
]
JUNK = [
    "garbage\n", "|   0  MIG 1g.5gb  19  -1  0:1 |\n", "|   0  MIG 1g.5gb   19   99999999999   0:1   |\n",
    "|   0  MIG $(reboot)   19   1   0:1   |\n", "|   0  MIG 1g.5gb   19   1   0:1\n", "||\n", "|\n",
    "GPU  0 Profile ID 19 Placements: {0,1,-2}:1\n", "GPU 0 Profile ID 999999 Placements: {0}:1\n",
    "0, GPU-x, name, bus, 1, Enabled, Enabled, 0x1\n",
    "-5, GPU-x, n, 00000000:01:00.0, 1, Enabled, Enabled, 0x20B010DE\n",
    "\x00\x01\x02\n", "A" * 100_000, "+----+\n| GPU instances: |\n|====|\n| 0 MIG 1g.5gb 19 1 0:1 |\n",
    "Successfully created GPU instance ID 999999 on GPU  0 using profile MIG 1g.5gb (ID 19)\n",
    "GPU 0: x (UUID: GPU-1)\n  MIG ;rm Device 0: (UUID: MIG-1)\n", "x" * 5_000_000,
    "|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |\n",
    "1, GPU-a, [N/A], [N/A]\n", "pid\n12, GPU-a, 1 GiB, x\n",
]


@pytest.mark.parametrize("text", JUNK)
@pytest.mark.parametrize("parse", PARSERS)
def test_junk_is_rejected_or_plain_data(parse: Callable[[str], object], text: str) -> None:
    try:
        result = parse(text)
    except smi.SmiError:
        return
    assert isinstance(result, list)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir()))
def test_mutated_samples_never_crash(name: str) -> None:
    rng = random.Random(name)
    text = sample(name)
    for _ in range(60):
        chars = list(text)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(chars))
            chars[pos] = rng.choice("0123456789|:-+, {}/\n\x1b;$xA")
        for parse in PARSERS:
            with contextlib.suppress(smi.SmiError):
                parse("".join(chars))


def _unicode_digits(text: str) -> list[str]:
    """Real samples with ASCII digits swapped for look-alikes that `str.isdigit`/`\\d` accept."""
    return [text.replace("0", "٠").replace("1", "١"), text.replace("1", "¹").replace("2", "²")]


@pytest.mark.parametrize("name", ["lgi_a30.txt", "lgip_a100_40gb.txt", "lgipp_a100_40gb.txt", "lci_h100.txt",
                                  "L_a30.txt", "query_gpu_noheader.csv", "query_compute_apps_noheader.csv"])
@pytest.mark.parametrize("parse", PARSERS)
def test_unicode_digits_in_host_output_never_crash(parse: Callable[[str], object], name: str) -> None:
    """Remote output is untrusted: a '²' where nvidia-smi prints digits is refused or kept as data, never a
    ValueError from int(), and never read as a number."""
    for text in _unicode_digits(sample(name)):
        try:
            result = parse(text)
        except smi.SmiError:
            continue
        assert isinstance(result, list)
        for row in result:
            for v in vars(row).values():
                assert not (isinstance(v, str) and v and any(c in v for c in "٠١¹²") and v.isdigit())


def test_gpu_of_ignores_unicode_digits() -> None:
    assert smi.errors.gpu_of(["nvidia-smi", "-i", "²"]) is None
    assert smi.errors.gpu_of(["nvidia-smi", "-i", "٣"]) is None
