"""The NVML adapter and `collect --local` against the fake NVML (tests/fake_nvml), and the fake against pynvml."""

from __future__ import annotations

import pynvml
import pytest

from migplan.adapters import nvml as nv
from migplan.adapters.history_store import HistoryStore, store_path
from migplan.catalog import builtin_catalog
from migplan.commands.collect import LocalSettings, collect_local
from migplan.history.identity import ProcessFacts
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess
from tests.fake_nvml import nvml as fake_module

CATALOG = builtin_catalog()
UUID0 = "GPU-11111111-0000-0000-0000-000000000000"
UUID1 = "GPU-22222222-0000-0000-0000-000000000000"


def a100_mig(**kw: object) -> FakeGpu:
    """A100-40GB in MIG mode: 3g.20gb@0 (GI 1, profile 9) and 2g.10gb@4 (GI 5, profile 14)."""
    return FakeGpu(uuid=UUID1, mig=True, migs=[FakeMig(1, 9, "3g.20gb", 0, 4, memory_mib=19968),
                                               FakeMig(5, 14, "2g.10gb", 4, 2, memory_mib=9856)], **kw)  # type: ignore[arg-type]


def named(mapping: dict[int, str]):
    return lambda pid: ProcessFacts(pid, env={"MIGPLAN_WORKLOAD": mapping[pid]} if pid in mapping else {})


def run_local(fake: FakeNvml, tmp_path, names: dict[int, str], **kw: object):
    return collect_local(LocalSettings(history=str(tmp_path), host="h1", **kw), CATALOG, nvml=fake,  # type: ignore[arg-type]
                         facts=named(names), now=lambda: fake.now, sleep=fake.advance)


def samples(tmp_path):
    with HistoryStore(store_path(tmp_path), readonly=True) as s:
        return list(s.iter_samples())


# --- the fake is an independent oracle with pynvml's own shapes ----------------------------------------

@pytest.mark.parametrize("code", [1, 2, 3, 4, 6, 9, 12, 13, 15, 999])
def test_fake_errors_are_made_like_pynvml(code: int) -> None:
    real, fake = pynvml.NVMLError(code), fake_module.NVMLError(code)
    assert type(fake).__name__ == type(real).__name__  # NVMLError(code) returns the NVMLError_<Name> subclass
    assert isinstance(fake, fake_module.NVMLError) and fake.value == real.value == code
    if code in pynvml.NVMLError._errcode_to_string:
        assert str(fake) == str(real)


def test_fake_structs_have_pynvml_fields() -> None:
    for name in ("c_nvmlProcessUtilizationSample_t", "c_nvmlAccountingStats_t", "c_nvmlSample_t", "c_nvmlMemory_t",
                 "c_nvmlGpmMetricsGet_t", "c_nvmlGpuInstanceInfo_t", "c_nvmlUtilization_t"):
        real = [f[0] for f in getattr(pynvml, name)._fields_]
        fake = [f[0] for f in getattr(fake_module, name)._fields_]
        assert fake == real, name
    for const in ("NVML_GPU_UTILIZATION_SAMPLES", "NVML_FEATURE_ENABLED", "NVML_DEVICE_MIG_ENABLE",
                  "NVML_GPM_METRIC_SM_UTIL", "NVML_DEVICE_ARCH_AMPERE", "NVML_DEVICE_ARCH_HOPPER"):
        assert getattr(fake_module, const) == getattr(pynvml, const), const


def test_fake_has_every_pynvml_function_the_adapter_calls() -> None:
    import ast
    import inspect

    called = {n.attr for n in ast.walk(ast.parse(inspect.getsource(nv))) if isinstance(n, ast.Attribute)
              and n.attr.startswith(("nvml", "NVML"))} - {"nvmlReturn"}  # nvmlReturn: a struct field
    fake = FakeNvml([])
    for name in sorted(called):
        assert hasattr(pynvml, name), f"adapter calls {name}, which pynvml does not have"
        assert hasattr(fake, name), f"the fake lacks {name}"


# --- failures are messages -----------------------------------------------------------------------------

def test_no_driver_is_a_clear_error(tmp_path) -> None:
    fake = FakeNvml([FakeGpu()], library_missing=True)
    with pytest.raises(nv.NvmlError) as err:
        run_local(fake, tmp_path, {})
    assert "NVML Shared Library Not Found" in str(err.value) and "install or load the NVIDIA driver" in str(err.value)
    assert samples(tmp_path) == []  # nothing written, and the store is intact


@pytest.fixture()
def no_nvidia_driver() -> None:
    """The real nvidia-ml-py finds no NVML library here (the no-driver path, shown with the real library)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return
    pynvml.nvmlShutdown()  # pragma: no cover - a machine with a GPU driver
    pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be shown with the real library")


def test_real_pynvml_without_driver_is_the_same_clear_error(no_nvidia_driver: None) -> None:
    with pytest.raises(nv.NvmlError, match="NVML is not available"):
        nv.read_host(pynvml)


def test_calls_before_init_are_uninitialized_in_the_fake() -> None:
    fake = FakeNvml([FakeGpu()])
    with pytest.raises(fake_module.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


# --- MIG mode -----------------------------------------------------------------------------------------

def test_mig_ampere_processes_go_to_their_instance_and_compute_is_unknown(tmp_path) -> None:
    gpu = a100_mig(processes=[FakeProcess(200, 15000, 50.0, mig=0), FakeProcess(201, 7000, 20.0, mig=1)])
    fake = FakeNvml([gpu])
    result = run_local(fake, tmp_path, {200: "embed", 201: "ocr"})
    got = {s.workload: s for s in samples(tmp_path)}
    assert got["embed"].place.mig_profile == "3g.20gb" and got["embed"].place.mig_start == 0
    assert got["ocr"].place.mig_profile == "2g.10gb" and got["ocr"].place.mig_start == 4
    assert got["embed"].memory_mib == 15000 and got["ocr"].memory_mib == 7000
    assert got["embed"].util_pct is None and got["ocr"].util_pct is None  # never invented
    assert any("not measured" in n for n in result.notes)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0  # not asked where NVML says it is not supported


def test_mig_without_privilege_reads_each_mig_device(tmp_path) -> None:
    gpu = a100_mig(processes=[FakeProcess(200, 15000, 0, mig=0), FakeProcess(201, 7000, 0, mig=1)])
    fake = FakeNvml([gpu], privileged=False)
    reading = nv.read_host(fake)
    procs = {p.pid: (p.gi_id, p.ci_id) for p in reading.gpus[0].processes}
    assert procs == {200: (1, 0), 201: (5, 0)}
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 3  # the parent (refused), then each MIG device


def test_mig_hopper_gpm_gives_instance_sm_activity(tmp_path) -> None:
    gpu = FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=UUID1, pci_device_id=0x233010DE, memory_mib=81559,
                  arch=fake_module.NVML_DEVICE_ARCH_HOPPER, gpm=True, mig=True,
                  migs=[FakeMig(1, 9, "3g.40gb", 0, 4, memory_mib=40448), FakeMig(5, 14, "2g.20gb", 4, 2)],
                  processes=[FakeProcess(300, 30000, 60.0, mig=0), FakeProcess(301, 10000, 0.0, mig=1)])
    fake = FakeNvml([gpu])
    run_local(fake, tmp_path, {300: "llm", 301: "idle"})
    got = {s.workload: s for s in samples(tmp_path)}
    assert got["llm"].util_pct == pytest.approx(60.0) and got["llm"].place.mig_profile == "3g.40gb"
    assert got["idle"].util_pct == pytest.approx(0.0)


def test_mig_ampere_gpm_unsupported_stays_unknown() -> None:
    gpu = a100_mig(gpm=True, processes=[FakeProcess(200, 100, 50.0, mig=0)])
    reading = nv.read_host(FakeNvml([gpu]))
    assert all(m.sm_util is None for m in reading.gpus[0].migs)


# --- utilisation windows: nothing counted twice, nothing lost -----------------------------------------

def test_process_utilisation_is_read_once_per_sample(tmp_path) -> None:
    gpu = FakeGpu(uuid=UUID0, processes=[FakeProcess(100, 5000, lambda t: 80.0 if int(t) % 2 else 0.0),
                                         FakeProcess(101, 1000, 10.0)])
    fake = FakeNvml([gpu])
    fake.buffer_s = 600
    first = nv.read_host(fake).gpus[0]  # cursor 0: whatever the driver still buffers (600 s here)
    assert first.device_util is not None and first.device_util.samples == 600
    total_samples = 0
    cursors = first.cursors()
    for _ in range(3):
        fake.advance(60)
        r = nv.read_host(fake, cursors)
        g = r.gpus[0]
        assert g.device_util is not None and g.device_util.samples == 60  # one period a second, none twice
        total_samples += g.device_util.samples
        assert g.process_util is not None
        assert g.process_util[100].mean == pytest.approx(40.0)  # idle periods count as 0, not skipped
        assert g.process_util[100].peak == 80.0 and g.process_util[100].samples == 30
        assert g.process_util[101].mean == pytest.approx(10.0)
        cursors = g.cursors()
    assert total_samples == 180


def test_a_run_that_fails_before_commit_loses_no_sample(tmp_path) -> None:
    gpu = FakeGpu(uuid=UUID0, processes=[FakeProcess(100, 5000, 30.0)])
    fake = FakeNvml([gpu])
    fake.buffer_s = 600
    run_local(fake, tmp_path, {100: "chat"})
    fake.advance(60)

    def broken(pid: int) -> ProcessFacts:
        raise RuntimeError("crash in the middle of a run")

    with pytest.raises(RuntimeError):
        collect_local(LocalSettings(history=str(tmp_path), host="h1"), CATALOG, nvml=fake, facts=broken,
                      now=lambda: fake.now)
    fake.advance(60)
    run_local(fake, tmp_path, {100: "chat"})
    got = [s for s in samples(tmp_path) if s.workload == "chat"]
    assert len(got) == 2  # the failed run wrote nothing
    with HistoryStore(store_path(tmp_path), readonly=True) as s:
        stored = list(s.iter_stored())
    assert stored[-1].util_n == 120  # ... and the next run read the failed run's 60 samples and its own 60


def test_processes_that_start_and_exit_between_runs(tmp_path) -> None:
    t0 = 1_764_547_200.0
    gpu = FakeGpu(uuid=UUID0, accounting=True, processes=[
        FakeProcess(100, 5000, 30.0, start=t0 - 10),  # runs all along
        FakeProcess(102, 9000, 90.0, start=t0 - 5, end=t0 + 30, peak_mib=9500),  # seen in run 1, gone by run 2
        FakeProcess(103, 2000, 50.0, start=t0 + 65, end=t0 + 90),  # starts and ends between runs 2 and 3
    ])
    fake = FakeNvml([gpu], now=t0)
    names = {100: "chat", 102: "batch"}
    run_local(fake, tmp_path, names)
    fake.advance(60)
    r2 = run_local(fake, tmp_path, names)
    fake.advance(60)
    r3 = run_local(fake, tmp_path, names)
    got = samples(tmp_path)
    batch = [s for s in got if s.workload == "batch"]
    assert [s.source for s in batch] == ["nvml", "nvml-accounting"]  # live once, then NVML's own record of it
    assert batch[1].memory_mib == 9500 and batch[1].timestamp == pytest.approx(t0 + 30)
    assert r2.workloads == ("chat",)
    assert any("never seen running" in n for n in r3.notes)  # pid 103 is reported, not guessed at
    assert sum(1 for s in got if s.source == "nvml-accounting") == 1  # not read twice in run 3


def test_accounting_off_reads_no_records(tmp_path) -> None:
    gpu = FakeGpu(uuid=UUID0, accounting=False, processes=[FakeProcess(100, 5000, 30.0, start=0, end=10)])
    fake = FakeNvml([gpu])
    reading = nv.read_host(fake)
    assert reading.gpus[0].finished == () and not reading.gpus[0].accounting
    assert fake.calls["nvmlDeviceGetAccountingStats"] == 0


def test_two_processes_of_one_workload_are_one_sample(tmp_path) -> None:
    gpu = FakeGpu(uuid=UUID0, processes=[FakeProcess(100, 5000, 40.0), FakeProcess(101, 1000, 10.0)])
    run_local(FakeNvml([gpu]), tmp_path, {100: "chat", 101: "chat"})
    (s,) = samples(tmp_path)
    assert s.memory_mib == 6000 and s.util_pct == pytest.approx(50.0)
    assert s.place.gpu_model == "A100-SXM4-40GB" and s.place.mig_profile is None


# --- the command line ------------------------------------------------------------------------------------

def test_cli_collect_local_without_driver_is_one_message(tmp_path, monkeypatch, no_nvidia_driver) -> None:
    from typer.testing import CliRunner

    from migplan.cli.app import app

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    r = CliRunner().invoke(app, ["collect", "--local", "--history", str(tmp_path / "h")])
    assert r.exit_code == 1 and "error: NVML is not available on this host" in r.stderr
    assert "Traceback" not in r.output
    r = CliRunner().invoke(app, ["collect"])
    assert r.exit_code == 2 and "give one of --local, --inventory FILE or --prometheus URL" in r.stderr
    r = CliRunner().invoke(app, ["collect", "--local", "--inventory", "x.yaml"])
    assert r.exit_code == 2 and "not --local and --inventory" in r.stderr


def test_local_run_summary_as_json(tmp_path) -> None:
    gpu = FakeGpu(uuid=UUID0, processes=[FakeProcess(100, 5000, 40.0)])
    result = run_local(FakeNvml([gpu]), tmp_path, {100: "chat"})
    doc = result.as_dict()
    assert doc["samples"] == 1 and doc["workloads"] == ["chat"] and doc["gpus"] == 1 and doc["run"] == 1
    assert doc["store"].endswith("history.sqlite")


def test_no_permission_is_a_clear_error() -> None:
    class Refusing(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, h):
            raise fake_module.NVMLError(fake_module.NVML_ERROR_NO_PERMISSION)

    with pytest.raises(nv.NvmlError) as err:
        nv.read_host(Refusing([FakeGpu(uuid=UUID0)]))
    assert "Insufficient Permissions" in str(err.value) and "as root" in str(err.value)


def test_a_gpu_without_mig_or_catalog_model_is_sampled_without_a_model(tmp_path) -> None:
    t4 = FakeGpu(name="Tesla T4", uuid=UUID0, pci_device_id=0x1EB810DE, memory_mib=15360, mig_capable=False,
                 arch=fake_module.NVML_DEVICE_ARCH_TURING, processes=[FakeProcess(100, 900.0, 12.0)])
    fake = FakeNvml([t4])
    result = run_local(fake, tmp_path, {100: "asr"})
    (s,) = samples(tmp_path)
    assert s.place.gpu_model is None and s.memory_mib == 900 and s.util_pct == pytest.approx(12.0)
    assert any("not a catalog model" in n for n in result.notes)
    assert fake.calls["nvmlDeviceGetMigMode"] == 1  # NotSupported there: read as "no MIG", not an error


@pytest.mark.parametrize("device_samples", [True, False])
def test_idle_periods_count_with_or_without_device_samples(device_samples: bool) -> None:
    """A process busy two seconds in three: its mean is 60 %, not the 90 % of the samples NVML returns."""
    gpu = FakeGpu(uuid=UUID0, processes=[FakeProcess(100, 5000, lambda t: 90.0 if int(t) % 3 else 0.0)])
    fake = FakeNvml([gpu])
    fake.buffer_s = 600
    if not device_samples:
        fake.nvmlDeviceGetSamples = lambda *a: (_ for _ in ()).throw(  # type: ignore[method-assign]
            fake_module.NVMLError(fake_module.NVML_ERROR_NOT_SUPPORTED))
    cursors = nv.read_host(fake).gpus[0].cursors()
    fake.advance(60)
    g = nv.read_host(fake, cursors).gpus[0]
    assert g.process_util is not None
    assert g.process_util[100].mean == pytest.approx(60.0, abs=1.5)
    assert g.process_util[100].samples == 40 and g.process_util[100].peak == 90.0
