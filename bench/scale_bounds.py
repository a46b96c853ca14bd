"""Inputs that scale with the fleet: python -m bench.scale_bounds [--gpus N] [--workloads N] [--only apply|csv|load].

* apply: a plan of `--gpus` GPU entries (8 per host, A100-SXM4-40GB, MIG disabled before, each host's 8 GPUs
  given the same layout and two workloads; a one-host plan of the planner copied host by host), its inventory of
  every host, and `migplan apply PLAN -i INV --limit gpu000000 --dry-run --yes -o json` in a child process, with
  the host gpu000000 the nvidia-smi simulator (tests/sim). Every step before and after the one host's visit
  (reading the plan, checking it, finding each host's GPUs, placements and moves) works on the whole plan.
* load: the same plan read by `documents.load_plan` alone in a child process (its CPU time around the call,
  and the child's); what `apply` pays to read and check the plan.
* A plan over 64 MiB (200,000 GPUs: about 250 MB) is read with MIGPLAN_MAX_FILE_MB raised to fit it in the
  children's environment (the default cap refuses it; the bench says so in its row).
* csv: a CSV time series of `--workloads` workloads (bench/csv_import.py's generator: 50 hosts, three rows a
  workload) and `migplan profiles import FILE --window all --out DIR -o json` in a child process.

Each prints the child's wall time, CPU time (user + system) and peak RSS, as a Markdown row
(bench/results/scale-bounds.md). `--pythonpath DIR` runs the children on another copy of migplan (an export
of an older commit: the "before" figures). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from sim.fleet import host_state, sim_env, write_state  # noqa: E402

from bench.generate import workload  # noqa: E402
from migplan.adapters.solver import PulpSolver  # noqa: E402
from migplan.catalog import builtin_catalog  # noqa: E402
from migplan.model.diff import diff  # noqa: E402
from migplan.model.gpu_plan import GpuPlan  # noqa: E402
from migplan.model.state import FleetState, GpuState  # noqa: E402
from migplan.planner import plan as make_plan  # noqa: E402
from migplan.planner import plan_to_dict  # noqa: E402
from migplan.planner.demand import Policy, memory_warning, policy_from_mapping  # noqa: E402
from migplan.planner.plan import memory_margins  # noqa: E402
from migplan.profiles import ProfileSet  # noqa: E402

MODEL = "A100-SXM4-40GB"
PER_HOST = 8


def _template() -> Any:
    cat = builtin_catalog()
    state = FleetState(tuple(GpuState("tmpl", i, MODEL, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
                                      mig_enabled=False) for i in range(PER_HOST)))
    ws = [workload(f"w{k}", 4000, 0.1, 1) for k in range(2 * PER_HOST)]
    return make_plan(state, ProfileSet(tuple(ws)), cat, Policy(), PulpSolver(time_limit=60)), cat


def write_plan(n_gpus: int, path: str, first: list[str] | None = None) -> int:
    """A plan of `n_gpus` GPUs (n_gpus / 8 hosts) as JSON, the first host's GPUs with the UUIDs `first` (the
    simulator's); returns its size in bytes."""
    tmpl, cat = _template()
    arch = cat.get(MODEL).architecture
    gpus, workloads = [], []
    for h in range(n_gpus // PER_HOST):
        host = f"gpu{h:06d}"
        for g in tmpl.gpus:
            uuid = first[g.index] if first and h == 0 else f"GPU-{h:08x}-{g.index:04x}-0000-0000-000000000000"
            obs = dataclasses.replace(g.observed, host=host, uuid=uuid)
            gpus.append(GpuPlan(obs, g.target, tuple(diff(obs.layout, g.target, gpu=obs.key, architecture=arch))))
        workloads += [dataclasses.replace(w, name=f"{w.name}-{h}", workload=f"{w.workload}-{h}", host=host)
                      for w in tmpl.workloads]
    below, least = memory_margins(workloads)
    policy = policy_from_mapping(tmpl.policy, source="bench")
    summary = dataclasses.replace(tmpl.summary, below_peak=below, min_margin_mib=least,
                                  memory_warning=memory_warning(policy, below))
    big = dataclasses.replace(tmpl, gpus=tuple(gpus), workloads=tuple(workloads), summary=summary,
                              created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              fingerprint=FleetState(tuple(g.observed for g in gpus)).fingerprint())  # of them all
    text = json.dumps(plan_to_dict(big), indent=2) + "\n"
    Path(path).write_text(text)
    return len(text.encode())


def _child(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        # run from an empty directory: `python -m` and `-c` put the working directory first on sys.path, before
        # PYTHONPATH, and this checkout would shadow the `--pythonpath` copy
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=_EMPTY_DIR)
        code: int | str = done.returncode
        tail = (done.stderr or "")[-300:]
        out = done.stdout or ""
    except subprocess.TimeoutExpired:
        code, tail, out = f"killed after {timeout:.0f} s", "", ""
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"exit": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_mib": after.ru_maxrss // 1024,
            "stderr_tail": tail, "stdout_tail": out[-200:]}


_EMPTY_DIR = tempfile.mkdtemp(prefix="migplan-bench-cwd-")


def _env(pythonpath: str | None, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = pythonpath or str(ROOT)
    return env


def _file_cap(env: dict[str, str], size: int) -> str:
    """Raise MIGPLAN_MAX_FILE_MB in `env` when the plan is over the default cap; a note for the row."""
    if size <= 64 * 2**20:
        return ""
    env["MIGPLAN_MAX_FILE_MB"] = str(size // 2**20 + 16)
    return f" (MIGPLAN_MAX_FILE_MB={env['MIGPLAN_MAX_FILE_MB']})"


_LOAD = ("import sys, time, migplan; from migplan.documents import load_plan; t = time.process_time(); "
         "p = load_plan(sys.argv[1]); "
         "print('load_plan_cpu_s', round(time.process_time() - t, 2), len(p.gpus), migplan.__file__)")


def bench_load(n_gpus: int, work: Path, pythonpath: str | None, timeout: float) -> dict[str, Any]:
    plan_file = work / "plan.json"
    size = write_plan(n_gpus, str(plan_file))
    env = _env(pythonpath)
    note = _file_cap(env, size)
    res = _child([sys.executable, "-c", _LOAD, str(plan_file)], env, timeout)
    return {"what": "load_plan" + note, "gpus": n_gpus, "plan_mb": round(size / 2**20, 1), **res}


def bench_apply(n_gpus: int, work: Path, pythonpath: str | None, timeout: float) -> dict[str, Any]:
    plan_file = work / "plan.json"
    sim = host_state(MODEL, PER_HOST, hostname="gpu000000", mig=False)
    size = write_plan(n_gpus, str(plan_file), [g["uuid"] for g in sim["gpus"]])
    state = write_state(work / "h0.json", sim)
    hosts = {f"gpu{h:06d}": {"address": f"10.{h >> 16 & 255}.{h >> 8 & 255}.{h & 255}", "discover": True}
             for h in range(n_gpus // PER_HOST)}
    hosts["gpu000000"] = {"connection": "local", "discover": True, "lock_file": str(work / "apply.lock"),
                          "state_dir": str(work / "etc")}
    (work / "inv.json").write_text(json.dumps({"version": 1, "hosts": hosts}))
    argv = [sys.executable, "-m", "migplan.cli.app", "apply", str(plan_file), "-i", str(work / "inv.json"),
            "--limit", "gpu000000", "--dry-run", "--yes", "-o", "json"]
    env = _env(pythonpath, sim_env(state))
    note = _file_cap(env, size)
    res = _child(argv, env, timeout)
    return {"what": "apply" + note, "gpus": n_gpus, "plan_mb": round(size / 2**20, 1), **res}


def bench_csv(workloads: int, work: Path, pythonpath: str | None, timeout: float) -> dict[str, Any]:
    from bench.csv_import import generate

    path = work / "series.csv"
    rows = generate(str(path), 0.16 * workloads / 1000, workloads)
    # -P: no current directory first on sys.path, so that --pythonpath (not the checkout run from) is what runs
    argv = [sys.executable, "-P", "-m", "migplan.cli.app", "profiles", "import", str(path), "--window", "all", "--out",
            str(work / "profiles"), "-o", "json"]
    res = _child(argv, _env(pythonpath), timeout)
    return {"what": "profiles import", "workloads": workloads, "rows": rows,
            "csv_mb": round(path.stat().st_size / 2**20, 1), **res}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale_bounds")
    ap.add_argument("--gpus", type=int, default=200_000)
    ap.add_argument("--workloads", type=int, default=200_000)
    ap.add_argument("--only", choices=("apply", "csv", "load"))
    ap.add_argument("--pythonpath", help="run the children on this copy of migplan (before figures)")
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="migplan-scale-") as tmp:
        out = []
        if a.only in (None, "apply"):
            out.append(bench_apply(a.gpus, Path(tmp), a.pythonpath, a.timeout))
        if a.only == "load":
            out.append(bench_load(a.gpus, Path(tmp), a.pythonpath, a.timeout))
        if a.only in (None, "csv"):
            out.append(bench_csv(a.workloads, Path(tmp), a.pythonpath, a.timeout))
    for r in out:
        size = f"{r['gpus']:,} GPUs, {r['plan_mb']} MB plan" if "gpus" in r else \
            f"{r['workloads']:,} workloads, {r['rows']:,} rows, {r['csv_mb']} MB"
        print(f"| {r['what']} | {size} | {r['exit']} | {r['wall_s']} s | {r['cpu_s']} s | {r['peak_rss_mib']} MiB |")
        if r["exit"] not in (0, 1) and r["stderr_tail"]:
            print("   stderr:", r["stderr_tail"].replace("\n", " | "))
        if r["what"].startswith("load_plan"):
            print("  ", r["stdout_tail"].strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
