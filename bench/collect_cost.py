"""What `migplan collect --local` costs: 8 GPUs, 50 processes, the fake NVML timed like the real library.

    python -m bench.collect_cost                 # writes bench/results/collect.md
    python -m bench.collect_cost --runs 20
    python -m bench.collect_cost --repo DIR --cron-only   # the same cron measurement of another checkout

Two measurements:

* One cron invocation: `migplan collect --local --quiet` as a whole fresh process, what cron or the systemd
  timer starts every minute: the interpreter, the imports and one run; CPU user+sys of the child
  (getrusage), median of `--runs` invocations after a warm-up, on a store prefilled with 14 days. The
  command is the console script's entry point read from pyproject.toml (`[project.scripts]`), and, for
  comparison, the same command line through typer (migplan.cli.app.app). The fake NVML is put in place of
  nvidia-ml-py through PYTHONPATH: a `pynvml.py` that builds the fake and puts it in sys.modules (SHIM), so
  migplan runs unchanged. Bytecode is cached as on an installed host (pip compiles it at install).
* One run inside a process (`collect_local` called in a loop, after a first run): the run's own cost in
  several scenarios (MIG, NVML latency 0 and x10, an empty store).

The fake NVML (tests/fake_nvml) busy-waits for each call's assumed latency, so the latency counts as this
process's CPU time: a pessimistic model (a real NVML call spends much of its time in an ioctl, partly
waiting). No per-call timings of NVML are published that we could find; the figures below are assumptions,
chosen on the high side, and every result is also given with NVML's share taken out (latency 0) and with
10 times the assumed latencies, so the conclusion does not rest on them. Source for "relatively high":
nvitop's maintainer (XuehaiPan/nvitop#65, "the latency from the NVML API call is relatively high").

The 50 processes are real (`sleep`), so workload identity reads real /proc files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Assumed wall time per NVML call (seconds); pynvml's list calls make two C calls (size, then fill).
LATENCY = {
    "nvmlInit": 25e-3, "nvmlShutdown": 1e-3, "nvmlSystemGetDriverVersion": 20e-6,
    "nvmlDeviceGetCount": 10e-6, "nvmlDeviceGetHandleByIndex": 20e-6, "nvmlDeviceGetName": 20e-6,
    "nvmlDeviceGetUUID": 20e-6, "nvmlDeviceGetPciInfo": 20e-6, "nvmlDeviceGetMemoryInfo": 30e-6,
    "nvmlDeviceGetArchitecture": 10e-6, "nvmlDeviceGetMigMode": 20e-6, "nvmlDeviceGetAccountingMode": 20e-6,
    "nvmlDeviceGetComputeRunningProcesses": 200e-6, "nvmlDeviceGetProcessUtilization": 400e-6,
    "nvmlDeviceGetSamples": 200e-6, "nvmlDeviceGetAccountingBufferSize": 20e-6,
    "nvmlDeviceGetAccountingPids": 100e-6, "nvmlDeviceGetAccountingStats": 40e-6,
    "nvmlDeviceGetMaxMigDeviceCount": 10e-6, "nvmlDeviceGetMigDeviceHandleByIndex": 30e-6,
    "nvmlDeviceGetGpuInstanceId": 10e-6, "nvmlDeviceGetComputeInstanceId": 10e-6,
    "nvmlDeviceGetGpuInstanceById": 30e-6, "nvmlGpuInstanceGetInfo": 20e-6,
}
T0 = 1_793_491_200.0

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["REPO"])
from migplan.catalog import builtin_catalog
from migplan.commands.collect import LocalSettings, collect_local
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess
cfg = json.loads(sys.argv[1])
pids = cfg["pids"]
scale = cfg["scale"]
latency = {k: v * scale for k, v in cfg["latency"].items()}
gpus = []
for g in range(8):
    procs = [FakeProcess(pid, 1000.0 + 37 * i, 20.0 + (i % 5) * 10, start=cfg["t0"] - 3600,
                         mig=(i % 7) if cfg["mig"] else None)
             for i, pid in enumerate(pids) if i % 8 == g]
    migs = [FakeMig(7 + k, 19, "1g.5gb", k, 1, memory_mib=4864) for k in range(7)] if cfg["mig"] else []
    gpus.append(FakeGpu(uuid=f"GPU-{g:08d}-0000-0000-0000-000000000000", mig=cfg["mig"], migs=migs,
                        accounting=not cfg["mig"], processes=procs))
fake = FakeNvml(gpus, now=cfg["t0"], latency=latency)
catalog = builtin_catalog()
settings = LocalSettings(history=cfg["history"], host="bench-host")
cpu, wall = [], []
for k in range(cfg["runs"] + 1):
    c0, w0 = time.process_time(), time.perf_counter()
    r = collect_local(settings, catalog, nvml=fake, now=lambda: fake.now)
    c1, w1 = time.process_time(), time.perf_counter()
    if k:  # the first run creates the store
        cpu.append(c1 - c0); wall.append(w1 - w0)
    fake.advance(60)
print(json.dumps({"cpu": cpu, "wall": wall, "samples": r.samples, "processes": r.processes,
                  "calls": sum(fake.calls.values()) // (cfg["runs"] + 1)}))
"""

# `pynvml` for a whole `migplan collect --local` process: found first on PYTHONPATH, it builds the fake NVML
# (8 GPUs, the bench's 50 processes, the assumed latencies) and puts it in sys.modules in its own place, so
# `import pynvml` in migplan/adapters/nvml.py returns the fake; migplan runs unchanged. The fake's clock is
# this machine's, moved on by 60 s per invocation (MIGPLAN_BENCH_NVML's "offset"), so every run reads a
# minute of new utilisation samples, as a cron run every minute does.
SHIM = r"""
import json, os, sys, time
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess
_cfg = json.loads(os.environ["MIGPLAN_BENCH_NVML"])
_now = time.time() + _cfg["offset"]
_gpus = []
for _g in range(8):
    _procs = [FakeProcess(pid, 1000.0 + 37 * i, 20.0 + (i % 5) * 10, start=_now - 3600,
                          mig=(i % 7) if _cfg["mig"] else None)
              for i, pid in enumerate(_cfg["pids"]) if i % 8 == _g]
    _migs = [FakeMig(7 + k, 19, "1g.5gb", k, 1, memory_mib=4864) for k in range(7)] if _cfg["mig"] else []
    _gpus.append(FakeGpu(uuid=f"GPU-{_g:08d}-0000-0000-0000-000000000000", mig=_cfg["mig"], migs=_migs,
                         accounting=not _cfg["mig"], processes=_procs))
sys.modules[__name__] = FakeNvml(_gpus, now=_now, latency=_cfg["latency"])
"""


PREFILL = r"""
import os, sys
sys.path.insert(0, os.environ["REPO"])
from migplan.adapters.history_store import HistoryStore, StoredSample, store_path
from migplan.history.samples import Place, Sample
history, days, workloads, t0 = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with HistoryStore(store_path(history)) as s:
    for day in range(int(days)):
        with s.run(t0 - (days - day) * 86400, "prefill") as w:
            rows = []
            for m in range(1440):
                ts = t0 - (days - day) * 86400 + m * 60
                rows += [StoredSample(Sample(ts, f"w{i:02d}", 1000.0 + i, 30.0, Place("bench-host", i % 8,
                                             "A100-SXM4-40GB"), "nvml"), 40.0, 60) for i in range(workloads)]
            w.add(rows)
"""


def _prefill(repo: Path, history: Path, days: float, workloads: int, t0: float = T0) -> int:
    """A store as `days` of one-a-minute runs leave it, ending at `t0`, written in bulk by `repo`'s own
    history store code (so a checkout is measured on a store its own version made)."""
    subprocess.run([sys.executable, "-c", PREFILL, str(history), str(days), str(workloads), str(t0)], check=True,
                   env={**os.environ, "REPO": str(repo)}, timeout=600)
    return int(days * 1440) * workloads


def _scenario(repo: Path, name: str, *, mig: bool, scale: float, runs: int, pids: list[int],
              prefill_days: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history"
        rows = _prefill(repo, history, prefill_days, 25) if prefill_days else 0
        cfg = {"pids": pids, "scale": scale, "latency": LATENCY, "mig": mig, "runs": runs, "t0": T0,
               "history": str(history)}
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True,
                              env={**os.environ, "REPO": str(repo)}, timeout=600, check=True)
        out = json.loads(done.stdout)
        size = sum(f.stat().st_size for f in history.iterdir())
    out.update(name=name, mig=mig, scale=scale, prefill_rows=rows, store_bytes=size)
    return out


def _entry_point(repo: Path) -> str:
    """What the installed `migplan` script runs ("module:function"), read from `repo`'s pyproject.toml."""
    text = (repo / "pyproject.toml").read_text()
    found = re.search(r'^migplan\s*=\s*"([\w.]+:\w+)"', text, re.MULTILINE)
    return found.group(1) if found else "migplan.cli.app:main"


def _script(target: str) -> str:
    """`python -c` code that does what the console script for "module:function" does."""
    module, _, fn = target.partition(":")
    return f"import sys; from {module} import {fn}; sys.argv[0] = 'migplan'; sys.exit({fn}())"


def _child_cost(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """(CPU user, CPU sys, wall) of one child process; a failing child stops the benchmark. `cwd` is a
    directory of the bench's own: `python -c` puts the working directory first on sys.path, and a checkout
    there would shadow the one measured."""
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{argv[:3]}...: exit {done.returncode}: {done.stderr.decode()[-2000:]}")
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, wall


def _cron(variants: list[tuple[Path, str, str, bool, bool]], *, runs: int, pids: list[int]) -> list[dict]:
    """Whole processes of `python -c CODE collect --local --quiet ...` (what cron starts every minute), each a
    fresh interpreter with the fake NVML as `pynvml` (SHIM), on a store prefilled with 14 days. A variant is
    (checkout, name, code, MIG mode, collect): with collect False the same process without the command line
    (a floor: the interpreter, an import). After one warm-up each (which writes the bytecode, the catalog
    cache and the first run's state), the variants run in turn, `runs` rounds, so that other load on the
    machine falls on all of them alike."""
    with tempfile.TemporaryDirectory() as tmp:
        prepared = []
        for n, (repo, name, code, mig, collect) in enumerate(variants):
            own = Path(tmp) / str(n)
            (own / "shim").mkdir(parents=True)
            (own / "shim" / "pynvml.py").write_text(SHIM)
            history = own / "history"
            if collect:
                _prefill(repo, history, 14.0, 25, t0=time.time())
            # as installed on a host: bytecode cached (pip compiles it at install; here the warm-up writes it,
            # to a directory of the bench's own), the catalog cache written by the warm-up, no config file
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("MIGPLAN_") and k != "PYTHONDONTWRITEBYTECODE"}
            env.update(PYTHONPATH=os.pathsep.join([str(own / "shim"), str(repo)]),
                       MIGPLAN_CACHE_DIR=str(own / "cache"), XDG_CONFIG_HOME=str(own / "xdg"),
                       PYTHONPYCACHEPREFIX=str(own / "pyc"))
            argv = [sys.executable, "-c", code]
            if collect:
                argv += ["collect", "--local", "--quiet", "--history", str(history), "--host-name", "bench-host"]
            prepared.append((name, argv, env, mig, history if collect else None, ([], [], [])))
        for k in range(runs + 1):
            for _name, argv, env, mig, _h, (user, system, wall) in prepared:
                env["MIGPLAN_BENCH_NVML"] = json.dumps({"pids": pids, "mig": mig, "latency": LATENCY,
                                                        "offset": 60 * k})
                u, sy, w = _child_cost(argv, env, Path(tmp))
                if k:
                    user.append(u)
                    system.append(sy)
                    wall.append(w)
        out = []
        for name, _argv, _env, _mig, history, (user, system, wall) in prepared:
            size = sum(f.stat().st_size for f in history.iterdir()) if history else 0
            out.append({"name": name, "cpu": [u + sy for u, sy in zip(user, system, strict=True)], "user": user,
                        "sys": system, "wall": wall, "store_bytes": size})
    return out


def _ms(values: list[float], how: str = "median") -> str:
    v = statistics.median(values) if how == "median" else max(values)
    return f"{v * 1000:.0f} ms"


def cron_rows(repo: Path, runs: int, pids: list[int], before: Path | None = None) -> list[dict]:
    entry = _entry_point(repo)
    typer_code = "import sys; from migplan.cli.app import app; sys.argv[0] = 'migplan'; app()"
    variants = [
        (repo, "`python -c pass` (this machine's interpreter start: the floor)", "pass", False, False),
        (repo, "`import pynvml`, the fake NVML (SHIM)", "import pynvml", False, False),
        (repo, f"`migplan collect --local -q`: console script `{entry}`; 8 GPUs, MIG off, accounting on",
         _script(entry), False, True),
        (repo, "the same, 8 GPUs x 7 MIG instances (Ampere)", _script(entry), True, True),
        (repo, "the same command line through typer (`migplan.cli.app.app()`), MIG off", typer_code, False, True),
    ]
    if before is not None:
        variants.insert(2, (before, f"before: console script `{_entry_point(before)}` of the checkout "
                            f"{before.name}/, MIG off", _script(_entry_point(before)), False, True))
    return _cron(variants, runs=runs, pids=pids)


def cron_table(rows: list[dict]) -> list[str]:
    out = ["| process | CPU user+sys, median (max) | user | sys | wall, median |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {_ms(r['cpu'])} ({_ms(r['cpu'], 'max')}) | {_ms(r['user'])} | {_ms(r['sys'])} "
                   f"| {_ms(r['wall'])} |")
    return out


def _real_pynvml_import() -> str:
    """CPU of `import pynvml` with the real nvidia-ml-py (what the fake stands in for), median of five."""
    costs = []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for code in ["pass", "import pynvml"]:
        one = []
        for _ in range(6):
            u, s, _w = _child_cost([sys.executable, "-c", code], env, Path(tempfile.gettempdir()))
            one.append(u + s)
        costs.append(statistics.median(one[1:]))
    return f"{(costs[1] - costs[0]) * 1000:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", help="results file [default: bench/results/collect.md; none with --cron-only]")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]), help="the checkout measured")
    ap.add_argument("--before", help="another checkout (e.g. `git archive HEAD | tar -x -C DIR`): its console "
                                     "script measured the same way, as a 'before' row")
    ap.add_argument("--cron-only", action="store_true", help="only the whole-process measurement")
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    out = args.out or (None if args.cron_only else str(Path(__file__).resolve().parent / "results" / "collect.md"))
    sleepers = [subprocess.Popen(["sleep", "600"], env={**os.environ, "MIGPLAN_WORKLOAD": f"w{i % 25:02d}"})
                for i in range(50)]
    try:
        pids = [p.pid for p in sleepers]
        cron = cron_rows(repo, args.runs, pids, Path(args.before).resolve() if args.before else None)
        real = _real_pynvml_import()
        cases = [("8 GPUs, MIG off, accounting on; 14-day store", False, 1.0, 14.0),
                 ("8 GPUs x 7 MIG instances (Ampere); 14-day store", True, 1.0, 14.0),
                 ("MIG off, NVML latency 0 (migplan's own cost)", False, 0.0, 14.0),
                 ("MIG off, NVML latency x10", False, 10.0, 14.0),
                 ("MIG off, empty store", False, 1.0, 0.0)]
        results = [] if args.cron_only else [
            _scenario(repo, n, mig=m, scale=sc, runs=args.runs, pids=pids, prefill_days=d) for n, m, sc, d in cases]
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    entry = _entry_point(repo)
    main_row = next(r for r in cron if r["name"].startswith("`migplan collect"))
    floor = statistics.median(cron[0]["cpu"])
    before_text = f" (before: {_ms(cron[2]['cpu'])})" if args.before else ""
    shim = statistics.median(cron[1]["cpu"]) - floor
    lines = ["## Collect: the cost of `collect --local`", "",
             f"`python -m bench.collect_cost --runs {args.runs}{' --before ' + args.before if args.before else ''}` "
             f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs shared with other work, Python "
             f"{sys.version.split()[0]}). One host: 8 A100-40GB, 50 real processes (25 workloads), the fake NVML "
             "busy-waiting each call's assumed latency (listed in bench/collect_cost.py: nvmlInit 25 ms, process "
             "lists 200 µs, process utilisation 400 µs, device samples 200 µs, simple queries 10-30 µs; "
             "assumptions, not measurements).", "",
             f"### One cron invocation (a whole process), median of {args.runs}", "",
             "`migplan collect --local --quiet --history DIR` as cron starts it every minute: a fresh interpreter, "
             "the imports, one run on a store holding 14 days of one-a-minute samples; CPU is the child's user+sys "
             "(getrusage), bytecode cached as on an installed host.", "",
             *cron_table(cron), "",
             f"Target: well under 0.2 s of CPU. The whole process through the console script (`{entry}`, "
             f"typer's CLI like every command since issue 22; bench/README.md, \"Speed measures\"): "
             f"{_ms(main_row['cpu'])}, "
             f"{'under' if statistics.median(main_row['cpu']) < 0.2 else 'OVER'} 0.2 s"
             f"{before_text}. Of that, "
             f"{floor * 1000:.0f} ms is this machine's bare interpreter start (`python -c pass`; its site-packages "
             "run an editable-install finder and a sandbox certificate hook at every start, about 30 ms a clean "
             f"interpreter does not pay) and {shim * 1000:.0f} ms the fake NVML module's import, standing in for "
             f"nvidia-ml-py's (`import pynvml` of the real binding: {real} here).", "",
             "Where the time went, and what changed: through typer, a cron run imports typer (and, when a command "
             "runs, typer's pydantic adapters), every option module of `collect` (the Prometheus options pull in "
             "migplan.commands.context, migplan.config and the planner) and the CLI tree: several times the run. "
             "Issue 11 had the console script parse `collect --local` itself, without typer, importing only the "
             "collector, the history store, the NVML adapter and the catalog; issue 22 retired that second parser "
             "of the same command (its options were defined twice), so a cron run pays typer again. The config "
             "file is read only when there is one; collect.py imports shlex/shutil/tempfile where the fleet and "
             "install code uses them. "
             "In the run, retention used to delete the old runs' rows with `id NOT IN (SELECT DISTINCT run FROM "
             "samples)`, a scan of every sample of the store in every run (about 27 ms on the 14-day store); an "
             "index on samples(run) makes it a lookup per old run (the store is about 18% larger). The free "
             "pages were also never handed back (`PRAGMA incremental_vacuum` run through execute() frees one "
             "page a call); it now runs to the end. The largest import left is the catalog package: its loader "
             "imports migplan.yamldoc, and with it PyYAML, even when the catalog is read from its JSON cache.",
             ""]
    if results:
        base = results[0]
        run_ms = statistics.median(base["cpu"]) * 1000
        own_ms = statistics.median(results[2]["cpu"]) * 1000
        lines += [f"### One run inside a process, median of {args.runs}", "",
                  "`collect_local` called in a loop (after a first run, which creates the store); the store "
                  "prefilled with 14 days of one-a-minute samples where stated.", "",
                  "| scenario | NVML calls/run | samples/run | CPU per run, median (max) | wall per run, median "
                  "| store |",
                  "|---|---|---|---|---|---|"]
        for r in results:
            lines.append(f"| {r['name']} | {r['calls']} | {r['samples']} | {statistics.median(r['cpu']) * 1000:.1f} ms "
                         f"({max(r['cpu']) * 1000:.1f} ms) | {statistics.median(r['wall']) * 1000:.1f} ms | "
                         f"{r['store_bytes'] / 2**20:.1f} MiB |")
        lines += ["", f"The run itself: {run_ms:.0f} ms of CPU with the assumed NVML latencies counted as CPU "
                  f"(NVML's share about {run_ms - own_ms:.0f} ms, migplan's own {own_ms:.0f} ms: /proc reads for "
                  "identity, building samples, one SQLite transaction with synchronous=FULL, retention, a WAL "
                  "checkpoint). migplan's own share is an upper bound: it includes the fake NVML's Python work of "
                  "building about 3,000 utilisation sample structs a run, which the real library hands over as one "
                  "ctypes array.", ""]
    text = "\n".join(lines)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
