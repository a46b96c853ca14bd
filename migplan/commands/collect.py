"""`migplan collect`: workload samples from NVML on this host, or from every inventory host over SSH.

* `collect_local`: one run (cron or a systemd timer, every minute): NVML read through the injected module
  (`migplan.adapters.nvml`), each process named (`migplan.history.identity`, facts from /proc), one compact
  sample per workload and place appended to the host's history store in one transaction with the state
  the next run needs (NVML cursors, accounting records read, which pid was which workload), then
  retention and the size cap.
* `--vgpu` (a vGPU host, issue 26): also `nvidia-smi vgpu -q` (`migplan.smi.vgpu`), one sample per active
  vGPU: the VM is the workload (`identity.vm_workload`: `vm:<VM name>`), its frame buffer used the memory, the
  vGPU's utilisation the compute, and the place carries the vGPU type and the VM's UUID, so that `profiles build`
  writes `kind: vm` profiles. The GPU's model is the vGPU board's (from the type's name), its index from
  `nvidia-smi --query-gpu` by PCI bus id.
* `collect_fleet`: per host in parallel, the host's store fetched (SFTP) and kept as `<out>/<host>.sqlite`;
  a host without one gets a short sample with nvidia-smi (processes and memory by instance, `pmon` SM %,
  accounted apps' peak memory), written as a run marked `few` whose samples have source `nvidia-smi`.
* `install`: a cron entry (or a systemd timer) calling `migplan collect --local` on every host, written
  only when it differs (put_file, atomic; every token validated and quoted).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from migplan.adapters import history_store as hs
from migplan.adapters import nvml as nv
from migplan.adapters.procfs import local_facts, remote_facts
from migplan.catalog import Catalog, GpuModel
from migplan.commands import Report, quiet
from migplan.errors import CatalogError, InputError
from migplan.files import check_ancestors
from migplan.history.identity import ProcessFacts, Rule, identify, parse_rules
from migplan.history.samples import Place, Sample
from migplan.text import printable

if TYPE_CHECKING:  # the fleet side is imported where it is used: `collect --local` (cron, every minute) starts lean
    from migplan.adapters.pool import HostResult
    from migplan.adapters.runner import CommandRunner
    from migplan.catalog import VgpuCatalog
    from migplan.commands.context import Context
    from migplan.commands.fleet import FleetRequest
    from migplan.commands.results import HostOutcome
    from migplan.inventory import Host
    from migplan.smi.vgpu import GpuActive

# How long a pid's workload is remembered after it was last seen running, to name its accounting record once
# it has exited: that record is read by the next run, so hours cover missed runs; the map stays small.
PID_MEMORY_S = 6 * 3600
SOURCE_NVML, SOURCE_ACCOUNTING, SOURCE_SMI = "nvml", "nvml-accounting", "nvidia-smi"
SOURCE_VGPU = "nvidia-smi-vgpu"


# --- on this host ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalSettings:
    history: str = hs.DEFAULT_DIR
    host: str | None = None  # the host name samples carry; default: this machine's name
    retention_days: float = hs.DEFAULT_RETENTION_DAYS
    max_mb: int = hs.DEFAULT_MAX_MB
    rules: tuple[Rule, ...] = ()
    gpm_interval_s: float = 1.0
    vgpu: bool = False  # a vGPU host: also each VM's vGPU from `nvidia-smi vgpu -q`
    smi_timeout_s: float = 30.0


@dataclass(frozen=True)
class LocalResult:
    store: str
    run: int
    samples: int
    gpus: int
    processes: int
    workloads: tuple[str, ...]
    notes: tuple[str, ...]
    pruned: int
    size_bytes: int
    cpu_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"store": self.store, "run": self.run, "samples": self.samples, "gpus": self.gpus,
                "processes": self.processes, "workloads": list(self.workloads), "notes": list(self.notes),
                "pruned": self.pruned, "size_bytes": self.size_bytes, "cpu_s": round(self.cpu_s, 4)}


def load_rules(path: str | None) -> tuple[Rule, ...]:
    if not path:
        return ()
    import yaml

    from migplan import yamldoc

    try:
        doc = yaml.safe_load(yamldoc.read_text(path))  # read_text: bounded, regular files only
    except yaml.YAMLError as err:
        raise InputError(f"not valid YAML: {printable(str(err), 300)}", source=path) from None
    return parse_rules(doc, path)


def collect_local(settings: LocalSettings, catalog: Catalog, *, nvml: Any = None,
                  facts: Callable[[int], ProcessFacts] = local_facts, now: Callable[[], float] = time.time,
                  sleep: Callable[[float], None] = time.sleep, report: Report = quiet,
                  runner: CommandRunner | None = None) -> LocalResult:
    """One sampling run on this host (see the module notes); `nvml` is the pynvml module or a fake, `runner` what
    runs `nvidia-smi` for `--vgpu` (default: this machine's processes)."""
    cpu0 = time.process_time()
    check_ancestors(settings.history, "--history")  # run as root from cron: nobody else may swap a directory above it
    module = nvml if nvml is not None else nv.load_pynvml()
    vms: Built | None = None
    host = settings.host or os.uname().nodename
    path = hs.store_path(settings.history)
    with hs.HistoryStore(path) as store:
        started = now()
        with store.run(started, SOURCE_NVML) as run:
            cursors = run.state("cursors", {})
            seen = {u: set(p) for u, p in run.state("accounted", {}).items()}
            pids: dict[str, list[Any]] = run.state("pids", {})
            reading = nv.read_host(module, cursors, seen, gpm_interval_s=settings.gpm_interval_s, sleep=sleep)
            ts = now()
            names = {p.pid: identify(facts(p.pid), settings.rules).workload
                     for g in reading.gpus for p in g.processes}
            built = build_samples(reading, names, pids, catalog, host, ts)
            if settings.vgpu:
                vms = read_vgpus(runner, host, ts, settings.smi_timeout_s)
                built.samples.extend(vms.samples)
                built.notes.extend(vms.notes)
            run.add(built.samples)
            for gpu, window in built.device:
                run.add_device(ts, gpu, window.mean, window.peak, window.samples)
            run.notes.extend(built.notes)
            for pid, workload in names.items():
                pids[str(pid)] = [workload, ts]
            run.set_state("pids", {p: v for p, v in pids.items() if ts - float(v[1]) < PID_MEMORY_S})
            run.set_state("cursors", {k: v for g in reading.gpus for k, v in g.cursors().items()})
            run.set_state("accounted", {g.uuid: sorted((seen.get(g.uuid, set()) | {f.pid for f in g.finished})
                                                       & set(g.accounted_pids)) for g in reading.gpus})
            run.finished = ts
            written, run_id = run.written, run.run_id
        pruned = store.prune(ts, retention_days=settings.retention_days, max_bytes=settings.max_mb * 1024 * 1024)
    for note in built.notes:
        report(f"note: {note}")
    workloads = set(names.values()) | {s.sample.workload for s in vms.samples} if vms else set(names.values())
    return LocalResult(str(path), run_id, written, len(reading.gpus), len(names),
                       tuple(sorted(workloads)), tuple(built.notes), pruned.deleted, pruned.size_bytes,
                       time.process_time() - cpu0)


def read_vgpus(runner: CommandRunner | None, host: str, ts: float, timeout: float) -> Built:
    """`nvidia-smi --query-gpu` and `nvidia-smi vgpu -q` on this host, as samples (`vgpu_samples`). A failure of
    either is an error of the run (a host given --vgpu that answers no vGPU query is misconfigured, not idle)."""
    from migplan.adapters.runner import LocalRunner
    from migplan.catalog.vgpu import parse_type_name, smi_type_name
    from migplan.smi import parse_query_gpus, query_gpus
    from migplan.smi.errors import SmiError
    from migplan.smi.vgpu import parse_vgpu_query, vgpu_query

    local = runner if runner is not None else LocalRunner()
    gpus = local.run(query_gpus(), timeout=timeout)
    query = local.run(vgpu_query(), timeout=timeout) if gpus.ok else gpus
    for done in (gpus, query):
        if not done.ok:
            why = printable((done.stdout + " " + done.stderr).strip(), 200)
            raise InputError(f"--vgpu: '{' '.join(done.argv)}' failed (exit {done.exit_code}): {why}",
                             hint="run --vgpu on a host with NVIDIA's vGPU manager (nvidia-smi vgpu answers), "
                                  "or leave --vgpu out")
    try:
        rows = parse_query_gpus(gpus.stdout)
        active = parse_vgpu_query(query.stdout)
    except SmiError as err:
        raise InputError(f"--vgpu: {err.message}") from None
    for g in active:
        for v in g.vgpus:
            try:
                parse_type_name(smi_type_name(v.type_name))
            except CatalogError:
                raise InputError(f"--vgpu: cannot read nvidia-smi vgpu -q output: vGPU {v.vgpu_id}: "
                                 f"{v.type_name[:60]!r} is not a vGPU type name") from None
    index = {r.pci_bus_id.lower(): (r.index, r.name) for r in rows}
    return vgpu_samples(active, index, host, ts)


def vgpu_samples(active: Sequence[GpuActive], index: Mapping[str, tuple[int, str]], host: str, ts: float) -> Built:
    """One sample per active vGPU (`index`: PCI bus id -> GPU index and name)."""
    from migplan.catalog import builtin_vgpu_catalog
    from migplan.catalog.vgpu import smi_type_name
    from migplan.history.identity import vm_workload

    vcat = builtin_vgpu_catalog()
    out = Built()
    per_vm: dict[str, list[int]] = {}
    for g in active:
        for v in g.vgpus:
            per_vm.setdefault(v.vm_name or v.vm_uuid or f"#{v.vgpu_id}", []).append(v.vgpu_id)
    unknown: set[str] = set()
    for g in active:
        at = index.get(g.pci_bus_id.lower())
        if at is None:
            out.notes.append(f"vGPU GPU {g.pci_bus_id} is not in nvidia-smi --query-gpu: its samples carry no GPU "
                             "index")
        for v in g.vgpus:
            type_name = smi_type_name(v.type_name)  # NVIDIA's bare name: `GRID P40-6Q` -> `P40-6Q`
            model, profile = _vgpu_model(vcat, type_name)
            if model is None and type_name not in unknown:
                unknown.add(type_name)
                out.notes.append(f"vGPU type {type_name} is not in migplan's vGPU catalog: its samples carry no "
                                 "gpu_model")
            ids = sorted(per_vm[v.vm_name or v.vm_uuid or f"#{v.vgpu_id}"])
            nth = ids.index(v.vgpu_id) + 1 if len(ids) > 1 else 0
            place = Place(host, at[0] if at else None, model, profile, None, type_name, v.vm_uuid)
            name = vm_workload(v.vm_name, v.vm_uuid, v.vgpu_id, nth=nth)
            if not v.vm_name and not v.vm_uuid:
                out.notes.append(f"vGPU {v.vgpu_id}: the VM has neither a name nor a UUID; recorded as {name}, which "
                                 "changes when the VM restarts")
            memory = float(v.fb_used_mib) if v.fb_used_mib is not None else None
            util = float(v.gpu_util_pct) if v.gpu_util_pct is not None else None
            out.samples.append(hs.StoredSample(Sample(ts, name, memory, util, place, SOURCE_VGPU),
                                               None, 1 if util is not None else None))
    return out


def _vgpu_model(vcat: VgpuCatalog, type_name: str) -> tuple[str | None, str | None]:
    """The catalog GPU model a vGPU type's board is (`A100X-3-20C` -> A100-SXM4-40GB) and, for a MIG-backed type,
    its MIG profile (3g.20gb); (None, None) for a type the vGPU catalog does not have."""
    from migplan.catalog.vgpu import parse_type_name

    board = parse_type_name(type_name).board
    for m in vcat.find(board):
        if m.board == board:
            try:
                t = m.vgpu_type(type_name)
            except CatalogError:
                continue
            return m.gpu, t.mig_profile or None
    return None, None


@dataclass
class Built:
    samples: list[hs.StoredSample] = field(default_factory=list)
    device: list[tuple[int, nv.UtilWindow]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _model(catalog: Catalog, g: nv.GpuReading) -> GpuModel | None:
    try:
        return catalog.match(g.name, memory_total_mib=g.memory_total_mib, pci_device_id=g.pci_device_id)
    except CatalogError:
        return None


def _profile(model: GpuModel | None, m: nv.MigDevice) -> str | None:
    if model is None or m.gi_profile_id is None:
        return None
    try:
        return model.profile(m.gi_profile_id).name
    except CatalogError:
        return None


def build_samples(reading: nv.HostReading, names: Mapping[int, str], pids: Mapping[str, Sequence[Any]],
                  catalog: Catalog, host: str, ts: float) -> Built:
    """One sample per (workload, place) of this read, plus one per finished process accounting reports."""
    out = Built()
    for g in reading.gpus:
        out.notes.extend(g.notes)
        model = _model(catalog, g)
        if model is None and (g.mig or g.processes):
            out.notes.append(f"GPU {g.index} ({printable(g.name, 100)}) is not a catalog model: samples carry no "
                             "gpu_model")
        migs = {m.gi_id: m for m in g.migs}
        whole = Place(host, g.index, model.id if model else None)
        groups: dict[tuple[str, Place], list[nv.NvmlProcess]] = {}
        for p in g.processes:
            place = whole
            if g.mig:
                m = migs.get(p.gi_id) if p.gi_id is not None else None
                place = Place(host, g.index, whole.gpu_model, _profile(model, m) if m else None,
                              m.start if m else None)
            groups.setdefault((names.get(p.pid, f"pid:{p.pid}"), place), []).append(p)
        per_instance: dict[Place, int] = {}
        for (_, place) in groups:
            per_instance[place] = per_instance.get(place, 0) + 1
        for (workload, place), procs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1].mig_start or 0)):
            known = [p.used_mib for p in procs if p.used_mib is not None]
            memory = sum(known) if known else None
            util, peak, n = _util(g, procs, place, migs, per_instance, len(groups))
            out.samples.append(hs.StoredSample(Sample(ts, workload, memory, util, place, SOURCE_NVML), peak, n))
        if g.device_util is not None:
            out.device.append((g.index, g.device_util))
        unnamed = 0
        for f in g.finished:
            known_pid = pids.get(str(f.pid))
            if known_pid is None or float(known_pid[1]) < f.start_us / 1e6:
                unnamed += 1  # started and ended between two runs, or a pid reused: nothing names it
                continue
            out.samples.append(hs.StoredSample(Sample(f.end, str(known_pid[0]), f.max_mib, f.util_pct, whole,
                                                      SOURCE_ACCOUNTING)))
        if unnamed:
            out.notes.append(f"GPU {g.index}: {unnamed} finished process(es) in NVML accounting were never seen "
                             "running, so no workload could be named for them; not recorded")
    return out


def _util(g: nv.GpuReading, procs: list[nv.NvmlProcess], place: Place, migs: Mapping[int, nv.MigDevice],
          per_instance: Mapping[Place, int], groups: int) -> tuple[float | None, float | None, int | None]:
    """SM % of `place` for one workload's processes; None where NVML did not measure it."""
    if g.mig:
        m = migs.get(procs[0].gi_id) if procs[0].gi_id is not None else None
        if m is not None and m.sm_util is not None and per_instance.get(place) == 1:
            return m.sm_util, None, 1  # GPM: the instance's activity, and this workload is alone on it
        return None, None, None
    if g.process_util is not None:
        windows = [g.process_util[p.pid] for p in procs if p.pid in g.process_util]
        if not windows:
            return None, None, None
        return (min(100.0, sum(w.mean for w in windows)), min(100.0, sum(w.peak for w in windows)),
                max(w.samples for w in windows))
    if g.device_util is not None and groups == 1:
        return g.device_util.mean, g.device_util.peak, g.device_util.samples  # alone on the GPU
    return None, None, None


# --- over SSH -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FleetCollect:
    out: str  # local directory: one <host>.sqlite per host
    remote_history: str = f"{hs.DEFAULT_DIR}/{hs.FILE_NAME}"
    pmon_samples: int = 5
    max_mb: int = hs.DEFAULT_MAX_MB
    rules: tuple[Rule, ...] = ()
    fetch_tries: int = 3


@dataclass(frozen=True)
class Collected:
    """What collecting from one host fetched (the host and any failure are its `HostResult`'s)."""

    mode: str  # "history" (the host's store fetched) or "nvidia-smi" (a short sample: few samples)
    samples: int
    workloads: tuple[str, ...] = ()
    first: float | None = None
    last: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def few(self) -> bool:
        return self.mode == "nvidia-smi"


@dataclass(frozen=True)
class FleetCollectResult:
    out: str
    results: tuple[HostResult[Collected], ...]

    def outcomes(self) -> list[HostOutcome]:
        from migplan.commands.results import pool_outcomes

        return pool_outcomes(self.results)

    def as_dict(self) -> dict[str, Any]:
        hosts = []
        for r in self.results:
            if r.value is not None:
                v = r.value
                hosts.append({"host": r.host, "ok": True, "mode": v.mode, "few_samples": v.few, "samples": v.samples,
                              "workloads": list(v.workloads), "first": v.first, "last": v.last,
                              "notes": list(v.notes), "file": str(Path(self.out) / f"{r.host}.sqlite")})
            elif r.error is not None:
                hosts.append({"host": r.host, "ok": False, "error": r.error.as_dict()})
        return {"out": self.out, "hosts": hosts}


def collect_fleet(ctx: Context, req: FleetRequest, what: FleetCollect, report: Report = quiet) -> FleetCollectResult:
    from migplan.adapters.pool import for_each_host
    from migplan.adapters.runner import check_remote_path
    from migplan.commands.fleet import runner_for, select_hosts

    inventory = select_hosts(ctx.inventory(req.inventory), req.limit)
    check_remote_path(what.remote_history)
    out = Path(what.out)
    out.mkdir(parents=True, exist_ok=True)
    from migplan.adapters.ssh import SshFleet

    def on_done(done: int, total: int, r: HostResult[Collected]) -> None:
        if r.value is not None:
            few = " (few samples: a short nvidia-smi sample)" if r.value.few else ""
            report(f"[{done}/{total}] {r.host}: ok, {r.value.samples} samples from {r.value.mode}{few} "
                   f"({r.duration_s:.1f} s)")
        elif r.error is not None:
            report(f"[{done}/{total}] {r.host}: FAILED ({r.error.code}) {printable(r.error.detail, 200)}")

    report(f"collecting from {len(inventory.hosts)} host(s), {req.parallel} at a time")
    with SshFleet(req.ssh) as ssh:
        results = for_each_host(list(inventory.hosts),
                                lambda h: collect_host(runner_for(ssh, h), h, ctx.catalog, what, req.timeout),
                                parallel=req.parallel, on_done=on_done, on_interrupt=ssh.close)
    return FleetCollectResult(str(out), tuple(results))


def collect_host(runner: CommandRunner, host: Host, catalog: Catalog, what: FleetCollect,
                 timeout: float) -> Collected:
    """The host's history if it has one, else a short nvidia-smi sample; kept as <out>/<host>.sqlite."""
    from migplan.adapters.runner import RemoteFileMissing

    target = Path(what.out) / f"{host.name}.sqlite"
    try:
        return _fetch(runner, host, what, target, timeout)
    except RemoteFileMissing:
        return _short_sample(runner, host, catalog, what, target, timeout)


def _fetch(runner: CommandRunner, host: Host, what: FleetCollect, target: Path, timeout: float) -> Collected:
    import shutil
    import tempfile

    from migplan.adapters.runner import HostError, RemoteFileMissing

    limit = what.max_mb * 1024 * 1024 + (64 << 20)
    problem = ""
    for _ in range(max(1, what.fetch_tries)):
        data = runner.get_file(what.remote_history, max_bytes=limit, timeout=timeout)
        try:
            wal = runner.get_file(what.remote_history + "-wal", max_bytes=limit, timeout=timeout)
        except RemoteFileMissing:
            wal = b""
        tmp = Path(tempfile.mkdtemp(prefix=f".{host.name}.", dir=target.parent))
        try:
            (tmp / hs.FILE_NAME).write_bytes(data)
            if wal:
                (tmp / (hs.FILE_NAME + "-wal")).write_bytes(wal)
            try:
                with hs.HistoryStore(tmp / hs.FILE_NAME) as copy:  # opening replays the WAL; the run checkpoints
                    problem = copy.check()
                    if problem == "ok":
                        copy.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                        copy.db.execute("PRAGMA journal_mode=DELETE")  # one self-contained file locally
                        summary = _summary(copy)
            except (InputError, hs.HistoryStoreError) as err:  # torn while copied, or not a store at all
                problem = err.message
            if problem == "ok":
                os.replace(tmp / hs.FILE_NAME, target)
                return Collected("history", *summary)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    raise HostError(host.name, f"the copy of {what.remote_history} cannot be read ({printable(problem, 200)}; "
                    f"{what.fetch_tries} tries)", hint="if a run was writing while it was copied, collect again; "
                    "else the file on the host is not a migplan history store")


def _summary(store: hs.HistoryStore) -> tuple[int, tuple[str, ...], float | None, float | None, tuple[str, ...]]:
    row = store.db.execute("SELECT count(*), min(ts), max(ts) FROM samples").fetchone()
    names = tuple(r[0] for r in store.db.execute(
        "SELECT DISTINCT n.name FROM samples s JOIN names n ON n.id = s.workload ORDER BY 1"))
    return int(row[0]), names, row[1], row[2], ()


def _short_sample(runner: CommandRunner, host: Host, catalog: Catalog, what: FleetCollect, target: Path,
                  timeout: float) -> Collected:
    """No history on the host: processes by instance (discovery), pmon's SM %, accounting's peak memory."""
    from migplan.adapters.smi_session import SmiSession
    from migplan.fleet.discover import discover_host
    from migplan.smi import usage

    notes = [f"no history at {what.remote_history}: a short nvidia-smi sample (few samples)"]
    found = discover_host(runner, host, catalog, timeout=timeout)
    ts = time.time()
    session = SmiSession(runner, timeout=timeout + what.pmon_samples)
    sm: dict[tuple[int, int], list[int]] = {}
    done = session.run(usage.pmon(what.pmon_samples))
    if done.ok:
        for row in usage.parse_pmon(done.stdout):
            if row.sm_pct is not None:
                sm.setdefault((row.gpu, row.pid), []).append(row.sm_pct)
    else:
        notes.append("nvidia-smi pmon failed: no per-process utilisation")
    peak: dict[tuple[str, int], int] = {}
    acc = session.run(usage.query_accounted_apps())
    if acc.ok:
        for a in usage.parse_accounted_apps(acc.stdout):
            if a.max_memory_mib is not None:
                peak[(a.gpu_uuid, a.pid)] = a.max_memory_mib
    # which GPU instance each process is in: only plain nvidia-smi's Processes table says (GI ID column)
    in_gi: dict[tuple[int, int], int] = {}
    table = session.run(usage.plain())
    if table.ok:
        in_gi = {(r.gpu, r.pid): r.gi_id for r in usage.parse_processes(table.stdout) if r.gi_id is not None}
    placed: list[tuple[Place, Any, str | None, bool]] = []  # place, process, GPU uuid, MIG mode
    for g in found.gpus:
        by_gi = {i.gi_id: i.instance for i in g.instances if i.gi_id is not None}
        for p in [p for i in g.instances for p in i.processes] + list(g.processes):
            inst = by_gi.get(in_gi.get((g.index, p.pid), -1))
            if inst is None:  # discovery's own attribution (a MIG device UUID, or the one instance)
                inst = next((i.instance for i in g.instances if p in i.processes), None)
            place = Place(host.name, g.index, g.model, inst.profile if inst else None, inst.start if inst else None)
            placed.append((place, p, g.uuid, g.mig_current))
    facts = remote_facts(runner, [p.pid for _, p, _, _ in placed],
                         names={p.pid: p.name for _, p, _, _ in placed if p.name}, timeout=timeout)
    samples: list[hs.StoredSample] = []
    groups: dict[tuple[str, Place], list[tuple[Any, str | None, bool]]] = {}
    for place, p, uuid, mig in placed:
        name = identify(facts.get(p.pid, ProcessFacts(p.pid, exe=p.name)), what.rules).workload
        groups.setdefault((name, place), []).append((p, uuid, mig))
    for (name, place), procs in sorted(groups.items(), key=lambda kv: kv[0][0]):
        mem = [p.used_memory_mib for p, _, _ in procs if p.used_memory_mib is not None]
        util = None
        utils = [sum(v) / len(v) for p, _, mig in procs if not mig and (v := sm.get((place.gpu or 0, p.pid)))]
        if utils and not any(mig for _, _, mig in procs):
            util = min(100.0, sum(utils))
        samples.append(hs.StoredSample(Sample(ts, name, float(sum(mem)) if mem else None, util, place, SOURCE_SMI),
                                       None, what.pmon_samples if util is not None else None))
        peaks = [peak[(uuid, p.pid)] for p, uuid, _ in procs if uuid and (uuid, p.pid) in peak]
        if peaks and sum(peaks) > sum(mem):
            samples.append(hs.StoredSample(Sample(ts, name, float(sum(peaks)), None, place, SOURCE_SMI)))
    with hs.HistoryStore(target) as store, store.run(ts, SOURCE_SMI, few=True) as run:
        run.add(samples)
        run.notes.extend(notes)
        run.finished = time.time()
    return Collected("nvidia-smi", len(samples), tuple(sorted({n for n, _ in groups})), ts, ts, tuple(notes))


# --- installing the sampler --------------------------------------------------------------------------

CRON_FILE = "/etc/cron.d/migplan-collect"
SYSTEMD_DIR = "/etc/systemd/system"
UNIT = "migplan-collect"
LOCK = "/run/lock/migplan-collect.lock"
_SAFE_PATH = re.compile(r"\A/[A-Za-z0-9._/+-]{1,1000}\Z")


@dataclass(frozen=True)
class InstallRequest:
    migplan: str = "/usr/local/bin/migplan"  # the command on the hosts
    history: str = hs.DEFAULT_DIR
    timer: bool = False  # a systemd timer instead of /etc/cron.d
    cron_file: str = CRON_FILE
    systemd_dir: str = SYSTEMD_DIR
    dry_run: bool = False
    vgpu: bool = False  # the hosts are vGPU hosts: the sampler runs `collect --local --vgpu`


@dataclass(frozen=True)
class Installed:
    """What installing the sampler did on one host (the host and any failure are its `HostResult`'s)."""

    files: tuple[tuple[str, str], ...]  # (path, "written" | "unchanged" | "would write")
    commands: tuple[tuple[str, ...], ...] = ()


def _safe(path: str, what: str) -> str:
    if not _SAFE_PATH.fullmatch(path) or "/../" in path or path.endswith("/.."):
        raise InputError(f"{what} {printable(path, 100)!r} must be an absolute path of letters, digits and ._/+-")
    return path


def sampler_files(req: InstallRequest) -> dict[str, str]:
    """What `install` writes on each host (path -> content); every token validated, the command quoted."""
    import shlex

    exe, history = _safe(req.migplan, "--migplan-path"), _safe(req.history, "--history")
    argv = [exe, "collect", "--local", "--quiet", "--history", history, *(["--vgpu"] if req.vgpu else [])]
    if not req.timer:
        _safe(req.cron_file, "--cron-file")
        line = " ".join(shlex.quote(t) for t in ["flock", "-n", LOCK, *argv])
        return {req.cron_file: (
            "# migplan: sample GPU workloads every minute (written by 'migplan collect install'; edits are replaced)\n"
            "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            f"* * * * * root {line} 2>&1 | logger -t migplan-collect\n")}
    base = _safe(req.systemd_dir, "--systemd-dir")
    return {
        f"{base}/{UNIT}.service": (
            "[Unit]\nDescription=migplan: sample GPU workloads (NVML)\n\n[Service]\nType=oneshot\n"
            f"ExecStart={' '.join(shlex.quote(t) for t in argv)}\nSyslogIdentifier=migplan-collect\n"
            "TimeoutStartSec=50s\n"),
        f"{base}/{UNIT}.timer": (
            "[Unit]\nDescription=migplan: sample GPU workloads every minute\n\n[Timer]\nOnCalendar=*-*-* *:*:00\n"
            "AccuracySec=1s\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n"),
    }


def install_host(runner: CommandRunner, host: Host, req: InstallRequest, timeout: float) -> Installed:
    from migplan.adapters.runner import HostError, RemoteFileMissing, check_remote_path

    check = runner.run([req.migplan, "--version"], timeout=timeout)
    if not check.ok:
        raise HostError(host.name, f"{req.migplan} does not run on the host (exit {check.exit_code})",
                        hint="install migplan on the host (pip install migplan) or pass --migplan-path")
    states = []
    changed = False
    for path, content in sampler_files(req).items():
        try:
            old = runner.get_file(check_remote_path(path), timeout=timeout).decode("utf-8", "replace")
        except RemoteFileMissing:
            old = None
        if old == content:
            states.append((path, "unchanged"))
            continue
        changed = True
        if req.dry_run:
            states.append((path, "would write"))
            continue
        runner.put_file(path, content.encode(), mode=0o644, timeout=timeout)
        states.append((path, "written"))
    commands: list[tuple[str, ...]] = []
    if req.timer and changed and not req.dry_run:
        for argv in (["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", f"{UNIT}.timer"]):
            done = runner.run(argv, timeout=timeout)
            commands.append(tuple(argv))
            if not done.ok:
                raise HostError(host.name, f"'{' '.join(argv)}' failed: {printable(done.stderr.strip(), 200)}")
    return Installed(tuple(states), tuple(commands))


def install(ctx: Context, req: FleetRequest, what: InstallRequest,
            report: Report = quiet) -> list[HostResult[Installed]]:
    from migplan.adapters.pool import for_each_host
    from migplan.commands.fleet import runner_for, select_hosts

    inventory = select_hosts(ctx.inventory(req.inventory), req.limit)
    sampler_files(what)  # bad paths are refused before any host is contacted
    from migplan.adapters.ssh import SshFleet

    def on_done(done: int, total: int, r: HostResult[Installed]) -> None:
        if r.value is not None:
            report(f"[{done}/{total}] {r.host}: " + ", ".join(f"{p} {s}" for p, s in r.value.files))
        elif r.error is not None:
            report(f"[{done}/{total}] {r.host}: FAILED ({r.error.code}) {printable(r.error.detail, 200)}")

    with SshFleet(req.ssh) as ssh:
        return for_each_host(list(inventory.hosts), lambda h: install_host(runner_for(ssh, h), h, what, req.timeout),
                             parallel=req.parallel, on_done=on_done, on_interrupt=ssh.close)


def summarise(stored: Iterable[Sample]) -> dict[str, int]:
    """Samples per workload (for messages and tests)."""
    out: dict[str, int] = {}
    for s in stored:
        out[s.workload] = out.get(s.workload, 0) + 1
    return out
