"""One replan run end to end on 64 simulated hosts of 8 A100-80GB GPUs (512 GPUs):
python -m bench.replan_fleet [--hosts 64] [--latency 0.25] [--out bench/results/replan.md]

Collect fetches every host's history store (`collect_host`, the code `migplan collect --inventory` runs;
each host holds 24 h of 10-minute samples of its workloads, written beforehand and not timed), replan
rolls the fetched histories up into profiles, discovery reads every host, the planner solves, the decision
is made and apply runs as a dry run (it re-reads each host and records the commands). Hosts are the
nvidia-smi simulator (tests/sim) called in-process, each command delayed by `--latency` seconds to model an
SSH round trip plus nvidia-smi's own run time on a real host (0.25 s by default: an assumption, not measured
here, as no GPU was lent). Reported: wall time, migplan's CPU time, and the time spent waiting on hosts.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import yaml
from sim.fleet import host_state, write_state
from sim_runner import InProcess

from migplan.adapters.runner import Completed
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import ReplanRequest, replan

MODEL = "A100-SXM4-80GB"


class Delayed(InProcess):
    """The simulator with a fixed delay per command (sleeping, not spinning: a host's time, not ours)."""

    def __init__(self, state: Path, latency: float, name: str) -> None:
        super().__init__(state)
        self.latency, self.name, self.calls = latency, name, 0

    @property
    def host(self) -> str:
        return self.name

    def run(self, argv, *, timeout=60.0, stdin=None) -> Completed:  # type: ignore[no-untyped-def,override]
        time.sleep(self.latency)
        self.calls += 1
        return super().run(argv, timeout=timeout, stdin=stdin)

    def get_file(self, path: str, *, max_bytes: int = 0, timeout: float = 60.0) -> bytes:
        """The host's history store (SFTP on a real host): one round trip."""
        from migplan.adapters.runner import RemoteFileMissing

        time.sleep(self.latency)
        self.calls += 1
        local = Path(str(self.state) + ".history") / Path(path).name
        if not local.exists():
            raise RemoteFileMissing(self.name, f"{path}: no such file")
        return local.read_bytes()


def _fleet(root: Path, hosts: int, seed: int) -> tuple[Path, dict[str, Path]]:
    rng = random.Random(seed)
    states = {}
    for i in range(hosts):
        name = f"gpu-{i:03d}"
        st = host_state(MODEL, 8, hostname=name, layouts=[None] * 8)
        for g in st["gpus"]:
            g.update(mig_current=False, mig_pending=False, gpu_instances=[])
        states[name] = write_state(root / f"{name}.json", st)
    inv = {"version": 1, "hosts": {n: {"connection": "local", "discover": True, "lock_file": str(root / f"{n}.lock"),
                                       "state_dir": str(root / "etc" / n)} for n in states}}
    (root / "inv.yaml").write_text(yaml.safe_dump(inv))
    work = []
    for k in range(hosts * 6):  # ~6 inference workloads per 8-GPU host: memory median ~18 GiB, tail to 70 GiB
        mib = min(int(rng.lognormvariate(9.8, 0.7)), 70_000)
        util = min(rng.betavariate(1.5, 8), 0.95)
        work.append({"name": f"svc-{k:04d}", "memory_mib": {"p50": int(mib * 0.8), "p95": int(mib * 0.95),
                                                           "p99": mib, "max": mib},
                     "compute": {"p50": util / 2, "p95": util, "p99": util, "max": util}})
    (root / "profiles.yaml").write_text(yaml.safe_dump({"version": 1, "workloads": work}))
    _histories(states, work, rng)
    # disruption allowed (no maintenance window): the run consolidates, the heaviest decision it can make
    (root / "config.yaml").write_text(yaml.safe_dump({"version": 1, "inventory": "inv.yaml",
                                                      "profiles": "profiles.yaml",
                                                      "replan": {"allow_disrupt": True}}))
    return root, states


def _histories(states: dict[str, Path], work: list[dict], rng: random.Random) -> None:
    """24 h of 10-minute samples per workload, in each host's own store (whole GPUs: MIG is off)."""
    from migplan.adapters.history_store import FILE_NAME, HistoryStore
    from migplan.history.samples import Place, Sample

    hosts = sorted(states)
    t0 = time.time() - 86400
    for k, name in enumerate(hosts):
        mine = work[k * 6:(k + 1) * 6]
        path = Path(str(states[name]) + ".history") / FILE_NAME
        with HistoryStore(path) as store:
            for step in range(144):
                ts = t0 + step * 600
                with store.run(ts, "nvml") as run:
                    run.add(Sample(ts, w["name"], w["memory_mib"]["max"] * rng.uniform(0.85, 1.0),
                                   100 * w["compute"]["p95"] * rng.uniform(0.5, 1.0),
                                   Place(name, j, MODEL), "nvml") for j, w in enumerate(mine))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root, states = _fleet(Path(tmp), a.hosts, 1)
        runners: dict[str, Delayed] = {}

        def connect(h):  # type: ignore[no-untyped-def]
            runners.setdefault(h.name, Delayed(states[h.name], a.latency, h.name))
            return runners[h.name]

        ctx = build_context(str(root / "config.yaml"), None, None)
        req = ReplanRequest(fleet=FleetRequest(parallel=a.parallel), state_dir=str(root / "state"), dry_run=True,
                            history=str(root / "fetched"), window_s=86400.0)
        cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        kid0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        from migplan.adapters.pool import for_each_host
        from migplan.commands.collect import FleetCollect, collect_host

        inv = ctx.inventory(None)
        (root / "fetched").mkdir()
        what = FleetCollect(out=str(root / "fetched"))
        got = for_each_host(list(inv.hosts), lambda h: collect_host(connect(h), h, ctx.catalog, what, 60.0),
                            parallel=a.parallel)
        collect_s = time.perf_counter() - t0
        bad = [r.host for r in got if not r.ok]
        res = replan(ctx, req, now=dt.datetime.now(dt.timezone.utc), connect=connect)
        wall = time.perf_counter() - t0
        cpu1, kid1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        cbc = (kid1.ru_utime - kid0.ru_utime) + (kid1.ru_stime - kid0.ru_stime)
        calls = sum(r.calls for r in runners.values())
        s = res.plan.summary if res.plan else None
        per_host = max(r.calls for r in runners.values()) * a.latency
        lines = [
            "## Replan end to end: 512 GPUs on 64 simulated hosts (dry-run apply)", "",
            f"Machine: {os.cpu_count()} cores. Hosts: {a.hosts} x 8 {MODEL}, MIG off and idle; "
            f"{a.hosts * 6} workloads (lognormal memory, median ~18 GiB) each running alone on a whole GPU, profiled "
            "from 24 h of samples; disruption allowed, so the run consolidates. Each nvidia-smi command waits "
            f"{a.latency} s (modelled SSH round trip + nvidia-smi run time), {a.parallel} hosts at a time.", "",
            "| measure | value |", "|---|---|",
            f"| result | {res.result}: {res.line[:120]} |",
            f"| wall time, whole run (collect + replan) | {wall:.1f} s (target < 60 s) |",
            f"| collect (fetch {a.hosts} history stores) | {collect_s:.1f} s{f', failed: {bad}' if bad else ''} |",
            f"| solve time | {res.solve_s or 0:.2f} s |",
            f"| dry-run apply time | {res.apply_s or 0:.2f} s |",
            f"| migplan CPU time (user+sys) | {cpu:.1f} s |",
            f"| CBC CPU time (child processes) | {cbc:.1f} s (the solve stops at replan's time_limit_s, 20 s by "
            "default: the GPU count reaches the bound long before CBC proves the fewest moves) |",
            f"| commands sent | {calls} ({calls / a.hosts:.0f} per host) |",
            f"| host wait on the slowest host (commands x latency) | {per_host:.1f} s |",
            f"| GPUs used / lower bound | {s.gpus_used if s else '-'} / {s.gpus_lower_bound if s else '-'} |",
            f"| workloads placed / left out | {s.workloads_placed if s else '-'} / "
            f"{s.workloads_unplaced if s else '-'} |", ""]
        text = "\n".join(lines)
        print(text)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
