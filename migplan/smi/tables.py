"""Parsers for nvidia-smi's boxed tables: `mig -lgip` (§3), `mig -lgi` (§6), `mig -lci` (§9) (pure).

Rows are split into whitespace tokens rather than read at fixed columns, so the old and new column
widths (MIG User Guide 54/79-column vs driver 535 57-column vs GB200 81-column) all parse.
§n = a section of docs/nvidia-smi.md ("Facts we rely on").
"""

from __future__ import annotations

import re

from migplan import names
from migplan.catalog.geometry import Engines
from migplan.catalog.layout import Instance, Layout
from migplan.smi._base import MAX_GPU, MAX_ID, fail, lines_of, message, num, profile_name
from migplan.smi.rows import ComputeInstanceRow, GpuInstanceRow, ProfileRow

_SEPARATOR = re.compile(r"(?a)\+-+\+")
_HEADER_END = re.compile(r"(?a)\|=+\|")
_HEADER_WORDS = frozenset({
    "GPU", "instance", "instances:", "profiles:", "Name", "ID", "Instances", "Memory", "P2P", "SM", "DEC",
    "ENC", "Free/Total", "GiB", "CE", "JPEG", "OFA", "Profile", "Instance", "Placement", "Start:Size",
    "Compute", "Exclusive", "Shared",
})
_GIB = re.compile(r"(?a)\d{1,5}\.\d{2}")
_PLACEMENT = re.compile(r"(?a)(\d{1,2}):(\d{1,2})")
_FREE_TOTAL = re.compile(r"(?a)(\d{1,3})/(\d{1,3})")


def _rows(text: str, what: str) -> list[tuple[int, str, list[str]]] | None:
    """Token lists of the data lines of a table (None for a "nothing found" message)."""
    lines = lines_of(text, what)
    if message(lines, what) == "":
        return None
    out: list[tuple[int, str, list[str]]] = []
    in_header = False
    for no, line in lines:
        body = line.strip()
        if _SEPARATOR.fullmatch(body):
            continue
        if _HEADER_END.fullmatch(body):
            in_header = False
            continue
        if not (body.startswith("|") and body.endswith("|") and len(body) > 2):
            raise fail(what, no, line, "not a table line")
        tokens = body[1:-1].split()
        if tokens and names.is_ascii_digits(tokens[0]) and not in_header:
            out.append((no, line, tokens))
        elif all(t in _HEADER_WORDS for t in tokens):
            in_header = True
        elif tokens and all(names.is_ascii_digits(t) for t in tokens):
            out.append((no, line, tokens))  # -lgip second line (CE JPEG OFA)
        else:
            raise fail(what, no, line, "unexpected table line")
    return out


def _mig_name(tokens: list[str], at: int, what: str, no: int, line: str) -> str:
    if len(tokens) <= at + 1 or tokens[at] != "MIG":
        raise fail(what, no, line, "expected 'MIG <profile>'")
    return profile_name(tokens[at + 1], what, no, line)


def parse_gpu_instances(text: str) -> list[GpuInstanceRow]:
    """`nvidia-smi mig -lgi` -> rows; [] for `No GPU instances found: Not Found`.

    Raises MigDisabledError for `No MIG-enabled devices found.` and SmiParseError for anything else odd.
    """
    what = "nvidia-smi mig -lgi"
    out = []
    for no, line, t in _rows(text, what) or []:
        if len(t) != 6:
            raise fail(what, no, line, f"expected 6 columns, got {len(t)}")
        place = _PLACEMENT.fullmatch(t[5])
        if place is None:
            raise fail(what, no, line, f"{t[5][:20]!r} is not START:SIZE")
        out.append(GpuInstanceRow(
            gpu=num(t[0], MAX_GPU, what, no, line), profile_name=_mig_name(t, 1, what, no, line),
            profile_id=num(t[3], MAX_ID, what, no, line), gi_id=num(t[4], MAX_ID, what, no, line),
            start=int(place.group(1)), size=int(place.group(2))))
    return out


def parse_compute_instances(text: str) -> list[ComputeInstanceRow]:
    """`nvidia-smi mig -lci` (with or without the Placement column) -> rows; [] when none exist."""
    what = "nvidia-smi mig -lci"
    out = []
    for no, line, t in _rows(text, what) or []:
        if len(t) not in (6, 7):
            raise fail(what, no, line, f"expected 6 or 7 columns, got {len(t)}")
        start = size = None
        if len(t) == 7:
            place = _PLACEMENT.fullmatch(t[6])
            if place is None:
                raise fail(what, no, line, f"{t[6][:20]!r} is not START:SIZE")
            start, size = int(place.group(1)), int(place.group(2))
        out.append(ComputeInstanceRow(
            gpu=num(t[0], MAX_GPU, what, no, line), gi_id=num(t[1], MAX_ID, what, no, line),
            profile_name=_mig_name(t, 2, what, no, line), profile_id=num(t[4], MAX_ID, what, no, line),
            ci_id=num(t[5], MAX_ID, what, no, line), start=start, size=size))
    return out


def _profile_row(first: tuple[int, str, list[str]], second: tuple[int, str, list[str]]) -> ProfileRow:
    what = "nvidia-smi mig -lgip"
    no, line, t = first
    if len(t) != 10:
        raise fail(what, no, line, f"expected 10 columns, got {len(t)}")
    free_total = _FREE_TOTAL.fullmatch(t[4])
    if free_total is None:
        raise fail(what, no, line, f"{t[4][:20]!r} is not FREE/TOTAL")
    if not _GIB.fullmatch(t[5]) or t[6] not in ("Yes", "No"):
        raise fail(what, no, line, "bad memory or P2P column")
    no2, line2, t2 = second
    if len(t2) != 3:
        raise fail(what, no2, line2, "expected CE JPEG OFA")
    ce, jpeg, ofa = (num(x, MAX_ID, what, no2, line2) for x in t2)
    return ProfileRow(
        gpu=num(t[0], MAX_GPU, what, no, line), profile_name=_mig_name(t, 1, what, no, line),
        profile_id=num(t[3], MAX_ID, what, no, line), free=int(free_total.group(1)),
        total=int(free_total.group(2)), memory_gib=t[5], p2p=t[6] == "Yes",
        sm_count=num(t[7], 10_000, what, no, line),
        engines=Engines(ce=ce, dec=num(t[8], MAX_ID, what, no, line), enc=num(t[9], MAX_ID, what, no, line),
                        jpeg=jpeg, ofa=ofa))


def parse_gi_profiles(text: str) -> list[ProfileRow]:
    """`nvidia-smi mig -lgip` (79- or 81-column) -> one row per GPU and profile."""
    rows = _rows(text, "nvidia-smi mig -lgip") or []
    out = []
    for pos in range(0, len(rows), 2):
        if pos + 1 >= len(rows) or len(rows[pos + 1][2]) != 3 or len(rows[pos][2]) == 3:
            no, line, _ = rows[pos]
            raise fail("nvidia-smi mig -lgip", no, line, "a profile needs two lines")
        out.append(_profile_row(rows[pos], rows[pos + 1]))
    return out


def layouts_of(rows: list[GpuInstanceRow]) -> dict[int, Layout]:
    """GPU index -> Layout of its GPU instances (profile short name at placement start)."""
    by_gpu: dict[int, list[Instance]] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu, []).append(Instance(r.start, r.profile_name))
    return {gpu: Layout.of(insts) for gpu, insts in sorted(by_gpu.items())}
