"""End to end: fake NVML -> `collect --local` runs every minute -> the history store -> `profiles build` -> `propose`.

One host, two A100-40GB: GPU 0 in MIG mode (3g.20gb@0 runs `embed`, 2g.10gb@4 runs `ocr`), GPU 1 whole, running
`chat` (two processes) whose memory grows. The profiles must carry what NVML said (peaks, the instances, compute
only where measured) and the plan must give every workload an instance that holds its peak.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from migplan.adapters.history_store import read_samples
from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.collect import LocalSettings, collect_local
from migplan.history.identity import ProcessFacts
from migplan.profiles import load_profiles
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

T0 = 1_793_491_200.0
RUNS = 30


def _host() -> tuple[FakeNvml, dict[int, str]]:
    mig = FakeGpu(uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", mig=True,
                  migs=[FakeMig(1, 9, "3g.20gb", 0, 4, memory_mib=19968), FakeMig(5, 14, "2g.10gb", 4, 2)],
                  processes=[FakeProcess(200, 12000.0, 50.0, mig=0, start=T0 - 3600),
                             FakeProcess(201, 6000.0, 20.0, mig=1, start=T0 - 3600)])
    whole = FakeGpu(uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
                    processes=[FakeProcess(100, 4000.0, lambda t: 30.0 + 20.0 * ((int(t) // 60) % 2), start=T0 - 3600),
                               FakeProcess(101, 1000.0, 5.0, start=T0 - 3600)])
    return FakeNvml([mig, whole], now=T0), {200: "embed", 201: "ocr", 100: "chat", 101: "chat"}


def test_collect_runs_to_profiles_to_a_plan(tmp_path: Path) -> None:
    fake, names = _host()
    history = tmp_path / "history"
    for k in range(RUNS):
        fake.gpus[1].processes[0].used_mib = 4000.0 + 100 * k  # chat grows: its peak is the last run's
        collect_local(LocalSettings(history=str(history), host="gpu01"), builtin_catalog(), nvml=fake,
                      facts=lambda pid: ProcessFacts(pid, env={"MIGPLAN_WORKLOAD": names[pid]}), now=lambda: fake.now)
        fake.advance(60)
    got = list(read_samples(history))
    assert len(got) == 3 * RUNS

    out = tmp_path / "profiles"
    runner = CliRunner()
    built = runner.invoke(app, ["profiles", "build", "--history", str(history), "--out", str(out)])
    assert built.exit_code == 0, built.output
    by = {w.name: w for w in load_profiles(out)}
    assert set(by) == {"chat", "embed", "ocr"}
    assert by["chat"].memory.max == 4000 + 100 * (RUNS - 1) + 1000  # both processes, the last run's peak
    assert by["chat"].observed.samples == RUNS and by["chat"].observed.gpu == 1
    assert by["chat"].compute.known  # measured on the whole GPU
    assert by["embed"].observed.mig_profile == "3g.20gb" and by["embed"].memory.max == 12000
    assert by["ocr"].observed.mig_profile == "2g.10gb" and by["ocr"].observed.mig_start == 4
    assert not by["embed"].compute.known and not by["ocr"].compute.known  # MIG on Ampere: never invented

    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "hosts": {"gpu01": {"gpus": [
        {"index": 0, "model": "A100-SXM4-40GB", "mig": True, "layout": ["3g.20gb@0", "2g.10gb@4"]},
        {"index": 1, "model": "A100-SXM4-40GB", "mig": False}]}}}))
    planned = runner.invoke(app, ["propose", "-i", str(inv), "-p", str(out), "-o", "json", "--allow-disrupt"])
    assert planned.exit_code == 0, planned.output
    plan = {w["workload"]: w for w in json.loads(planned.stdout)["workloads"]}
    assert set(plan) == {"chat", "embed", "ocr"}
    for name, w in plan.items():
        assert w["status"] == "placed" and w["host"] == "gpu01", w
        assert w["peak_mib"] == by[name].memory.max and w["instance_mib"] >= w["peak_mib"], w  # holds its peak
