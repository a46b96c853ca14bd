"""Are two checkouts' plans the same? `propose -o json` and `-o table` of the example fleet and of generated
1,000- and 7,000-GPU fleets, from each tree, compared byte for byte except the plan's `created_at` and the
solve times (a refactoring must leave plans and outputs unchanged: issue 22).

    python -m bench.golden_plans --before /path/to/old/checkout [--after .] [--sizes 1000,7000]

Each tree runs in its own child with that tree first on sys.path (its `migplan` is the one imported; the
child prints which). The fleets are bench/large_inputs.py's `write_instance`, written once into a temporary
directory and read by both trees. Prints one line per output (identical / differs, with the first differing
lines) and exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.large_inputs import write_instance

ROOT = Path(__file__).resolve().parents[1]
# What may differ between two runs of the same plan: when it was made and how long the solver took.
_VOLATILE = (re.compile(r'^\s*"created_at": '), re.compile(r'^\s*"time_s": '),
             re.compile(r"^solver \S+: .*, [0-9.]+s$"))
_CHILD = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import migplan; "
          "sys.stderr.write('migplan from ' + migplan.__file__ + '\\n'); "
          "from migplan.cli.app import main; sys.argv[0] = 'migplan'; sys.exit(main())")
_OLD_CHILD = _CHILD.replace("from migplan.cli.app import main", "from migplan.cli.entry import main")


def _propose(tree: Path, inventory: Path, profiles: Path, fmt: str) -> str:
    # Before issue 22 the console script's entry was migplan/cli/entry.py.
    child = _OLD_CHILD if (tree / "migplan" / "cli" / "entry.py").exists() else _CHILD
    out = subprocess.run([sys.executable, "-c", child, str(tree), "propose", "-i", str(inventory), "-p",
                          str(profiles), "-o", fmt], cwd=tree, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: propose -o {fmt} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def _stable(text: str) -> list[str]:
    return [line for line in text.splitlines() if not any(p.search(line) for p in _VOLATILE)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the old checkout")
    ap.add_argument("--after", type=Path, default=ROOT, help="the new checkout (default: this one)")
    ap.add_argument("--sizes", default="1000,7000", help="generated fleets, GPUs (default 1000,7000)")
    args = ap.parse_args(argv)
    differs = 0
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        fleets = [("example", ROOT / "inventory" / "example.yaml", ROOT / "profiles" / "example")]
        for size in (int(s) for s in args.sizes.split(",") if s):
            inventory, profiles, _ = write_instance(size, str(Path(tmp) / f"{size}g"))
            fleets.append((f"{size:,} GPUs", Path(inventory), Path(profiles)))
        for name, inventory, profiles in fleets:
            for fmt in ("json", "table"):
                old = _stable(_propose(args.before.resolve(), inventory, profiles, fmt))
                new = _stable(_propose(args.after.resolve(), inventory, profiles, fmt))
                if old == new:
                    print(f"{name} -o {fmt}: identical ({len(new)} lines, created_at and solve times aside)")
                else:
                    differs += 1
                    diff = list(difflib.unified_diff(old, new, "before", "after", lineterm="", n=0))[:12]
                    print(f"{name} -o {fmt}: DIFFERS\n  " + "\n  ".join(diff))
    return 1 if differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
