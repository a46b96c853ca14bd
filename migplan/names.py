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
  under 300 GB).
"""

from __future__ import annotations

import re
import shlex

MAX_GPUS_PER_HOST = 64
MAX_GPU_INDEX = MAX_GPUS_PER_HOST - 1
MAX_MIG_SLICES = 16
MAX_MEMORY_MIB = 1 << 20

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
