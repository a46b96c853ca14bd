"""The cron entry and systemd units that `migplan schedule install` writes (pure text).

cron: /etc/cron.d/migplan, the system crontab format with a user field (crontab(5), Debian cron):
no dots in the file name, a trailing newline, `PATH` set because cron's is minimal.
systemd: migplan-replan.service (Type=oneshot) + migplan-replan.timer (OnCalendar, Persistent=true so a
missed run happens at boot), and migplan-restore.service for `--at-boot`: `migplan apply --last` before
the services that use the GPUs (Before= the container runtime and kubelet, After= the NVIDIA persistence
daemon and the driver's device nodes), WantedBy=multi-user.target.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

CRON_PATH = "/etc/cron.d/migplan"
UNIT_DIR = "/etc/systemd/system"
REPLAN_SERVICE, REPLAN_TIMER, RESTORE_SERVICE = "migplan-replan.service", "migplan-replan.timer", \
    "migplan-restore.service"
# Units that use the GPUs and must see the restored MIG layout (the ones a host may have; absent ones are
# ignored by systemd's Before=).
BEFORE_GPU_USERS = ("containerd.service", "docker.service", "crio.service", "kubelet.service",
                    "nvidia-mig-manager.service")
_SAFE_ARG = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_MINUTES = re.compile(r"^(\d+)(m|h)$")


@dataclass(frozen=True)
class Schedule:
    every: str = "1h"  # "15m", "1h", "6h": how often replan runs
    argv: tuple[str, ...] = ("migplan", "replan", "--quiet")  # the command (absolute migplan path preferred)
    user: str = "root"

    def minutes(self) -> int:
        m = _MINUTES.match(self.every)
        if not m:
            raise ValueError(f"--every {self.every!r}: write minutes or hours, e.g. 15m, 1h, 6h")
        n = int(m[1]) * (60 if m[2] == "h" else 1)
        if n < 1 or n > 24 * 60 or (n < 60 and 60 % n) or (n >= 60 and (n % 60 or 24 % (n // 60))):
            raise ValueError(f"--every {self.every!r}: use a divisor of an hour (1-30m) or of a day (1-24h)")
        return n


def check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    bad = [a for a in argv if not _SAFE_ARG.match(a)]
    if bad or not argv:
        raise ValueError(f"unsafe characters in the scheduled command: {bad!r} (letters, digits and _@%+=:,./- only)")
    return tuple(argv)


def _exec(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in check_argv(argv))


def cron_entry(s: Schedule) -> str:
    n = s.minutes()
    when = f"*/{n} * * * *" if n < 60 else f"0 {'*' if n == 60 else f'*/{n // 60}'} * * *"
    return ("# migplan replan, installed by 'migplan schedule install' (remove with 'migplan schedule remove')\n"
            "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            f"{when} {s.user} {_exec(s.argv)}\n")


def _calendar(n: int) -> str:
    if n < 60:
        return f"*:0/{n}"
    return "hourly" if n == 60 else f"00/{n // 60}:00"


def replan_units(s: Schedule) -> dict[str, str]:
    n = s.minutes()
    service = ("[Unit]\nDescription=migplan: re-plan and apply MIG layouts\n"
               "Wants=network-online.target\nAfter=network-online.target\n\n"
               f"[Service]\nType=oneshot\nUser={s.user}\nExecStart={_exec(s.argv)}\n"
               # exit 3 (partial) is reported by the run itself; "nothing to do" is 0
               "SuccessExitStatus=0\n")
    timer = ("[Unit]\nDescription=migplan: re-plan on a schedule\n\n"
             f"[Timer]\nOnCalendar={_calendar(n)}\nPersistent=true\nRandomizedDelaySec=60\n"
             f"Unit={REPLAN_SERVICE}\n\n[Install]\nWantedBy=timers.target\n")
    return {REPLAN_SERVICE: service, REPLAN_TIMER: timer}


def restore_unit(migplan: str = "migplan") -> str:
    before = " ".join(BEFORE_GPU_USERS)
    return ("[Unit]\nDescription=migplan: restore the last applied MIG layout after boot\n"
            "After=nvidia-persistenced.service systemd-modules-load.service\n"
            f"Before={before}\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart={_exec([migplan, 'apply', '--last', '--yes'])}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
