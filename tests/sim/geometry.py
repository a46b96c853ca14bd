"""GPU geometry for the nvidia-smi simulator, kept independent of migplan (it never imports it).

Where the reference (/work/shared/reference, not part of the repository) has a verbatim `nvidia-smi mig
-lgip` or `-lgipp` sample, the sample itself is stored byte-exact under tests/data/ (sources listed in
tests/data/sim/README.md) and read here by the simulator's own small readers, `read_lgip` and
`read_lgipp`. Everything else comes from the table in geometry_inferred.py, transcribed from the
reference's mig-catalog.yaml and mig-geometry.md, with the provenance of every row.

Rules of the hardware the simulator enforces itself (mig-geometry.md §1, nvml.h on
nvmlGpuInstancePlacement_t): a profile starts only where -lgipp lists it; no two GPU instances share a
memory slice; the compute slices of all instances fit the GPU; a profile never exceeds its "Instances
Total"; at most one instance with media extensions (`+me`) per GPU (UG: "A single 1g profile can include
media extensions"); the instances together use no more CE/DEC/ENC/JPEG/OFA engines than the whole-GPU profile
lists in -lgip (or the model's `engine_budget`, where only some are known); and, on a host whose driver is
older than R510, no (4 memory, 4 compute) instance next to a (4 memory, 3 compute) one (UG "Concepts", quoted
at R510_COMBINATION).

Custom models (a host state's `catalog_files`) are read from migplan's documented catalog YAML format
with PyYAML, again without migplan's code.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # imported as part of the tests' `sim` package, or run as a script from tests/sim
    from . import geometry_inferred as table
except ImportError:  # pragma: no cover - script mode
    import geometry_inferred as table  # type: ignore[no-redef]

DATA = Path(__file__).resolve().parents[1] / "data"

# Default compute-instance profile (NVML_COMPUTE_INSTANCE_PROFILE_* enum) by GI compute slices
# (mig-catalog.yaml ci_profiles_by_gi_slices, the `default: true` entries).
CI_DEFAULT_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
# Hopper and later: the default CI of the double-memory 1g GI (1 compute, 2 memory slices) is 1_SLICE_REV1
# = 7 (real GH200 output, mig-catalog.yaml ci_profile_notes; other models inferred). A100: not seen, 0 used.
CI_DEFAULT_1G_DOUBLE_MEMORY = 7

RULES = ("unknown-profile", "bad-start", "overlap", "compute", "max-count", "media-extensions", "engines",
         "combination")

# mig-geometry.md §1, quoting the MIG User Guide ("Concepts"): "prior to NVIDIA driver release R510, the combination
# of a (4 memory, 4 compute) and a (4 memory, 3 compute) profile was not supported" (4g.20gb + 3g.20gb on A100-40GB).
# Stated in slices of an 8-memory-slice GPU: (memory slices, compute slices) of the two GI shapes, and the branch.
R510_COMBINATION = ((4, 4), (4, 3))
R510 = 510


def driver_branch(driver: str) -> int:
    """`470.57.02` (nvidia-smi's driver_version) or a bare branch `470` -> 470."""
    return int(driver.strip().lstrip("Rr").split(".")[0])
ENGINES = ("ce", "dec", "enc", "jpeg", "ofa")


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile, as -lgip (name, id, counts, memory, SM, engines) and -lgipp (starts) show it."""

    name: str
    id: int
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_count: int
    sm_count: int
    ce: int
    dec: int
    enc: int
    jpeg: int
    ofa: int
    starts: tuple[int, ...]
    ci_default_id: int = 0
    source: str = ""
    unknown: tuple[str, ...] = ()  # fields no source gives: placeholder values, never evidence
    # The least MiB any known driver prints for this row, where another driver than the one this simulated host
    # plays prints less (geometry_inferred.SMALLEST_KNOWN_MIB, with its source); None: `memory_mib` is the least.
    smallest_known_mib: int | None = None

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def gib(self) -> str:
        """The -lgip "Memory GiB" column: memorySizeMB / 1024 as %.2f (mig-geometry.md §4)."""
        return f"{self.memory_mib / 1024:.2f}"

    def slots(self, start: int) -> range:
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class Model:
    """A MIG-capable GPU as the simulator plays it."""

    id: str
    architecture: str  # ampere | hopper | blackwell
    memory_slices: int
    compute_slices: int
    profiles: tuple[Profile, ...]  # in -lgip row order
    smi_name: str
    pci_device_id: str  # "0x20B0"
    source: str
    lgip_sample: str | None = None  # verbatim -lgip text printed for this model (Free column updated)
    lgipp_sample: str | None = None  # verbatim -lgipp text printed for this model
    unknown_identity: tuple[str, ...] = field(default=())
    engine_budget: tuple[tuple[str, int], ...] | None = None  # None: the whole-GPU profile's engines

    def engine_limits(self) -> dict[str, int]:
        if self.engine_budget is not None:
            return dict(self.engine_budget)
        full = self.full_profile
        return {k: getattr(full, k) for k in ENGINES}

    def profile(self, ref: str | int) -> Profile | None:
        """By id, short name (`3g.20gb`), full name (`MIG 3g.20gb`) or id as text (§5 of nvidia-smi-mig.md)."""
        if isinstance(ref, int):
            return next((p for p in self.profiles if p.id == ref), None)
        key = ref.strip()
        if key.upper().startswith("MIG "):
            key = key[4:].strip()
        found = next((p for p in self.profiles if p.name == key), None)
        if found is None and key.isdigit():
            found = next((p for p in self.profiles if p.id == int(key)), None)
        return found

    @property
    def full_profile(self) -> Profile:
        whole = [p for p in self.profiles if p.memory_slices == self.memory_slices and not p.media_extensions]
        plain = [p for p in whole if "+" not in p.name and "-" not in p.name]  # not 4g.96gb+gfx
        return max(plain or whole, key=lambda p: p.compute_slices)

    @property
    def reset_required_for_mode(self) -> bool:
        """Ampere resets the GPU to change MIG mode; Hopper and later do not (UG getting-started)."""
        return self.architecture == "ampere"


# --- readers of the two verbatim formats --------------------------------------------------------

@dataclass(frozen=True)
class LgipRow:
    gpu: int
    name: str  # short name, "MIG " dropped
    id: int
    free: int
    total: int
    gib: str
    sm: int
    dec: int
    enc: int
    ce: int | None  # None when a sample shows only the first line of a row
    jpeg: int | None
    ofa: int | None


_LGIP_FIRST = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+(\d+\.\d\d)\s+(\S+)"
                         r"\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$")
_LGIP_SECOND = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$")
_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{(\d+(?:,\d+)*)\}:(\d+)$")


def read_lgip(text: str) -> list[LgipRow]:
    """`nvidia-smi mig -lgip` rows (79- or 81-column tables; excerpts with `...` lines are fine)."""
    rows: list[LgipRow] = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = _LGIP_FIRST.match(line.rstrip())
        if not m:
            continue
        gpu, name, pid, free, total, gib, _p2p, sm, dec, enc = m.groups()
        nxt = _LGIP_SECOND.match(lines[n + 1].rstrip()) if n + 1 < len(lines) else None
        ce, jpeg, ofa = (int(v) for v in nxt.groups()) if nxt else (None, None, None)
        rows.append(LgipRow(int(gpu), name, int(pid), int(free), int(total), gib, int(sm), int(dec), int(enc),
                            ce, jpeg, ofa))
    return rows


def read_lgipp(text: str) -> list[tuple[int, int, tuple[int, ...], int]]:
    """`nvidia-smi mig -lgipp` lines -> (gpu, profile id, starts, size)."""
    out = []
    for line in text.splitlines():
        m = _LGIPP.match(line.strip())
        if m:
            out.append((int(m.group(1)), int(m.group(2)), tuple(int(s) for s in m.group(3).split(",")),
                        int(m.group(4))))
    return out


def mib_of_gib(gib: str) -> int:
    """MiB behind a printed "Memory GiB": the multiple of 64 MiB that prints as `gib` (mig-catalog.yaml,
    memory_mib: "values are multiples of 64 MiB, e.g. 9.62 -> 9.625 GiB -> 9856 MiB")."""
    k = round(float(gib) * 16)
    for cand in (k, k - 1, k + 1):
        if f"{cand * 64 / 1024:.2f}" == gib:
            return cand * 64
    raise ValueError(f"no multiple of 64 MiB prints as {gib} GiB")


_G = re.compile(r"^(\d+)g\.")


def compute_slices_of(name: str) -> int:
    """`3g.20gb` -> 3: the GI's compute slices are the first number of its name (mig-geometry.md §2)."""
    m = _G.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a GPU-instance profile name")
    return int(m.group(1))


def ci_default(architecture: str, compute: int, memory: int, one_slice_memory: int = 1) -> int:
    """The double-memory 1g GI: one compute slice and more memory slices than the model's smallest 1g (RTX PRO
    6000's 1g GIs all have size 3 and default to CI profile 0, real RTXPRO_SE `-C` output)."""
    if compute == 1 and memory > one_slice_memory and architecture != "ampere":
        return CI_DEFAULT_1G_DOUBLE_MEMORY
    return CI_DEFAULT_BY_SLICES.get(compute, 0)


# --- building the models ------------------------------------------------------------------------

def sample_text(name: str) -> str:
    return (DATA / name).read_text()


def _from_samples(ident: dict[str, Any], rows: Sequence[LgipRow] | None,
                  places: dict[int, tuple[tuple[int, ...], int]]) -> list[Profile]:
    """Profiles of a model whose -lgip sample gives every row and whose -lgipp sample gives every placement."""
    arch = ident["architecture"]
    out = []
    for r in rows or ():
        if r.ce is None or r.jpeg is None or r.ofa is None:
            raise ValueError(f"{ident['id']}: -lgip sample row {r.name} has no CE/JPEG/OFA line")
        starts, size = places[r.id]
        g = compute_slices_of(r.name)
        out.append(Profile(r.name, r.id, g, size, mib_of_gib(r.gib), r.total, r.sm, r.ce, r.dec, r.enc, r.jpeg,
                           r.ofa, starts, ci_default(arch, g, size),
                           source=f"verbatim -lgip {ident['lgip']}, -lgipp {ident['lgipp']}"))
    return out


def _rows(ident: dict[str, Any]) -> list[Any]:
    rows = ident["profiles"]
    if isinstance(rows, str):  # a copy of another model's rows (an inferred geometry)
        rows = next(m["profiles"] for m in table.MODELS if m["id"] == rows)
    return list(rows)


def _from_table(ident: dict[str, Any], places: dict[int, tuple[tuple[int, ...], int]] | None) -> list[Profile]:
    arch = ident["architecture"]
    one_slice = min(row[3] for row in _rows(ident) if row[2] == 1)
    out = []
    for row in _rows(ident):
        name, pid, g, mem, mib, mx, sm, (ce, dec, enc, jpeg, ofa), source = row[:9]
        unknown = tuple(row[9]) if len(row) > 9 else ()
        if places is not None:  # a verbatim -lgipp sample decides starts and size
            starts, size = places[pid]
            if size != mem:
                raise ValueError(f"{ident['id']} {name}: table says {mem} memory slices, -lgipp sample {size}")
            where = f"placements verbatim -lgipp {ident['lgipp']}"
        else:
            starts = tuple(ident["placements"][pid])
            where = f"placements {ident['placements_source']}"
        least = table.SMALLEST_KNOWN_MIB.get((ident["id"], pid))
        out.append(Profile(name, pid, g, mem, mib, mx, sm, ce, dec, enc, jpeg, ofa, starts,
                           ci_default(arch, g, mem, one_slice), source=f"{source}; {where}", unknown=unknown,
                           smallest_known_mib=least[0] if least is not None else None))
    return sorted(out, key=lambda p: (p.compute_slices, p.memory_slices, p.id))  # -lgip row order (§3)


def _build(ident: dict[str, Any]) -> Model:
    lgip = sample_text(ident["lgip"]) if ident.get("lgip") else None
    lgipp = sample_text(ident["lgipp"]) if ident.get("lgipp") else None
    places = None
    if lgipp is not None:
        places = {pid: (starts, size) for gpu, pid, starts, size in read_lgipp(lgipp) if gpu == 0}
    if lgip is not None:
        if places is None:
            raise ValueError(f"{ident['id']}: a -lgip sample needs a -lgipp sample")
        profiles = _from_samples(ident, [r for r in read_lgip(lgip) if r.gpu == 0], places)
        source = f"verbatim samples tests/data/{ident['lgip']}, tests/data/{ident['lgipp']}"
    else:
        profiles = _from_table(ident, places)
        source = ident["source"]
    memory = max(s + p.memory_slices for p in profiles for s in p.starts)
    compute = max(p.compute_slices for p in profiles)
    if (memory, compute) != (ident["memory_slices"], ident["compute_slices"]):
        raise ValueError(f"{ident['id']}: samples give {memory} memory / {compute} compute slices, the table "
                         f"{ident['memory_slices']} / {ident['compute_slices']}")
    budget = ident.get("engine_budget")
    return Model(ident["id"], ident["architecture"], memory, compute, tuple(profiles), ident["smi_name"],
                 ident["pci_device_id"], source, lgip, lgipp, tuple(ident.get("unknown_identity", ())),
                 tuple(sorted(budget.items())) if budget is not None else None)


@functools.lru_cache(maxsize=1)
def builtin_models() -> dict[str, Model]:
    """Every model the simulator plays, by id (the ids migplan's shipped catalog uses)."""
    return {ident["id"]: _build(ident) for ident in table.MODELS}


def read_catalog_file(path: str) -> list[Model]:
    """Models from a catalog YAML in migplan's documented format (README "Catalog overrides")."""
    import yaml  # only hosts with catalog_files need it

    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    models = []
    for m in doc.get("models", []):
        arch = str(m["architecture"])
        profiles = []
        for p in m["profiles"]:
            e = p.get("engines", {})
            g, mem = int(p["compute_slices"]), int(p["memory_slices"])
            profiles.append(Profile(
                str(p["name"]), int(p["id"]), g, mem, int(p["memory_mib"]), int(p["max_count"]),
                int(p.get("sm_count", 0)), *(int(e.get(k, 0)) for k in ("ce", "dec", "enc", "jpeg", "ofa")),
                starts=tuple(sorted(int(s) for s in p["starts"])),
                ci_default_id=int(p.get("ci_default_id", ci_default(arch, g, mem))), source=f"catalog file {path}"))
        profiles.sort(key=lambda q: (q.compute_slices, q.memory_slices, q.id))
        names = [str(n) for n in m.get("smi_names", [])]
        pci = [str(n) for n in m.get("pci_device_ids", [])]
        models.append(Model(str(m["id"]), arch, int(m["memory_slices"]), int(m["compute_slices"]),
                            tuple(profiles), names[0] if names else f"NVIDIA {m['id']}",
                            "0x" + (pci[0][2:].upper() if pci else "1EB8"), f"catalog file {path}",
                            engine_budget=(tuple(sorted((str(k), int(v)) for k, v in m["engine_budget"].items()))
                                           if isinstance(m.get("engine_budget"), dict) else None)))
    return models


@functools.lru_cache(maxsize=8)
def models_for(catalog_files: tuple[str, ...] = ()) -> dict[str, Model]:
    """The built-in models with a host's catalog files applied in order (same id: replaced)."""
    models = dict(builtin_models())
    for path in catalog_files:
        models.update({m.id: m for m in read_catalog_file(path)})
    return models


def find_model(model_id: str, catalog_files: Iterable[str] = ()) -> Model:
    models = models_for(tuple(catalog_files))
    if model_id not in models:
        raise KeyError(f"the nvidia-smi simulator has no geometry for GPU model {model_id!r}: add it to "
                       f"tests/sim/geometry_inferred.py (or pass catalog_files); known: {', '.join(models)}")
    return models[model_id]


# --- the placement rules ------------------------------------------------------------------------

def driver_conflicts(model: Model, profiles: Sequence[Profile], driver: str | None) -> list[tuple[str, str]]:
    """The R510_COMBINATION rule on a host with `driver` (None: a current driver, where it does not apply)."""
    if driver is None or model.memory_slices != 8 or driver_branch(driver) >= R510:
        return []
    shapes = {(p.memory_slices, p.compute_slices): p.name for p in profiles}
    if not all(shape in shapes for shape in R510_COMBINATION):
        return []
    both = " and ".join(shapes[shape] for shape in R510_COMBINATION)
    return [("combination", f"{both} together are not supported before driver R510 (this host: {driver})")]


def conflicts(model: Model, placed: Sequence[tuple[str | int, int]],
              driver: str | None = None) -> list[tuple[str, str]]:
    """(rule, message) for every rule that GPU instances `placed` ((profile, start) pairs) break on a host with
    `driver` (None: a current driver, where no driver rule applies)."""
    out: list[tuple[str, str]] = []
    known: list[tuple[Profile, int]] = []
    for ref, start in placed:
        prof = model.profile(ref)
        if prof is None:
            out.append(("unknown-profile", f"{model.id} has no profile {ref!r}"))
            continue
        known.append((prof, start))
        if start not in prof.starts:
            out.append(("bad-start", f"{prof.name}@{start}: -lgipp lists only {{{','.join(map(str, prof.starts))}}}"))
    owner: dict[int, str] = {}
    for prof, start in known:
        for slot in prof.slots(start):
            if slot >= model.memory_slices:
                out.append(("bad-start", f"{prof.name}@{start} runs past memory slice {model.memory_slices - 1}"))
                break
            if slot in owner:
                out.append(("overlap", f"{owner[slot]} and {prof.name}@{start} share memory slice {slot}"))
                break
            owner[slot] = f"{prof.name}@{start}"
    used = sum(p.compute_slices for p, _ in known)
    if used > model.compute_slices:
        out.append(("compute", f"{used} compute slices used; {model.id} has {model.compute_slices}"))
    for prof in model.profiles:
        n = sum(1 for p, _ in known if p.id == prof.id)
        if n > prof.max_count:
            out.append(("max-count", f"{n} x {prof.name}; Instances Total is {prof.max_count}"))
    if sum(1 for p, _ in known if p.media_extensions) > 1:
        out.append(("media-extensions", "more than one instance with media extensions (+me)"))
    out += driver_conflicts(model, [p for p, _ in known], driver)
    if any(rule == "media-extensions" for rule, _ in out):
        return out  # a second +me already explains the media engines it would share (one cause, one rule)
    for kind, most in model.engine_limits().items():
        need = sum(getattr(p, kind) for p, _ in known)
        if need > most:
            out.append(("engines", f"{need} {kind.upper()} engines needed; the GPU has {most}"))
    return out


def remaining(model: Model, placed: Sequence[tuple[str | int, int]], prof: Profile, driver: str | None = None) -> int:
    """How many more `prof` instances fit now: the -lgip "Free" column (nvidia-smi-mig.md §3). Under a driver
    rule (R510_COMBINATION) the column is taken to count what the driver would create: unverified, no -lgip of
    such a host is in the reference."""
    cur, count = list(placed), 0
    for start in prof.starts:
        if not conflicts(model, [*cur, (prof.id, start)], driver):
            cur.append((prof.id, start))
            count += 1
    return count
