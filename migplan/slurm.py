"""Slurm's view of a plan: each node's `Gres=` for slurm.conf and its gres.conf (pure; docs/slurm.md).

Slurm schedules a MIG device as one `gpu` GRES (SchedMD doc/html/gres.shtml, "MIG Management"). Per node:

* slurm.conf: `GresTypes=gpu` and, on the node's one NodeName line (a node named on two lines has the second
  ignored, slurm.conf(5) "NODE CONFIGURATION"), `Gres=gpu:TYPE:COUNT,...`. Every GPU is typed: slurm.conf(5)
  `Gres` forbids "both an untyped GRES and a typed GRES with the same <name>" on one node, so whole GPUs get a
  type too (`whole_type`).
* gres.conf, as the operator chooses (`MODES`):
  - `autodetect`: `NodeName=N AutoDetect=nvml`; slurmd finds the MIG devices through NVML when it starts. The
    slurm.conf types must then be substrings of the names slurmd makes (gres.shtml: "This type must be a
    substring of the 'MIG Profile' string"), which depend on the Slurm release (`TYPE_STYLES`).
  - `files`: one line per device, `AutoDetect=off` on the node's first line. A MIG device is
    `MultipleFiles=/dev/nvidia<gpu>,/dev/nvidia-caps/nvidia-cap<gi>,/dev/nvidia-caps/nvidia-cap<ci>` (gres.conf(5)
    `MultipleFiles`; the three files Slurm's own NVML code gives a MIG device, src/plugins/gpu/nvml/gpu_nvml.c
    `_handle_mig`), a whole GPU `File=/dev/nvidia<gpu>`.

The capability minors are NVIDIA's fixed table (`cap_minors`), but the GPU instance and compute instance ids
are the driver's choice when an instance is created: a plan does not know them. The files mode therefore takes
them from what was read after the apply (a discovery snapshot, `LiveGpu`), and refuses a GPU that is not
exactly as planned there.

Unverified here (no GPU): that `/dev/nvidia<index>` is the GPU of nvidia-smi index `index` (Slurm uses the
device minor number; they are equal unless the system numbers them otherwise: `nvidia-smi -q | grep Minor`), and
the MIG device names slurmd makes with NVML (the type styles below follow Slurm's source and public job scripts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migplan.catalog.geometry import GiProfile, GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.errors import InputError

GRES_NAME = "gpu"
MODES = ("autodetect", "files")
# How a MIG device's type is written (autodetect must match what slurmd makes from NVML):
#  nvidia:  NVIDIA's profile name (3g.40gb). Slurm 23.02.6 and later take the MIG device's name from NVML
#           (SchedMD/slurm 04f0e4c3d7 "Get mig profile name from nvidia if possible", gpu_nvml.c `_handle_mig`:
#           the part after "mig" of e.g. "nvidia_a100-sxm4-80gb_mig_3g.40gb").
#  rounded: Slurm 23.02.5 and earlier, 22.05 included (gpu_nvml.c at tag slurm-22-05-8-1): the GPU instance's
#           slice count and its memory in GiB rounded to the nearest (`roundl(memorySizeMB / 1024)`), so
#           3g.40gb (40,192 MiB) is 3g.39gb; public job scripts request exactly `gpu:nvidia_a100_80gb_pcie_3g.39gb`.
TYPE_STYLES = ("nvidia", "rounded")
# NVIDIA's capability device minors (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-caps.c, commit
# 1739a20e: `_nv_cap_table_init` numbers the tables in order from 0: nvlink fabric-mgmt 0, mig config 1,
# mig monitor 2, then for gpu0..gpu31 each of gi0..gi14 as `access` followed by its ci0..ci7). The same table is
# printed in /proc/driver/nvidia-caps/mig-minors ("gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13"), which is
# where Slurm reads them (gpu_nvml.c `_nvml_get_mig_minor_numbers`).
CAP_FIRST = 3
CAP_GPUS = 32
CAP_GIS = 15
CAP_CIS = 8
CAP_PER_GI = 1 + CAP_CIS
CAP_PER_GPU = CAP_GIS * CAP_PER_GI
# A Slurm node name and a GRES type as migplan writes them: plain tokens (no ',', ':', '=', '[', space, '#'),
# so that a value can never split a slurm.conf or gres.conf line into other keys.
_NODE_NAME = re.compile(r"\A[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?\Z")
_TYPE_NAME = re.compile(r"\A[A-Za-z0-9](?:[A-Za-z0-9._+-]{0,62}[A-Za-z0-9])?\Z")
MAX_HOSTLIST = 65536  # names one slurm.conf NodeName expression may expand to (far above any real line)


def cap_minors(gpu: int, gi: int, ci: int) -> tuple[int, int]:
    """The /dev/nvidia-caps minors of GPU `gpu`'s GPU instance `gi` and its compute instance `ci`."""
    if not (0 <= gpu < CAP_GPUS and 0 <= gi < CAP_GIS and 0 <= ci < CAP_CIS):
        raise InputError(f"GPU {gpu}, GPU instance {gi}, compute instance {ci} is outside NVIDIA's capability "
                         f"table (gpu0..gpu{CAP_GPUS - 1}, gi0..gi{CAP_GIS - 1}, ci0..ci{CAP_CIS - 1})",
                         hint="use --gres-conf autodetect for this node")
    base = CAP_FIRST + gpu * CAP_PER_GPU + gi * CAP_PER_GI
    return base, base + 1 + ci


def _gib_rounded(mib: int) -> int:
    """C's roundl(mib / 1024): to the nearest, halves away from zero (exact in integers)."""
    return (2 * mib + 1024) // 2048


def mig_type(profile: GiProfile, style: str = "nvidia") -> str:
    """The GRES type of a MIG device of `profile` (see TYPE_STYLES)."""
    if style == "rounded":
        return f"{profile.compute_slices}g.{_gib_rounded(profile.memory_mib)}gb"
    return profile.name


def whole_type(model: GpuModel, overrides: Mapping[str, str]) -> str:
    """A whole GPU's type: `--gpu-type MODEL=TYPE`, else the catalog model id in lower case (a100-sxm4-40gb)."""
    return overrides[model.base_id] if model.base_id in overrides else model.base_id.lower()


def check_type(text: str, what: str) -> str:
    if not _TYPE_NAME.fullmatch(text):
        raise InputError(f"{what} {text!r} is not a Slurm GRES type migplan writes (letters, digits, '.', '_', '+', "
                         "'-'; at most 64)", hint="name it with --gpu-type MODEL=TYPE")
    return text


def check_node_name(text: str) -> str:
    if not _NODE_NAME.fullmatch(text):
        raise InputError(f"host {text!r} is not a Slurm node name (letters, digits, '.', '_', '-'; at most 128)",
                         hint="plan with inventory host names equal to the Slurm NodeNames")
    return text


@dataclass(frozen=True)
class LiveGpu:
    """One GPU as read after the apply (a discovery snapshot): its layout and each instance's ids.
    `ids[instance]` lists the compute instance ids of its GPU instance; migplan creates one each."""

    layout: Layout | None
    gi: Mapping[Instance, int] = field(default_factory=dict)
    ci: Mapping[Instance, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuInput:
    """One GPU of a node as Slurm will schedule it: MIG instances (`layout`) or, None, the whole GPU."""

    index: int
    model: GpuModel
    layout: Layout | None
    live: LiveGpu | None = None  # files mode: the ids read after the apply


@dataclass(frozen=True)
class Device:
    """One GRES record: a MIG device or a whole GPU."""

    gpu: int
    type: str
    instance: Instance | None  # None: the whole GPU
    files: tuple[str, ...] = ()  # files mode: File= (one) or MultipleFiles= (three)
    gi: int | None = None
    ci: int | None = None
    order: tuple[int, int, str] = (1, 0, "")  # the type's place in Gres=: MIG largest first, then whole GPUs
    model: GpuModel | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "type": self.type, "instance": str(self.instance) if self.instance else None,
                "files": list(self.files), "gpu_instance": self.gi, "compute_instance": self.ci}


@dataclass(frozen=True)
class SlurmNode:
    name: str  # the Slurm NodeName
    host: str  # the plan's host
    devices: tuple[Device, ...]
    gpus: tuple[tuple[int, str], ...]  # (index, layout as text) for the comments

    @property
    def counts(self) -> tuple[tuple[str, int], ...]:
        """(type, count) in Gres= order: MIG types largest first, then whole GPUs by type."""
        seen: dict[str, tuple[tuple[int, int, str], int]] = {}
        for d in self.devices:
            order, n = seen.get(d.type, (d.order, 0))
            seen[d.type] = (min(order, d.order), n + 1)
        return tuple((t, n) for t, (_, n) in sorted(seen.items(), key=lambda kv: (kv[1][0], kv[0])))

    @property
    def gres(self) -> str:
        return ",".join(f"{GRES_NAME}:{t}:{n}" for t, n in self.counts)


@dataclass(frozen=True)
class SlurmExport:
    mode: str
    style: str
    nodes: tuple[SlurmNode, ...]
    plan_fingerprint: str = ""
    notes: tuple[str, ...] = ()

    def node(self, name: str) -> SlurmNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "migplan/export-slurm", "plan": self.plan_fingerprint, "gres_conf": self.mode,
                "type_style": self.style, "gres_types": GRES_NAME,
                "nodes": [{"node": n.name, "host": n.host, "gres": n.gres, "counts": dict(n.counts),
                           "devices": [d.to_dict() for d in n.devices]} for n in self.nodes],
                "notes": list(self.notes)}


# --- building ------------------------------------------------------------------------------------

def _mig_devices(g: GpuInput, layout: Layout, mode: str, style: str, where: str) -> list[Device]:
    out = []
    live = g.live
    if mode == "files":
        if live is None:
            raise InputError(f"{where}: not in the snapshot, so its GPU and compute instance ids are not known",
                             hint="--gres-conf files needs --snapshot: a 'migplan discover' snapshot taken after the "
                                  "apply (or use --gres-conf autodetect)")
        if live.layout != layout:
            seen = "MIG disabled" if live.layout is None else str(live.layout)
            raise InputError(f"{where}: the snapshot shows {seen}, the plan {layout}",
                             hint="apply the plan, then 'migplan discover --out SNAPSHOT' and export from that "
                                  "snapshot")
    for inst in sorted(layout.instances):
        profile = g.model.profile(inst.profile)
        kind = check_type(mig_type(profile, style), f"{where}: type of {inst.profile}")
        order = (0, -profile.compute_slices * 1_000_000 - profile.memory_mib, kind)
        if mode != "files" or live is None:
            out.append(Device(g.index, kind, inst, order=order))
            continue
        gi, cis = live.gi.get(inst), live.ci.get(inst, ())
        if gi is None or len(cis) != 1:
            what = "no GPU instance id" if gi is None else f"{len(cis)} compute instances"
            raise InputError(f"{where}: {inst} has {what} in the snapshot; Slurm needs one compute instance per "
                             "GPU instance, as migplan creates them", hint="re-apply the plan, or use --gres-conf "
                                                                           "autodetect")
        gi_minor, ci_minor = cap_minors(g.index, gi, cis[0])
        files = (f"/dev/nvidia{g.index}", f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
                 f"/dev/nvidia-caps/nvidia-cap{ci_minor}")
        out.append(Device(g.index, kind, inst, files, gi, cis[0], order))
    if mode == "files":  # gres.conf lines in capability minor order (File numbers increasing, gres.shtml)
        out.sort(key=lambda d: (d.gi or 0, d.ci or 0))
    return out


def build_node(host: str, gpus: Sequence[GpuInput], *, mode: str = "autodetect", style: str = "nvidia",
               node: str | None = None, gpu_types: Mapping[str, str] | None = None) -> SlurmNode:
    """One node's GRES from its GPUs (pure)."""
    if mode not in MODES:
        raise InputError(f"--gres-conf {mode!r}: expected one of {', '.join(MODES)}")
    if style not in TYPE_STYLES:
        raise InputError(f"--type-style {style!r}: expected one of {', '.join(TYPE_STYLES)}")
    name = check_node_name(node or host)
    devices: list[Device] = []
    shown: list[tuple[int, str]] = []
    for g in sorted(gpus, key=lambda g: g.index):
        where = f"{host} GPU {g.index}"
        if g.layout is None or not g.model.mig:
            kind = check_type(whole_type(g.model, gpu_types or {}), f"{where}: type of {g.model.base_id}")
            files = (f"/dev/nvidia{g.index}",) if mode == "files" else ()
            devices.append(Device(g.index, kind, None, files, order=(1, 0, kind), model=g.model))
            shown.append((g.index, f"whole GPU ({g.model.base_id}{', MIG disabled' if g.model.mig else ''})"))
            continue
        if not g.layout.instances:
            shown.append((g.index, "MIG enabled, no instances"))
            continue
        devices += _mig_devices(g, g.layout, mode, style, where)
        shown.append((g.index, str(g.layout)))
    return SlurmNode(name, host, tuple(devices), tuple(shown))


def build(nodes: Sequence[SlurmNode], *, mode: str, style: str, plan_fingerprint: str = "",
          notes: Sequence[str] = ()) -> SlurmExport:
    """The export of several nodes, sorted by NodeName; two hosts that would be one Slurm node are refused."""
    seen: dict[str, str] = {}
    for n in nodes:
        if n.name in seen:
            raise InputError(f"hosts {seen[n.name]!r} and {n.host!r} would both be Slurm node {n.name!r}",
                             hint="drop --short-names, or export one of them with --host")
        seen[n.name] = n.host
    out_notes = list(notes)
    if mode == "autodetect":
        out_notes += _whole_type_notes(nodes)
        for n in nodes:
            types = [t for t, _ in n.counts]
            for t in types:
                inner = [u for u in types if u != t and t in u]
                if inner:
                    out_notes.append(f"{n.name}: type {t} is also part of {', '.join(inner)}; with AutoDetect=nvml "
                                     "Slurm matches types as substrings of the names it detects, so check "
                                     "'slurmd -G' on that node")
    return SlurmExport(mode, style, tuple(sorted(nodes, key=lambda n: n.name)), plan_fingerprint, tuple(out_notes))


def detected_name(smi_name: str) -> str:
    """The name slurmd's NVML autodetection gives a whole GPU: nvidia-smi's product name in lower case with
    spaces as underscores (gpu_nvml.c `_nvml_get_device_name`: `gpu_common_underscorify_tolower`)."""
    return smi_name.lower().replace(" ", "_")


def _whole_type_notes(nodes: Sequence[SlurmNode]) -> list[str]:
    """With AutoDetect=nvml a whole GPU's type must be a substring of the name slurmd detects: say where the
    catalog's product names show it is not (e.g. h100-sxm5-80gb for 'NVIDIA H100 80GB HBM3')."""
    out = []
    seen: set[tuple[str, str]] = set()
    for n in nodes:
        for d in n.devices:
            if d.instance is not None or d.model is None or (d.model.base_id, d.type) in seen:
                continue
            seen.add((d.model.base_id, d.type))
            names = [detected_name(s) for s in d.model.smi_names]
            missed = [(s, x) for s, x in zip(d.model.smi_names, names, strict=True) if d.type not in x]
            if missed:
                out.append(f"whole {d.model.base_id} GPUs are typed {d.type}, which is not part of the name slurmd "
                           "detects for " + ", ".join(f"'{s}' ({x})" for s, x in missed) + ": with AutoDetect=nvml "
                           f"pass --gpu-type {d.model.base_id}=TYPE with a part of the name your GPUs have (e.g. "
                           f"{missed[0][1].removeprefix('nvidia_')})")
    return out


# --- rendering -----------------------------------------------------------------------------------

def _header(export: SlurmExport, what: str) -> list[str]:
    return [f"# {what} written by migplan export slurm from plan {export.plan_fingerprint or '(none)'}",
            f"# gres.conf mode: {export.mode}; MIG types: {export.style} (docs/slurm.md)"]


def slurm_conf_lines(export: SlurmExport) -> str:
    """`GresTypes=gpu` and one `NodeName=N Gres=...` line per node: set these Gres= on each node's NodeName line
    (or let `rewrite_slurm_conf` do it)."""
    lines = _header(export, "slurm.conf lines")
    lines += ["# set each node's Gres= on its own NodeName line: a node named on two NodeName lines has the",
              "# second ignored (slurm.conf(5)); 'migplan export slurm --slurm-conf FILE' rewrites a slurm.conf",
              f"GresTypes={GRES_NAME}"]
    lines += [f"NodeName={n.name} Gres={n.gres}" if n.devices else f"# {n.name}: no GPU for Slurm"
              for n in export.nodes]
    return "\n".join(lines) + "\n"


def gres_conf(export: SlurmExport) -> str:
    """gres.conf for the nodes (each line names its node, so one file serves them all)."""
    lines = _header(export, "gres.conf")
    if export.mode == "files":
        lines += ["# MIG devices: the GPU's device file and its GPU and compute instance capability files (NVIDIA's",
                  "# minors, /proc/driver/nvidia-caps/mig-minors); GPU N is /dev/nvidiaN (check: nvidia-smi -q | "
                  "grep Minor)"]
    for n in export.nodes:
        lines.append(f"# {n.name}" + (f" (host {n.host})" if n.host != n.name else ""))
        lines += [f"#   GPU {i}: {lay}" for i, lay in n.gpus]
        if export.mode == "autodetect":
            lines.append(f"NodeName={n.name} AutoDetect=nvml")
            continue
        first = True
        for d in n.devices:
            key = "File" if len(d.files) == 1 else "MultipleFiles"
            auto = " AutoDetect=off" if first else ""
            lines.append(f"NodeName={n.name}{auto} Name={GRES_NAME} Type={d.type} {key}={','.join(d.files)}")
            first = False
        if first:
            lines.append(f"NodeName={n.name} AutoDetect=off")
    return "\n".join(lines) + "\n"


# --- rewriting a slurm.conf ------------------------------------------------------------------------

def _top_level_items(expr: str) -> list[str]:
    """`a[1-2],b` -> ["a[1-2]", "b"]: split at the commas outside brackets."""
    items: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(expr):
        if c == "[":
            depth += 1
            if depth > 1:
                raise ValueError("nested '['")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("']' without '['")
        elif c == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
    if depth:
        raise ValueError("'[' without ']'")
    items.append(expr[start:])
    if any(not item for item in items):
        raise ValueError("an empty name")
    return items


def _range_choices(part: str) -> list[str]:
    """`[01-03,7]` -> ["01", "02", "03", "7"]."""
    choices: list[str] = []
    for r in part[1:-1].split(","):
        lo, sep, hi = r.partition("-")
        if not (lo.isascii() and lo.isdigit()) or (sep and not (hi.isascii() and hi.isdigit())):
            raise ValueError(f"{part!r} is not a range of numbers")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a or b - a >= MAX_HOSTLIST:
            raise ValueError(f"{part!r}: bad range")
        choices += [str(k).zfill(len(lo)) for k in range(a, b + 1)]
    return choices


def expand_hostlist(expr: str) -> list[str]:
    """A Slurm hostlist expression (`gpu[01-04,07],login1`) as names; bounded. Ranges keep their zero padding."""
    out: list[str] = []
    for item in _top_level_items(expr):
        names = [""]
        for part in re.split(r"(\[[^\]]*\])", item):
            if part.startswith("["):
                choices = _range_choices(part)
                names = [n + c for n in names for c in choices]
            else:
                names = [n + part for n in names]
            if len(names) > MAX_HOSTLIST:
                raise ValueError(f"more than {MAX_HOSTLIST} names")
        out += names
        if len(out) > MAX_HOSTLIST:
            raise ValueError(f"more than {MAX_HOSTLIST} names")
    return out


def _tokens(body: str) -> list[tuple[int, int]]:
    """(start, end) of each whitespace-separated token of a slurm.conf line, a double-quoted part kept whole."""
    out, i, n = [], 0, len(body)
    while i < n:
        if body[i].isspace():
            i += 1
            continue
        j, quoted = i, False
        while j < n and (quoted or not body[j].isspace()):
            if body[j] == '"':
                quoted = not quoted
            j += 1
        out.append((i, j))
        i = j
    return out


def _key(token: str) -> str:
    return token.partition("=")[0].lower()


def _with_value(line: str, key: str, value: str) -> str:
    """`line` with the (one) `key=...` token's value replaced, or the token added at the end of its body."""
    body = line.split("#", 1)[0]
    comment = line[len(body):]
    at = [(a, b) for a, b in _tokens(body) if _key(body[a:b]) == key.lower()]
    if at:
        a, b = at[0]
        return f"{body[:a]}{body[a:b].partition('=')[0]}={value}{body[b:]}{comment}"
    stripped = body.rstrip()
    return f"{stripped} {key}={value}{body[len(stripped):]}{comment}"


def _node_line(body: str, number: int, source: str, want: Mapping[str, str], found: dict[str, int]) -> str | None:
    """The Gres a NodeName line must get (None: it names no exported node); errors name the line."""
    toks = _tokens(body)
    value = body[toks[0][0]:toks[0][1]].partition("=")[2]
    if value.upper() == "DEFAULT":
        return None
    try:
        names = expand_hostlist(value)
    except ValueError as err:
        raise InputError(f"NodeName={value}: {err}", source=source, line=number) from None
    mine = [n for n in names if n in want]
    if not mine:
        return None
    if body.rstrip().endswith("\\"):
        raise InputError(f"NodeName={value} is continued on the next line; migplan rewrites one-line NodeName "
                         "lines only", source=source, line=number, hint="join the line")
    for n in mine:
        if n in found:
            raise InputError(f"node {n} is on two NodeName lines ({found[n]} and {number}); Slurm ignores the "
                             "second", source=source, line=number, hint="keep one line per node")
        found[n] = number
    others = [n for n in names if n not in want]
    values = {want[n] for n in mine}
    if others or len(values) > 1:
        why = (f"also names {', '.join(others[:5])}, which the export does not cover" if others
               else "names nodes the plan gives different Gres: " + "; ".join(f"{n}: {want[n]}" for n in mine[:5]))
        raise InputError(f"NodeName={value} {why}", source=source, line=number,
                         hint="give those nodes NodeName lines of their own (one per Gres), then export again")
    if sum(1 for a, b in toks if _key(body[a:b]) == "gres") > 1:
        raise InputError(f"NodeName={value} has Gres= twice", source=source, line=number)
    return values.pop()


def rewrite_slurm_conf(text: str, source: str, export: SlurmExport) -> str:
    """`text` (a slurm.conf) with each exported node's `Gres=` set on its NodeName line and `gpu` in GresTypes;
    every other line kept as it is. A NodeName line naming nodes that would get different Gres (or nodes the
    export does not cover) is an error naming it: Slurm allows each node on one line only."""
    want = {n.name: n.gres for n in export.nodes if n.devices}
    found: dict[str, int] = {}
    out = text.split("\n")
    gres_types_at: list[int] = []
    first_node_line: int | None = None
    has_include = False
    for k, line in enumerate(list(out)):
        body = line.split("#", 1)[0]
        toks = _tokens(body)
        if not toks:
            continue
        keys = [_key(body[a:b]) for a, b in toks]
        if keys[0] == "include" or body[toks[0][0]:toks[0][1]].lower() == "include":
            has_include = True
        elif "grestypes" in keys:
            gres_types_at.append(k)
        elif keys[0] == "nodename":
            first_node_line = k if first_node_line is None else first_node_line
            gres = _node_line(body, k + 1, source, want, found)
            if gres is not None:
                out[k] = _with_value(line, "Gres", gres)
    missing = sorted(set(want) - set(found))
    if missing:
        hint = "add a NodeName line for each (with its CPUs and memory)"
        if has_include:
            hint += "; this file includes others: rewrite the one that holds the NodeName lines"
        raise InputError(f"no NodeName line names {', '.join(missing[:10])}", source=source, hint=hint)
    for k in gres_types_at:
        body = out[k].split("#", 1)[0]
        value = next(body[a:b].partition("=")[2] for a, b in _tokens(body) if _key(body[a:b]) == "grestypes")
        if GRES_NAME not in [t.strip() for t in value.split(",")]:
            out[k] = _with_value(out[k], "GresTypes", f"{value},{GRES_NAME}" if value else GRES_NAME)
    if not gres_types_at and want:
        at = first_node_line if first_node_line is not None else len(out)
        out[at:at] = [f"GresTypes={GRES_NAME}  # added by migplan export slurm"]
    return "\n".join(out)
