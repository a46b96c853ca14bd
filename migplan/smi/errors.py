"""Typed errors for nvidia-smi failures, and the classifier that maps NVIDIA's texts to them (pure).

NVIDIA's error texts are `nvmlErrorString()` strings printed after `: ` (docs/nvidia-smi.md §0):
`In use by another client`, `Insufficient Resources`, `Invalid Argument`, `Not Supported`,
`Insufficient Permissions`, `Not Found`. Exit codes (nvidia-smi man page): 2 invalid argument, 3 not
supported, 4 no permission, 6 not found, 255 other. The exit code of each MIG error was NOT observed
(docs/nvidia-smi.md §0: unverified), so the text decides and the code is only a fallback.
A bare §n below is a section of docs/nvidia-smi.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from migplan import names
from migplan.errors import InputError, MigplanError
from migplan.text import printable

_MAX_SHOWN = 300


def clean_text(text: str, limit: int = _MAX_SHOWN) -> str:
    """Remote output made safe to show, line breaks kept (`migplan.text.printable`, the one sanitiser)."""
    return printable(text, limit, multiline=True)


class SmiCommandError(InputError):
    """A command builder was given a value it must not put on a command line."""


class SmiError(MigplanError):
    """nvidia-smi failed, or printed something migplan cannot read. Carries the GPU and the command."""

    nvml_text = ""
    nvml_code: int | None = None

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        gpu: int | None = None,
        exit_code: int | None = None,
        output: str = "",
        hint: str | None = None,
    ) -> None:
        where = f"GPU {gpu}: " if gpu is not None else ""
        cmd = " ".join(argv)
        suffix = f" (command: {cmd})" if cmd else ""
        super().__init__(f"{where}{message}{suffix}", hint=hint)
        self.argv = tuple(argv)
        self.gpu = gpu
        self.returncode = exit_code  # nvidia-smi's; `exit_code` is migplan's own (MigplanError)
        self.output = output


class InUseError(SmiError):
    nvml_text = "In use by another client"
    nvml_code = 19  # NVML_ERROR_IN_USE (nvml.h; docs/sources.md §2)


class InsufficientResourcesError(SmiError):
    nvml_text = "Insufficient Resources"
    nvml_code = 23  # NVML_ERROR_INSUFFICIENT_RESOURCES


class InvalidArgumentError(SmiError):
    nvml_text = "Invalid Argument"
    nvml_code = 2


class NotSupportedError(SmiError):
    nvml_text = "Not Supported"
    nvml_code = 3


class InsufficientPermissionsError(SmiError):
    nvml_text = "Insufficient Permissions"
    nvml_code = 4


class NotFoundError(SmiError):
    nvml_text = "Not Found"
    nvml_code = 6


class MigDisabledError(SmiError):
    """`No MIG-enabled devices found.` (§3, §6): the selected GPUs are not in MIG mode."""


class SmiParseError(SmiError):
    """Output that is not what nvidia-smi prints: garbage, absurd values, a format we do not know."""


# Checked in order: the specific texts first.
_BY_TEXT: tuple[tuple[str, type[SmiError]], ...] = (
    ("in use by another client", InUseError),
    ("being used by", InUseError),  # reset refused / pending mode (§1; reset text unverified)
    ("insufficient resources", InsufficientResourcesError),
    ("insufficient permissions", InsufficientPermissionsError),
    ("invalid argument", InvalidArgumentError),
    ("invalid combination of input arguments", InvalidArgumentError),
    ("no mig-enabled devices found", MigDisabledError),
    ("no mig-supported devices found", NotSupportedError),
    ("not supported", NotSupportedError),
    ("not found", NotFoundError),
    ("no devices were found", NotFoundError),
)
_BY_CODE: dict[int, type[SmiError]] = {
    2: InvalidArgumentError, 3: NotSupportedError, 4: InsufficientPermissionsError, 6: NotFoundError,
    19: InUseError, 23: InsufficientResourcesError,
}
_GPU_IN_TEXT = re.compile(r"(?a)\bon GPU\s+(\d{1,3})\b|\bfrom GPU\s+(\d{1,3})\b")


def gpu_of(argv: Sequence[str]) -> int | None:
    """The GPU index a command targets (`-i N` or `--id=N`), None for all GPUs or a non-index id."""
    for pos, tok in enumerate(argv):
        value = None
        if tok in ("-i", "--id") and pos + 1 < len(argv):
            value = argv[pos + 1]
        elif tok.startswith("--id="):
            value = tok[len("--id="):]
        if value is not None:
            return int(value) if names.is_ascii_digits(value) and len(value) <= 3 else None
    return None


def _first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        low = line.lower()
        if any(key in low for key, _ in _BY_TEXT) or low.startswith(("unable", "failed", "error")):
            return line
    return lines[-1] if lines else ""


def classify_failure(argv: Sequence[str], exit_code: int | None, stdout: str, stderr: str) -> SmiError:
    """The typed error for a failed nvidia-smi run: by NVIDIA's text first, then by exit code."""
    text = f"{stderr}\n{stdout}"
    low = text.lower()
    cls: type[SmiError] = SmiError
    for key, kind in _BY_TEXT:
        if key in low:
            cls = kind
            break
    else:
        if exit_code is not None:
            cls = _BY_CODE.get(exit_code, SmiError)
    gpu = gpu_of(argv)
    if gpu is None:
        found = _GPU_IN_TEXT.search(text)
        if found:
            gpu = int(found.group(1) or found.group(2))
    detail = clean_text(_first_error_line(text)) or "no output"
    code = "no exit status" if exit_code is None else f"exit {exit_code}"
    return cls(f"nvidia-smi failed ({code}): {detail}", argv=argv, gpu=gpu, exit_code=exit_code,
               output=clean_text(text, 4000))
