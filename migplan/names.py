"""Validation of names and tokens that end up in commands or file names (pure)."""

from __future__ import annotations

import re
import shlex

HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# A host address: DNS name, IPv4, or IPv6 (with optional brackets).
ADDRESS = re.compile(r"^(\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9][A-Za-z0-9.-]{0,252})$")
WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,252}$")
GPU_UUID = re.compile(r"^GPU-[0-9A-Fa-f-]{8,64}$")
# Tokens of a become prefix such as `sudo -n` or `sudo -n -u root`.
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9@%+=:,./_-]+$")
PROFILE_NAME = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+-][A-Za-z0-9.]+)?$")


def split_become(text: str) -> tuple[str, ...] | None:
    """`sudo -n` -> ('sudo', '-n'); None when a token is not a plain word."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        return None
    if not all(SAFE_TOKEN.match(t) for t in tokens):
        return None
    return tuple(tokens)


def profile_size(name: str) -> tuple[int, int] | None:
    """`3g.20gb` -> (3, 20): compute slices and nominal GB; None if not a MIG profile name.

    Grammar from go-nvlib parseMigProfile: `[<c>c.]<g>g.<gb>gb[+attr|-attr]`.
    """
    m = PROFILE_NAME.match(name.strip())
    if not m:
        return None
    return int(m.group(2)), int(m.group(3))
