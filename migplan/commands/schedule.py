"""`migplan schedule install|remove`: write or remove the cron entry and systemd units, idempotently.

Files are written atomically; an unchanged file is left alone (so a second install reports "unchanged").
With systemd files changed, `systemctl daemon-reload` and `enable --now` are run (only under root "/").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from migplan.adapters.runner import LocalRunner
from migplan.files import write_atomic
from migplan.replan import schedule as s


def _under(root: str, path: str) -> Path:
    return Path(root) / path.lstrip("/")


def install(files: Mapping[str, str], *, root: str = "/", systemd: bool = True) -> list[str]:
    out, changed_units = [], []
    for path, text in files.items():
        target = _under(root, path)
        try:
            same = target.read_bytes() == text.encode("utf-8")  # as write_atomic writes it
        except FileNotFoundError:
            same = False
        if same:
            out.append(f"unchanged: {target}")
            continue
        write_atomic(target, text, mode=0o644, keep_mode=False)
        out.append(f"wrote: {target}")
        if path.endswith((".service", ".timer")):
            changed_units.append(os.path.basename(path))
    if systemd and changed_units and os.path.abspath(root) == "/":
        runner = LocalRunner(host="localhost")
        runner.run(["systemctl", "daemon-reload"])
        for unit in changed_units:
            if unit.endswith(".timer") or unit == s.RESTORE_SERVICE:
                done = runner.run(["systemctl", "enable", "--now" if unit.endswith(".timer") else "--quiet", unit])
                out.append(f"enabled: {unit}" if done.ok else f"warning: systemctl enable {unit} failed: "
                           f"{done.stderr.strip()[:200]}")
    return out


def remove(*, root: str = "/") -> list[str]:
    out = []
    paths = [s.CRON_PATH] + [f"{s.UNIT_DIR}/{u}" for u in (s.REPLAN_TIMER, s.REPLAN_SERVICE, s.RESTORE_SERVICE)]
    for path in paths:
        target = _under(root, path)
        if target.exists():
            if os.path.abspath(root) == "/" and path.endswith((".timer", ".service")):
                with contextlib.suppress(Exception):
                    LocalRunner(host="localhost").run(["systemctl", "disable", "--now", os.path.basename(path)])
            target.unlink()
            out.append(f"removed: {target}")
    return out or ["nothing to remove"]
