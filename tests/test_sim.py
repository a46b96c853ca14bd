"""The nvidia-smi simulator: NVIDIA's texts and exit codes, MIG rules, faults, locking, and a round trip of
every maximal layout of every catalog model through migplan's argv builders and parsers."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any

import pytest
from sim.fleet import Proc, call_sim, host_state, read_state, run_sim, write_host, write_state

from migplan import smi
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts

DATA = Path(__file__).parent / "data" / "smi"
CAT = builtin_catalog()


def verbatim(name: str) -> str:
    return (DATA / name).read_text()


def sim(path: Path, *args: str) -> tuple[int, str, str]:
    return call_sim(["nvidia-smi", *args], path)


def host(tmp_path: Path, model: str | None, n: int = 1, **kw: Any) -> Path:
    return write_host(tmp_path / "host.json", model, n, **kw)


def edit(path: Path, **gpu0: Any) -> None:
    state = read_state(path)
    state["gpus"][0].update(gpu0)
    write_state(path, state)


# --- verbatim output ------------------------------------------------------------------------

def test_lgip_and_lgipp_are_nvidias_text(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    assert sim(p, "mig", "-lgip") == (0, verbatim("lgip_a100_40gb.txt"), "")
    assert sim(p, "mig", "-i", "0", "-lgipp") == (0, verbatim("lgipp_a100_40gb.txt"), "")
    assert sim(host(tmp_path, "A30"), "mig", "-lgipp")[1] == verbatim("lgipp_a30.txt")


def test_lgi_lci_and_L_are_nvidias_text(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", layouts=Layout.parse(["1g.6gb@0", "1g.6gb@1", "2g.12gb@2"]))
    state = read_state(p)
    gpu = state["gpus"][0]
    gpu.update(name="NVIDIA A30", uuid="GPU-1e44b340-5807-0dbe-62e6-343a6b8b8bcd")
    uuids = {3: "41b9eab5-8d48-5c52-9f07-82bc59af3901", 4: "55dcd9bd-e6b1-549a-bcb4-0b0496bfee9c",
             2: "1b8509c0-e60d-502d-8263-d434867998aa"}
    for gi, gid in zip(gpu["gpu_instances"], (3, 4, 2), strict=True):
        gi["id"] = gid
        gi["cis"][0]["uuid"] = "MIG-" + uuids[gid]
    write_state(p, state)
    assert sim(p, "mig", "-lgi") == (0, verbatim("lgi_a30.txt"), "")
    assert sim(p, "-L") == (0, verbatim("L_a30.txt"), "")
    h = host(tmp_path, "H100-SXM5-80GB", layouts=Layout.parse(["1g.10gb@0", "1g.10gb@1"]))
    assert sim(h, "mig", "-i", "0", "-lci") == (0, verbatim("lci_h100.txt"), "")


def test_create_and_destroy_texts(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    assert sim(p, "mig", "-cgi", "9:4,9:0")[0] == 0
    assert sim(p, "mig", "-i", "0", "-cci", "0,0,0", "-gi", "2") == (0, verbatim("cci_success.txt"), "")
    assert sim(p, "mig", "-cci", "0,0,0", "-gi", "1")[0] == 0
    assert sim(p, "mig", "-i", "0", "-dgi", "-gi", "1") == (19, verbatim("dgi_in_use.txt"), "")
    assert sim(p, "mig", "-dci", "-ci", "0,1,2", "-gi", "1") == (0, verbatim("dci_success.txt"), "")
    assert sim(p, "mig", "-dci")[0] == 0
    assert sim(p, "mig", "-dgi") == (0, verbatim("dgi_success.txt"), "")
    assert sim(p, "mig", "-lgi") == (6, verbatim("lgi_empty.txt"), "")
    assert sim(p, "mig", "-dgi") == (6, "No GPU instances found: Not Found\n", "")


def test_create_with_default_ci(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    code, out, _ = sim(p, "mig", "-cgi", "9,3g.20gb", "-C")
    assert code == 0
    acts = smi.parse_actions(out)
    assert [type(a).__name__ for a in acts] == ["CreatedGpuInstance", "CreatedComputeInstance"] * 2
    assert {(a.profile_name, a.profile_id) for a in acts} == {("3g.20gb", 9), ("3g.20gb", 2)}
    assert out.splitlines()[1] == ("Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using "
                                   "profile MIG 3g.20gb (ID  2)")


# --- placement rules --------------------------------------------------------------------------

def test_invalid_profile_is_invalid_argument(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-80GB")
    assert sim(p, "mig", "-cgi", "7g.40gb", "-C") == (2, verbatim("cgi_invalid_argument.txt"), "")
    code, out, _ = sim(p, "mig", "-cgi", "19:7")
    assert code == 2 and out.endswith("Failed to create GPU instances: Invalid Argument\n")
    assert "using profile 19: Invalid Argument" in out
    assert sim(p, "mig", "-cgi", "MIG 3g.40gb:4")[0] == 0


def test_insufficient_resources_keeps_earlier_successes(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    code, out, _ = sim(p, "mig", "-cgi", "19,19,14,9")
    assert code == 23
    assert out.splitlines()[3:] == verbatim("cgi_partial_insufficient.txt").splitlines()[3:]
    assert len(smi.parse_actions(out)) == 3
    assert len(smi.parse_gpu_instances(sim(p, "mig", "-lgi")[1])) == 3


@pytest.mark.parametrize(("existing", "create"), [
    (["4g.20gb@0"], "9:0"),        # overlap
    (["1g.5gb@0"] * 0 + [f"1g.5gb@{s}" for s in range(7)], "15:6"),  # compute slices used up
    (["3g.20gb@0", "3g.20gb@4"], "19:0"),  # no memory slice free
    (["1g.5gb+me@0"], "20:1"),     # per-profile limit (+me max 1)
])
def test_capacity_rules(tmp_path: Path, existing: list[str], create: str) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", layouts=Layout.parse(existing))
    code, out, _ = sim(p, "mig", "-cgi", create)
    assert code == 23 and out.endswith("Failed to create GPU instances: Insufficient Resources\n")


def test_profile_limit_text(tmp_path: Path) -> None:
    p = host(tmp_path, "H100-SXM5-80GB", layouts=Layout.parse(["1g.10gb+me@0"]))
    assert sim(p, "mig", "-cgi", "20,20,20", "-C") == (23, verbatim("cgi_limit_insufficient.txt"), "")


def test_free_column_tracks_remaining_capacity(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", layouts=Layout.parse([f"1g.6gb@{s}" for s in range(4)]))
    rows = {r.profile_name: (r.free, r.total) for r in smi.parse_gi_profiles(sim(p, "mig", "-lgip")[1])}
    assert rows == {"1g.6gb": (0, 4), "1g.6gb+me": (0, 1), "2g.12gb": (0, 2), "2g.12gb+me": (0, 1), "4g.24gb": (0, 1)}


def test_gi_ids_are_small_and_not_from_placement(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    out = sim(p, "mig", "-cgi", "19:6,19:0,14:2,19:5")[1]
    assert [a.gi_id for a in smi.parse_actions(out)] == [7, 8, 3, 9]
    sim(p, "mig", "-dgi", "-gi", "7")
    out = sim(p, "mig", "-cgi", "19:1")[1]
    assert smi.parse_actions(out)[0].gi_id == 7  # the freed id is reused for another placement


def test_compute_instances(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", layouts=Layout.parse(["3g.20gb@0"]), cis=False)
    assert sim(p, "mig", "-cci", "1,0", "-gi", "1")[0] == 0
    code, out, _ = sim(p, "mig", "-cci", "0", "-gi", "1")
    assert code == 23 and "Failed to create compute instances: Insufficient Resources" in out
    code, out, _ = sim(p, "mig", "-cci", "4", "-gi", "1")  # a 7-slice CI in a 3g GI
    assert code == 2 and "Invalid Argument" in out
    rows = smi.parse_compute_instances(sim(p, "mig", "-lci")[1])
    assert [(r.profile_name, r.ci_id, r.start, r.size) for r in rows] == [("2c.3g.20gb", 0, 0, 2),
                                                                           ("1c.3g.20gb", 1, 2, 1)]
    assert sim(p, "mig", "-cci", "-gi", "5")[0] == 6


# --- processes, MIG mode, reset -------------------------------------------------------------------

def test_busy_instances_cannot_be_destroyed(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", layouts=Layout.parse(["3g.20gb@4", "4g.20gb@0"]),
             busy={0: [Proc(4242, start=4)]})
    code, out, _ = sim(p, "mig", "-dci")
    assert code == 19 and "In use by another client" in out
    assert smi.classify_failure(["nvidia-smi", "mig", "-dci"], code, out, "").gpu == 0
    code, out, _ = sim(p, "mig", "-dgi", "-gi", "2")
    assert (code, out) == (19, "Unable to destroy GPU instance ID  2 from GPU  0: In use by another client\n"
                                "Failed to destroy GPU instances: In use by another client\n")
    apps = smi.parse_compute_apps(sim(p, *smi.query_compute_apps()[1:])[1])
    assert [(a.pid, a.process_name, a.used_memory_mib) for a in apps] == [(4242, "python", 1024)]


def test_ampere_mode_change_is_pending_until_reset(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", mig=False)
    edit(p, pci_bus_id="00000000:07:00.0")
    assert sim(p, "-i", "0", "-mig", "1") == (0, verbatim("mig_enable_pending_in_use.txt"), "")
    (info,) = smi.parse_query_gpus(sim(p, *smi.query_gpus()[1:])[1])
    assert (info.mig_current, info.mig_pending) == (False, True)
    assert sim(p, "mig", "-lgi") == (6, verbatim("mig_disabled.txt"), "")
    code, out, _ = sim(p, "-r", "-i", "0")
    assert (code, out) == (0, "GPU 00000000:07:00.0 was successfully reset.\nAll done.\n")
    (info,) = smi.parse_query_gpus(sim(p, *smi.query_gpus()[1:])[1])
    assert (info.mig_current, info.mig_pending) == (True, True)


def test_ampere_in_a_vm_cannot_reset(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", mig=False)
    edit(p, pci_bus_id="00000000:00:03.0", mode_reset="not-supported")
    code, out, _ = sim(p, "-i", "0", "-mig", "1")
    assert code == 0 and out.splitlines()[:2] == verbatim("mig_enable_pending_not_supported.txt").splitlines()[:2]
    assert sim(p, "--gpu-reset") == (3, verbatim("gpu_reset_not_supported.txt"), "")


def test_ampere_idle_driver_reset_is_immediate(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", mig=False)
    edit(p, pci_bus_id="00000000:36:00.0", mode_reset="ok")
    assert sim(p, "-i", "0", "-mig", "1") == (0, verbatim("mig_enable.txt"), "")


def test_hopper_mode_change_is_immediate(tmp_path: Path) -> None:
    p = host(tmp_path, "H100-SXM5-80GB", mig=False)
    edit(p, pci_bus_id="00000000:36:00.0")
    assert sim(p, "-i", "0", "-mig", "1") == (0, verbatim("mig_enable.txt"), "")
    assert sim(p, "mig", "-lgi")[0] == 6 and sim(p, "mig", "-cgi", "0:0", "-C")[0] == 0
    edit(p, pci_bus_id="00000009:01:00.0")
    assert sim(p, "-mig", "0") == (19, verbatim("mig_disable_in_use.txt"), "")
    sim(p, "mig", "-dci")
    sim(p, "mig", "-dgi")
    edit(p, pci_bus_id="00000000:16:00.0")
    assert sim(p, "-i", "0", "-mig", "0") == (0, verbatim("mig_disable.txt"), "")


def test_hopper_busy_gpu_refuses_mode_change(tmp_path: Path) -> None:
    p = host(tmp_path, "H200-141GB", mig=False, busy={0: [Proc(1)]})
    code, out, _ = sim(p, "-mig", "1")
    assert code == 19 and out.endswith("Terminating early due to previous errors.\n")


def test_gpu_without_mig(tmp_path: Path) -> None:
    p = host(tmp_path, None)
    edit(p, pci_bus_id="00000000:18:00.0")
    assert sim(p, "-mig", "1") == (0, verbatim("mig_enable_unsupported.txt"), "")
    assert sim(p, "mig", "-lgip") == (3, verbatim("mig_unsupported.txt"), "")
    (info,) = smi.parse_query_gpus(sim(p, *smi.query_gpus()[1:])[1])
    assert info.mig_current is None


def test_reset_refused_while_processes_run(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", busy={0: [Proc(7)]})
    code, out, _ = sim(p, "-r", "-i", "0")
    assert code == 19 and out.startswith("The following GPUs could not be reset:\n  GPU 00000000:17:00.0: In use")
    assert type(smi.classify_failure(["nvidia-smi", "-r", "-i", "0"], code, out, "")) is smi.InUseError


def test_non_root_gets_insufficient_permissions(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", root=False)
    code, out, _ = sim(p, *smi.create_gpu_instances(0, [(0, 0)])[1:])
    assert code == 4 and "Failed to create GPU instances: Insufficient Permissions" in out
    assert sim(p, "mig", "-lgi")[0] == 6  # reading is allowed
    assert sim(p, "-mig", "0")[0] == 4


# --- argv variants, queries -------------------------------------------------------------------------

def test_argv_variants(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", 2)
    uuid, bus = read_state(p)["gpus"][1]["uuid"], read_state(p)["gpus"][1]["pci_bus_id"]
    assert sim(p, "mig", "--id=1", "--create-gpu-instance=9:4", "--default-compute-instance")[0] == 0
    for sel in (["-i", "1"], ["--id=1"], ["-i", uuid], ["-i", bus], ["--id", "1"]):
        assert smi.layouts_of(smi.parse_gpu_instances(sim(p, "mig", *sel, "--list-gpu-instances")[1])) == {
            1: Layout.parse(["3g.20gb@4"])}
    assert len(smi.parse_gi_profiles(sim(p, "mig", "-i", "0,1", "-lgip")[1])) == 14
    assert sim(p, "mig", "-i", "9", "-lgi")[0] == 6
    for bad in (["mig", "-lgi", "-bogus"], ["mig"], ["-mig", "2"], ["mig", "-cgi"], ["mig", "-lgi", "-lgip"]):
        assert sim(p, *bad) == (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n",
                                "")


def test_query_gpu_formats(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", 2)
    code, out, _ = sim(p, "--query-gpu=index,memory.total,mig.mode.current", "--format=csv")
    assert code == 0
    assert out.splitlines()[:2] == ["index, memory.total [MiB], mig.mode.current", "0, 24480 MiB, Enabled"]
    infos = smi.parse_query_gpus(sim(p, *smi.query_gpus()[1:])[1])
    assert [CAT.match(i.name, memory_total_mib=i.memory_total_mib, pci_device_id=i.pci_device_id).id
            for i in infos] == ["A30", "A30"]
    assert sim(p, "--query-gpu=bogus", "--format=csv") == (2, 'Field "bogus" is not a valid field to query.\n', "")
    assert sim(p, "--query-compute-apps=pid,name", "--format=csv") == (0, "pid, name\n", "")


# --- host flags and faults ----------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "expected"), [
    ({"ssh": "down"}, (255, "", "ssh: connect to host h1 port 22: Connection refused\n")),
    ({"ssh": "auth-denied", "user": "ops"}, (255, "", "ops@h1: Permission denied (publickey).\n")),
    ({"nvidia_smi": "missing"}, (127, "", "bash: line 1: nvidia-smi: command not found\n")),
    ({"driver_loaded": False}, (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                   "Make sure that the latest NVIDIA driver is installed and running.\n", "")),
])
def test_host_flags(tmp_path: Path, flags: dict[str, Any], expected: tuple[int, str, str]) -> None:
    p = host(tmp_path, "A30", hostname="h1", **flags)
    assert sim(p, "-L") == expected


def test_fault_error_injection(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", faults=[{"match": "-cgi", "error": "In use by another client", "times": 1}])
    code, out, _ = sim(p, "mig", "-cgi", "20,20", "-C")
    assert (code, out) == (19, "Unable to create a GPU instance on GPU  0 using profile 20: In use by another client\n"
                               "Failed to create GPU instances: In use by another client\n")
    assert sim(p, "mig", "-lgi")[0] == 6  # nothing was created
    assert sim(p, "mig", "-cgi", "20,20", "-C")[0] == 23  # fault spent; second +me is over the limit
    assert read_state(p)["faults"][0]["fired"] == 1


def test_fault_partial_failure_after_n(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", faults=[{"match": "mig -cgi", "error": "Insufficient Resources", "after": 2}])
    code, out, _ = sim(p, *smi.create_gpu_instances(0, [(19, 0), (19, 1), (19, 2)])[1:])
    assert code == 23 and len(smi.parse_actions(out)) == 2
    assert type(smi.classify_failure(["x"], code, out, "")) is smi.InsufficientResourcesError


def test_fault_listing_error_and_gpu_filter_and_skip(tmp_path: Path) -> None:
    faults = [{"match": "-lgi", "gpu": 1, "error": "Unknown Error"}, {"match": "-lgip", "skip": 1, "error": "Timeout"}]
    p = host(tmp_path, "A30", 2, faults=faults)
    assert sim(p, "mig", "-i", "0", "-lgi")[0] == 6
    assert sim(p, "mig", "-i", "1", "-lgi") == (255, "Failed to display GPU instances: Unknown Error\n", "")
    assert sim(p, "mig", "-lgip")[0] == 0
    assert sim(p, "mig", "-lgip") == (10, "Failed to display GPU instance profiles: Timeout\n", "")


def test_fault_drop_before_and_after(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", faults=[{"match": "-cgi", "drop": "before", "times": 1},
                                      {"match": "-cgi", "drop": "after", "times": 1}])
    argv = smi.create_gpu_instances(0, [(0, 0)], default_ci=True)
    assert sim(p, *argv[1:]) == (255, "", "")
    assert sim(p, "mig", "-lgi")[0] == 6  # dropped before: no effect
    assert sim(p, *argv[1:]) == (255, "", "")
    assert smi.layouts_of(smi.parse_gpu_instances(sim(p, "mig", "-lgi")[1])) == {0: Layout.parse(["4g.24gb@0"])}


def test_fault_hang_and_raw_output(tmp_path: Path) -> None:
    p = host(tmp_path, "A30", faults=[{"match": "-L", "hang": 0.3, "times": 1},
                                      {"match": "-lgip", "exit": 255, "stdout": "Segmentation fault\n"}])
    t0 = time.monotonic()
    assert sim(p, "-L")[0] == 0
    assert time.monotonic() - t0 >= 0.3
    assert sim(p, "mig", "-lgip") == (255, "Segmentation fault\n", "")
    assert [e[0] for e in read_state(p)["log"]] == ["-L", "mig"]


# --- real processes: wrapper script, lock ------------------------------------------------------------

def test_wrapper_script_runs_the_simulator(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB", layouts=Layout.parse(["7g.40gb@0"]))
    r = run_sim(smi.list_gpu_instances(0), p)
    assert r.returncode == 0 and smi.layouts_of(smi.parse_gpu_instances(r.stdout)) == {0: Layout.parse(["7g.40gb@0"])}


@pytest.mark.slow
def test_parallel_commands_do_not_corrupt_state(tmp_path: Path) -> None:
    p = host(tmp_path, "A100-SXM4-40GB")
    argvs = [smi.create_gpu_instances(0, [(19, s)], default_ci=True) for s in range(7)]
    with concurrent.futures.ThreadPoolExecutor(7) as pool:
        results = list(pool.map(lambda a: run_sim(a, p), argvs))
    assert [r.returncode for r in results] == [0] * 7
    rows = smi.parse_gpu_instances(run_sim(smi.list_gpu_instances(0), p).stdout)
    assert sorted(r.gi_id for r in rows) == list(range(7, 14))
    assert smi.layouts_of(rows)[0] == Layout.parse([f"1g.5gb@{s}" for s in range(7)])
    assert len(json.loads(p.read_text())["log"]) == 8


# --- round trip: every maximal layout of every model ------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("model", CAT.models, ids=lambda m: m.id)
def test_every_maximal_layout_round_trips(tmp_path: Path, model: Any) -> None:
    p = tmp_path / "host.json"
    write_state(p, host_state(model, 1))
    layouts = enumerate_layouts(model, maximal=True)
    assert layouts
    for layout in layouts:
        code, out, _ = sim(p, *smi.create_instances_for(model, 0, layout.instances)[1:])
        assert code == 0, (layout, out)
        code, out, _ = sim(p, *smi.list_gpu_instances(0)[1:])
        assert code == 0 and smi.layouts_of(smi.parse_gpu_instances(out)) == {0: layout}
        assert sim(p, *smi.destroy_compute_instances(0)[1:])[0] == 0
        assert sim(p, *smi.destroy_gpu_instances(0)[1:])[0] == 0
    learned = smi.learn_model(sim(p, "mig", "-lgip")[1], sim(p, "mig", "-lgipp")[1], model.id,
                              architecture=model.architecture)
    ours = sorted(model.profiles, key=lambda q: (q.compute_slices, q.memory_slices, q.id))
    assert [(q.id, q.name, q.starts, q.memory_slices, q.max_count, q.engines) for q in learned.profiles] \
        == [(q.id, q.name, q.starts, q.memory_slices, q.max_count, q.engines) for q in ours]
    # memory: the host's own print, which is the catalog's except where this simulated host's driver prints
    # more than the least a known driver prints (the conservative catalog carries that least)
    from sim.geometry_inferred import SMALLEST_KNOWN_MIB

    for got, cat in zip(learned.profiles, ours, strict=True):
        if (model.id, cat.id) in SMALLEST_KNOWN_MIB:
            assert got.memory_mib > cat.memory_mib == SMALLEST_KNOWN_MIB[(model.id, cat.id)][0], cat.name
        else:
            assert got.lgip_gib == cat.lgip_gib, cat.name
