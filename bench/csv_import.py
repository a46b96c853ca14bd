"""CSV import at scale:  python -m bench.csv_import [--size-mb 1024] [--workloads 500] [--keep].

Generates a CSV time series of about `--size-mb` MiB under /tmp (seeded; one row per workload per
minute, time-ordered, 50 hosts, memory with noise and a slow growth, utilisation in whole percent, one
bad row in 100,000), runs `migplan profiles import FILE --window all --out DIR -o json` in a child
process, and reports the child's wall time, CPU time (user + system), rows per second of each, and
peak RSS (getrusage of the child). The file is deleted afterwards unless --keep. Nothing is
asserted; the unit tests are tests/test_csv_import.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_790_000_000


def generate(path: str, size_mb: float, workloads: int, seed: int = 1) -> int:
    """Write the file; returns the number of data rows."""
    rnd = random.Random(seed)
    base = [rnd.uniform(2_000, 60_000) for _ in range(workloads)]
    names = [f"wl-{w:04d},host-{w % 50:02d}" for w in range(workloads)]
    limit = int(size_mb * 1024 * 1024)
    rows = written = 0
    minute = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        head = "timestamp,workload,host,memory_used_mib,util_pct,gpu_model\n"
        fh.write(head)
        written += len(head)
        while written < limit:
            t = T0 + 60 * minute
            chunk = []
            grow = 1 + minute / 200_000
            for w in range(workloads):
                r = rnd.random()
                if rows % 100_000 == 99_999:
                    chunk.append(f"{t},{names[w]},-1,5,A100-SXM4-80GB\n")  # a bad row: negative memory
                else:
                    chunk.append(f"{t},{names[w]},{base[w] * grow + r * 800:.1f},{int(r * 61)},A100-SXM4-80GB\n")
                rows += 1
            text = "".join(chunk)
            fh.write(text)
            written += len(text)
            minute += 1
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024)
    ap.add_argument("--workloads", type=int, default=500)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    fd, path = tempfile.mkstemp(prefix="migplan-bench-", suffix=".csv", dir="/tmp")
    os.close(fd)
    out = tempfile.mkdtemp(prefix="migplan-bench-profiles-", dir="/tmp")
    try:
        t = time.perf_counter()
        rows = generate(path, args.size_mb, args.workloads)
        gen_s = time.perf_counter() - t
        size = os.path.getsize(path)
        print(f"generated {size / 2**20:.0f} MiB, {rows} rows in {gen_s:.1f}s", file=sys.stderr)
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "migplan.cli.app", "profiles", "import", path, "--window", "all",
                              "--out", out, "-o", "json"], cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        rss_mib, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        if res.returncode != 0:
            print(res.stderr[-2000:], file=sys.stderr)
            return 1
        doc = json.loads(res.stdout)
        csv = doc["csv"]
        print(json.dumps({"file_mib": round(size / 2**20), "rows": csv["rows_read"], "kept": csv["rows_kept"],
                          "rejected": csv["rows_rejected"], "profiles": len(doc["profiles"]),
                          "files": len(doc["written"]), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                          "rows_per_s": round(csv["rows_read"] / wall), "mib_per_s": round(size / 2**20 / wall, 1),
                          "rows_per_cpu_s": round(csv["rows_read"] / cpu),
                          "peak_rss_mib": round(rss_mib)}, indent=2))
    finally:
        if not args.keep:
            os.unlink(path)
        for name in os.listdir(out):
            os.unlink(os.path.join(out, name))
        os.rmdir(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
