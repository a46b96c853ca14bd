"""Two more nvidia-smi texts apply reads (pure): the MIG devices table of plain `nvidia-smi -i N` (§12), which
is where nvidia-smi prints the memory a created MIG device really has, and `nvidia-smi mig -h`, which says
whether `-cgi` takes a placement (§5).

`-lgi` prints no memory (§6) and `-lgip` prints the profile's, not the created instance's (§3); the §12 table
row `|  0    2   0   0  |              25MiB / 11968MiB  | ...` is GPU, GI ID, CI ID, MIG device index and the
device's memory used / total. The row's second line (BAR1 usage) is skipped. Untrusted text: bounded numbers,
anything unexpected inside the MIG devices section raises SmiParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from migplan.smi._base import MAX_GPU, MAX_ID, fail, lines_of, num

MAX_MIB = 10_000_000
_ROW = re.compile(r"(?a)\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_BAR1 = re.compile(r"(?a)\|\s*\|\s*\d+MiB\s*/\s*\d+MiB\s*\|")
_DECOR = re.compile(r"(?a)[+|=\-\s]*")
# §5: the real help's own words for the placement tuple (`-cgi 9:4,19:0`)
PLACEMENT_WORDS = ("placement specifier", "placement start index")


@dataclass(frozen=True)
class MigDeviceMemory:
    gpu: int
    gi_id: int
    ci_id: int
    device: int  # the MIG device index (the `-L` order)
    used_mib: int
    total_mib: int


def parse_mig_devices(text: str) -> list[MigDeviceMemory]:
    """The rows of the "MIG devices:" section of plain `nvidia-smi` (empty when it has none: no MIG GPU)."""
    what = "nvidia-smi (MIG devices table)"
    out: list[MigDeviceMemory] = []
    inside = False
    for no, line in lines_of(text, what):
        body = line.strip()
        if body.startswith("| MIG devices:"):
            inside = True
            continue
        if not inside:
            continue
        if body.startswith("| Processes:"):
            break
        m = _ROW.match(body)
        if m:
            gpu, gi, ci, dev, used, total = m.groups()
            out.append(MigDeviceMemory(num(gpu, MAX_GPU, what, no, line), num(gi, MAX_ID, what, no, line),
                                       num(ci, MAX_ID, what, no, line), num(dev, MAX_ID, what, no, line),
                                       num(used, MAX_MIB, what, no, line), num(total, MAX_MIB, what, no, line)))
        elif _BAR1.match(body) or _DECOR.fullmatch(body) or "ID" in body or "Memory-Usage" in body \
                or body.replace(" ", "").strip("|") in ("", "ECC|"):
            continue
        elif body.startswith("|") and not any(ch.isdigit() for ch in body[:20]):
            continue  # a header line (GPU GI CI MIG / BAR1-Usage / ECC)
        else:
            raise fail(what, no, line, "unexpected line in the MIG devices table")
    return out


def takes_placement(help_text: str) -> bool:
    """Whether `nvidia-smi mig -h` documents the `-cgi PROFILE:START` placement tuple."""
    low = " ".join(help_text.lower().split())
    return any(w in low for w in PLACEMENT_WORDS)
