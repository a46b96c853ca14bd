"""SSH options an inventory passes to `ssh` (`ansible_ssh_common_args`, `ansible_ssh_extra_args`, migplan's own
`ssh_args`/`migplan_ssh_args`), read into `SshArgs` for the SSH adapter (docs/inventory.md, "SSH options").

The text is split with `shlex` as Ansible's ssh connection plugin splits it (`_split_ssh_args`), then read as
ssh(1) reads its command line. What migplan honours:

* `-o ProxyJump=[user@]host[:port][,...]` and `-J [user@]host[:port][,...]`: a chain of real SSH connections,
  each jump host verified against known_hosts and looked up in ~/.ssh/config like any host;
* `-o ProxyCommand=COMMAND`: run without a shell (paramiko.ProxyCommand), with `%h` `%p` `%r` `%n` `%%`
  expanded; so a command that needs a shell (`|`, `;`, `&`, `$`, redirections, globs, backquotes) is refused;
* `ProxyJump=none`/`ProxyCommand=none`: no proxy, whatever ~/.ssh/config says;
* `-o StrictHostKeyChecking=yes` (or `ask`: there is no one to ask, so an unknown key is refused): what migplan
  does anyway, noted; `no`/`off`/`accept-new` are refused, never honoured: an inventory does not turn host-key
  checking off or make it trust-on-first-use (`--accept-new-host-keys` does the latter, on the command line);
* `-o UserKnownHostsFile=PATH` (one file, not /dev/null): the target's host key is verified against PATH.

Everything else (`-C`, `-q`, `-o ServerAliveInterval=...`, `-o ControlMaster=...`, a Jinja2 template) is
refused with a message that names it: an option migplan does not act on is never dropped silently. Messages are
for `Node.fail` (the caller adds the file, the line, the host and the variable). Pure: no files, no processes.
"""

from __future__ import annotations

import os
import re
import shlex

from migplan import names
from migplan.inventory.model import JumpHop, SshArgs

SUPPORTED = ("-o ProxyJump=[user@]host[:port][,...], -J [user@]host[:port][,...], -o ProxyCommand=COMMAND, "
             "-o StrictHostKeyChecking=yes, -o UserKnownHostsFile=PATH")
MAX_JUMPS = 8  # more hops than any bastion set-up has: a typo or a loop
MAX_TEXT = 4096
# Characters that mean something to the shell OpenSSH runs ProxyCommand with, and that paramiko (no shell) would
# pass on as text: a command that needs them is refused rather than run differently.
_SHELL_CHARS = set("|;&<>()$`*?{}!#\n\r")
_OPTION = re.compile(r"\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*)\Z", re.S)
_TOKEN = re.compile(r"%(.?)", re.S)  # `%` at the very end: group "" (refused)
TOKENS = {"h": "the host name", "p": "the port", "r": "the remote user", "n": "the name as given", "%": "a '%'"}


class SshArgsError(ValueError):
    """A refused or malformed option; `str()` is the message, `hint` what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def parse_jumps(spec: str) -> tuple[JumpHop, ...]:
    """`[user@]host[:port][,...]` (also `ssh://[user@]host[:port]`, `[v6::addr]:port`) -> hops, in order."""
    hops = []
    for part in spec.split(","):
        hops.append(parse_jump(part))
    if len(hops) > MAX_JUMPS:
        raise SshArgsError(f"ProxyJump {spec!r} has {len(hops)} hops, more than {MAX_JUMPS}")
    return tuple(hops)


def parse_jump(spec: str) -> JumpHop:
    """One hop: `[user@]host[:port]` or `ssh://[user@]host[:port]`."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):]
    user, _, rest = text.rpartition("@")
    host, port_text = rest, None
    if rest.startswith("["):  # [v6::addr]:port
        host, _, tail = rest[1:].partition("]")
        if tail and not tail.startswith(":"):
            host = ""
        port_text = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    port = None
    if port_text is not None:
        if not (names.is_ascii_digits(port_text) and 1 <= int(port_text) <= 65535):
            raise SshArgsError(f"ProxyJump {spec.strip()!r}: port {port_text!r} is not a number in 1-65535")
        port = int(port_text)
    if not host or not names.ADDRESS.fullmatch(host) or (user and not names.USER_NAME.fullmatch(user)):
        raise SshArgsError(f"ProxyJump {spec.strip()!r} is not [user@]host[:port]",
                           hint="ProxyJump takes [user@]host[:port], comma-separated")
    return JumpHop(host, port, user or None)


def proxy_command(text: str) -> tuple[str, ...]:
    """A ProxyCommand as the argv paramiko runs (no shell), %-tokens left in place; refused when it needs a shell."""
    shown = text.strip()
    bad = sorted(_SHELL_CHARS & set(shown))
    if bad:
        raise SshArgsError(
            f"ProxyCommand {shown!r} uses {''.join(bad)!r}, which needs a shell; migplan runs ProxyCommand without "
            "one (paramiko)", hint="write a plain command such as 'ssh -W %h:%p bastion', or use ProxyJump")
    try:
        argv = tuple(shlex.split(shown))
    except ValueError as err:
        raise SshArgsError(f"cannot split ProxyCommand {shown!r}: {err}", hint="check the quotes") from None
    if not argv:
        raise SshArgsError("ProxyCommand is empty", hint="give a command such as 'ssh -W %h:%p bastion', or 'none'")
    if os.path.basename(argv[0]) == "sshpass":
        raise SshArgsError(f"ProxyCommand {argv[0]!r}: migplan logs in with keys, never a password (one on a command "
                           "line would also show in process lists and in migplan's own messages)",
                           hint="give the jump host a key (ssh-agent or IdentityFile), e.g. ProxyJump")
    if any(c.isspace() for c in argv[0]):
        raise SshArgsError(f"ProxyCommand {shown!r} is quoted as a whole, so it names a program {argv[0]!r}; "
                           "OpenSSH would not run it either", hint="remove the quotes around the command")
    for token in argv:
        for m in _TOKEN.finditer(token):
            if m.group(1) not in TOKENS:
                what = f"%{m.group(1)} is not expanded by migplan" if m.group(1) else f"a lone '%' ends {token!r}"
                raise SshArgsError(f"ProxyCommand {shown!r}: {what}",
                                   hint="use %h (host), %p (port), %r (user), %n (the name as given) or %% for a '%'")
    return argv


def expand(argv: tuple[str, ...], *, host: str, port: int, user: str, name: str) -> tuple[str, ...]:
    """ProxyCommand's %-tokens, as ssh_config(5) TOKENS: %h host, %p port, %r remote user, %n the original name,
    %% a '%'. The values are validated names and a number, and each argv word stays one word (no shell)."""
    values = {"h": host, "p": str(port), "r": user, "n": name, "%": "%"}
    return tuple(_TOKEN.sub(lambda m: values.get(m.group(1), m.group(0)), word) for word in argv)


def _options(tokens: list[str]) -> list[tuple[str, str, str]]:
    """(keyword lowercased, value, as written) for each `-o`/`-J` on the command line; anything else refused."""
    out: list[tuple[str, str, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-o", "-J"):
            if i + 1 >= len(tokens):
                example = "-o ProxyJump=bastion" if tok == "-o" else "-J bastion"
                raise SshArgsError(f"{tok} has no value", hint=f"write e.g. {example}")
            value, i = tokens[i + 1], i + 2
        elif tok.startswith(("-o", "-J")):
            value, i = tok[2:], i + 1
        else:
            if out and out[-1][0] == "proxycommand":
                raise SshArgsError(f"{tok!r} follows {out[-1][2]!r} as a word of its own",
                                   hint="quote the whole command: -o 'ProxyCommand=ssh -W %h:%p bastion'")
            raise SshArgsError(f"option {tok!r} is not supported", hint=f"migplan honours {SUPPORTED}")
        if tok.startswith("-J"):
            if not value.strip():
                raise SshArgsError("-J has no value", hint="write e.g. -J bastion")
            out.append(("proxyjump", value.strip(), f"-J {value.strip()}"))
            continue
        m = _OPTION.fullmatch(value)
        if not m:
            raise SshArgsError(f"-o {value!r} is not KEYWORD=VALUE", hint="write e.g. -o ProxyJump=bastion")
        if not m.group(2).strip():
            raise SshArgsError(f"-o {m.group(1)} has no value", hint=f"write -o {m.group(1)}=VALUE (or none)")
        out.append((m.group(1).lower(), m.group(2).strip(), f"-o {m.group(1)}={m.group(2).strip()}"))
    return out


def parse_ssh_args(text: str, where: str) -> SshArgs:
    """An inventory's ssh options (`where` names the variable(s), for --verbose notes), checked; SshArgsError when
    an option is refused."""
    if len(text) > MAX_TEXT:
        raise SshArgsError(f"longer than {MAX_TEXT} characters")
    if "{{" in text or "{%" in text:
        raise SshArgsError("holds a Jinja2 template, which migplan does not expand",
                           hint="write the value out, or pass the output of 'ansible-inventory --list' after "
                                "templating it yourself")
    if not text.replace("\t", " ").isprintable():
        raise SshArgsError("holds control characters")
    try:
        tokens = shlex.split(text)
    except ValueError as err:
        raise SshArgsError(f"cannot split {text!r}: {err}", hint="check the quotes") from None
    seen: dict[str, tuple[str, str]] = {}
    for key, value, written in _options(tokens):
        if key in seen and seen[key][0] != value:
            raise SshArgsError(f"{seen[key][1]!r} and {written!r} disagree (ssh would use the first)",
                               hint="keep one of them")
        seen.setdefault(key, (value, written))
    unknown = [w for k, (_, w) in seen.items()
               if k not in ("proxyjump", "proxycommand", "stricthostkeychecking", "userknownhostsfile")]
    if unknown:
        raise SshArgsError(f"option {unknown[0]!r} is not supported", hint=f"migplan honours {SUPPORTED}")
    notes: list[str] = []
    proxy, jumps, command = _proxy(seen, where, notes)
    if "stricthostkeychecking" in seen:
        _strict(seen["stricthostkeychecking"][0], where, notes)
    known = _known_hosts(seen["userknownhostsfile"][0], where, notes) if "userknownhostsfile" in seen else None
    return SshArgs(proxy=proxy, jumps=jumps, command=command, known_hosts=known, notes=tuple(notes))


def _proxy(seen: dict[str, tuple[str, str]], where: str,
           notes: list[str]) -> tuple[str | None, tuple[JumpHop, ...], tuple[str, ...]]:
    """(proxy, jumps, command) from ProxyJump/-J and ProxyCommand; both given (and not `none`) is refused."""
    jump_v = seen.get("proxyjump", ("", ""))[0]
    cmd_v = seen.get("proxycommand", ("", ""))[0]
    if "proxyjump" in seen and "proxycommand" in seen and "none" not in (jump_v.lower(), cmd_v.lower()):
        raise SshArgsError(f"both {seen['proxyjump'][1]!r} and {seen['proxycommand'][1]!r} (ssh uses the first)",
                           hint="keep one of them")
    if jump_v and jump_v.lower() != "none":
        jumps = parse_jumps(jump_v)
        notes.append(f"ProxyJump {','.join(map(str, jumps))} (from {where}): through "
                     f"{len(jumps)} jump host{'s' if len(jumps) > 1 else ''}, each key verified")
        return "jump", jumps, ()
    if cmd_v and cmd_v.lower() != "none":
        command = proxy_command(cmd_v)
        notes.append(f"ProxyCommand {shlex.join(command)!r} (from {where}): run without a shell, %h %p %r expanded")
        return "command", (), command
    if "proxyjump" in seen or "proxycommand" in seen:
        notes.append(f"ProxyJump/ProxyCommand none (from {where}): no proxy, whatever ~/.ssh/config says")
        return "none", (), ()
    return None, (), ()


def _strict(written: str, where: str, notes: list[str]) -> None:
    value = written.lower()
    if value in ("no", "off", "false", "accept-new"):
        what = "record unknown host keys on first use" if value == "accept-new" else "turn host-key checking off"
        raise SshArgsError(
            f"'-o StrictHostKeyChecking={written}' would {what}; migplan verifies every host key against known_hosts "
            "and does not let an inventory change that",
            hint="remove the option (or set migplan_ssh_args for migplan's own options); to record the keys of new "
                 "hosts, check their fingerprints and run once with --accept-new-host-keys")
    if value not in ("yes", "true", "ask"):
        raise SshArgsError(f"StrictHostKeyChecking {written!r} is not yes, ask, accept-new or no")
    notes.append(f"StrictHostKeyChecking={value} (from {where}): honoured; host keys are verified against "
                 "known_hosts (migplan's default), an unknown key is refused, never prompted for")


def _known_hosts(value: str, where: str, notes: list[str]) -> str:
    files = value.split()
    if not files or value.lower() == "none" or any(f in ("/dev/null", "none") for f in files):
        raise SshArgsError(f"'-o UserKnownHostsFile={value}' would forget every host key, so nothing would be "
                           "verified", hint="remove it, or name a known_hosts file")
    if len(files) > 1:
        raise SshArgsError(f"'-o UserKnownHostsFile={value}' names {len(files)} files; migplan reads one",
                           hint="name one known_hosts file (or use --known-hosts)")
    if not files[0].startswith(("/", "~")):
        raise SshArgsError(f"UserKnownHostsFile {files[0]!r} is not an absolute path or ~/...",
                           hint="write the full path of the known_hosts file")
    notes.append(f"UserKnownHostsFile={files[0]} (from {where}): this host's key is verified against that file "
                 "instead of --known-hosts")
    return files[0]
