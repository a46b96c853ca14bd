"""Apply the vGPU part of a plan to one KVM host over its runner (issue 26; docs/vgpu.md "Apply on KVM hosts").

The same safety as MIG apply (`fleet.apply`), with the vGPU vocabulary (`model.vgpu.VgpuAction`, run as the
commands of `migplan.smi.vgpu_commands`):

1. the host's apply lock (`adapters.host_lock`, the same lock file as a MIG apply; none in a dry run);
2. the host read again under the lock: its GPUs (`discover.discover_host` with `vgpu=True`) made into
   `VgpuGpuState`s as the planner made them (`vgpu_state.discovered_states`);
3. per GPU of the plan here, in index order:
   - the live state already holds the target                                       -> unchanged
   - the live state's fingerprint is not the plan's observed state's (a VM started or stopped, a vGPU made or
     removed, MIG or VFs changed since planning)                                   -> refused (stale)
   - checkpoint = the state just read; run the plan's actions in `ACTION_ORDER`; before each `remove` the host
     is read again and a device a running VM holds (or one that cannot be told apart from a running VM's) is
     never touched                                                                 -> refused (a VM runs)
   - read back: the target's types on its GPU instances, kept devices unchanged, each created device there
     with its type (its address is reported)                                       -> applied ("as planned")
   - any failure (a write refused, a command failing, a timeout, a read-back that differs): read again, run the
     actions back to the checkpoint (remove what was created, re-create what was removed with the same type on
     the same VF or with the same mdev UUID, re-create GPU instances, restore MIG, VF and mixed-size mode) and
     check that the fingerprint is the checkpoint's again                        -> rolled back, or failed
4. every command, its exit code and output, the checkpoints, read-backs and rollbacks go to the journal.

A dry run reads (every read passes through; `read_only`) and lists the commands it would run, with placeholders
(`<a free VF of ...>`, `<id of 3g.20gb@4>`) where a value only exists once an earlier command has run.

`create` on an SR-IOV GPU takes a free VF (`current_vgpu_type` 0) and the type id the host lists in that VF's
`creatable_vgpu_types` (never the catalog's: ids differ between drivers); MIG-backed, the VF's `gpu_instance_id`
is written first and its creatable types read after. On an mdev GPU the type id is the `mdev_supported_types`
directory whose `name` is the type, and the UUID is new (`new_uuid`, uuid4). Nothing a host printed reaches a
command line unchecked: the argv builders take validated addresses, UUIDs and integers only.

`sysfs_root` and `sriov_manage` are keywords of the Python API only (tests point them at the vGPU simulator, as
for discovery); a real host has `/` and NVIDIA's `/usr/lib/nvidia/sriov-manage`.
"""

from __future__ import annotations

import dataclasses
import re
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Sequence

from migplan import smi
from migplan.adapters.host_lock import acquire
from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import CommandRunner, HostError
from migplan.catalog import Catalog, VgpuCatalog, builtin_vgpu_catalog
from migplan.catalog.vgpu import MIG_BACKED, smi_type_name
from migplan.errors import MigplanError
from migplan.fleet.discover import discover_host
from migplan.fleet.outcomes import ApplyOptions, GpuOutcome, GpuResult, HostApplyResult, Journal, quiet
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredHost
from migplan.fleet.steps import is_read_only
from migplan.fleet.vgpu_state import discovered_states
from migplan.inventory import Host
from migplan.model.vgpu import ACTION_ORDER, VgpuAction, VgpuGpuPlan, VgpuGpuState, VgpuSlot
from migplan.smi import sysfs
from migplan.smi import vgpu as sv
from migplan.smi import vgpu_commands as vc
from migplan.text import printable

SYSFS_READERS = ("ls", "cat", "readlink")
_TYPE_ID = re.compile(r"(?a)type-(\d{1,7})")
_ORDER = {k: i for i, k in enumerate((*ACTION_ORDER[:4], "vfs-disable", *ACTION_ORDER[4:]))}


def read_only(argv: Sequence[str]) -> bool:
    """What a dry run of a vGPU host still runs: nvidia-smi's queries and the sysfs reads (`ls`, `cat`, `readlink`
    of `smi.sysfs`' builders). `tee`, `sriov-manage` and every nvidia-smi setter are recorded, not run."""
    return is_read_only(argv) or (bool(argv) and argv[0] in SYSFS_READERS)


class _Step(Exception):
    """A command failed or the host is not as the next action needs (the GPU is rolled back)."""


class _RunningVm(Exception):
    """A running VM holds a device the plan removes: nothing more is done on the GPU."""


def apply_vgpu_host(runner: CommandRunner, host: Host, plans: Sequence[VgpuGpuPlan], catalog: Catalog,
                    options: ApplyOptions, journal: Journal = quiet, *, vcat: VgpuCatalog | None = None,
                    sysfs_root: str = "/", sriov_manage: str = vc.SRIOV_MANAGE,
                    new_uuid: Callable[[], str] | None = None) -> HostApplyResult:
    """Every vGPU GPU of the plan on this host (module notes); one GPU's failure never stops the next."""
    sysfs.check_root(sysfs_root)
    vc.sriov_manage("0000:00:00.0", True, sriov_manage)  # the program path checked before anything runs
    ctx = _Host(runner, host, catalog, options, journal, vcat or builtin_vgpu_catalog(), sysfs_root, sriov_manage,
                new_uuid or (lambda: str(uuidlib.uuid4())))
    if options.dry_run:
        if not isinstance(runner, RecordingRunner):  # reads run, every change is recorded: nothing is changed
            ctx.runner = RecordingRunner(runner, read_only=read_only)
        return ctx.apply(plans)
    if not hasattr(runner, "hold"):
        raise HostError(runner.host, "this runner cannot hold the host's apply lock")
    lock = acquire(runner, host.lock_file, timeout=options.timeout)  # type: ignore[arg-type]  # has `hold`
    journal({"event": "locked", "path": host.lock_file})
    try:
        return ctx.apply(plans)
    finally:
        lock.release()
        journal({"event": "unlocked", "path": host.lock_file})


def named(s: VgpuGpuState, names: dict[int, str]) -> VgpuGpuState:
    """`s` with each `type-ID` slot (a type id whose name the host did not print when it was read: discovery learns
    names from creatable lists, empty on a full GPU) named as the host listed that id during this apply."""
    def one(x: VgpuSlot) -> VgpuSlot:
        m = _TYPE_ID.fullmatch(x.type_name)
        name = names.get(int(m.group(1))) if m is not None else None
        return dataclasses.replace(x, type_name=smi_type_name(name)) if name else x
    return dataclasses.replace(s, slots=tuple(one(x) for x in s.slots)) if names else s


def _comparable(s: VgpuGpuState, names: dict[int, str] | None = None) -> VgpuGpuState:
    """The state as the stale check compares it: what the host holds, not the inventory's `allowed` modes."""
    return dataclasses.replace(named(s, names or {}), allowed=())


def held(s: VgpuGpuState) -> tuple[object, ...]:
    """What an apply changes and a rollback must restore: each known device's type and GPU instance, MIG mode,
    GPU instances and VFs (not which VMs run: a VM may start meanwhile, and then discovery may not tell its device)."""
    devs = sorted((x.device, x.type_name, x.placement or "") for x in s.slots
                  if x.device is not None and not x.device.startswith("vgpu:"))
    return (tuple(devs), s.mig_enabled, s.layout, s.vfs)


def stale_reasons(planned: VgpuGpuState, live: VgpuGpuState, names: dict[int, str] | None = None) -> list[str]:
    """What differs between the plan's observed state and the live one ([] when the fingerprints agree)."""
    a, b = _comparable(planned, names), _comparable(live, names)
    if a.fingerprint() == b.fingerprint():
        return []
    out = []
    for f in ("model", "board", "host_mode", "mode", "mig_enabled", "layout", "vfs", "uuid", "pci_bus_id"):
        if getattr(a, f) != getattr(b, f):
            out.append(f"{f} was {getattr(a, f)!r}, is {getattr(b, f)!r}")
    before, now = set(a.slots), set(b.slots)
    out += [f"{_slot(s)} is new" for s in sorted(now - before, key=_slot)]
    out += [f"{_slot(s)} is gone" for s in sorted(before - now, key=_slot)]
    return out or ["its state differs"]


def _slot(s: VgpuSlot) -> str:
    where = f" on {s.placement}" if s.placement else ""
    who = f" (VM {s.vm} running)" if s.running else (f" for {s.vm}" if s.vm else "")
    return f"{s.type_name} {s.device or '(new)'}{where}{who}"


def _shown(s: VgpuGpuState) -> list[str]:
    return [_slot(x) for x in s.slots]


class _Host:
    def __init__(self, runner: CommandRunner, host: Host, catalog: Catalog, options: ApplyOptions, journal: Journal,
                 vcat: VgpuCatalog, root: str, sriov: str, new_uuid: Callable[[], str]) -> None:
        self.runner, self.host, self.catalog, self.options, self.journal = runner, host, catalog, options, journal
        self.vcat, self.root, self.sriov, self.new_uuid = vcat, root, sriov, new_uuid
        self.record: DiscoveredHost | None = None
        self.states: dict[int, VgpuGpuState] = {}
        self.names: dict[int, dict[int, str]] = {}  # GPU -> type id -> name, as the host listed them this run

    def read(self, purpose: str) -> None:
        """The host again (discovery's reads), and its GPUs as the planner sees them."""
        record = discover_host(self.runner, self.host, self.catalog, timeout=self.options.timeout,
                               assignments=False, vgpu=True, sysfs_root=self.root)
        notes: list[str] = []
        settings = {self.host.name: self.host.vgpu} if self.host.vgpu is not None else {}
        states = discovered_states([record], self.vcat, settings, notes)
        self.record, self.states = record, {s.index: s for s in states}
        for g in record.gpus:
            for d in g.vgpu.devices if g.vgpu is not None else ():
                if d.type_id and d.type_name:
                    self.names.setdefault(g.index, {})[d.type_id] = d.type_name
        for st in states:
            mine = self.names.get(st.index, {})
            if any((m := _TYPE_ID.fullmatch(x.type_name)) and int(m.group(1)) not in mine for x in st.slots):
                self.learn_names(st.index)
        self.journal({"event": "vgpu-read", "for": purpose, "notes": [*record.notes, *notes],
                      "gpus": {str(s.index): {"fingerprint": s.fingerprint(), "slots": _shown(s),
                                              "layout": list(s.layout), "mig": s.mig_enabled, "vfs": s.vfs}
                               for s in states}})

    def learn_names(self, index: int) -> None:
        """The names of the GPU's type ids from `nvidia-smi vgpu -s -v -i N` (a full GPU's creatable lists are empty,
        so discovery leaves the ids its VFs hold unnamed); a failure leaves them unnamed (a note in the journal)."""
        argv = vc.supported_types(index)
        done = self.runner.run(argv, timeout=self.options.timeout)
        try:
            rows = sv.parse_vgpu_types(done.stdout, " ".join(argv)) if done.ok else []
        except smi.SmiParseError as err:
            self.journal({"event": "note", "gpu": index, "text": err.message})
            return
        for r in rows:
            for t in r.types:
                if t.type_id is not None:
                    self.names.setdefault(index, {})[t.type_id] = smi_type_name(t.name)

    def gpu(self, index: int) -> DiscoveredGpu | None:
        assert self.record is not None
        return next((g for g in self.record.gpus if g.index == index), None)

    def apply(self, plans: Sequence[VgpuGpuPlan]) -> HostApplyResult:
        try:
            self.read("pre-flight and state")
        except (HostError, MigplanError) as err:
            why = err.detail if isinstance(err, HostError) else str(err)
            self.journal({"event": "preflight-failed", "reason": why})
            return HostApplyResult(self.host.name, (), preflight=f"pre-flight failed, nothing changed: {why}")
        results: list[GpuResult] = []
        commands: list[str] = []
        for plan in sorted(plans, key=lambda p: p.observed.index):
            res = _Gpu(self, plan).go()
            results.append(res)
            commands += res.commands
        return HostApplyResult(self.host.name, tuple(results),
                               commands=tuple(commands) if self.options.dry_run else ())


def _target_ok(plan: VgpuGpuPlan, live: VgpuGpuState, created: Sequence[tuple[str, VgpuSlot]] = ()) -> list[str]:
    """Where the live GPU is not the plan's target ([]: as planned)."""
    out = []
    want_mig = plan.mode == MIG_BACKED if plan.mode is not None else plan.observed.mig_enabled
    if live.mig_enabled != want_mig:
        out.append(f"MIG mode is {'on' if live.mig_enabled else 'off'}")
    if want_mig:
        layout = tuple(sorted({s.placement for s in plan.slots if s.placement is not None}))
        if live.layout != layout:
            out.append(f"GPU instances {', '.join(live.layout) or 'none'}, planned {', '.join(layout) or 'none'}")
    have = Counter((s.type_name, s.placement) for s in live.slots)
    want = Counter((s.type_name, s.placement) for s in plan.slots)
    if have != want:
        out.append("vGPUs " + (", ".join(_slot(s) for s in live.slots) or "none") + "; planned " +
                   (", ".join(f"{t}{' on ' + p if p else ''}" for t, p in sorted(want.elements(),
                                                                                  key=lambda x: (x[0], x[1] or "")))
                    or "none"))
    by_dev = {s.device: s for s in live.slots}
    for s in plan.slots:
        if s.device is not None and (by_dev.get(s.device) is None or by_dev[s.device].type_name != s.type_name
                                     or by_dev[s.device].placement != s.placement):
            out.append(f"the kept vGPU {_slot(s)} is not there")
    for dev, s in created:
        got = by_dev.get(dev)
        if got is None or got.type_name != s.type_name or got.placement != s.placement:
            out.append(f"the created {s.type_name} on {dev} is not there")
    if plan.mode is not None and live.host_mode == "sr-iov" and not live.vfs:
        out.append("no virtual functions are enabled")
    return out


class _Gpu:
    """One GPU's change: checkpoint, actions, read-back, rollback."""

    def __init__(self, h: _Host, plan: VgpuGpuPlan) -> None:
        self.ctx, self.plan = h, plan  # the host's apply: its runner, states, journal
        self.index = plan.observed.index
        self.where = f"{h.host.name}: GPU {self.index}"
        self.commands: list[str] = []
        self.done: list[VgpuAction] = []
        self.created: list[tuple[str, VgpuSlot]] = []
        self.taken: set[str] = set()  # VFs used in this run (a dry run cannot see them taken)
        self.gi_ids: dict[str, int] = {}
        self.mig_on = False
        self.vf_types: list[tuple[str, int]] | None = None
        self.checkpoint: VgpuGpuState | None = None

    @property
    def names(self) -> dict[int, str]:
        return self.ctx.names.get(self.index, {})

    @property
    def dry(self) -> bool:
        return self.ctx.options.dry_run

    def result(self, outcome: GpuOutcome, reason: str, state: VgpuGpuState | None = None) -> GpuResult:
        return GpuResult(self.index, outcome, reason, commands=tuple(self.commands),
                         layout=_shown(state) if state is not None else None)

    # --- the GPU's course --------------------------------------------------------------------------------------

    def go(self) -> GpuResult:
        live = self.ctx.states.get(self.index)
        if live is None:
            return self.result(GpuOutcome.REFUSED, "refused (stale): the GPU is not on the host as a vGPU GPU "
                               "(re-plan from a fresh discovery)")
        if not self.plan.actions or (live != self.plan.observed and not _target_ok(self.plan, named(live, self.names))):
            return self.result(GpuOutcome.UNCHANGED, "already as planned", live)
        stale = stale_reasons(self.plan.observed, live, self.names)
        if stale:
            self.ctx.journal({"event": "refused", "gpu": self.index, "reasons": stale})
            return self.result(GpuOutcome.REFUSED, "refused (stale): changed since the plan was made: "
                               + printable("; ".join(stale), 600) + " (re-plan with 'migplan propose')")
        self.checkpoint = live
        self.ctx.journal({"event": "checkpoint", "gpu": self.index, "fingerprint": live.fingerprint(),
                        "state": live.canonical()})
        try:
            for a in self.plan.actions:
                self.run(a)
        except _RunningVm as err:
            if not self.done:
                self.ctx.journal({"event": "refused", "gpu": self.index, "reasons": [str(err)]})
                return self.result(GpuOutcome.REFUSED, f"refused: {err}; nothing changed on this GPU")
            return self.roll_back(str(err))
        except (_Step, HostError, MigplanError) as err:
            return self.roll_back(_text(err))
        if self.dry:
            return self.result(GpuOutcome.WOULD_APPLY, "would apply: " + ", ".join(map(str, self.plan.actions)))
        try:
            self.ctx.read("read-back")
        except (HostError, MigplanError) as err:
            return self.roll_back(f"the read-back failed: {_text(err)}")
        now = self.ctx.states.get(self.index)
        now = named(now, self.names) if now is not None else None
        wrong = _target_ok(self.plan, now, self.created) if now is not None else ["the GPU is gone"]
        self.ctx.journal({"event": "verify", "gpu": self.index, "ok": not wrong, "found": _shown(now) if now else [],
                        "problems": wrong})
        if wrong:
            return self.roll_back("the read-back differs from the plan: " + "; ".join(wrong))
        made = ", ".join(f"{s.type_name} on {dev}" for dev, s in self.created)
        return self.result(GpuOutcome.APPLIED, "as planned" + (f" (created {made})" if made else ""), now)

    def roll_back(self, why: str) -> GpuResult:
        self.ctx.journal({"event": "failure", "gpu": self.index, "error": why})
        assert self.checkpoint is not None
        if self.dry:
            return self.result(GpuOutcome.FAILED, f"the dry run stopped: {why}")
        self.taken, self.vf_types, self.gi_ids = set(), None, {}
        ck = named(self.checkpoint, self.names)
        try:
            self.ctx.read("rollback")
            live = self.ctx.states.get(self.index)
            if live is None:
                raise _Step("the GPU is no longer read as a vGPU GPU")
            for a in back_actions(named(live, self.names), ck, self.done):
                self.run(a, rollback=True)
            self.ctx.read("after the rollback")
            now = self.ctx.states.get(self.index)
            now = named(now, self.names) if now is not None else None
            if now is None or held(now) != held(ck):
                raise _Step("after the rollback the GPU is not as before: " +
                            "; ".join(stale_reasons(ck, now) if now else ["it is gone"]))
        except (_Step, _RunningVm, HostError, MigplanError) as err:
            self.ctx.journal({"event": "rollback-failed", "gpu": self.index, "error": _text(err)})
            return self.result(GpuOutcome.FAILED, f"failed: {why}; the rollback failed too: {_text(err)} (the GPU "
                               "is left as the journal shows; re-discover and re-plan)",
                               self.ctx.states.get(self.index))
        self.ctx.journal({"event": "rolled-back", "gpu": self.index, "slots": _shown(now)})
        return self.result(GpuOutcome.ROLLED_BACK, f"rolled back: {why}", now)

    # --- one action --------------------------------------------------------------------------------------------

    def run(self, a: VgpuAction, *, rollback: bool = False) -> None:
        st = self.plan.observed
        if a.kind == "remove":
            self.remove(a, check=not rollback)
        elif a.kind == "gi-destroy":
            self.gi_destroy(str(a.placement))
        elif a.kind in ("mig-enable", "mig-disable"):
            self.mig(a.kind == "mig-enable")
        elif a.kind in ("vfs-enable", "vfs-disable"):
            self.vfs(a.kind == "vfs-enable")
        elif a.kind in ("mixed-on", "mixed-off"):
            self.do(vc.mixed_mode(self.index, a.kind == "mixed-on"), a.kind)
        elif a.kind == "gi-create":
            self.do(vc.gi_create(self.ctx.catalog.get(st.model), self.index, str(a.placement)), a.kind)
        elif a.kind == "create":
            self.create(a)
        else:
            raise _Step(f"{self.where}: unknown action {a.kind!r}")
        self.done.append(a)

    def do(self, cmd: list[str] | vc.SysfsWrite, kind: str) -> str:
        """Run one changing command (recorded only in a dry run); a failure raises `_Step` naming it."""
        shown = str(cmd) if isinstance(cmd, vc.SysfsWrite) else " ".join(cmd)
        self.commands.append(shown)
        argv, stdin = (cmd.argv, cmd.stdin) if isinstance(cmd, vc.SysfsWrite) else (cmd, None)
        done = self.ctx.runner.run(argv, timeout=self.ctx.options.timeout, stdin=stdin)
        self.ctx.journal({"event": "command", "gpu": self.index, "kind": kind, "argv": list(argv),
                        "stdin": stdin.decode() if stdin is not None else None, "exit_code": done.exit_code,
                        "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:], "dry_run": self.dry})
        if not done.ok:
            why = printable((done.stderr or done.stdout).strip(), 300) or "no output"
            raise _Step(f"{self.where}: '{shown}' failed (exit {done.exit_code}): {why}")
        return done.stdout

    def read(self, argv: list[str], what: str) -> str:
        done = self.ctx.runner.run(argv, timeout=self.ctx.options.timeout)
        if not done.ok:
            raise _Step(f"{self.where}: cannot read {what} ('{' '.join(argv)}', exit {done.exit_code}): "
                        f"{printable(done.stderr.strip(), 200) or 'no output'}")
        return done.stdout

    def pf(self) -> str:
        bus = self.plan.observed.pci_bus_id
        if bus is None:
            raise _Step(f"{self.where}: its PCI address is not known")
        return sysfs.bdf(bus)

    def remove(self, a: VgpuAction, *, check: bool) -> None:
        dev = str(a.device)
        if dev.startswith("vgpu:"):
            raise _Step(f"{self.where}: the device of vGPU {dev} is not known; it is not removed")
        if check and not self.dry:  # right before: a VM that started since the plan was read
            self.vm_check(a, dev)
        self.taken.discard(dev)
        if _is_bdf(dev):
            self.do(vc.clear_vgpu_type(self.ctx.root, dev), "remove")
        else:
            self.do(vc.mdev_remove(self.ctx.root, dev), "remove")

    def vm_check(self, a: VgpuAction, dev: str) -> None:
        """`nvidia-smi vgpu -q` now: a running VM on `dev` (its mdev UUID; on a VF, more running vGPUs of the type on
        its GPU instance than the checkpoint's running VMs on other devices account for) refuses the removal."""
        argv = sv.vgpu_query()
        try:
            rows = sv.parse_vgpu_query(self.read(argv, "the running vGPUs"))
        except smi.SmiParseError as err:
            raise _Step(f"{self.where}: {err.message}") from None
        pf = self.pf()
        mine = [v for r in rows if _bdf_or_none(r.pci_bus_id) == pf for v in r.vgpus]
        if _is_bdf(dev):
            gi = self.gi_id(a.placement) if a.placement is not None else None
            same = [v for v in mine if smi_type_name(v.type_name) == a.type_name
                    and (gi is None or v.gpu_instance_id == gi)]
            assert self.checkpoint is not None
            known = [s for s in self.checkpoint.running if s.device != dev and s.type_name == a.type_name
                     and s.placement == a.placement]
            hit = same[0] if len(same) > len(known) else None
        else:
            hit = next((v for v in mine if v.mdev_uuid is not None and v.mdev_uuid.lower() == dev.lower()), None)
        if hit is not None:
            self.ctx.journal({"event": "running-vm", "gpu": self.index, "device": dev, "vm": hit.vm_name})
            raise _RunningVm(f"a running VM ({printable(hit.vm_name or hit.vm_uuid or '?', 80)}) holds "
                             f"{a.type_name} on {dev}, which the plan removes")

    def gi_id(self, placement: str) -> int | None:
        """The live GPU instance id of `placement` (`nvidia-smi mig -lgi`; None in a dry run for one not made yet)."""
        if placement not in self.gi_ids:
            mig = self.plan.observed.mig_enabled if self.dry else self.plan.observed.mig_enabled or self.mig_on
            self.gi_ids = self.list_gis() if mig else {}
        if placement not in self.gi_ids:
            if self.dry:
                return None
            raise _Step(f"{self.where}: no GPU instance {placement} is listed")
        return self.gi_ids[placement]

    def list_gis(self) -> dict[str, int]:
        try:
            rows = smi.parse_gpu_instances(self.read(smi.list_gpu_instances(self.index), "the GPU instances"))
        except smi.MigDisabledError:
            return {}
        except smi.SmiParseError as err:
            raise _Step(f"{self.where}: {err.message}") from None
        return {f"{r.profile_name}@{r.start}": r.gi_id for r in rows if r.gpu == self.index}

    def gi_destroy(self, placement: str) -> None:
        gi = self.gi_id(placement)
        if gi is None:
            self.commands.append(f"nvidia-smi mig -i {self.index} -dgi -gi <id of {placement}>")
            return
        done = self.ctx.runner.run(smi.list_compute_instances(self.index, gi), timeout=self.ctx.options.timeout)
        try:  # "No compute instances found" (an exit code of its own): nothing to destroy first
            cis = smi.parse_compute_instances(done.stdout) if done.ok else []
        except smi.SmiError:
            cis = []
        if cis:  # a GPU instance is destroyed once its compute instances are
            self.do(vc.ci_destroy(self.index, gi), "ci-destroy")
        self.do(vc.gi_destroy(self.index, gi), "gi-destroy")
        self.gi_ids.pop(placement, None)

    def mig(self, on: bool) -> None:
        self.do(vc.mig_mode(self.index, on), "mig-enable" if on else "mig-disable")
        self.mig_on = on
        if self.dry:
            return
        row = self.query()
        if row.mig_current != on and row.mig_pending == on:  # Ampere: a reset makes the pending mode current
            self.do(vc.gpu_reset(self.index), "reset-gpu")
            row = self.query()
        if row.mig_current != on:
            raise _Step(f"{self.where}: MIG mode is still {'off' if on else 'on'} after '-mig {int(on)}'")

    def query(self) -> smi.GpuQueryRow:
        argv = smi.query_gpus(self.index)
        try:
            rows = [r for r in smi.parse_query_gpus(self.read(argv, "the GPU's MIG mode")) if r.index == self.index]
        except smi.SmiParseError as err:
            raise _Step(f"{self.where}: {err.message}") from None
        if len(rows) != 1:
            raise _Step(f"{self.where}: '{' '.join(argv)}' lists {len(rows)} rows for it")
        return rows[0]

    def vfs(self, on: bool) -> None:
        self.do(vc.sriov_manage(self.pf(), on, self.ctx.sriov), "vfs-enable" if on else "vfs-disable")
        if self.dry:
            return
        out = self.read(vc.numvfs(self.ctx.root, self.pf()), "sriov_numvfs")
        n = sysfs.parse_count(out, "sriov_numvfs", 4096)
        if (n > 0) != on:  # sriov-manage exits 0 when its write failed
            raise _Step(f"{self.where}: sriov_numvfs is {n} after sriov-manage {'-e' if on else '-d'}")

    def create(self, a: VgpuAction) -> None:
        name = str(a.type_name)
        slot = VgpuSlot(name, vm=a.vm, placement=a.placement)
        if self.plan.observed.host_mode == "sr-iov":
            dev = self.create_on_vf(name, a.placement, a.device)
        else:
            dev = self.create_mdev(name, a.device)
        if dev is not None:
            self.created.append((dev, slot))

    def free_vfs(self, wanted: str | None) -> list[str]:
        """The GPU's VFs without a vGPU, in virtfn order (`wanted` alone, for a rollback, when it is free). Read
        from sysfs when something changed since (`ls`, `readlink` and one `cat` of every current_vgpu_type)."""
        if self.vf_types is None or (self.done and self.done[-1].kind != "create"):
            self.vf_types = self.read_vfs()
        free = [vf for vf, t in self.vf_types if not t and vf not in self.taken]
        if wanted is not None:
            return [wanted] if wanted in free else []
        return free

    def read_vfs(self) -> list[tuple[str, int]]:
        g = self.ctx.gpu(self.index)
        if self.dry or (g is not None and g.vgpu is not None and g.vgpu.devices and not self.done):
            return [(d.address, d.type_id) for d in (g.vgpu.devices if g is not None and g.vgpu is not None else ())
                    if d.kind == "vf"]
        pf, root = self.pf(), self.ctx.root
        try:
            fns = sysfs.virtfns(sysfs.parse_listing(self.read(sysfs.list_dir(sysfs.pci_path(root, pf)), pf), pf))
            if not fns:
                return []
            links = sysfs.read_links([sysfs.pci_path(root, pf, n) for _, n in fns])
            vfs = [sysfs.link_bdf(sysfs.component(x), "virtfn") for x in
                   sysfs.parse_links(self.read(links, "the virtual functions"), len(fns), "virtfn links")]
            text = self.read(vc.vf_attributes(root, vfs, "current_vgpu_type"), "the VFs' current_vgpu_type")
            lines = text.splitlines()
            if len(lines) != len(vfs):
                raise _Step(f"{self.where}: {len(vfs)} VFs but {len(lines)} current_vgpu_type lines")
            return [(vf, sysfs.parse_current_vgpu_type(line + "\n", f"{vf} current_vgpu_type"))
                    for vf, line in zip(vfs, lines, strict=True)]
        except smi.SmiError as err:
            raise _Step(f"{self.where}: {err.message}") from None

    def create_on_vf(self, name: str, placement: str | None, wanted: str | None) -> str | None:
        vfs = self.free_vfs(wanted)
        gi = self.gi_id(placement) if placement is not None else None
        vf_text = vfs[0] if vfs else f"<a free VF of {self.pf()}>"
        if not vfs and not self.dry:
            raise _Step(f"{self.where}: no free virtual function" + (f" ({wanted} is not free)" if wanted else ""))
        if vfs:
            self.taken.add(vfs[0])
        if not vfs or (placement is not None and gi is None):  # a dry run before the VFs or the instance exist
            if placement is not None:
                self.commands.append(f"echo {gi if gi is not None else f'<id of {placement}>'} | tee "
                                     f"{_vf_path(self.ctx.root, vf_text, 'gpu_instance_id')}")
            self.commands.append(f"echo <id of {name} in creatable_vgpu_types> | tee "
                                 f"{_vf_path(self.ctx.root, vf_text, 'current_vgpu_type')}")
            return None
        vf = vfs[0]
        if gi is not None:
            self.do(vc.set_gpu_instance_id(self.ctx.root, vf, gi), "gpu-instance-id")
        out = self.read(vc.vf_attribute(self.ctx.root, vf, "creatable_vgpu_types"), f"{vf}'s creatable_vgpu_types")
        try:
            types = sysfs.parse_creatable_vgpu_types(out, f"{vf}/nvidia/creatable_vgpu_types")
        except smi.SmiParseError as err:
            raise _Step(f"{self.where}: {err.message}") from None
        for i, n in types:
            self.ctx.names.setdefault(self.index, {})[i] = smi_type_name(n)
        ids = [i for i, n in types if smi_type_name(n) == name]
        if not ids:
            if self.dry:  # the GPU instance id was not written: the VF lists what it would list then
                self.commands.append(f"echo <id of {name} in creatable_vgpu_types> | tee "
                                     f"{_vf_path(self.ctx.root, vf, 'current_vgpu_type')}")
                return None
            offered = ", ".join(smi_type_name(n) for _, n in types[:12]) or "none"
            raise _Step(f"{self.where}: {name} is not creatable on {vf} (its creatable_vgpu_types: {offered})")
        self.do(vc.set_vgpu_type(self.ctx.root, vf, ids[0]), "create")
        return vf

    def create_mdev(self, name: str, wanted: str | None) -> str | None:
        pf = self.pf()
        listing = self.read(vc.mdev_types(self.ctx.root, pf), f"{pf}'s mdev_supported_types")
        try:
            tids = sysfs.mdev_type_ids(sysfs.parse_listing(listing, "mdev_supported_types"))
            text = self.read(vc.mdev_type_names(self.ctx.root, pf, tids), "the mdev type names") if tids else ""
            names = [sysfs.parse_one_line(line + "\n", f"{pf} mdev type name") for line in text.splitlines()]
            if len(names) != len(tids):
                raise _Step(f"{self.where}: {len(tids)} mdev types but {len(names)} names")
        except smi.SmiError as err:
            raise _Step(f"{self.where}: {err.message}") from None
        hit = [t for t, n in zip(tids, names, strict=True) if smi_type_name(n) == name]
        if not hit:
            raise _Step(f"{self.where}: {pf} has no mdev type named {name}")
        if self.dry and wanted is None:
            path = sysfs.pci_path(self.ctx.root, pf, "mdev_supported_types", f"nvidia-{hit[0]}", "create")
            self.commands.append(f"echo <a new UUID> | tee {path}")
            return None
        dev = sysfs.mdev_uuid(wanted) if wanted is not None else self.ctx.new_uuid()
        self.do(vc.mdev_create(self.ctx.root, pf, hit[0], dev), "create")
        return dev


def back_actions(live: VgpuGpuState, checkpoint: VgpuGpuState, done: Sequence[VgpuAction] = ()) -> list[VgpuAction]:
    """The actions from `live` back to `checkpoint`: what was created removed, what was removed re-created with its
    type on its own device (the same VF, the same mdev UUID) and GPU instance, GPU instances, MIG, VF and
    mixed-size mode as they were (`done`: the actions that ran, for the mixed-size mode nothing reads back)."""
    def known(x: VgpuSlot) -> bool:  # a vGPU whose device is not known (`vgpu:ID`, a running VM's) is never touched
        return x.device is not None and not x.device.startswith("vgpu:")
    before = {s.device: s for s in checkpoint.slots if known(s)}
    now = {s.device: s for s in live.slots if known(s)}
    out: list[VgpuAction] = []
    for d, s in now.items():
        old = before.get(d)
        if not s.running and (old is None or (old.type_name, old.placement) != (s.type_name, s.placement)):
            out.append(VgpuAction("remove", s.type_name, d, s.placement))
    old_gis = set(checkpoint.layout) if checkpoint.mig_enabled else set()
    new_gis = set(live.layout) if live.mig_enabled else set()
    out += [VgpuAction("gi-destroy", placement=p) for p in sorted(new_gis - old_gis)]
    if live.mig_enabled != checkpoint.mig_enabled:
        out.append(VgpuAction("mig-enable" if checkpoint.mig_enabled else "mig-disable"))
    if live.vfs and not checkpoint.vfs:
        out.append(VgpuAction("vfs-disable"))
    elif checkpoint.vfs and not live.vfs:
        out.append(VgpuAction("vfs-enable"))
    kinds = [a.kind for a in done if a.kind in ("mixed-on", "mixed-off")]
    if kinds and not (live.vfs and not checkpoint.vfs):  # sriov-manage -d clears mixed-size mode itself
        out.append(VgpuAction("mixed-off" if kinds[-1] == "mixed-on" else "mixed-on"))
    out += [VgpuAction("gi-create", placement=p) for p in sorted(old_gis - new_gis)]
    for d, s in before.items():
        cur = now.get(d)
        if cur is None or (cur.type_name, cur.placement) != (s.type_name, s.placement):
            out.append(VgpuAction("create", s.type_name, d, s.placement, s.vm))
    return sorted(out, key=lambda a: _ORDER[a.kind])


def _is_bdf(dev: str) -> bool:
    try:
        return sysfs.link_bdf(dev, "device") == dev
    except smi.SmiParseError:
        return False


def _bdf_or_none(bus: str) -> str | None:
    try:
        return sysfs.bdf(bus)
    except smi.SmiError:
        return None


def _vf_path(root: str, vf: str, attribute: str) -> str:
    """A VF attribute's path for the dry run's listing (`vf` may be a placeholder there)."""
    return f"{'' if root == '/' else root}/sys/bus/pci/devices/{vf}/nvidia/{attribute}"


def _text(err: BaseException) -> str:
    if isinstance(err, HostError):
        return err.detail
    return str(err)
