"""`migplan collect --inventory` and `collect install` over the real sshd, against the nvidia-smi simulator.

A host with a history store (written by `collect --local` with the fake NVML) has it fetched over SFTP; a
host without one gets a short nvidia-smi sample (processes by instance, pmon SM %, accounted peak memory)
marked as few samples; a host that is down is reported and the exit code says partial. Processes are real
child processes carrying MIGPLAN_WORKLOAD, so identity is read from their /proc over SSH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import Fleet
from simhosts import Proc, read, state, write
from typer.testing import CliRunner, Result

from migplan.adapters.history_store import FILE_NAME, HistoryStore, read_samples
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.cli.app import app
from migplan.commands.collect import LocalSettings, collect_local
from migplan.history.identity import ProcessFacts
from tests.fake_nvml import FakeGpu, FakeNvml, FakeProcess

Run = Callable[..., Result]
CATALOG = builtin_catalog()


@pytest.fixture()
def run(fleet: Fleet, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Run:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_CATALOG", "MIGPLAN_KNOWN_HOSTS",
                "MIGPLAN_SSH_CONFIG", "MIGPLAN_HISTORY"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(app, [*args, "--known-hosts", str(fleet.known_hosts), "--ssh-config", "none"])

    return invoke


@pytest.fixture()
def workloads() -> Iterator[dict[str, int]]:
    """Real processes named by MIGPLAN_WORKLOAD: name -> pid."""
    procs = {}
    for name in ("chat", "embed", "ocr"):
        procs[name] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                       env={**os.environ, "MIGPLAN_WORKLOAD": name})
    time.sleep(0.2)
    yield {n: p.pid for n, p in procs.items()}
    for p in procs.values():
        p.kill()
        p.wait()


def _history_on_host(directory: Path) -> int:
    """Three collect runs with the fake NVML, as cron would have made them on the host."""
    gpu = FakeGpu(uuid="GPU-11111111-0000-0000-0000-000000000000",
                  processes=[FakeProcess(100, 5000.0, 30.0), FakeProcess(101, 2000.0, 0.0)])
    fake = FakeNvml([gpu])
    for _ in range(3):
        collect_local(LocalSettings(history=str(directory), host="gpu-host-own-name"), CATALOG, nvml=fake,
                      facts=lambda pid: ProcessFacts(pid, env={"MIGPLAN_WORKLOAD": {100: "chat", 101: "idle"}[pid]}),
                      now=lambda: fake.now)
        fake.advance(60)
    with HistoryStore(directory / FILE_NAME, readonly=True) as s:
        return s.count()


def test_collect_fetches_history_and_reports_a_host_that_is_down(run: Run, fleet: Fleet) -> None:
    hist = fleet.host(0).dir / "history"
    count = _history_on_host(hist)
    write(fleet.host(0).state, state("A100-SXM4-40GB", 1, hostname="g1", mig=[False]))
    inv = fleet.inventory({"g1": fleet.host_entry(fleet.host(0)),
                           "down": fleet.host_entry(fleet.host(1), address="127.0.0.254")})
    out = fleet.tmp / "collected"
    r = run("collect", "-i", str(inv), "--history", str(hist), "--out", str(out), "-o", "json")
    assert r.exit_code == 1, r.output  # partial: one host down
    doc = json.loads(r.stdout)
    by = {h["host"]: h for h in doc["hosts"]}
    assert by["g1"]["ok"] and by["g1"]["mode"] == "history" and by["g1"]["samples"] == count
    assert not by["g1"]["few_samples"] and by["g1"]["workloads"] == ["chat", "idle"]
    assert not by["down"]["ok"] and by["down"]["error"]["code"] == "unreachable"
    assert "down" in r.stderr and "[2/2]" in r.stderr  # progress on stderr
    got = list(read_samples(out))
    assert len(got) == count and {s.place.host for s in got} == {"g1"}  # read under the inventory's name
    with HistoryStore(out / "g1.sqlite", readonly=True) as s:
        assert s.check() == "ok"


def test_collect_without_history_takes_a_short_nvidia_smi_sample(run: Run, fleet: Fleet,
                                                                 workloads: dict[str, int]) -> None:
    a100 = CATALOG.get("A100-SXM4-40GB")
    st = state(a100, 2, hostname="g2", layouts=[Layout.parse(["3g.20gb@0", "2g.10gb@4"]), None], mig=[True, False],
               busy={0: [Proc(workloads["chat"], "python3", 15000, start=0), Proc(workloads["embed"], "python3", 7000,
                                                                                    start=4)],
                     1: [Proc(workloads["ocr"], "python3", 3000)]})
    st["gpus"][1]["accounting"] = True
    st["gpus"][1]["processes"][0]["sm_util"] = 42
    st["gpus"][1]["processes"][0]["max_memory_mib"] = 3900
    write(fleet.host(0).state, st)
    inv = fleet.inventory({"g2": fleet.host_entry(fleet.host(0))})
    out = fleet.tmp / "collected"
    r = run("collect", "-i", str(inv), "--history", str(fleet.tmp / "nothing-here"), "--out", str(out),
            "--sample-seconds", "3", "-o", "json")
    assert r.exit_code == 0, r.output
    (h,) = json.loads(r.stdout)["hosts"]
    assert h["mode"] == "nvidia-smi" and h["few_samples"] and h["workloads"] == ["chat", "embed", "ocr"]
    got = {(s.workload, s.memory_mib): s for s in read_samples(out)}
    chat, embed = got[("chat", 15000)], got[("embed", 7000)]
    assert (chat.place.mig_profile, chat.place.mig_start) == ("3g.20gb", 0)
    assert (embed.place.mig_profile, embed.place.mig_start) == ("2g.10gb", 4)
    assert chat.util_pct is None and embed.util_pct is None  # MIG: pmon has no per-process utilisation
    assert got[("ocr", 3000)].util_pct == 42 and got[("ocr", 3000)].place.mig_profile is None
    assert ("ocr", 3900) in got  # accounting's peak memory, beyond the current 3000 MiB
    assert all(s.source == "nvidia-smi" for s in got.values())
    with HistoryStore(out / "g2.sqlite", readonly=True) as s:
        assert s.runs()[0]["few"] is True
    log = [" ".join(a) for a in read(fleet.host(0).state)["log"]]
    assert "pmon -c 3" in log and any(a.startswith("--query-accounted-apps=") for a in log)


def test_install_cron_entry_is_idempotent(run: Run, fleet: Fleet) -> None:
    h = fleet.host(0)
    fake_migplan = h.script("migplan", "#!/bin/sh\necho 'migplan 0.0-test'\n")
    (h.dir / "cron.d").mkdir()
    cron = h.dir / "cron.d" / "migplan-collect"
    write(h.state, state("A100-SXM4-40GB", 1, hostname="g1", mig=[False]))
    inv = fleet.inventory({"g1": fleet.host_entry(h), "down": fleet.host_entry(fleet.host(1), address="127.0.0.254")})
    args = ("collect", "install", "-i", str(inv), "--migplan-path", str(fake_migplan), "--cron-file", str(cron),
            "-o", "json")
    first = run(*args)
    assert first.exit_code == 1, first.output  # one host down
    by = {x["host"]: x for x in json.loads(first.stdout)["hosts"]}
    assert by["g1"]["files"] == [{"path": str(cron), "state": "written"}]
    text = cron.read_text()
    assert f"* * * * * root flock -n /run/lock/migplan-collect.lock {fake_migplan} collect --local --quiet --history " \
           "/var/lib/migplan/history 2>&1 | logger -t migplan-collect" in text
    assert oct(cron.stat().st_mode & 0o777) == "0o644"
    inv1 = fleet.inventory({"g1": fleet.host_entry(h)}, name="one.yaml")
    again = run("collect", "install", "-i", str(inv1), "--migplan-path", str(fake_migplan), "--cron-file", str(cron),
                "-o", "json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["hosts"][0]["files"][0]["state"] == "unchanged"


def test_install_timer_enables_it_once(run: Run, fleet: Fleet) -> None:
    h = fleet.host(0)
    fake_migplan = h.script("migplan", "#!/bin/sh\necho 'migplan 0.0-test'\n")
    calls = h.dir / "systemctl.log"
    h.script("systemctl", f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    units = h.dir / "system"
    units.mkdir()
    write(h.state, state("A100-SXM4-40GB", 1, hostname="g1", mig=[False]))
    inv = fleet.inventory({"g1": fleet.host_entry(h)})
    args = ("collect", "install", "-i", str(inv), "--timer", "--migplan-path", str(fake_migplan), "--systemd-dir",
            str(units))
    assert run(*args).exit_code == 0
    assert "ExecStart=" + str(fake_migplan) + " collect --local" in (units / "migplan-collect.service").read_text()
    assert "OnCalendar=*-*-* *:*:00" in (units / "migplan-collect.timer").read_text()
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now migplan-collect.timer"]
    assert run(*args).exit_code == 0
    assert len(calls.read_text().splitlines()) == 2  # unchanged: nothing reloaded or enabled again


@pytest.mark.parametrize("bad", ["relative/migplan", "/usr/bin/migplan;rm -rf /", "/usr/bin/$(id)"])
def test_install_refuses_unsafe_paths_before_connecting(run: Run, fleet: Fleet, bad: str) -> None:
    inv = fleet.inventory({"g1": fleet.host_entry(fleet.host(0))})
    r = run("collect", "install", "-i", str(inv), "--migplan-path", bad)
    assert r.exit_code == 2 and "--migplan-path" in r.stderr and "Traceback" not in r.output


def test_a_history_that_cannot_be_read_fails_that_host_only(run: Run, fleet: Fleet) -> None:
    bad = fleet.host(0).dir / "bad"
    bad.mkdir()
    (bad / FILE_NAME).write_bytes(b"not a database at all " * 200)
    write(fleet.host(0).state, state("A100-SXM4-40GB", 1, hostname="g1", mig=[False]))
    inv = fleet.inventory({"g1": fleet.host_entry(fleet.host(0))})
    r = run("collect", "-i", str(inv), "--history", str(bad), "--out", str(fleet.tmp / "o"), "-o", "json")
    assert r.exit_code == 1
    (h,) = json.loads(r.stdout)["hosts"]
    assert not h["ok"] and "cannot be read" in h["error"]["message"] and "3 tries" in h["error"]["message"]
    assert not (fleet.tmp / "o" / "g1.sqlite").exists()  # nothing half-copied left behind
