"""Apply to many simulated hosts at once vs one host alone:  python -m bench.apply_fleet [--hosts 100] [--gpus 8]
[--parallel 100] [--scale 0.05] [--transport inprocess|sshd] [--out bench/results/apply.md]

Every host has `--gpus` A100-SXM4-40GB GPUs and every GPU needs a change: GPUs 0..n-3 are re-partitioned
(3g.20gb@0 3g.20gb@4 -> 3g.20gb@0 2g.10gb@4 1g.5gb@6: one GPU instance destroyed, two created, the kept 3g
untouched) and the last two go from MIG off to a partition (Ampere: `-mig 1` and a reset of that GPU).

The nvidia-smi simulator (tests/sim) sleeps per command as real hardware takes (modelled, not measured:
0.05 s a command, 1 s per GPU instance created, 0.3 s per one destroyed, 3 s per reset, 0.5 s per mode
change), times `--scale` so a run stays short; both the modelled (raw) and the scaled seconds are reported.

Measured, per run: wall time of the whole apply (`commands.apply.apply_one_host` for every host on the pool,
as `migplan apply` runs them: lock, pre-flight, read, checkpoint, change, verify, memory read-back,
assignments and last-applied written), round trips (every runner call: a command, a file put or get, the set of
files in one `put_files`, the lock)
per changed GPU, and CPU: this process's CPU time minus the simulator's (the simulator runs on the "hosts",
so its CPU is not migplan's). The CPU floor is migplan's CPU time / the cores of this machine: no wall time
can be lower than that on it.

`--transport inprocess` (default) runs the simulator in this process behind a runner with the same
protocol (no SSH: the honest choice on a 2-core machine shared with others, where 100 hosts x ~100 sshd
sessions and simulator processes would measure the machine, not migplan). `--transport sshd` goes over a
real OpenSSH sshd on loopback (tests/fleet/sshd.py), one simulator process per command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from sim.fleet import call_sim, host_state, read_state, write_state  # noqa: E402
from sim.nvidia_smi_sim import LATENCY_DEFAULTS  # noqa: E402

from migplan.adapters.pool import for_each_host  # noqa: E402
from migplan.adapters.runner import (  # noqa: E402
    DEFAULT_TIMEOUT,
    Completed,
    FilesDone,
    FileToPut,
    LocalRunner,
    Prune,
    run_many,
)
from migplan.catalog import builtin_catalog  # noqa: E402
from migplan.catalog.layout import Layout  # noqa: E402
from migplan.commands.apply import _Journal, apply_one_host  # noqa: E402
from migplan.fleet.apply import ApplyOptions, GpuOutcome  # noqa: E402
from migplan.fleet.assignments import LastApplied  # noqa: E402
from migplan.fleet.outcomes import HostApplyResult as HostReport  # noqa: E402
from migplan.inventory import Host  # noqa: E402
from migplan.model.diff import diff  # noqa: E402
from migplan.model.gpu_plan import GpuPlan  # noqa: E402
from migplan.model.state import GpuState  # noqa: E402

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
AFTER = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
CORES = os.cpu_count() or 1


class Counting:
    """Counts every call that costs a round trip to the host, by kind; passes them to `inner`."""

    def __init__(self, inner: Any, counts: Counter[str], batched: Counter[str], one_by_one: bool = False) -> None:
        self.inner, self.counts, self.batched, self.one_by_one = inner, counts, batched, one_by_one
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        return str(self.inner.host)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        self._count(_kind(argv))
        done: Completed = self.inner.run(argv, timeout=timeout, stdin=stdin)
        return done

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        """One round trip (one SSH exec) for several read-only commands; what was in it is counted apart."""
        if self.one_by_one:  # --no-batch: as a runner without run_batch would (each read its own exec)
            return [self.run(a, timeout=timeout) for a in argvs]
        self._count(f"reads batch ({len(argvs)})")
        with self._lock:
            for a in argvs:
                self.batched[_kind(a)] += 1
        done: list[Completed] = run_many(self.inner, argvs, timeout=timeout)
        return done

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._count("put")
        self.inner.put_file(path, data, mode=mode, timeout=timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        """All of a host's files: one round trip (one SFTP session, or one exec of the script with become)."""
        self._count("put_files")
        done: FilesDone = self.inner.put_files(directory, files, prune=prune, timeout=timeout)
        return done

    def get_file(self, remote_path: str, *, max_bytes: int = 16 << 20, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        self._count("get")
        data: bytes = self.inner.get_file(remote_path, max_bytes=max_bytes, timeout=timeout)
        return data

    def hold(self, argv: Sequence[str], **kw: Any) -> Any:
        self._count("lock")
        return self.inner.hold(argv, **kw)


def _kind(argv: Sequence[str]) -> str:
    a = list(argv[1:])
    for flag in ("-cgi", "-dgi", "-dci", "-lgipp", "-lgip", "-lgi", "-lci", "-mig", "-r", "-L", "-h"):
        if flag in a:
            return flag
    if any(t.startswith("--query-gpu=index,uuid") for t in a):
        return "--query-gpu"
    if any(t.startswith("--query-gpu=") for t in a):
        return "--query-gpu(driver)"
    if any(t.startswith("--query-compute-apps") for t in a):
        return "--query-compute-apps"
    if argv and argv[0] == "nvidia-smi":
        return "nvidia-smi (table)"
    return argv[0] if argv else "?"


class InProcessHost:
    """The simulator in this process (its sleeps release the GIL, as a remote host would), files on local disk."""

    def __init__(self, name: str, state: Path, sim_cpu: list[float]) -> None:
        self.name, self.state, self.sim_cpu = name, state, sim_cpu
        self.local = LocalRunner(host=name)

    @property
    def host(self) -> str:
        return self.name

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        if argv[0] != "nvidia-smi":
            if argv[0] == "mkdir":
                os.makedirs(argv[-1], exist_ok=True)
                return Completed(tuple(argv), 0, "", "")
            return self.local.run(argv, timeout=timeout, stdin=stdin)
        start = time.thread_time()
        code, out, err = call_sim(list(argv), self.state)
        self.sim_cpu.append(time.thread_time() - start)  # list.append is atomic under the GIL
        return Completed(tuple(argv), code, out, err)

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.local.put_file(path, data, mode=mode, timeout=timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        return self.local.put_files(directory, files, prune=prune, timeout=timeout)

    def get_file(self, path: str, **kw: Any) -> bytes:
        return self.local.get_file(path, **kw)

    def hold(self, argv: Sequence[str], **kw: Any) -> Any:
        class Held:
            def release(self) -> None:
                pass
        return Held()


def _host_state(name: str, n_gpus: int, scale: float) -> dict[str, Any]:
    st: dict[str, Any] = host_state("A100-SXM4-40GB", n_gpus, hostname=name,
                    layouts=[BEFORE if i < n_gpus - 2 else Layout() for i in range(n_gpus)])
    for gpu in st["gpus"][max(0, n_gpus - 2):]:
        gpu.update(mig_current=False, mig_pending=False, gpu_instances=[], mode_reset="in-use")
    st["latency"] = {"scale": scale}
    return st


def _plans(name: str, state: dict[str, Any]) -> list[GpuPlan]:
    out = []
    for gpu in state["gpus"]:
        current = BEFORE if gpu["mig_current"] else None
        observed = GpuState(host=name, index=gpu["index"], model=MODEL.id, uuid=gpu["uuid"],
                            mig_enabled=current is not None, layout=current)
        out.append(GpuPlan(observed, AFTER, tuple(diff(current, AFTER, gpu=(name, gpu["index"]),
                                                       architecture=MODEL.architecture))))
    return out


def _plain_shell_server() -> Any:
    from fleet.sshd import SshServer  # tests/fleet

    class PlainShellServer(SshServer):  # type: ignore[misc]
        """The test sshd with SHLVL=1 in each host's environment: bash then skips ~/.bashrc for the commands sshd
        runs (bash sources it for a top-level shell started by sshd, SSH_SOURCE_BASHRC; `shell_level < 2`), so
        the login user's rc file (here root's, with `pyenv init`: ~100 processes, ~130 ms per command) is not
        measured with migplan. Real hosts' rc files are whatever they are; `--plain-shell` says which was used."""

        def _config(self, *args: Any) -> str:
            text: str = super()._config(*args)
            return text.replace("  SetEnv PATH=", "  SetEnv SHLVL=1 PATH=")

    return PlainShellServer


def run(n_hosts: int, n_gpus: int, parallel: int, scale: float, transport: str, root: Path,
        plain_shell: bool = False, no_batch: bool = False) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    batched: Counter[str] = Counter()
    sim_cpu: list[float] = []
    hosts, plans, states = [], {}, {}
    server = None
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if transport == "sshd":
        from fleet.sshd import SshServer, ensure_sshd  # tests/fleet

        _PlainShellServer = _plain_shell_server()

        sshd, why = ensure_sshd()
        if sshd is None:
            raise SystemExit(f"--transport sshd: {why}")
        server = (_PlainShellServer if plain_shell else SshServer)(root / "sshd", sshd, count=n_hosts)
        server.start()
    try:
        for i in range(n_hosts):
            name = f"gpu{i:03d}"
            st = _host_state(name, n_gpus, scale)
            if server is not None:
                sim = server.hosts[i]
                path = write_state(sim.state, st)
                host = Host(name=name, address=sim.address, port=server.port, user=_user(),
                            key_file=str(server.client_key), lock_file=str(sim.dir / "apply.lock"),
                            state_dir=str(sim.dir / "etc"))
            else:
                path = write_state(root / f"{name}.json", st)
                host = Host(name=name, address=name, state_dir=str(root / name / "etc"),
                            lock_file=str(root / f"{name}.lock"))
            hosts.append(host)
            plans[name] = _plans(name, st)
            states[name] = path
        options = ApplyOptions(timeout=120.0)
        journal = _Journal(None, None)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        def one(host: Host, runner: Any) -> HostReport:
            last = LastApplied(host.name, "sha256:" + "0" * 64, stamp, (), ())
            return apply_one_host(host, Counting(runner, counts, batched, no_batch), plans[host.name], CAT,
                                  fingerprint=last.plan,
                                  items=(), last=last, migrations=(), dry_run=False, options=options,
                                  journal=journal, stamp=stamp)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        if server is not None:
            from migplan.adapters.ssh import SshFleet
            from migplan.adapters.ssh_options import SshOptions

            opts = SshOptions(known_hosts=str(server.known_hosts), ssh_config=None, connect_timeout=10.0,
                              allow_agent=False, look_for_keys=False)
            with SshFleet(opts) as ssh:
                results = for_each_host(hosts, lambda h: one(h, ssh.runner(h)), parallel=parallel)
        else:
            results = for_each_host(hosts, lambda h: one(h, InProcessHost(h.name, states[h.name], sim_cpu)),
                                    parallel=parallel)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        if server is not None:
            time.sleep(1.0)  # the closed sessions' sshd processes exit and are reaped, so their CPU is counted
            server.stop()  # sshd waited for: its sessions' and the simulator processes' CPU is now counted
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    host_cpu = (children.ru_utime + children.ru_stime) - (children0.ru_utime + children0.ru_stime)
    outcomes: Counter[str] = Counter()
    for r in results:
        if r.value is None or r.value.error:
            outcomes[f"host error: {r.error or (r.value.error if r.value else '')}"[:120]] += 1
            continue
        for g in r.value.gpus:
            outcomes[g.outcome.value] += 1
    changed = sum(1 for r in results if r.value is not None for g in r.value.gpus
                  if g.outcome is GpuOutcome.APPLIED)
    modelled = sum(read_state(p).get("latency_modelled_s", 0.0) for p in states.values())
    mig_cpu = cpu - sum(sim_cpu) if transport == "inprocess" else cpu
    return {"hosts": n_hosts, "gpus": n_gpus, "parallel": parallel, "transport": transport, "wall_s": wall,
            "cpu_s": cpu, "sim_cpu_s": sum(sim_cpu) if transport == "inprocess" else host_cpu,
            "migplan_cpu_s": mig_cpu, "changed": changed,
            "outcomes": dict(outcomes), "round_trips": sum(counts.values()), "by_kind": dict(counts),
            "batched": dict(batched),
            "modelled_s_per_host": modelled / n_hosts, "scaled_s_per_host": modelled * scale / n_hosts,
            "plain_shell": plain_shell, "no_batch": no_batch}


def _user() -> str:
    import getpass

    return getpass.getuser()


def report(one: dict[str, Any], many: dict[str, Any], scale: float) -> str:
    floor = many["migplan_cpu_s"] / CORES
    floor_all = many["cpu_s"] / CORES
    target = max(2 * one["wall_s"], 1.2 * floor)
    gil = many["cpu_s"]  # the in-process simulator and migplan share one interpreter: about one core at a time
    run_floor = gil if many["transport"] == "inprocess" else floor
    run_target = max(2 * one["wall_s"], 1.2 * run_floor)
    rt = many["round_trips"] / max(1, many["changed"])
    per_gpu_kinds = {k: v / max(1, many["changed"]) for k, v in sorted(many["by_kind"].items(), key=lambda kv: -kv[1])}
    lines = [
        f"## Apply to a fleet (`python -m bench.apply_fleet --hosts {many['hosts']} --parallel {many['parallel']} "
        f"--scale {scale:g}" + (f" --transport {many['transport']}" if many["transport"] != "inprocess" else "")
        + (" --plain-shell" if many.get("plain_shell") else "") + (" --no-batch" if many.get("no_batch") else "")
        + "`)", "",
        f"{many['hosts']} simulated hosts x {many['gpus']} A100-SXM4-40GB GPUs, every GPU changed "
        f"({many['gpus'] - 2} re-partitioned: 1 instance destroyed, 2 created, 1 kept; 2 MIG off -> on with a "
        f"one-GPU reset), `--parallel {many['parallel']}`, transport **{many['transport']}**"
        + (" (the simulator in this process behind the runner protocol, no SSH)" if many["transport"] == "inprocess"
           else " (a real OpenSSH sshd on loopback, one simulator process per nvidia-smi command; the login "
                "shell's ~/.bashrc " + ("skipped: --plain-shell" if many.get("plain_shell") else
                                        "sourced per exec, as bash does for sshd") + ")")
        + f", {CORES} CPU cores.", "",
        f"Simulated MIG latency per host (modelled on real hardware, not measured: "
        f"{LATENCY_DEFAULTS['gi_created_s']:g} s per GPU instance created, {LATENCY_DEFAULTS['reset_s']:g} s per "
        f"reset, {LATENCY_DEFAULTS['gi_destroyed_s']:g} s per instance destroyed, {LATENCY_DEFAULTS['mode_s']:g} s "
        f"per mode change, {LATENCY_DEFAULTS['command_s']:g} s per command): raw "
        f"{one['modelled_s_per_host']:.1f} s, run scaled by {scale:g} to {one['scaled_s_per_host']:.2f} s.", "",
        "| run | wall s | migplan CPU s | CPU s per host | GPUs applied | round trips | per changed GPU |",
        "|---|---|---|---|---|---|---|",
        f"| 1 host alone | {one['wall_s']:.2f} | {one['migplan_cpu_s']:.2f} | {one['migplan_cpu_s']:.3f} | "
        f"{one['changed']} | {one['round_trips']} | {one['round_trips'] / max(1, one['changed']):.2f} |",
        f"| {many['hosts']} hosts | {many['wall_s']:.2f} | {many['migplan_cpu_s']:.2f} | "
        f"{many['migplan_cpu_s'] / many['hosts']:.3f} | {many['changed']} | {many['round_trips']} | {rt:.2f} |", "",
        f"- Outcomes ({many['hosts']} hosts): {many['outcomes']}.",
        f"- CPU floor on this machine: migplan's CPU {many['migplan_cpu_s']:.2f} s / {CORES} cores = "
        f"**{floor:.2f} s**" + (f" (with the in-process simulator's CPU, which real hosts would spend: "
                                f"{many['cpu_s']:.2f} s / {CORES} = {floor_all:.2f} s)"
                                if many["transport"] == "inprocess" else
                                f" (the hosts' side, sshd and one simulator process per command, took "
                                f"{many['sim_cpu_s']:.2f} s of this machine's CPU: with it the floor is "
                                f"{(many['sim_cpu_s'] + many['migplan_cpu_s']) / CORES:.2f} s)") + "."
        + (f" In one interpreter (the GIL) that CPU runs about one core at a time: {gil:.2f} s, so this run's "
           f"wall cannot go below about {gil:.2f} s whatever migplan does; with the simulator's CPU on the hosts, "
           f"where it belongs, migplan's own floor is the {floor:.2f} s above."
           if many["transport"] == "inprocess" else ""),
        f"- Target against migplan's own floor: wall <= max(2 x one host = {2 * one['wall_s']:.2f} s, 1.2 x "
        f"{floor:.2f} s) = {target:.2f} s; measured {many['wall_s']:.2f} s: "
        f"**{'met' if many['wall_s'] <= target else 'NOT met'}** (wall / one host = "
        f"{many['wall_s'] / one['wall_s']:.2f}x)."
        + (f" Against this run's CPU floor ({run_floor:.2f} s, simulator included): wall <= "
           f"{run_target:.2f} s: **{'met' if many['wall_s'] <= run_target else 'NOT met'}** "
           f"({many['wall_s'] / run_floor:.2f}x the floor)." if many["transport"] == "inprocess" else ""),
        f"- Round trips per changed GPU: **{rt:.2f}** (target <= 4: "
        f"**{'met' if rt <= 4 else 'NOT met'}**). Per changed GPU, by kind: "
        + ", ".join(f"`{k}` {v:.2f}" for k, v in per_gpu_kinds.items()) + "."
        + (" In the read batches (one round trip each), per host: "
           + ", ".join(f"`{k}` {v / many['hosts']:g}" for k, v in sorted(many["batched"].items(), key=lambda kv:
                                                                          -kv[1])) + "." if many["batched"] else ""),
    ]
    return "\n".join(lines) + "\n"


def exec_cost(n_hosts: int, per_host: int = 20) -> str:
    """What one SSH exec costs on this machine's test sshd, apart from migplan and the simulator: `true`,
    `per_host` times on each host, one host alone and `n_hosts` at once, the login shell's rc file sourced
    (bash does for sshd) or not (SHLVL=1). CPU: this process (paramiko) and the sshd side (reaped children)."""
    from fleet.sshd import SshServer, ensure_sshd  # tests/fleet

    from migplan.adapters.ssh import SshFleet
    from migplan.adapters.ssh_options import SshOptions

    sshd, why = ensure_sshd()
    if sshd is None:
        raise SystemExit(f"--exec-cost: {why}")
    rows = []
    for plain in (False, True):
        for hosts in (1, n_hosts):
            with tempfile.TemporaryDirectory(prefix="migplan-bench-exec-") as tmp:
                server = (_plain_shell_server() if plain else SshServer)(Path(tmp) / "sshd", sshd, count=hosts)
                children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                server.start()
                try:
                    opts = SshOptions(known_hosts=str(server.known_hosts), ssh_config=None, connect_timeout=10.0,
                                      allow_agent=False, look_for_keys=False)
                    inv = [Host(name=f"h{i}", address=h.address, port=server.port, user=_user(),
                                key_file=str(server.client_key)) for i, h in enumerate(server.hosts)]
                    with SshFleet(opts) as ssh:
                        for h in inv:
                            ssh.runner(h).run(["true"], timeout=60)  # connected: only execs are timed
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        for_each_host(inv, lambda h: [ssh.runner(h).run(["true"], timeout=120)
                                                      for _ in range(per_host)], parallel=hosts)
                        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                finally:
                    time.sleep(1.0)
                    server.stop()
                children = resource.getrusage(resource.RUSAGE_CHILDREN)
                host_cpu = (children.ru_utime + children.ru_stime) - (children0.ru_utime + children0.ru_stime)
                n = hosts * per_host
                rows.append(f"| {'no (SHLVL=1)' if plain else 'yes'} | {hosts} | {n} | {wall:.2f} | "
                            f"{wall / per_host * 1000:.0f} | {wall / n * 1000:.0f} | {cpu / n * 1000:.1f} | "
                            f"{host_cpu / n * 1000:.0f} |")
    return "\n".join([
        f"## One SSH exec on this machine (`python -m bench.apply_fleet --exec-cost --hosts {n_hosts}`)", "",
        f"`true` run {per_host} times per host over the test sshd (tests/fleet/sshd.py) after connecting, each host "
        "on its own thread; the login user is root, whose ~/.bashrc runs `pyenv init` (with `pyenv rehash`, which "
        "takes a lock file in ~/.pyenv/shims shared by every session of the machine).", "",
        "| ~/.bashrc sourced | hosts at once | execs | wall s | ms per exec (one host's view) | ms per exec "
        "(machine) | migplan CPU ms per exec | sshd-side CPU ms per exec |", "|---|---|---|---|---|---|---|---|",
        *rows]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=100)
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--transport", choices=("inprocess", "sshd"), default="inprocess")
    ap.add_argument("--plain-shell", action="store_true",
                    help="sshd: SHLVL=1 so bash skips the login user's ~/.bashrc per command (see _plain_shell_server)")
    ap.add_argument("--no-batch", action="store_true", help="each read its own round trip (as before the batches)")
    ap.add_argument("--exec-cost", action="store_true",
                    help="sshd only: time one `true` per exec, one host alone and --hosts at once, with and without "
                         "the login shell's rc file, instead of an apply")
    ap.add_argument("--out", default=None, help="write the results section here (markdown)")
    ap.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    args = ap.parse_args()
    if args.exec_cost:
        text = exec_cost(args.hosts)
        print(text)
        if args.out:
            out = Path(args.out)
            out.write_text((out.read_text() + "\n" if args.append and out.exists() else "# Apply benchmark\n\n") + text)
        return
    with tempfile.TemporaryDirectory(prefix="migplan-bench-apply-") as tmp:
        one = run(1, args.gpus, 1, args.scale, args.transport, Path(tmp) / "one", args.plain_shell, args.no_batch)
        print(f"1 host: {one['wall_s']:.2f} s wall, {one['migplan_cpu_s']:.2f} s CPU, {one['round_trips']} round "
              f"trips, {one['outcomes']}", file=sys.stderr)
        many = run(args.hosts, args.gpus, args.parallel, args.scale, args.transport, Path(tmp) / "many",
                   args.plain_shell, args.no_batch)
    text = report(one, many, args.scale)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        head = out.read_text() + "\n" if args.append and out.exists() else "# Apply benchmark\n\n"
        out.write_text(head + text)


if __name__ == "__main__":
    main()
