"""Shared helpers of the nvidia-smi parsers: bounded numbers, names, known messages (pure).

Remote output is untrusted: every value is checked against a sane range and pattern, and anything
unexpected raises SmiParseError (never IndexError/ValueError).
"""

from __future__ import annotations

import re

from migplan import names
from migplan.smi.errors import (
    MigDisabledError,
    NotSupportedError,
    SmiError,
    SmiParseError,
    classify_failure,
    clean_text,
)

MAX_TEXT = 4_000_000  # characters; far above any real listing
MAX_GPU = 255  # GPU indices nvidia-smi prints and `-i` takes; the builders use the same bound
MAX_ID = 255  # profile, GPU instance and compute instance ids

_INT = re.compile(r"(?a)\d{1,9}")
PROFILE_NAME = names.PROFILE_NAME  # the one pattern, shared with profile_size

# Known "nothing here" messages (docs/nvidia-smi.md §3, §6, §10). "No compute instances found" is by
# analogy (unverified, §9).
EMPTY = ("No GPU instances found: Not Found", "No compute instances found: Not Found")
MIG_DISABLED = "No MIG-enabled devices found."
MIG_UNSUPPORTED = "No MIG-supported devices found."


def fail(what: str, line_no: int, line: str, why: str) -> SmiParseError:
    return SmiParseError(f"cannot read {what} output, line {line_no}: {why}: {clean_text(line, 120)!r}",
                         output=clean_text(line, 400))


def num(token: str, top: int, what: str, line_no: int, line: str) -> int:
    if not _INT.fullmatch(token):
        raise fail(what, line_no, line, f"{token[:20]!r} is not a number")
    value = int(token)
    if value > top:
        raise fail(what, line_no, line, f"{value} is out of range 0..{top}")
    return value


def profile_name(token: str, what: str, line_no: int, line: str) -> str:
    if not PROFILE_NAME.fullmatch(token):
        raise fail(what, line_no, line, f"{token[:40]!r} is not a MIG profile name")
    return token


def lines_of(text: str, what: str) -> list[tuple[int, str]]:
    """Numbered non-blank lines (right-stripped)."""
    if len(text) > MAX_TEXT:
        raise SmiParseError(f"{what} output is {len(text)} characters long; refusing to read it")
    return [(n, ln.rstrip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]


def message(lines: list[tuple[int, str]], what: str) -> str | None:
    """For a one-message output: '' when it says "nothing found", else raise its typed error."""
    if len(lines) != 1 or lines[0][1].lstrip().startswith(("+", "|", "GPU ")):
        return None
    text = lines[0][1].strip()
    if text in EMPTY:
        return ""
    if text == MIG_DISABLED:
        raise MigDisabledError("MIG mode is not enabled (nvidia-smi: No MIG-enabled devices found.)",
                               output=text)
    if text == MIG_UNSUPPORTED:
        raise NotSupportedError("no MIG-capable GPU (nvidia-smi: No MIG-supported devices found.)", output=text)
    err = classify_failure((), None, text, "")
    if type(err) is SmiError and not text.startswith(("Failed", "Unable")):
        return None  # not an NVIDIA message: the caller reports the line as unreadable
    raise err
