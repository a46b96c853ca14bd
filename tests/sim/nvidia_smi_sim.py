#!/usr/bin/env python3
"""A stateful nvidia-smi simulator for migplan's tests (never talks to a GPU).

Run as `tests/sim/bin/nvidia-smi ARGS` (or `main(argv)` in-process). The host it pretends to be is a
JSON file named by $MIGPLAN_SIM_STATE (schema: docs/nvidia-smi.md and tests/sim/fleet.py); every run
takes an exclusive fcntl lock on `<state>.lock`, so parallel commands never corrupt it. Each run appends
its argv to the state's `log` and who ran it (`euid=N sudo_user=NAME`, SUDO_USER being set by a real sudo)
to `ran_as`.

Text and syntax follow /work/shared/reference/nvidia-smi-mig.md (cited as §n). Where the reference has
no verbatim sample, the text is modelled on its nearest sibling and marked "unverified" below. Exit
codes: the reference gives the man page's codes but never observed one per MIG error (§0), so each
NVIDIA error text exits with its NVML code, as §0 suggests: Invalid Argument 2, Not Supported 3,
Insufficient Permissions 4, Not Found 6, Timeout 10, In use by another client 19, Insufficient
Resources 23, anything else 255 - unverified.

GPU instance ids come from a per-size pool like the driver's (mig-geometry.md §6: 7g 0, 3g/4g 1-2,
2g 3-6, 1g 7-14): the lowest free id of the pool, never derived from the placement.

The GPU geometry and the placement rules are the simulator's own (tests/sim/geometry.py: verbatim -lgip /
-lgipp samples where the reference has them, tests/sim/geometry_inferred.py elsewhere). Nothing here
imports migplan, so a wrong rule or catalog entry in migplan fails against it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

try:  # imported as tests' `sim` package, or run as a script (tests/sim/bin/nvidia-smi)
    from . import geometry as geo
except ImportError:  # pragma: no cover - script mode
    import geometry as geo  # type: ignore[no-redef]

Model, Profile = geo.Model, geo.Profile
Placed = list[tuple[int, int]]  # (profile id, start) of each GPU instance on one GPU

STATE_ENV = "MIGPLAN_SIM_STATE"
EXIT_BY_ERROR = {
    "Invalid Argument": 2, "Not Supported": 3, "Insufficient Permissions": 4, "Not Found": 6, "Timeout": 10,
    "In use by another client": 19, "Insufficient Resources": 23,
}
IN_USE, NOT_FOUND, BAD_ARGS = "In use by another client", "Not Found", 2
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
BUSY_TEXT = ("{bus} is currently being used by one or more other processes (e.g. CUDA application or a monitoring "
             "application such as another instance of nvidia-smi). Please first kill all processes using the device "
             "and retry the command or reboot the system to make MIG mode effective.")  # §1 verbatim
RESET_BUSY = ("1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
              "application, graphics application such as an X server, or a monitoring application such as another "
              "instance of nvidia-smi). Please first kill all processes using this device and all compute "
              "applications running in the system.")
# Not in the reference; verbatim in public logs of `nvidia-smi -r` refused on Ampere while nvidia-persistenced or
# nvidia_drm held the GPU (ComputeCanada/puppet-magic_castle#387 via mig-parted, NVIDIA/NVSentinel#1690, which also
# shows that `nvidia-smi -pm 0` then lets the reset succeed). NVSentinel#1690 shows exit 255 where this simulator
# exits with the NVML code (19) like every other refusal (module notes): tests/test_sim.py pins 19.
# CI profile ids = NVML_COMPUTE_INSTANCE_PROFILE_* enum (mig-geometry.md §3) -> compute slices
CI_ENUM_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


class Fail(Exception):
    """Stop the command: print `lines` and exit with `code`."""

    def __init__(self, lines: Sequence[str], code: int) -> None:
        super().__init__(lines[0] if lines else "")
        self.lines = list(lines)
        self.code = code


def code_of(error: str) -> int:
    return EXIT_BY_ERROR.get(error, 255)


# --- state file -----------------------------------------------------------------------------

@contextmanager
def locked(path: str) -> Iterator[dict[str, Any]]:
    """Read the state under an exclusive lock; write it back (atomically) on normal exit."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as fh:
                state: dict[str, Any] = json.load(fh)
            yield state
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(json.dumps(state, separators=(",", ":")))  # dumps, no indent: the C encoder (bench CPU)
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def model_of(state: dict[str, Any], gpu: dict[str, Any]) -> Model | None:
    """The GPU's model: the simulator's own geometry, or a host's `catalog_files` for custom models."""
    if gpu.get("model") is None:
        return None
    return geo.find_model(gpu["model"], state.get("catalog_files", ()))


def new_uuid(state: dict[str, Any], prefix: str, seed: str) -> str:
    state["uuid_counter"] = state.get("uuid_counter", 0) + 1
    h = hashlib.sha256(f"{seed}/{state['uuid_counter']}".encode()).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# --- geometry -------------------------------------------------------------------------------

DEFAULT_DRIVER = "535.129.03"  # what a host state without `driver_version` reports


def driver_of(state: dict[str, Any]) -> str:
    """The simulated host's driver version (`driver_version` of the state): placement rules depend on it."""
    return str(state.get("driver_version", DEFAULT_DRIVER))


def gi_profile(model: Model, gi: dict[str, Any]) -> Profile:
    prof = model.profile(int(gi["profile_id"]))
    if prof is None:
        raise ValueError(f"state: {model.id} has no profile id {gi['profile_id']}")
    return prof


def placed_of(gpu: dict[str, Any]) -> Placed:
    return [(int(gi["profile_id"]), int(gi["start"])) for gi in gpu["gpu_instances"]]


def gi_id_pool(model: Model, size: int) -> range:
    """Ids of one size class: a binary tree over the memory slices (mig-geometry.md §6)."""
    level = 1
    while level * size < model.memory_slices:
        level *= 2
    return range(level - 1, 2 * level - 1)


def next_gi_id(model: Model, gpu: dict[str, Any], size: int) -> int:
    used = {gi["id"] for gi in gpu["gpu_instances"]}
    for gid in [*gi_id_pool(model, size), *range(64)]:
        if gid not in used:
            return gid
    raise Fail(["Failed to create GPU instances: Insufficient Resources"], 23)


def busy(gpu: dict[str, Any], gi: int | None = None, ci: int | None = None) -> bool:
    """A process on the GPU (or GPU instance, compute instance); or a vGPU there: `vgpu_holds`, written by the vGPU
    simulator (tests/sim_vgpu), lists the GPU instances MIG-backed vGPUs sit on and "gpu" while any vGPU exists."""
    held = gpu.get("vgpu_holds") or []
    if ci is None and (gi in held if gi is not None else bool(held)):
        return True
    return any((gi is None or p.get("gi") == gi) and (ci is None or p.get("ci") == ci) for p in gpu["processes"])


def gpu_of(argv: Sequence[str]) -> int | None:
    """The GPU index a command names with `-i N` / `--id N` / `--id=N`; None for all GPUs or another id."""
    for pos, tok in enumerate(argv):
        value = argv[pos + 1] if tok in ("-i", "--id") and pos + 1 < len(argv) else None
        if tok.startswith("--id="):
            value = tok[len("--id="):]
        if value is not None:
            return int(value) if value.isdigit() and len(value) <= 3 else None
    return None


# --- argument parsing -----------------------------------------------------------------------

MIG_FLAGS = {  # short and long forms (§0); value: does it take an argument (None = optional)
    "-lgip": ("lgip", False), "--list-gpu-instance-profiles": ("lgip", False),
    "-lgipp": ("lgipp", False), "--list-gpu-instance-possible-placements": ("lgipp", False),
    "-lgi": ("lgi", False), "--list-gpu-instances": ("lgi", False),
    "-lci": ("lci", False), "--list-compute-instances": ("lci", False),
    "-cgi": ("cgi", True), "--create-gpu-instance": ("cgi", True),
    "-C": ("C", False), "--default-compute-instance": ("C", False),
    "-cci": ("cci", None), "--create-compute-instance": ("cci", None),
    "-dci": ("dci", False), "--destroy-compute-instance": ("dci", False),
    "-dgi": ("dgi", False), "--destroy-gpu-instance": ("dgi", False),
    "-gi": ("gi", True), "--gpu-instance-id": ("gi", True),
    "-ci": ("ci", True), "--compute-instance-id": ("ci", True),
    "-i": ("id", True), "--id": ("id", True),
    "-h": ("help", False), "--help": ("help", False),
}
TOP_FLAGS = {
    "-L": ("L", False), "--list-gpus": ("L", False), "-i": ("id", True), "--id": ("id", True),
    "-mig": ("mig", True), "--multi-instance-gpu": ("mig", True), "-r": ("reset", False),
    "--gpu-reset": ("reset", False), "--query-gpu": ("query-gpu", True),
    "--query-compute-apps": ("query-compute-apps", True), "--format": ("format", True),
    "--query-accounted-apps": ("query-accounted-apps", True), "pmon": ("pmon", False), "-c": ("count", True),
}
MIG_ACTIONS = ("lgip", "lgipp", "lgi", "lci", "cgi", "cci", "dci", "dgi", "help")
TOP_ACTIONS = ("L", "mig", "reset", "query-gpu", "query-compute-apps", "query-accounted-apps", "pmon")


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """Options of one command line; raises Fail with nvidia-smi's usage error when malformed."""
    bad = Fail([INVALID_ARGS], BAD_ARGS)
    table, opts, pos = TOP_FLAGS, {}, 0
    if argv and argv[0] == "mig":
        table, opts, pos = MIG_FLAGS, {"mig-sub": True}, 1
    while pos < len(argv):
        tok, inline = argv[pos], None
        if tok.startswith("--") and "=" in tok:
            tok, inline = tok.split("=", 1)
        if tok not in table:
            raise bad
        key, takes = table[tok]
        pos += 1
        if takes is False:
            if inline is not None:
                raise bad
            opts[key] = True
            continue
        if inline is None and pos < len(argv) and (takes or not argv[pos].startswith("-")):
            inline, pos = argv[pos], pos + 1
        if inline is None and takes:
            raise bad
        opts[key] = inline if inline is not None else True
    actions = [a for a in (MIG_ACTIONS if "mig-sub" in opts else TOP_ACTIONS) if a in opts]
    if not actions and "mig-sub" not in opts and set(opts) <= {"id"}:
        actions = ["table"]  # plain `nvidia-smi [-i N]`: the default table (§12)
    if len(actions) != 1:
        raise bad
    opts["action"] = actions[0]
    return opts


def select(state: dict[str, Any], ident: Any) -> list[dict[str, Any]]:
    """GPUs named by -i: indexes, UUIDs or PCI bus ids, comma separated (§0); all when absent."""
    gpus: list[dict[str, Any]] = state["gpus"]
    if ident is None:
        return gpus
    out = []
    for part in str(ident).split(","):
        key = part.strip().lower()
        found = [g for g in gpus if key in (str(g["index"]), g["uuid"].lower())
                 or (":" in key and g["pci_bus_id"].lower().endswith(key.removeprefix("0000")))]
        if len(found) != 1 or not key:
            raise Fail(["No devices were found"], 6)  # text for an unknown -i: unverified
        out.append(found[0])
    return out


def id_list(raw: Any) -> list[int] | None:
    if raw is None:
        return None
    parts = str(raw).split(",")
    if not all(p.strip().isdigit() for p in parts):
        raise Fail([INVALID_ARGS], BAD_ARGS)
    return [int(p) for p in parts]


# --- shared pieces of the handlers ----------------------------------------------------------

def injected(inject: dict[str, Any] | None, item: int, state: dict[str, Any], mutating: bool = True) -> str | None:
    """The error to fail item `item` with: an injected fault (at its `after` index) or no root."""
    if inject is not None and item == int(inject.get("after", 0)):
        return str(inject["error"])
    if mutating and not state.get("root", True):
        return "Insufficient Permissions"  # NVML NO_PERMISSION (§5: expected, no verbatim sample)
    return None


def mig_gpus(state: dict[str, Any], opts: dict[str, Any]) -> list[tuple[dict[str, Any], Model]]:
    """Selected GPUs in MIG mode; nvidia-smi's own message when there are none (§3, §6)."""
    chosen = [(g, model_of(state, g)) for g in select(state, opts.get("id"))]
    if all(m is None for _, m in chosen):
        raise Fail(["No MIG-supported devices found."], 3)  # exit code unverified
    enabled = [(g, m) for g, m in chosen if m is not None and g["mig_current"]]
    if not enabled:
        raise Fail(["No MIG-enabled devices found."], 6)  # exit code unverified
    return enabled


def gi_targets(gpu: dict[str, Any], wanted: list[int] | None, missing: Any) -> list[dict[str, Any]]:
    gis = sorted(gpu["gpu_instances"], key=lambda gi: gi["id"])
    if wanted is None:
        return gis
    by_id = {gi["id"]: gi for gi in gis}
    for gid in wanted:
        if gid not in by_id:
            raise Fail(missing(gid), code_of(NOT_FOUND))  # text unverified
    return [by_id[gid] for gid in wanted]


def ci_name(model: Model, gi: dict[str, Any], ci: dict[str, Any]) -> str:
    prof = gi_profile(model, gi)
    return prof.name if ci["size"] == prof.compute_slices else f"{ci['size']}c.{prof.name}"


def add_ci(state: dict[str, Any], gpu: dict[str, Any], gi: dict[str, Any], profile_id: int, size: int,
           start: int) -> dict[str, Any]:
    used = {ci["id"] for ci in gi["cis"]}
    cid = min(set(range(len(used) + 1)) - used)
    ci = {"id": cid, "profile_id": profile_id, "start": start, "size": size,
          "uuid": new_uuid(state, "MIG", gpu["uuid"])}
    gi["cis"].append(ci)
    return ci


def ci_created_line(gpu: dict[str, Any], gi: dict[str, Any], ci: dict[str, Any], name: str) -> str:
    return (f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu['index']:>2} GPU instance ID "
            f"{gi['id']:>2} using profile MIG {name} (ID {ci['profile_id']:>2})")  # §5, §8


def ci_fit(gi: dict[str, Any], size: int, total: int) -> int | None:
    """First compute-slice offset where a CI of `size` fits in its GI (nvml CI placements, compute units)."""
    used = {s for ci in gi["cis"] for s in range(ci["start"], ci["start"] + ci["size"])}
    for start in range(0, total - size + 1):
        if not used & set(range(start, start + size)):
            return start
    return None


# --- mig listings ---------------------------------------------------------------------------

LGIP_HEAD = [  # §3 verbatim (A100-40GB, 79 columns)
    "+-----------------------------------------------------------------------------+",
    "| GPU instance profiles:                                                      |",
    "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
    "|                              Free/Total   GiB              CE    JPEG  OFA  |",
    "|=============================================================================|",
]
LGI_HEAD = [  # §6 verbatim (A30, driver 535, 57 columns)
    "+-------------------------------------------------------+",
    "| GPU instances:                                        |",
    "| GPU   Name             Profile  Instance   Placement  |",
    "|                          ID       ID       Start:Size |",
    "|=======================================================|",
]
LCI_HEAD = [  # §9 verbatim (H100, with Placement, 70 columns)
    "+--------------------------------------------------------------------+",
    "| Compute instances:                                                 |",
    "| GPU     GPU       Name             Profile   Instance   Placement  |",
    "|       Instance                       ID        ID       Start:Size |",
    "|         ID                                                         |",
    "|====================================================================|",
]


def lgip_rows(model: Model, gpu: dict[str, Any], driver: str | None = None) -> list[str]:
    """One GPU's -lgip rows: the verbatim sample's lines where there is one (GPU index and Free column set
    to this GPU's), else rows in the same 79-column format (§3)."""
    placed = placed_of(gpu)
    free = {p.id: geo.remaining(model, placed, p, driver) for p in model.profiles}
    if model.lgip_sample is not None:
        out = []
        for line in model.lgip_sample.splitlines()[len(LGIP_HEAD):]:
            row = geo.read_lgip(line)
            if row:
                m = _FREE.search(line)
                assert m is not None  # read_lgip matched a Free/Total column
                line = (f"|{gpu['index']:>4}{line[5:m.start()]}{free[row[0].id]:>{len(m.group(1))}}/"
                        f"{m.group(2)}{line[m.end():]}")
            out.append(line)
        return out
    rows = []
    for p in model.profiles:
        name = "MIG " + p.name
        rows.append(f"|{gpu['index']:>4}  {name:<16}{p.id:>4}{free[p.id]:>6}/{p.max_count:<3}"
                    f"      {p.gib:<11}{'No':<7}{p.sm_count:<7}{p.dec:<6}{p.enc:<4}|")
        rows.append(f"|{'':60}{p.ce:>2}{'':5}{p.jpeg:<6}{p.ofa:<4}|")
        rows.append(LGIP_HEAD[0])
    return rows


_FREE = re.compile(r"(\s*\d+)/(\d+)")


def do_lgip(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    err = injected(inject, 0, state, mutating=False)
    if err:
        raise Fail([f"Failed to display GPU instance profiles: {err}"], code_of(err))  # §3
    out.extend(LGIP_HEAD)
    for gpu, model in gpus:
        out.extend(lgip_rows(model, gpu, driver_of(state)))


def do_lgipp(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    err = injected(inject, 0, state, mutating=False)
    if err:
        raise Fail([f"Failed to display GPU instance profile placements: {err}"], code_of(err))  # unverified
    for gpu, model in gpus:
        if model.lgipp_sample is not None:  # the verbatim sample, for this GPU's index
            out.extend(re.sub(r"^GPU +\d+", f"GPU {gpu['index']:>2}", line)
                       for line in model.lgipp_sample.splitlines())
            continue
        for p in model.profiles:
            label = "Placements:" if len(p.starts) > 1 else "Placement :"  # §4
            starts = ",".join(str(s) for s in p.starts)
            out.append(f"GPU {gpu['index']:>2} Profile ID {p.id:>2} {label} {{{starts}}}:{p.memory_slices}")


def do_lgi(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    err = injected(inject, 0, state, mutating=False)
    if err:
        raise Fail([f"Failed to display GPU instances: {err}"], code_of(err))  # by analogy with §9
    rows = []
    for gpu, model in gpus:
        order = {p.id: n for n, p in enumerate(model.profiles)}
        for gi in sorted(gpu["gpu_instances"], key=lambda gi: (order[gi["profile_id"]], gi["id"])):  # §6 order
            p = gi_profile(model, gi)
            rows += [f"|{gpu['index']:>4}  {'MIG ' + p.name:<18}{p.id:>4}{gi['id']:>9}{gi['start']:>11}:"
                     f"{p.memory_slices:<6}|", LGI_HEAD[0]]
    if not rows:
        raise Fail(["No GPU instances found: Not Found"], code_of(NOT_FOUND))  # §6
    out.extend(LGI_HEAD + rows)


def do_lci(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    err = injected(inject, 0, state, mutating=False)
    if err:
        raise Fail([f"Failed to display compute instances: {err}"], code_of(err))  # §9
    wanted, rows, any_gi = id_list(opts.get("gi")), [], False
    for gpu, model in gpus:
        any_gi = any_gi or bool(gpu["gpu_instances"])
        for gi in sorted(gpu["gpu_instances"], key=lambda gi: gi["id"]):
            if wanted is not None and gi["id"] not in wanted:
                continue
            for ci in sorted(gi["cis"], key=lambda ci: ci["id"]):
                rows += [f"|{gpu['index']:>4}{gi['id']:>7}       {'MIG ' + ci_name(model, gi, ci):<18}"
                         f"{ci['profile_id']:>4}{ci['id']:>10}{ci['start']:>11}:{ci['size']:<6}|", LCI_HEAD[0]]
    if not rows:
        text = "No compute instances found: Not Found" if any_gi else "No GPU instances found: Not Found"
        raise Fail([text], code_of(NOT_FOUND))  # compute-instance text by analogy (unverified)
    out.extend(LCI_HEAD + rows)


# --- mig create / destroy -------------------------------------------------------------------

def resolve_gi(model: Model, placed: Placed, token: str,
               driver: str | None = None) -> tuple[Profile | None, int | None, str | None]:
    """(profile, start, error) for one `-cgi` tuple `PROFILE[:START]` (§5), by the simulator's own rules on a host
    with `driver`. A combination the driver does not support (geometry.R510_COMBINATION) is refused with the
    generic "Insufficient Resources" of §5: the reference has no text for that refusal (unverified)."""
    ref, sep, start_txt = token.rpartition(":") if ":" in token else (token, "", "")
    prof = model.profile(ref)
    if prof is None or (sep and not start_txt.isdigit()):
        return None, None, "Invalid Argument"
    if sep and int(start_txt) not in prof.starts:
        return prof, None, "Invalid Argument"  # a placement -lgipp does not list (unverified code)
    starts = [int(start_txt)] if sep else sorted(prof.starts, reverse=True)  # driver's choice: undocumented (§5)
    for start in starts:
        if not geo.conflicts(model, [*placed, (prof.id, start)], driver):
            return prof, start, None
    return prof, None, "Insufficient Resources"  # overlap, compute slices, per-profile, +me or driver limit (§5)


def do_cgi(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    tokens = str(opts["cgi"]).split(",")
    for gpu, model in gpus:
        for item, token in enumerate(tokens):
            prof, start, err = resolve_gi(model, placed_of(gpu), token, driver_of(state))
            err = injected(inject, item, state) or err
            if err or prof is None or start is None:
                shown = token.rpartition(":")[0] if ":" in token else token  # echoed as typed (§5)
                raise Fail([f"Unable to create a GPU instance on GPU {gpu['index']:>2} using profile {shown}: {err}",
                            f"Failed to create GPU instances: {err}"], code_of(str(err)))
            gi = {"id": next_gi_id(model, gpu, prof.memory_slices), "profile_id": prof.id, "start": start, "cis": []}
            gpu["gpu_instances"].append(gi)
            out.append(f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu['index']:>2} using profile "
                       f"MIG {prof.name} (ID {prof.id:>2})")
            if opts.get("C"):
                ci = add_ci(state, gpu, gi, prof.ci_default_id, prof.compute_slices, 0)
                out.append(ci_created_line(gpu, gi, ci, prof.name))


def ci_size(prof: Profile, profile_id: int) -> int | None:
    if profile_id == prof.ci_default_id:
        return prof.compute_slices
    size = CI_ENUM_SLICES.get(profile_id)
    return size if size is not None and size < prof.compute_slices else None


def do_cci(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    ids = None if opts["cci"] is True else id_list(opts["cci"])
    item = 0
    for gpu, model in gpus:
        def missing(gid: int, gpu: dict[str, Any] = gpu) -> list[str]:
            return [f"Unable to create a compute instance on GPU {gpu['index']:>2} GPU instance ID {gid:>2}: "
                    f"{NOT_FOUND}", f"Failed to create compute instances: {NOT_FOUND}"]
        for gi in gi_targets(gpu, id_list(opts.get("gi")), missing):
            prof = gi_profile(model, gi)
            for pid in ids or [prof.ci_default_id]:
                size = ci_size(prof, pid)
                start = None if size is None else ci_fit(gi, size, prof.compute_slices)
                err = injected(inject, item, state) or (
                    "Invalid Argument" if size is None else "Insufficient Resources" if start is None else None)
                item += 1
                if err or size is None or start is None:  # texts by analogy with §5 (unverified)
                    raise Fail([f"Unable to create a compute instance on GPU {gpu['index']:>2} GPU instance ID "
                                f"{gi['id']:>2} using profile {pid}: {err}",
                                f"Failed to create compute instances: {err}"], code_of(str(err)))
                ci = add_ci(state, gpu, gi, pid, size, start)
                out.append(ci_created_line(gpu, gi, ci, ci_name(model, gi, ci)))


def do_dci(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    wanted_ci, item = id_list(opts.get("ci")), 0
    for gpu, _model in gpus:
        if not gpu["gpu_instances"]:
            raise Fail(["No GPU instances found: Not Found"], code_of(NOT_FOUND))  # §10

        def unable(gid: int, cid: int | str, err: str, gpu: dict[str, Any] = gpu) -> list[str]:
            return [f"Unable to destroy compute instance ID {cid:>2} from GPU {gpu['index']:>2} GPU instance ID "
                    f"{gid:>2}: {err}", f"Failed to destroy compute instances: {err}"]  # by analogy with §10
        targets = []
        for gi in gi_targets(gpu, id_list(opts.get("gi")), lambda gid: unable(gid, "", NOT_FOUND)):
            cis = {ci["id"]: ci for ci in gi["cis"]}
            for cid in wanted_ci if wanted_ci is not None else sorted(cis):
                if cid not in cis:
                    raise Fail(unable(gi["id"], cid, NOT_FOUND), code_of(NOT_FOUND))
                targets.append((gi, cis[cid]))
        if not targets:
            raise Fail(["No compute instances found: Not Found"], code_of(NOT_FOUND))  # unverified
        for gi, ci in targets:
            err = injected(inject, item, state) or (IN_USE if busy(gpu, gi["id"], ci["id"]) else None)
            item += 1
            if err:
                raise Fail(unable(gi["id"], ci["id"], err), code_of(err))
            gi["cis"].remove(ci)
            out.append(f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {gpu['index']:>2} "
                       f"GPU instance ID {gi['id']:>2}")  # §10


def do_dgi(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    gpus = mig_gpus(state, opts)
    item = 0
    for gpu, _model in gpus:
        if not gpu["gpu_instances"]:
            raise Fail(["No GPU instances found: Not Found"], code_of(NOT_FOUND))  # §10

        def unable(gid: int, err: str, gpu: dict[str, Any] = gpu) -> list[str]:
            return [f"Unable to destroy GPU instance ID {gid:>2} from GPU {gpu['index']:>2}: {err}",
                    f"Failed to destroy GPU instances: {err}"]  # §10 verbatim
        for gi in gi_targets(gpu, id_list(opts.get("gi")), lambda gid: unable(gid, NOT_FOUND)):
            err = injected(inject, item, state) or (IN_USE if gi["cis"] or busy(gpu, gi["id"]) else None)
            item += 1
            if err:
                raise Fail(unable(gi["id"], err), code_of(err))
            gpu["gpu_instances"].remove(gi)
            out.append(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu['index']:>2}")


# --- MIG mode and reset ---------------------------------------------------------------------

def _mode_change(gpu: dict[str, Any], model: Model, on: bool, out: list[str]) -> None:
    bus, verb = gpu["pci_bus_id"], "enable" if on else "disable"
    refused = [f"Unable to {verb} MIG Mode for GPU {bus}: {IN_USE}", "Terminating early due to previous errors."]
    if not on and gpu["gpu_instances"]:
        raise Fail(refused, code_of(IN_USE))  # §1 "Disable refused"
    gpu["mig_pending"] = on
    if gpu["mig_current"] != on and model.reset_required_for_mode:
        how = gpu.get("mode_reset", "in-use")  # Ampere: the driver's own reset attempt (§1)
        if busy(gpu) or how == "in-use":
            out += [f"Warning: MIG mode is in pending {verb} state for GPU {bus}:{IN_USE}", BUSY_TEXT.format(bus=bus)]
            return
        if how == "not-supported":
            out += [f"Warning: MIG mode is in pending {verb} state for GPU {bus}:Not Supported",
                    f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU {bus}"]
            return
    elif gpu["mig_current"] != on and busy(gpu):
        raise Fail(refused, code_of(IN_USE))  # Hopper+: immediate, refused while in use (§1)
    gpu["mig_current"] = on
    out.append(f"{'Enabled' if on else 'Disabled'} MIG Mode for GPU {bus}")


def do_mig_mode(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    value = str(opts["mig"]).upper()
    if value not in ("0", "1", "ENABLED", "DISABLED"):
        raise Fail([INVALID_ARGS], BAD_ARGS)
    on = value in ("1", "ENABLED")
    for item, gpu in enumerate(select(state, opts.get("id"))):
        model = model_of(state, gpu)
        err = injected(inject, item, state)
        if err:  # modelled on §1 "Disable refused"
            raise Fail([f"Unable to {'enable' if on else 'disable'} MIG Mode for GPU {gpu['pci_bus_id']}: {err}",
                        "Terminating early due to previous errors."], code_of(err))
        if model is None:  # §1 GPU without MIG support
            out += [f"Unable to {'enable' if on else 'disable'} MIG Mode for GPU {gpu['pci_bus_id']}: Not Supported",
                    "Treating as warning and moving on."]
            continue
        _mode_change(gpu, model, on, out)
    out.append("All done.")


def do_reset(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    """`nvidia-smi -r`: applies a pending MIG mode and clears GPU/compute instances. Success and refusal
    texts are not in the reference (unverified); `is not supported` is §1 verbatim."""
    for item, gpu in enumerate(select(state, opts.get("id"))):
        bus = gpu["pci_bus_id"]
        held = busy(gpu) or bool(gpu.get("reset_holders"))  # e.g. nvidia-persistenced, nvidia_drm, Xorg
        err = injected(inject, item, state) or (IN_USE if held else None)
        if err:
            tail = ["", RESET_BUSY] if err == IN_USE else []
            raise Fail(["The following GPUs could not be reset:", f"  GPU {bus}: {err}", *tail], code_of(err))
        if gpu.get("mode_reset") == "not-supported":
            raise Fail([f"Resetting GPU {bus} is not supported."], code_of("Not Supported"))
        gpu["mig_current"] = gpu["mig_pending"]
        gpu["gpu_instances"] = []
        out.append(f"GPU {bus} was successfully reset.")
    out.append("All done.")


# --- -L and CSV queries ---------------------------------------------------------------------

def mig_devices(gpu: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(GPU instance, compute instance) in MIG device order: by GI id, then CI id (§11, §12)."""
    return [(gi, ci) for gi in sorted(gpu["gpu_instances"], key=lambda g: g["id"])
            for ci in sorted(gi["cis"], key=lambda c: c["id"])]


def do_list(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    for gpu in select(state, opts.get("id")):
        check_query(state, gpu, inject)
        out.append(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")  # §11
        model = model_of(state, gpu)
        if model is None or not gpu["mig_current"]:
            continue
        devices = mig_devices(gpu)
        for n, (gi, ci) in enumerate(devices):
            out.append(f"  MIG {ci_name(model, gi, ci):<11} Device {n:>2}: (UUID: {ci['uuid']})")


def check_query(state: dict[str, Any], gpu: dict[str, Any], inject: dict[str, Any] | None) -> None:
    err = injected(inject, 0, state, mutating=False)
    if err:  # unverified text
        raise Fail([f"Unable to determine the device handle for GPU {gpu['pci_bus_id']}: {err}"], code_of(err))


def csv_format(opts: dict[str, Any]) -> tuple[bool, bool]:
    """(header, units) from --format=csv[,noheader][,nounits] (§2)."""
    parts = str(opts.get("format", "")).split(",")
    if "csv" not in parts or set(parts) - {"csv", "noheader", "nounits"}:
        raise Fail([INVALID_ARGS], BAD_ARGS)
    return "noheader" not in parts, "nounits" not in parts


MIB_FIELDS = {"memory.total", "memory.used", "memory.free", "used_memory", "used_gpu_memory"}


def gpu_field(state: dict[str, Any], gpu: dict[str, Any], field: str) -> str | None:
    used = sum(p["used_memory_mib"] for p in gpu["processes"])
    mig = None if model_of(state, gpu) is None else gpu
    values: dict[str, Any] = {
        "index": gpu["index"], "uuid": gpu["uuid"], "gpu_uuid": gpu["uuid"], "name": gpu["name"],
        "gpu_name": gpu["name"], "pci.bus_id": gpu["pci_bus_id"], "gpu_bus_id": gpu["pci_bus_id"],
        "memory.total": gpu["memory_total_mib"], "memory.used": used, "memory.free": gpu["memory_total_mib"] - used,
        "mig.mode.current": "[N/A]" if mig is None else ("Enabled" if gpu["mig_current"] else "Disabled"),
        "mig.mode.pending": "[N/A]" if mig is None else ("Enabled" if gpu["mig_pending"] else "Disabled"),
        "pci.device_id": gpu["pci_device_id"], "driver_version": driver_of(state),
        "count": len(state["gpus"]),
    }
    return None if field not in values else str(values[field])


def app_field(gpu: dict[str, Any], proc: dict[str, Any], field: str) -> str | None:
    values: dict[str, Any] = {
        "pid": proc["pid"], "process_name": proc["name"], "name": proc["name"], "gpu_uuid": gpu["uuid"],
        "gpu_name": gpu["name"], "gpu_bus_id": gpu["pci_bus_id"], "used_memory": proc["used_memory_mib"],
        "used_gpu_memory": proc["used_memory_mib"],
    }
    return None if field not in values else str(values[field])


def do_query(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    apps = opts["action"] == "query-compute-apps"
    fields = str(opts[opts["action"]]).split(",")
    header, units = csv_format(opts)
    rows: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for gpu in select(state, opts.get("id")):
        check_query(state, gpu, inject)
        rows += [(gpu, p) for p in gpu["processes"]] if apps else [(gpu, None)]
    dummy = {"index": 0, "uuid": "", "name": "", "pci_bus_id": "", "memory_total_mib": 0, "processes": [],
             "model": None, "pci_device_id": ""}
    for field in fields:
        probe = app_field(dummy, {"pid": 0, "name": "", "used_memory_mib": 0}, field) if apps \
            else gpu_field(state, dummy, field)
        if probe is None:
            raise Fail([f'Field "{field}" is not a valid field to query.'], BAD_ARGS)  # unverified text
    if header:
        out.append(", ".join(f + (" [MiB]" if units and f in MIB_FIELDS else "") for f in fields))
    for gpu, proc in rows:
        vals = [str(app_field(gpu, proc, f) if proc is not None else gpu_field(state, gpu, f)) for f in fields]
        unit = [" MiB" if units and f in MIB_FIELDS else "" for f in fields]
        out.append(", ".join(v + u for v, u in zip(vals, unit, strict=True)))


# --- `nvidia-smi mig -h` and the plain `nvidia-smi` table -------------------------------------------

PLACEMENT_HELP = ("A profile tuple consists of a profile name or ID and an optional placement specifier, which "
                  "consists of a colon and a placement start index. Provide comma separated values for more than one "
                  "profile tuple(e.g. 1:0,4:2).")  # §5: verbatim from the real help text


def do_mig_help(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    """`nvidia-smi mig -h`. Only PLACEMENT_HELP is verbatim (§5); the rest is modelled on it (unverified). A host
    with `cgi_placement: false` is a driver whose -cgi takes no placement (its help lacks the sentence)."""
    cgi = "    [-cgi | --create-gpu-instance]: Create GPU instances for the given profiles. A profile can be " \
          "specified by ID or name. Provide comma separated values for more than one profile."
    if state.get("cgi_placement", True):
        cgi += " " + PLACEMENT_HELP
    out += ["", "    mig -- Multi Instance GPU management.", "", "    Usage: nvidia-smi mig [options]", "",
            "    Options include:", "    [-h | --help]: Display help information",
            "    [-i | --id]: Enumeration index, PCI bus ID or UUID.",
            "    [-gi | --gpu-instance-id]: GPU instance ID.",
            "    [-lgip | --list-gpu-instance-profiles]: List supported GPU instance profiles.",
            "    [-lgipp | --list-gpu-instance-possible-placements]: List possible GPU instance placements.",
            cgi, "    [-C | --default-compute-instance]: Create compute instance with the default profile.",
            "    [-lgi | --list-gpu-instances]: List GPU instances.",
            "    [-dgi | --destroy-gpu-instance]: Destroy GPU instances.",
            "    [-cci | --create-compute-instance]: Create compute instances.",
            "    [-lci | --list-compute-instances]: List compute instances.",
            "    [-dci | --destroy-compute-instance]: Destroy compute instances."]


MIG_TABLE_HEAD = [  # §12 verbatim
    "| MIG devices:                                                                          |",
    "+------------------+--------------------------------+-----------+-----------------------+",
    "| GPU  GI  CI  MIG |                   Memory-Usage |        Vol|      Shared           |",
    "|      ID  ID  Dev |                     BAR1-Usage | SM     Unc| CE ENC DEC OFA JPG    |",
    "|                  |                                |        ECC|                       |",
    "|==================+================================+===========+=======================|",
]


def instance_memory(gpu: dict[str, Any], prof: Profile) -> int:
    """MiB the driver gives a created instance: the profile's, unless the state says less (`instance_memory_mib`,
    a host whose driver hands out less than its -lgip promised)."""
    return int(gpu.get("instance_memory_mib", {}).get(prof.name, prof.memory_mib))


def do_table(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    """Plain `nvidia-smi [-i N]`: a short GPU header (modelled, unverified) and the MIG devices table (§12 format:
    GPU, GI ID, CI ID, MIG device index, memory used / total of the instance)."""
    gpus = select(state, opts.get("id"))
    out += ["+---------------------------------------------------------------------------------------+",
            f"| NVIDIA-SMI (simulated)       Driver Version: {driver_of(state):<41}|",
            "+---------------------------------------------------------------------------------------+"]
    rows = []
    for gpu in gpus:
        check_query(state, gpu, inject)
        model = model_of(state, gpu)
        if model is None or not gpu["mig_current"]:
            continue
        devices = mig_devices(gpu)
        for n, (gi, ci) in enumerate(devices):
            prof = gi_profile(model, gi)
            used = sum(p["used_memory_mib"] for p in gpu["processes"] if p.get("gi") == gi["id"])
            mem = f"{used}MiB / {instance_memory(gpu, prof)}MiB"
            rows += [f"|{gpu['index']:>3}{gi['id']:>5}{ci['id']:>4}{n:>4}  |{mem:>30}  |{prof.sm_count:>3}      0 |"
                     f"{prof.ce:>3}{prof.enc:>4}{prof.dec:>5}{prof.ofa:>5}{prof.jpeg:>5} |",
                     f"|                  |{'0MiB / 16383MiB':>30}  |           |                       |",
                     MIG_TABLE_HEAD[1]]
    if rows:
        out += ["", "+---------------------------------------------------------------------------------------+",
                *MIG_TABLE_HEAD, *rows]
    out += processes_table(gpus)  # the "Processes:" section after the GPU tables


# --- latency (the benchmark): real MIG commands take time --------------------------------------------

LATENCY_DEFAULTS = {  # seconds on real hardware, modelled (not measured here): a second or so per GPU instance
    "command_s": 0.05,  # created, a few seconds per reset (issue 10); `scale` shrinks them all for a run
    "gi_created_s": 1.0, "gi_destroyed_s": 0.3, "reset_s": 3.0, "mode_s": 0.5, "scale": 1.0,
}


def latency_s(state: dict[str, Any], argv: Sequence[str], lines: Sequence[str]) -> tuple[float, float]:
    """(modelled seconds, seconds to sleep = modelled x scale) for one command; (0, 0) without `latency`."""
    conf = state.get("latency")
    if not conf:
        return 0.0, 0.0
    c = {**LATENCY_DEFAULTS, **conf}
    raw = c["command_s"] + c["gi_created_s"] * sum(ln.startswith("Successfully created GPU instance") for ln in lines)
    raw += c["gi_destroyed_s"] * sum(ln.startswith("Successfully destroyed GPU instance") for ln in lines)
    raw += c["reset_s"] * sum(ln.endswith("was successfully reset.") for ln in lines)
    raw += c["mode_s"] * ("-mig" in argv or "--multi-instance-gpu" in argv)
    return raw, raw * float(c["scale"])


# --- accounting and pmon (usage samples) ------------------------------------------------------------

PROC_BAR = "+" + "-" * 89 + "+"  # 91 columns


def processes_table(gpus: list[dict[str, Any]]) -> list[str]:
    """The "Processes:" table of plain nvidia-smi, 91 columns as in public output of drivers 535-550 (not in the
    reference): GPU, GI ID, CI ID (N/A outside MIG), PID, type, name (cut to '...' and its last 37 characters),
    memory in MiB; "No running processes found" when there are none."""
    head = [PROC_BAR, f"| {'Processes:':<88}|",
            "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|"]
    rows = []
    for gpu in gpus:
        for p in gpu["processes"]:
            gi = "N/A" if p.get("gi") is None else str(p["gi"])
            ci = "N/A" if p.get("ci") is None else str(p["ci"])
            name = str(p["name"]) if len(str(p["name"])) <= 40 else "..." + str(p["name"])[-37:]
            rows.append(f"|{gpu['index']:>5}{gi:>6}{ci:>5}{p['pid']:>10}{'C':>7}   {name:<40}"
                        f"{str(p['used_memory_mib']) + 'MiB':>12} |")
    if not rows:
        rows = [f"|  {'No running processes found':<87}|"]
    return ["", *head, *rows, PROC_BAR]



ACCOUNTED = {"gpu_uuid": None, "gpu_name": None, "gpu_bus_id": None, "pid": None, "gpu_utilization": "%",
             "gpu_util": "%", "mem_utilization": "%", "mem_util": "%", "max_memory_usage": "MiB", "time": "ms"}


def do_accounted(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    """`--query-accounted-apps` (§14: header and units verbatim). A GPU lists its processes only with
    `accounting: true` and MIG off (NVML forces accounting off in MIG mode); running ones have time 0, finished
    ones come from the GPU's `accounted` list. A GPU without accounting prints nothing (unverified)."""
    fields = str(opts["query-accounted-apps"]).split(",")
    header, units = csv_format(opts)
    bad = [f for f in fields if f not in ACCOUNTED]
    if bad:
        raise Fail([f'Field "{bad[0]}" is not a valid field to query.'], BAD_ARGS)  # unverified text
    if header:
        out.append(", ".join(f + (f" [{ACCOUNTED[f]}]" if units and ACCOUNTED[f] else "") for f in fields))
    for gpu in select(state, opts.get("id")):
        check_query(state, gpu, inject)
        if not gpu.get("accounting") or gpu["mig_current"]:
            continue
        rows = [{"pid": p["pid"], "util": p.get("sm_util", 0), "mem": p.get("mem_util", 0),
                 "max": p.get("max_memory_mib", p["used_memory_mib"]), "time": 0} for p in gpu["processes"]]
        rows += [{"pid": a["pid"], "util": a.get("gpu_util", 0), "mem": a.get("mem_util", 0),
                  "max": a.get("max_memory_mib", 0), "time": a.get("time_ms", 1)} for a in gpu.get("accounted", [])]
        for r in rows:
            values = {"gpu_uuid": gpu["uuid"], "gpu_name": gpu["name"], "gpu_bus_id": gpu["pci_bus_id"],
                      "pid": r["pid"], "gpu_utilization": r["util"], "gpu_util": r["util"], "mem_utilization": r["mem"],
                      "mem_util": r["mem"], "max_memory_usage": r["max"], "time": r["time"]}
            out.append(", ".join(str(values[f]) + (f" {ACCOUNTED[f]}" if units and ACCOUNTED[f] else "")
                                 for f in fields))


def do_pmon(state: dict[str, Any], opts: dict[str, Any], out: list[str], inject: dict[str, Any] | None) -> None:
    """`nvidia-smi pmon -c N`: N samples (no waiting here). The layout with jpg/ofa columns of newer drivers, as
    in public output (the reference has none). A process's `sm_util` (default 0); in MIG mode '-' (utilisation is
    not attributed there; unverified). A GPU without processes prints a row of dashes."""
    count = str(opts.get("count", "1"))
    if not count.isdigit() or not 1 <= int(count) <= 10000:
        raise Fail([INVALID_ARGS], BAD_ARGS)
    gpus = select(state, opts.get("id"))
    for gpu in gpus:
        check_query(state, gpu, inject)
    out += ["# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command ",
            "# Idx           #    C/G      %      %      %      %      %      %    name "]
    for _ in range(int(count)):
        for gpu in gpus:
            if not gpu["processes"]:
                out.append(f"{gpu['index']:>5} {'-':>10} {'-':>5} " + " ".join(f"{'-':>6}" for _ in range(6))
                           + "    -              ")
            for p in gpu["processes"]:
                sm = "-" if gpu["mig_current"] else str(p.get("sm_util", 0))
                mem = "-" if gpu["mig_current"] else str(p.get("mem_util", 0))
                name = str(p["name"]).rsplit("/", 1)[-1][:15]
                out.append(f"{gpu['index']:>5} {p['pid']:>10} {'C':>5} {sm:>6} {mem:>6} "
                           + " ".join(f"{'-':>6}" for _ in range(4)) + f"    {name:<15}")


HANDLERS = {
    "help": do_mig_help, "table": do_table,
    "lgip": do_lgip, "lgipp": do_lgipp, "lgi": do_lgi, "lci": do_lci, "cgi": do_cgi, "cci": do_cci,
    "dci": do_dci, "dgi": do_dgi, "mig": do_mig_mode, "reset": do_reset, "L": do_list,
    "query-gpu": do_query, "query-compute-apps": do_query,
    "query-accounted-apps": do_accounted, "pmon": do_pmon,
}


# --- host-level failures, fault injection, entry point --------------------------------------

def host_failure(state: dict[str, Any]) -> tuple[list[str], list[str], int] | None:
    """(stdout, stderr, exit) when the host itself fails before nvidia-smi runs (for the SSH layer)."""
    host, user = state.get("hostname", "gpu-host"), state.get("user", "root")
    ssh = state.get("ssh", "ok")
    if ssh == "down":  # OpenSSH client text and exit status 255
        return [], [f"ssh: connect to host {host} port 22: Connection refused"], 255
    if ssh == "auth-denied":
        return [], [f"{user}@{host}: Permission denied (publickey)."], 255
    if state.get("nvidia_smi", "installed") == "missing":
        return [], ["bash: line 1: nvidia-smi: command not found"], 127
    if state.get("driver_loaded", True) is False:  # exit 9 = "NVIDIA driver is not loaded" (§0); text unverified
        return ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                "latest NVIDIA driver is installed and running."], [], 9
    return None


def take_fault(state: dict[str, Any], argv: Sequence[str]) -> dict[str, Any] | None:
    """The first fault whose `match` tokens all appear in argv (and `gpu`, if given, is the -i value)."""
    for fault in state.get("faults", []):
        tokens = str(fault.get("match", "")).split()
        if not all(t in argv for t in tokens):
            continue
        if "gpu" in fault and gpu_of(argv) != fault["gpu"]:
            continue
        if fault.get("skip", 0) > 0:
            fault["skip"] -= 1
            continue
        if "times" in fault:
            if fault["times"] <= 0:
                continue
            fault["times"] -= 1
        fault["fired"] = fault.get("fired", 0) + 1
        return dict(fault)
    return None


def spawn_process(state: dict[str, Any], fault: dict[str, Any], index: int | None) -> None:
    """Fault `spawn: START`: a CUDA process appears on the GPU instance placed at START (its first CI)."""
    for gpu in state["gpus"]:
        if index is not None and gpu["index"] != index:
            continue
        for gi in gpu["gpu_instances"]:
            if gi["start"] == int(fault["spawn"]) and gi["cis"]:
                gpu["processes"].append({"pid": int(fault.get("pid", 4242)), "name": "late.py", "used_memory_mib": 512,
                                         "gi": gi["id"], "ci": gi["cis"][0]["id"]})
                return


def run(state: dict[str, Any], argv: Sequence[str], inject: dict[str, Any] | None) -> tuple[list[str], int]:
    out: list[str] = []
    try:
        opts = parse_args(argv)
        HANDLERS[opts["action"]](state, opts, out, inject)
    except Fail as fail:
        return out + fail.lines, fail.code
    return out, 0


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ) if env is None else env
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    path = env.get(STATE_ENV)
    if not path:
        stderr.write(f"nvidia-smi simulator: set {STATE_ENV} to a host state file\n")
        return 255
    with locked(path) as state:
        state.setdefault("log", []).append(argv)
        who = f"euid={os.geteuid()} sudo_user={env.get('SUDO_USER', '')}"  # SUDO_USER: set by the real sudo
        if who not in state.setdefault("ran_as", []):
            state["ran_as"].append(who)
        early = host_failure(state)
        fault = None if early else take_fault(state, argv)
    if early:
        stdout.write("".join(line + "\n" for line in early[0]))
        stderr.write("".join(line + "\n" for line in early[1]))
        return early[2]
    if fault and fault.get("hang"):
        # a command that takes `hang` seconds before it takes effect; if its caller dies meanwhile (an ssh session
        # closing, migplan killed) it ends without effect, as a command whose session is gone gets nowhere
        parent, end = os.getppid(), time.monotonic() + float(fault["hang"])
        while time.monotonic() < end:
            if os.getppid() != parent:
                return 255
            time.sleep(0.02)
    if fault and fault.get("drop") in (True, "before"):
        return 255  # the connection died: no output, ssh's status 255, state untouched
    if fault and any(k in fault for k in ("exit", "stdout", "stderr")):
        stdout.write(fault.get("stdout", ""))
        stderr.write(fault.get("stderr", ""))
        return int(fault.get("exit", 0))
    with locked(path) as state:
        if fault and fault.get("spawn"):  # a process starts on the GI at `spawn` start just before this command
            spawn_process(state, fault, gpu_of(argv))
        lines, code = run(state, argv, fault if fault and "error" in fault else None)
        raw, delay = latency_s(state, argv, lines)
        if raw:
            state["latency_modelled_s"] = round(state.get("latency_modelled_s", 0.0) + raw, 6)
    if delay:
        time.sleep(delay)  # outside the state lock: other commands on this host are not held up by it
    if fault and fault.get("drop") == "after":
        return 255  # the command took effect, but its output and status never arrived
    stdout.write("".join(line + "\n" for line in lines))  # nvidia-smi writes its errors to stdout too (unverified)
    return code


if __name__ == "__main__":
    sys.exit(main())
