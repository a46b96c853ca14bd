"""Whole-process runs of several checkouts on the same fleet, interleaved: the before/after of a speed budget.

    python -m bench.interleave --rounds 30 before=/tmp/wt-cdc after=.
    python -m bench.interleave --fleet /tmp/l7/7000g --rounds 12 a=/tmp/a b=/tmp/b c=/tmp/c

Each NAME=CHECKOUT runs that checkout's own console script (the `migplan` entry of its pyproject.toml, so a
checkout from before the console script moved runs the one it had) as `migplan propose -i INVENTORY -p
PROFILES -o json`, stdout to /dev/null, in a fresh interpreter with the checkout on PYTHONPATH (the child's
code and its timing are bench/speed_measures.py's). A round runs every checkout once, in turn, the order reversed
every other round, so that a drift of this VM's speed (its CPUs are shared) falls on all of them alike. Wall is
the child's; CPU is user+sys of the child and of all it waited for (profile workers, CBC). The table gives
medians, the fastest run, and each checkout against the first one named. Nothing is asserted: the figures go into
bench/README.md.

This VM sets PYTHONDONTWRITEBYTECODE: a checkout without compiled modules would compile every module on every
run, so each checkout's `migplan/` is compiled first (`--no-compile` skips it).

The fleet: `--fleet DIR` with `inventory.yaml` and `profiles/` (`python -m bench.large_inputs --keep DIR`
writes them), else one of `--gpus` GPUs (7,000) generated into a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.speed_measures import entry_point, propose_code, run_child  # after the path above


@dataclass
class Checkout:
    name: str
    root: Path
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)


def parse_checkout(spec: str) -> Checkout:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise SystemExit(f"{spec!r}: write NAME=CHECKOUT, e.g. before=/tmp/wt-cdc")
    root = Path(path).resolve()
    if not (root / "migplan" / "__init__.py").is_file():
        raise SystemExit(f"{spec!r}: {root} is not a migplan checkout (no migplan/__init__.py)")
    entry_point(root)  # its console script, or the reason it has none, before any run
    return Checkout(name, root)


def run_once(c: Checkout, fleet: Path) -> tuple[float, float]:
    """One `migplan propose -o json` of `c`'s console script on `fleet`: (wall s, CPU s of it and all it waited
    for); a failed run stops everything, naming the checkout."""
    try:
        return run_child(c.root, propose_code(c.root, fleet))
    except SystemExit as err:
        raise SystemExit(f"{c.name} ({c.root}): {err}") from None


def table(checkouts: list[Checkout]) -> str:
    base = checkouts[0]
    bw, bc = statistics.median(base.walls), statistics.median(base.cpus)
    lines = [f"| checkout | wall s, median (min-max) | CPU s, median | wall vs {base.name} | CPU vs {base.name} |",
             "|---|---|---|---|---|"]
    for c in checkouts:
        w, cpu = statistics.median(c.walls), statistics.median(c.cpus)
        lines.append(f"| {c.name} | {w:.2f} ({min(c.walls):.2f}-{max(c.walls):.2f}) | {cpu:.2f} | "
                     f"{100 * (w / bw - 1):+.1f}% | {100 * (cpu / bc - 1):+.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", nargs="+", metavar="NAME=CHECKOUT", help="the first one is the baseline")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--fleet", help="a directory with inventory.yaml and profiles/ (bench/large_inputs.py --keep)")
    ap.add_argument("--gpus", type=int, default=7000, help="without --fleet: the size of the generated fleet")
    ap.add_argument("--no-compile", action="store_true", help="do not compile each checkout's modules first")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    checkouts = [parse_checkout(s) for s in args.checkouts]
    if len({c.name for c in checkouts}) != len(checkouts):
        ap.error("give each checkout its own NAME")
    with tempfile.TemporaryDirectory(prefix="migplan-interleave-") as tmp:
        fleet = Path(args.fleet) if args.fleet else Path(tmp)
        if not args.fleet:
            from bench.large_inputs import write_instance

            print(f"writing a fleet of {args.gpus} GPUs into {tmp}", file=sys.stderr)
            write_instance(args.gpus, tmp)
        inventory, profiles = fleet / "inventory.yaml", fleet / "profiles"
        if not inventory.is_file() or not profiles.exists():
            raise SystemExit(f"{fleet}: needs inventory.yaml and profiles/ (python -m bench.large_inputs --keep DIR)")
        if not args.no_compile:
            for c in checkouts:
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(c.root / "migplan")],
                               stdout=subprocess.DEVNULL, check=False)
        print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
        for r in range(args.rounds):
            for c in checkouts if r % 2 == 0 else checkouts[::-1]:
                wall, cpu = run_once(c, fleet)
                c.walls.append(wall)
                c.cpus.append(cpu)
            print(f"round {r + 1}: " + "  ".join(f"{c.name} {c.walls[-1]:.2f} s / {c.cpus[-1]:.2f} s CPU"
                                                for c in checkouts), flush=True)
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
        print(table(checkouts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
