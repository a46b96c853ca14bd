"""Validation of names and tokens that end up in commands or file names, and hardware bounds (pure).

Every pattern here matches the WHOLE string: each is anchored with ``\\A...\\Z`` (a trailing ``$``
also accepts a trailing newline, so ``"gpu01\\n"`` would pass as a host name), so ``match`` and
``fullmatch`` agree; new code uses ``fullmatch``. Digits are ASCII only (``\\d`` and
``str.isdigit`` also take ``'٣'`` or ``'²'``).

Bounds, documented in one place so every reader uses the same ones (the numbers hardware has, with
a margin):

* `MAX_GPUS_PER_HOST` = 64 GPUs per host, so a GPU index is 0..63 (the largest MIG-capable
  servers have 8 or 16 GPUs);
* `MAX_MIG_SLICES` = 16 memory or compute slices per GPU (MIG GPUs have at most 8 memory and 7
  compute slices today);
* `MAX_MEMORY_MIB` = 1,048,576 MiB (1 TiB) of memory per GPU or instance (the largest MIG GPUs have
  under 300 GB);
* `CLOCK_SKEW_S` = 300 s: how far in the future a document's own time (a plan's `created_at`) may be
  before it is refused as wrong (two machines' clocks differ by seconds under NTP; a later date would
  keep a plan "fresh" for `apply --max-age` forever).

Times in documents are `UTC_STAMP`s (`2026-12-01T08:00:00Z`, as migplan writes them), read with
`utc_stamp`, which returns None for anything else ("yesterday", "2026-02-30T00:00:00Z") instead of
raising. Numbers from options and documents go through `finite` (one check: `inf`, `nan` and
`1e999` are not numbers anyone means).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shlex

MAX_GPUS_PER_HOST = 64
MAX_GPU_INDEX = MAX_GPUS_PER_HOST - 1
MAX_MIG_SLICES = 16
MAX_MEMORY_MIB = 1 << 20
CLOCK_SKEW_S = 300
UTC_STAMP = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z")
UTC_STAMP_EXAMPLE = "2026-12-01T08:00:00Z"

HOST_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
# A host address: DNS name, IPv4, or IPv6 (with optional brackets).
ADDRESS = re.compile(r"\A(?:\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9][A-Za-z0-9.-]{0,252})\Z")
WORKLOAD_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._/:-]{0,252}\Z")
GPU_UUID = re.compile(r"\AGPU-[0-9A-Fa-f-]{8,64}\Z")
# A login or become user (POSIX portable user names, as `useradd` accepts them).
USER_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
# Tokens of a become prefix such as `sudo -n` or `sudo -n -u root`.
SAFE_TOKEN = re.compile(r"\A[A-Za-z0-9@%+=:,./_-]+\Z")
# The one MIG profile-name pattern (go-nvlib parseMigProfile grammar, docs/mig-geometry.md §2), bounded
# because parsers apply it to untrusted host output: `[<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr]`.
PROFILE_NAME = re.compile(r"\A(?:([0-9]{1,2})c\.)?([0-9]{1,2})g\.([0-9]{1,4})gb"
                          r"(?:[+-][A-Za-z0-9.]{1,16}(?:,[A-Za-z0-9.]{1,16}){0,3})?\Z")


def split_become(text: str) -> tuple[str, ...] | None:
    """`sudo -n` -> ('sudo', '-n'); None when a token is not a plain word."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        return None
    if not all(SAFE_TOKEN.fullmatch(t) for t in tokens):
        return None
    return tuple(tokens)


def profile_size(name: str) -> tuple[int, int] | None:
    """`3g.20gb` -> (3, 20): compute slices and nominal GB; None if not a MIG profile name.

    Grammar from go-nvlib parseMigProfile: `[<c>c.]<g>g.<gb>gb[+attr|-attr]`.
    """
    m = PROFILE_NAME.fullmatch(name.strip())
    if not m:
        return None
    return int(m.group(2)), int(m.group(3))


def is_ascii_digits(text: str) -> bool:
    """True for a non-empty string of ASCII digits 0-9 only (unlike `str.isdigit`)."""
    return bool(text) and text.isascii() and text.isdigit()


def utc_stamp(text: object) -> dt.datetime | None:
    """A `UTC_STAMP` (`2026-12-01T08:00:00Z`) as an aware datetime; None for anything else, a day or time
    that does not exist (`2026-02-30`, `25:00:00`) included."""
    if not isinstance(text, str) or not UTC_STAMP.fullmatch(text):
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def finite(value: float) -> bool:
    """True for a real number: not `inf`, `-inf` or `nan` (float('1e999') is inf)."""
    return math.isfinite(value)

# a GPU instance as a plan writes it: PROFILE@START (catalog.layout.Instance.parse has the last word)
PLACEMENT = re.compile(r"\A[0-9]{1,2}(?:c\.[0-9]{1,2})?g\.[0-9]{1,4}gb(?:[+-][a-z.]{1,12})?@[0-9]{1,2}\Z")
# what carries a vGPU: an SR-IOV VF's PCI address (0000:17:00.4), an mdev UUID, or `vgpu:<vGPU ID>` for an active
# vGPU whose device discovery could not tell (fleet/vgpu_state.py)
VGPU_DEVICE = re.compile(r"\A(?:[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                         r"[0-9a-f]{4}-[0-9a-f]{12}|vgpu:[0-9]{1,12})\Z")
