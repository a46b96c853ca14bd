"""Start-up time of the CLI: python -m bench.startup [--runs 10] [--out FILE].

Each command runs `--runs` times as a fresh process (the wall time of `subprocess.run`, after one
warm-up run that also writes the catalog cache); the table gives the median, the fastest and the
slowest. `migplan` is run as its console script does (`from migplan.cli.app import main; main()`)
with this checkout first on sys.path. The floors are measured the same way: the bare interpreter
(`python -c pass`) and `import typer`. Then, in this process: the shipped catalog parsed strictly
(what every run did before the cache) against read from the cache, median of 20. Last, the import
profile (`python -X importtime`) of `--help` and of `propose`: the largest modules by cumulative
time, and the self time summed per top-level package. Nothing here is asserted.

Targets (issue 8): `migplan --help` at most 0.25 s, `propose` on the example fleet at most 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIGPLAN = [sys.executable, "-c", "import sys; from migplan.cli.app import main; sys.argv[0] = 'migplan'; main()"]
PROPOSE = ["propose", "--inventory", "inventory/example.yaml", "--profiles", "profiles/example"]
TARGETS = {"migplan --help": 0.25, "migplan propose (example fleet)": 0.5}


def _env(**extra: str) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE (set on the development VM) would make every edited module be compiled
    # again in every run; an installed migplan has its bytecode (pip compiles at install), so the
    # warm-up run is allowed to write it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGPLAN_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.update(extra)
    return env


def commands(cache: str) -> list[tuple[str, list[str], dict[str, str]]]:
    on, off = _env(MIGPLAN_CACHE_DIR=cache), _env(MIGPLAN_CACHE_DIR="none")
    return [
        ("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"], on),
        ("python -c 'import typer' (typer floor)", [sys.executable, "-c", "import typer"], on),
        ("migplan --version", [*MIGPLAN, "--version"], on),
        ("migplan --help", [*MIGPLAN, "--help"], on),
        ("migplan catalog list", [*MIGPLAN, "catalog", "list"], on),
        ("migplan propose (example fleet)", [*MIGPLAN, *PROPOSE], on),
        ("migplan propose (example fleet), catalog cache off", [*MIGPLAN, *PROPOSE], off),
    ]


def wall(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        out.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return out


def catalog_times(cache: str, runs: int = 20) -> tuple[float, float]:
    """(strict parse, cached read) of the shipped catalog, median seconds, in this process."""
    os.environ["MIGPLAN_CACHE_DIR"] = cache
    from migplan.catalog import cache as catalog_cache
    from migplan.catalog.loader import BUILTIN_PATH, parse_builtin

    with open(BUILTIN_PATH, "rb") as fh:
        data = fh.read()
    catalog_cache.store(data, parse_builtin(data))
    parse, cached = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        parse_builtin(data)
        t1 = time.perf_counter()
        assert catalog_cache.load(data) is not None, "the cache was not written"
        cached.append(time.perf_counter() - t1)
        parse.append(t1 - t0)
    return statistics.median(parse), statistics.median(cached)


def importtime(cmd: list[str], env: dict[str, str], top: int = 12) -> tuple[list[tuple[str, float]],
                                                                           list[tuple[str, float]]]:
    """(largest modules by cumulative import time, self time per top-level package), in seconds."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    cumulative: list[tuple[str, float]] = []
    per_package: dict[str, float] = defaultdict(float)
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        head, cum_us, name = line.split("|", 2)
        self_s, cum_s = int(head.split(":")[1]) / 1e6, int(cum_us) / 1e6
        module = name.strip()
        depth = (len(name) - len(name.lstrip()) - 1) // 2  # importtime indents each nested import by 2
        if depth <= 1:
            cumulative.append((module, cum_s))
        per_package[module.split(".")[0]] += self_s
    cumulative.sort(key=lambda x: -x[1])
    return cumulative[:top], sorted(per_package.items(), key=lambda x: -x[1])[:top]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="migplan-startup-cache-")
    lines = [f"Machine: {machine()} at the start.", "",
             f"Wall time of a fresh process, {args.runs} runs after one warm-up (`python -m bench.startup`):", "",
             "| command | median s | min s | max s | target |", "|---|---|---|---|---|"]
    for label, cmd, env in commands(cache):
        times = wall(cmd, env, args.runs)
        med = statistics.median(times)
        target = TARGETS.get(label)
        verdict = f"<= {target:g}: " + ("met" if med <= target else "NOT met") if target else ""
        lines.append(f"| `{label}` | {med:.3f} | {min(times):.3f} | {max(times):.3f} | {verdict} |")
        print(f"{label}: median {med:.3f} s", file=sys.stderr, flush=True)
    parse, cached = catalog_times(cache)
    lines += ["", f"Shipped catalog, in process (median of 20): strict parse {parse * 1000:.1f} ms, "
              f"from the cache {cached * 1000:.1f} ms.", ""]
    for label, cmd in (("migplan --help", [*MIGPLAN, "--help"]), ("migplan propose", [*MIGPLAN, *PROPOSE])):
        cum, per = importtime(cmd, _env(MIGPLAN_CACHE_DIR=cache))
        lines += [f"`python -X importtime` of `{label}`: largest imports (cumulative s): "
                  + ", ".join(f"{m} {s:.3f}" for m, s in cum), "",
                  "self time per top-level package (s): " + ", ".join(f"{m} {s:.3f}" for m, s in per), ""]
    lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
