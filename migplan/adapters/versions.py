"""What `migplan --version` reports: migplan's version and those of the solver and NVML binding it finds.

Nothing here imports PuLP or pynvml (the version of an installed distribution is read from its
metadata), so `--version` stays fast and other commands never pay for it. CBC's own version is
asked of the binary PuLP bundles (`cbc -quit` prints "Version: 2.10.3" in its banner), found where
PuLP 3.x keeps it (pulp/solverdir/cbc/<os>/<arch>/cbc, as pulp/apis/coin_api.py builds the path),
else a `cbc` on PATH.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys

_CBC_VERSION = re.compile(r"Version:\s*([0-9][0-9A-Za-z.\-]*)")
_ARCH = {"x86_64": "i64", "amd64": "i64", "aarch64": "arm64", "arm64": "arm64", "i386": "i32", "i686": "i32"}
_OS = {"linux": "linux", "darwin": "osx", "win32": "win"}


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def bundled_cbc() -> str | None:
    """The path of the CBC binary PuLP bundles, without importing PuLP."""
    spec = importlib.util.find_spec("pulp")
    if spec is None or not spec.submodule_search_locations:
        return None
    osname = next((v for k, v in _OS.items() if sys.platform.startswith(k)), None)
    arch = _ARCH.get(platform.machine().lower())
    if osname is None or arch is None:
        return None
    exe = "cbc.exe" if osname == "win" else "cbc"
    path = os.path.join(list(spec.submodule_search_locations)[0], "solverdir", "cbc", osname,
                        "i64" if osname == "osx" else arch, exe)
    return path if os.path.isfile(path) else None


def cbc_version(path: str | None = None) -> tuple[str | None, str | None]:
    """(version, path) of CBC: the bundled binary, else `cbc` on PATH; (None, path) when it will not say."""
    path = path or bundled_cbc() or shutil.which("cbc")
    if path is None:
        return None, None
    try:
        done = subprocess.run([path, "-quit"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, path
    m = _CBC_VERSION.search(done.stdout + done.stderr)
    return (m.group(1) if m else None), path


def version_text(migplan_version: str) -> str:
    """The lines `migplan --version` prints."""
    cbc, cbc_path = cbc_version()
    pulp = package_version("PuLP") or package_version("pulp")
    if cbc_path is None:
        solver = "CBC not found" + (f" (PuLP {pulp} is installed without its bundled cbc)" if pulp else
                                    " (PuLP is not installed)")
    else:
        solver = f"CBC {cbc or 'unknown version'} ({cbc_path}" + (f", via PuLP {pulp})" if pulp else ")")
    highs = package_version("highspy")
    nvml = package_version("nvidia-ml-py")
    lines = [f"migplan {migplan_version}", f"solver: {solver}",
             f"solver (optional): HiGHS {'via highspy ' + highs if highs else 'not installed'}",
             f"nvidia-ml-py: {nvml or 'not installed'}",
             f"ansible-core (optional, INI inventories): {package_version('ansible-core') or 'not installed'}",
             f"python: {platform.python_version()}"]
    return "\n".join(lines)
