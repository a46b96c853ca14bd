"""Round trips of one host's apply, the files it leaves included (issue 20):
python -m bench.apply_files [--gpus 8] [--changed 1,2,8] [--out bench/results/apply.md --append]

One host with `--gpus` A100-SXM4-40GB GPUs (the nvidia-smi simulator of tests/sim, in this process), of which
1, 2 or all are re-partitioned (3g.20gb@0 3g.20gb@4 -> 3g.20gb@0 2g.10gb@4 1g.5gb@6; the others are already so),
one workload per instance of that layout (3 per GPU: 24 workloads, so 26 files: 24 env files, assignments.json,
last-applied.json). Each case runs three applies on a fresh host: the apply, a re-apply of the same plan (nothing
changes), and a re-apply after the plan moved one workload to another host (its env file is now stale).

* **before**: the files as migplan wrote them until issue 20, emulated by a runner whose `put_files` does what
  `_write_assignments` did: `mkdir -p` of env/, then one `put_file` per file (as the login user one SFTP put each;
  with a become prefix `tee`, `chmod`, `mv` each: runner.put_via_commands), no pruning;
* **after**: `put_files` (one SFTP session, or with a become prefix one exec of runner.FILES_SCRIPT).

The files go to this machine's disk through `LocalRunner` (with a become prefix: a pass-through stand-in for
`sudo -n`, so each exec the become route makes is a real process, counted, not modelled). A round trip is what
would be one SSH request/answer: a command, a batch of reads, the lock, a file put without become (one SFTP put),
a `put_files` without become (one SFTP session), and each process the become route starts. "Rewritten" counts
the files whose inode or mtime changed on the re-apply, where every file's content is the same; "stale" the env
files left for a workload the plan put elsewhere. No timings: round trips are what this measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from sim.fleet import call_sim, host_state, write_state  # noqa: E402

from migplan.adapters.runner import (  # noqa: E402
    DEFAULT_TIMEOUT,
    Completed,
    FilesDone,
    FileToPut,
    LocalRunner,
    Prune,
)
from migplan.catalog import builtin_catalog  # noqa: E402
from migplan.catalog.layout import Layout  # noqa: E402
from migplan.commands.apply import _Journal, apply_one_host  # noqa: E402
from migplan.fleet.apply import ApplyOptions, GpuOutcome  # noqa: E402
from migplan.fleet.assignments import LastApplied, Placement  # noqa: E402
from migplan.inventory import Host  # noqa: E402
from migplan.model.diff import diff  # noqa: E402
from migplan.model.gpu_plan import GpuPlan  # noqa: E402
from migplan.model.state import GpuState  # noqa: E402

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
AFTER = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
FINGERPRINT = "sha256:" + "0" * 64
STAMP = "2026-12-01T00:00:00Z"


class _Spawns(LocalRunner):
    """A local runner that counts the processes it starts (each one SSH exec on a real host)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.spawned = 0

    def _spawn(self, full: tuple[str, ...], stdin: bytes | None, timeout: float) -> tuple[int, bytes, bytes]:
        self.spawned += 1
        return super()._spawn(full, stdin, timeout)


class Host1:
    """nvidia-smi in-process, files on this machine, every round trip counted by kind; `before`: the old files."""

    def __init__(self, state: Path, become: Sequence[str], before: bool) -> None:
        self.state, self.before = state, before
        self.local = _Spawns(host="h1", become=become)
        self.become = bool(become)
        self.trips: Counter[str] = Counter()

    @property
    def host(self) -> str:
        return "h1"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        if argv[0] == "nvidia-smi":
            self.trips["GPU changes"] += 1
            code, out, err = call_sim(list(argv), self.state)
            return Completed(tuple(argv), code, out, err)
        self.trips["files" if argv[0] == "mkdir" else "other"] += 1
        return self.local.run(argv, timeout=timeout, stdin=stdin)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        self.trips["read batches"] += 1
        return [Completed(tuple(a), *call_sim(list(a), self.state)) for a in argvs]

    def hold(self, argv: Sequence[str], **kw: Any) -> Any:
        self.trips["lock"] += 1

        class Held:
            def release(self) -> None:
                pass
        return Held()

    def get_file(self, path: str, **kw: Any) -> bytes:
        self.trips["other"] += 1
        return self.local.get_file(path, **kw)

    def _files(self, call: Any) -> Any:
        seen = self.local.spawned
        done = call()
        self.trips["files"] += self.local.spawned - seen if self.become else 1
        return done

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._files(lambda: self.local.put_file(path, data, mode=mode, timeout=timeout))

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        if not self.before:
            done: FilesDone = self._files(lambda: self.local.put_files(directory, files, prune=prune,
                                                                       timeout=timeout))
            return done
        self.run(["mkdir", "-p", "--", f"{directory}/env"], timeout=timeout)  # what _write_assignments did
        for f in files:
            self.put_file(f"{directory}/{f.name}", f.data, mode=f.mode, timeout=timeout)
        return FilesDone(written=tuple(f.name for f in files))


def _case(root: Path, gpus: int, changed: int) -> tuple[Path, Host, list[GpuPlan], list[Placement]]:
    layouts = [BEFORE if i < changed else AFTER for i in range(gpus)]
    st = host_state("A100-SXM4-40GB", gpus, hostname="h1", layouts=layouts)
    st["latency"] = {"scale": 0.0}
    state = write_state(root / "h1.json", st)
    host = Host(name="h1", address="h1", state_dir=str(root / "etc"), lock_file=str(root / "apply.lock"))
    plans = [GpuPlan(GpuState(host="h1", index=g["index"], model=MODEL.id, uuid=g["uuid"], mig_enabled=True,
                              layout=lay), AFTER, tuple(diff(lay, AFTER, gpu=("h1", g["index"]),
                                                             architecture=MODEL.architecture)))
             for g, lay in zip(st["gpus"], layouts, strict=True)]
    items = [Placement(f"w{g}-{i.profile}-{i.start}", g, str(i)) for g in range(gpus) for i in AFTER.instances]
    return state, host, plans, items


def _apply(runner: Host1, host: Host, plans: list[GpuPlan], items: list[Placement]) -> Any:
    last = LastApplied("h1", FINGERPRINT, STAMP, (), ())
    rep = apply_one_host(host, runner, plans, CAT, fingerprint=FINGERPRINT, items=items, last=last, migrations=(),
                         dry_run=False, options=ApplyOptions(), journal=_Journal(None, None), stamp=STAMP)
    if rep.error is not None:
        raise SystemExit(f"the apply failed: {rep.error}")
    return rep


def _files(etc: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in etc.rglob("*") if p.is_file()}


def measure(root: Path, gpus: int, changed: int, become: bool, before: bool) -> dict[str, Any]:
    root.mkdir(parents=True)
    prefix: tuple[str, ...] = ()
    if become:
        stub = root / "bin" / "sudo"
        stub.parent.mkdir()
        stub.write_text('#!/bin/sh\nexec "$@"\n')
        stub.chmod(0o755)
        prefix = (str(stub),)
    state, host, plans, items = _case(root, gpus, changed)
    first = Host1(state, prefix, before)
    rep = _apply(first, host, plans, items)
    applied = sum(1 for g in rep.gpus if g.outcome is GpuOutcome.APPLIED)
    etc = Path(host.state_dir)
    stamps = _files(etc)
    done = [GpuPlan(dataclasses.replace(p.observed, layout=AFTER), AFTER, ()) for p in plans]
    again = Host1(state, prefix, before)
    _apply(again, host, done, items)
    rewritten = sum(1 for p, s in _files(etc).items() if stamps.get(p) != s)
    moved = Host1(state, prefix, before)
    _apply(moved, host, done, items[1:])  # the plan put items[0] on another host
    stale = int((etc / "env" / f"{items[0].workload}.env").exists())
    return {"gpus": gpus, "changed": applied, "become": become, "before": before, "workloads": len(items),
            "first": dict(first.trips), "again": dict(again.trips), "rewritten": rewritten, "files": len(stamps),
            "stale": stale}


def report(rows: Sequence[dict[str, Any]], gpus: int) -> str:
    lines = [f"## Files in one round trip (`python -m bench.apply_files --gpus {gpus}`)", "",
             f"One host, {gpus} A100-SXM4-40GB GPUs, of which 1, 2 or {gpus} are re-partitioned (3 nvidia-smi "
             f"commands each); one workload per instance ({rows[0]['workloads']} workloads: "
             f"{rows[0]['files']} files). Round trips per host: the apply, then a re-apply of the same plan (nothing "
             "changes), counted as bench/apply_files.py's docstring says (with become, each process the become "
             "route starts). *before*: `mkdir -p` + one `put_file` per file (become: tee, chmod, mv each); "
             "*after*: one `put_files`.", "",
             "| GPUs changed | become | files | round trips (of which files) | per changed GPU | re-apply: round "
             "trips (files) | files rewritten on re-apply | stale env file left |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        total, files = sum(r["first"].values()), r["first"].get("files", 0)
        again, again_files = sum(r["again"].values()), r["again"].get("files", 0)
        which = "before" if r["before"] else "**after**"
        lines.append(f"| {r['changed']} | {'sudo -n' if r['become'] else 'no'} | {which} | {total} ({files}) | "
                     f"{total / max(1, r['changed']):.2f} | {again} ({again_files}) | {r['rewritten']} of "
                     f"{r['files']} | {'yes' if r['stale'] else 'no'} |")
    by_kind = sorted(rows[-1]["first"].items())
    after = next(r for r in reversed(rows) if not r["before"])
    overhead = sum(after["first"].values()) - 3 * after["changed"]
    need = next(n for n in range(1, 1000) if overhead + 3 * n <= 4 * n)
    lines += ["", f"- By kind, {rows[-1]['changed']} GPUs changed, after, "
                  f"{'with' if rows[-1]['become'] else 'without'} become: "
              + ", ".join(f"{k} {v}" for k, v in by_kind) + ".",
              f"- The host's own round trips (the lock, two read batches, the in-flight record read and written "
              f"before the first change, the files with the settled record) are {overhead} whatever changes; each "
              f"changed GPU adds its 3 commands. Per changed GPU that is at most 4 from {need} changed GPUs on "
              f"({(overhead + 3 * rows[-1]['changed']) / rows[-1]['changed']:.2f} for {rows[-1]['changed']}); a "
              "host with fewer pays its fixed ones, which no batching can lower. *before* writes the same set of "
              "files (the in-flight record among them) one by one, as migplan did until issue 20."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--changed", default="1,2,8", help="comma-separated numbers of changed GPUs")
    ap.add_argument("--out", default=None, help="write the results section here (markdown)")
    ap.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="migplan-bench-files-") as tmp:
        for n, changed in enumerate(int(c) for c in args.changed.split(",")):
            for become in (False, True):
                for before in (True, False):
                    rows.append(measure(Path(tmp) / f"{n}-{become}-{before}", args.gpus, min(changed, args.gpus),
                                        become, before))
    text = report(rows, args.gpus)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        head = out.read_text() + "\n" if args.append and out.exists() else "# Apply benchmark\n\n"
        out.write_text(head + text)


if __name__ == "__main__":
    main()
