"""The cron entry and systemd units that `migplan schedule install` writes (pure text).

cron: /etc/cron.d/migplan, the system crontab format with a user field (crontab(5), Debian cron):
no dots in the file name, a trailing newline, `PATH` set because cron's is minimal.
systemd: migplan-replan.service (Type=oneshot) + migplan-replan.timer (OnCalendar, Persistent=true so a
missed run happens at boot), and migplan-restore.service for `--at-boot`: `migplan apply --last` before
the services that use the GPUs (Before= the container runtime and kubelet, After= the NVIDIA persistence
daemon and the driver's device nodes), WantedBy=multi-user.target.

The scheduled command is written so that each format hands back exactly the arguments given:
- cron runs the command with `/bin/sh -c` after its own pass over it: an unescaped `%` ends the command
  (the rest becomes its standard input, further `%` newlines) and `\\%` is a literal `%` (crontab(5); vixie
  and Debian cron, cronie alike). Each argument is quoted for sh and each `%` written as `\\%`, never right
  after a backslash (where the crons differ). vixie/Debian cron keeps at most 999 bytes of a command.
- systemd splits `ExecStart=` into words (double quotes, C escapes), then expands specifiers (`%%` is a
  literal `%`) and, when it runs, environment variables (`$$` is a literal `$`): systemd.service(5),
  "Command lines"; systemd.unit(5), "Specifiers". The executable must be an absolute path without quotes,
  backslashes or `$` (systemd refuses the first two in it and does not expand the last there).
What neither format can hold is refused with the reason: a control character (a newline ends a cron line
and a unit file setting) or an empty argument.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
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
# replan's exit codes that mean success (migplan.commands.replan: EXIT_NOTHING 0, EXIT_APPLIED 5; the tests
# check they agree). 1 partial, 3 failed, 4 locked and 2 bad input show as a failed unit.
REPLAN_SUCCESS = (0, 5)
CRON_MAX_COMMAND = 999  # vixie/Debian cron: MAX_COMMAND 1000 with its NUL; a longer command is cut short
# words that need no quoting in ExecStart= (and cannot be a lone ";", a prefix or a specifier)
_UNIT_PLAIN = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
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
    """The scheduled command, refused (ValueError, naming the argument) where no format could hold it."""
    if not argv:
        raise ValueError("the scheduled command is empty")
    for a in argv:
        if not a:
            raise ValueError("an empty argument in the scheduled command: give each option a value")
        bad = next((c for c in a if unicodedata.category(c) == "Cc"), None)
        if bad is not None:
            raise ValueError(f"{a!r}: a control character ({bad!r}) cannot be written into a crontab or a unit "
                             "file (a newline would end the line): remove it")
        if any(unicodedata.category(c) == "Cs" for c in a):
            raise ValueError(f"{a!r} is not valid UTF-8: give the path or value in UTF-8")
    return tuple(argv)


def cron_word(arg: str) -> str:
    """`arg` as one sh word that cron's `%` pass leaves alone: quoted pieces joined by `\\%`."""
    return "\\%".join(shlex.quote(part) if part else "" for part in arg.split("%"))


def cron_command(argv: Sequence[str]) -> str:
    cmd = " ".join(cron_word(a) for a in check_argv(argv))
    if len(cmd.encode("utf-8")) > CRON_MAX_COMMAND:
        raise ValueError(f"the scheduled command is {len(cmd.encode('utf-8'))} bytes as cron reads it; cron keeps "
                         f"at most {CRON_MAX_COMMAND}: use --with systemd, or shorter paths and options")
    return cmd


def unit_word(arg: str, *, executable: bool = False) -> str:
    """`arg` as one word of a systemd `ExecStart=` that systemd turns back into `arg`."""
    if executable:
        if not arg.startswith("/"):
            raise ValueError(f"{arg!r}: systemd's ExecStart= needs the absolute path of the executable")
        bad = sorted(set(arg) & set("\"'\\$"))
        if bad:
            raise ValueError(f"{arg!r}: systemd cannot run an executable whose path has {' '.join(bad)} in it: "
                             "install migplan at another path")
    if _UNIT_PLAIN.match(arg):
        return arg
    text = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{text}"'


def exec_start(argv: Sequence[str]) -> str:
    exe, *args = check_argv(argv)
    return " ".join([unit_word(exe, executable=True), *(unit_word(a) for a in args)])


def cron_entry(s: Schedule) -> str:
    n = s.minutes()
    when = f"*/{n} * * * *" if n < 60 else f"0 {'*' if n == 60 else f'*/{n // 60}'} * * *"
    return ("# migplan replan, installed by 'migplan schedule install' (remove with 'migplan schedule remove')\n"
            "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            f"{when} {s.user} {cron_command(s.argv)}\n")


def _calendar(n: int) -> str:
    if n < 60:
        return f"*:0/{n}"
    return "hourly" if n == 60 else f"00/{n // 60}:00"


def replan_units(s: Schedule) -> dict[str, str]:
    n = s.minutes()
    service = ("[Unit]\nDescription=migplan: re-plan and apply MIG layouts\n"
               "Wants=network-online.target\nAfter=network-online.target\n\n"
               f"[Service]\nType=oneshot\nUser={s.user}\nExecStart={exec_start(s.argv)}\n"
               "# replan: 0 nothing to do, 5 applied; 1 partial, 3 failed, 4 locked, 2 bad input are failures\n"
               f"SuccessExitStatus={' '.join(str(c) for c in REPLAN_SUCCESS if c)}\n")
    timer = ("[Unit]\nDescription=migplan: re-plan on a schedule\n\n"
             f"[Timer]\nOnCalendar={_calendar(n)}\nPersistent=true\nRandomizedDelaySec=60\n"
             f"Unit={REPLAN_SERVICE}\n\n[Install]\nWantedBy=timers.target\n")
    return {REPLAN_SERVICE: service, REPLAN_TIMER: timer}


def restore_unit(migplan: str) -> str:
    before = " ".join(BEFORE_GPU_USERS)
    return ("[Unit]\nDescription=migplan: restore the last applied MIG layout after boot\n"
            "After=nvidia-persistenced.service systemd-modules-load.service\n"
            f"Before={before}\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart={exec_start([migplan, 'apply', '--last', '--yes'])}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
