"""The scheduled command as cron and systemd read it back: every argument arrives as given, or is refused.

The readers here are written from the formats' own rules, not from migplan's writer:
- cron (crontab(5)): an unescaped `%` ends the command (the rest is its standard input, further `%` newlines),
  `\\%` is a literal `%`. vixie/Debian cron and cronie differ on a backslash before `\\%`; both are read. The
  command then runs as `/bin/sh -c COMMAND`: the real sh runs it here, with a script that prints its argv.
- systemd (systemd.service(5) "Command lines", systemd.unit(5) "Specifiers"): `ExecStart=` split into words
  (double and single quotes, C escapes, an unquoted lone `;` separates commands), then specifiers (`%%` is
  `%`, any other `%X` is expanded), then, when it runs, environment variables (`$$` is `$`, other `$` are
  expanded; not in the executable's path). Plus the real `systemd-analyze verify` where it is installed.
And replan's exit codes as the written service judges them (SuccessExitStatus=, read back from the file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import MIGPLAN_ENV
from typer.testing import CliRunner

from migplan.cli.app import app
from migplan.commands.replan import EXIT_APPLIED, EXIT_FAILED, EXIT_LOCKED, EXIT_NOTHING, EXIT_PARTIAL
from migplan.commands.schedule import install
from migplan.errors import EXIT_USAGE
from migplan.replan import schedule

SH = "/bin/sh"
ANALYZE = shutil.which("systemd-analyze")
NEEDS_ANALYZE = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed here")

# Arguments with every character either format treats specially.
HARD = [
    ["-i", "/etc/100%/inv.yaml"],
    ["-p", "%h/profiles"],
    ["-p", "%%"],
    ["-p", "%"],
    ["--config", "$HOME/c.yaml"],
    ["--config", "${HOME}x"],
    ["--config", "$$"],
    ["--config", "/srv/a b/c.yaml"],
    ["--config", "it's \"quoted\""],
    ["--config", "back\\slash\\%x\\"],
    ["--config", "\\\\%\\%"],
    ["--limit", ";"],
    ["--limit", "\\;"],
    ["--limit", "`id` $(id) ; rm -rf / # &"],
    ["--limit", "-"],
    ["--limit", "#x"],
    ["--limit", "ünï/cödé\u2028"],
    ["--limit", "a*b?[c]~{d,e}"],
    ["--catalog", "x!y@z:w+"],
]


def _argv_script(where: Path) -> Path:
    """An executable that prints its argv ($0 too), NUL-separated: the stand-in for migplan."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text("#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\"\n")
    where.chmod(0o755)
    return where


# --- cron ---------------------------------------------------------------------------------------------------

def cron_percent_vixie(command: str) -> tuple[str, str | None]:
    """vixie/Debian cron's pass (do_command.c): `\\%` -> `%`; a backslash takes the next character as it is;
    the first other `%` ends the command, the rest is stdin with each further `%` a newline."""
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(command):
        if escaped:
            if ch == "%":
                out[-1] = "%"
            else:
                out.append(ch)
            escaped = False
            continue
        if ch == "\\":
            escaped = True
        elif ch == "%":
            return "".join(out), command[i + 1:].replace("%", "\n")
        out.append(ch)
    return "".join(out), None


def cron_percent_cronie(command: str) -> tuple[str, str | None]:
    """cronie's pass: `\\%` -> `%`, `\\x` -> `\\x` for every other x (a backslash after a backslash escapes
    again); the first unescaped `%` ends the command."""
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(command):
        if escaped:
            if ch != "%":
                out.append("\\")
        elif ch == "%":
            return "".join(out), command[i + 1:].replace("%", "\n")
        escaped = ch == "\\"
        if not escaped:
            out.append(ch)
    if escaped:
        out.append("\\")
    return "".join(out), None


def cron_command_of(crontab: str) -> str:
    """The command of the one job line of a system crontab: after five time fields and the user."""
    jobs = [ln for ln in crontab.split("\n") if ln.strip() and not ln.lstrip().startswith("#")
            and not ln.split("=", 1)[0].strip().isidentifier()]
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 6)
    assert len(fields) == 7 and fields[5] == "root", fields
    return fields[6]


def run_as_cron(crontab: str) -> list[list[str]]:
    """The argv the real sh gives the command, after each cron's `%` pass (they must agree)."""
    seen = []
    for read in (cron_percent_vixie, cron_percent_cronie):
        command, stdin = read(cron_command_of(crontab))
        assert stdin is None, f"{read.__name__}: the command ends at a %: {command!r}, stdin {stdin!r}"
        done = subprocess.run([SH, "-c", command], capture_output=True, timeout=30, check=True)
        seen.append(done.stdout.decode("utf-8").split("\0")[:-1])
    return seen


def test_the_percent_readers_follow_crontab_5() -> None:
    """The readers themselves, on what crontab(5) says (and where the two crons differ)."""
    for read in (cron_percent_vixie, cron_percent_cronie):
        assert read("date +%Y") == ("date +", "Y")
        assert read("mail x%line 1%line 2") == ("mail x", "line 1\nline 2")
        assert read("date +\\%Y") == ("date +%Y", None)
        assert read("a\\b") == ("a\\b", None)
    assert cron_percent_vixie("a\\\\%b") == ("a\\\\", "b")
    assert cron_percent_cronie("a\\\\%b") == ("a\\%b", None)


@pytest.mark.skipif(not os.access(SH, os.X_OK), reason="/bin/sh is not here")
@pytest.mark.parametrize("args", HARD, ids=lambda a: repr(a[-1]))
def test_cron_hands_every_argument_back(tmp_path: Path, args: list[str]) -> None:
    exe = _argv_script(tmp_path / "100% bin" / "mig'plan $x")
    argv = (str(exe), "replan", "--quiet", *args)
    text = schedule.cron_entry(schedule.Schedule(every="15m", argv=argv))
    assert text.endswith("\n") and text.count("\n") == 4, text  # one line per setting, nothing split
    assert run_as_cron(text) == [list(argv), list(argv)]


def test_the_issue_path_is_escaped_for_cron() -> None:
    text = schedule.cron_entry(schedule.Schedule(argv=("/usr/bin/migplan", "replan", "--quiet", "-i",
                                                       "/etc/100%/inv.yaml")))
    assert "root /usr/bin/migplan replan --quiet -i /etc/100\\%/inv.yaml\n" in text
    # written raw, the reader (and cron) would cut the command there
    assert cron_percent_vixie("/usr/bin/migplan -i /etc/100%/inv.yaml")[1] == "/inv.yaml"


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b", "\x1b[0m", "a\x85b", "", "\udcff"])
def test_what_no_format_can_hold_is_refused(bad: str) -> None:
    argv = ("/usr/bin/migplan", "replan", "-i", bad)
    for write in (schedule.cron_entry, lambda s: schedule.replan_units(s)[schedule.REPLAN_SERVICE]):
        with pytest.raises(ValueError, match="control character|empty argument|UTF-8"):
            write(schedule.Schedule(argv=argv))


def test_a_command_longer_than_cron_keeps_is_refused() -> None:
    fits = ("/usr/bin/migplan", "-i", "x" * (schedule.CRON_MAX_COMMAND - len("/usr/bin/migplan -i ")))
    assert len(cron_command_of(schedule.cron_entry(schedule.Schedule(argv=fits)))) == schedule.CRON_MAX_COMMAND
    with pytest.raises(ValueError, match="999"):
        schedule.cron_entry(schedule.Schedule(argv=(*fits[:2], fits[2] + "x")))
    with pytest.raises(ValueError, match="999"):  # counted as cron reads it: quoted, in UTF-8 bytes
        schedule.cron_entry(schedule.Schedule(argv=(*fits[:2], "é" * 490)))


# --- systemd -------------------------------------------------------------------------------------------------

_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
              '"': '"', "'": "'", "s": " "}


def unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections -> key -> values (systemd.syntax(7): comments at line start, `\\` at the end of
    a line continues it, `[Section]`, `Key=Value` with whitespace around both stripped)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    pending = ""
    for raw in text.split("\n"):
        line = pending + raw
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            assert stripped.endswith("]"), stripped
            section = stripped[1:-1]
            out.setdefault(section, {})
            continue
        key, eq, value = stripped.partition("=")
        assert eq and section is not None, stripped
        out[section].setdefault(key.strip(), []).append(value.strip())
    assert not pending
    return out


def _words(value: str) -> list[tuple[str, str]]:
    """systemd's extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE) over a command line: (raw, word)."""
    words = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in " \t\n\r":
            i += 1
        if i == n:
            return words
        start, word, quote = i, [], None
        while i < n and (quote or value[i] not in " \t\n\r"):
            ch = value[i]
            if ch == "\\":
                esc = value[i + 1] if i + 1 < n else ""
                if esc == "x":
                    word.append(chr(int(value[i + 2:i + 4], 16)))
                    i += 4
                    continue
                assert esc in _C_ESCAPES, f"systemd refuses the escape \\{esc} in {value!r}"
                word.append(_C_ESCAPES[esc])
                i += 2
                continue
            if quote and ch == quote:
                quote = None
            elif not quote and ch in "\"'":
                quote = ch
            else:
                word.append(ch)
            i += 1
        assert quote is None, f"an unterminated quote in {value!r}"
        words.append((value[start:i], "".join(word)))


def _specifiers(word: str) -> str:
    out, i = [], 0
    while i < len(word):
        if word[i] == "%":
            nxt = word[i + 1:i + 2]
            assert nxt == "%", f"systemd would expand the specifier %{nxt} in {word!r}"
            out.append("%")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def _environment(word: str) -> str:
    out, i = [], 0
    while i < len(word):
        if word[i] == "$":
            nxt = word[i + 1:i + 2]
            assert nxt == "$", f"systemd would expand ${nxt}... in {word!r}"
            out.append("$")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def exec_argv(value: str) -> list[str]:
    """What systemd executes for an `ExecStart=` value: one command, its path first."""
    words = _words(value)
    assert words, value
    (_, first), rest = words[0], words[1:]
    assert first[:1] not in "-@:+!", f"{first!r} starts with an ExecStart= prefix"
    assert not any(raw == ";" for raw, _ in rest), f"a lone ; separates commands in {value!r}"
    path = _specifiers(first)
    assert path.startswith("/") and not set(path) & set("\"'\\$"), path  # and `$` is not expanded in it
    return [path, *(_environment(_specifiers(w)) for _, w in rest)]


def test_the_exec_reader_follows_systemd_service_5() -> None:
    assert exec_argv('/bin/echo "a b" \'c d\' e\\x20f') == ["/bin/echo", "a b", "c d", "e f"]
    assert exec_argv('/bin/echo "100%%" "$$HOME" \'say "hi"\' "\\"\\\\"') == ["/bin/echo", "100%", "$HOME",
                                                                              'say "hi"', '"\\']
    for expanded in ("/bin/echo %h", "/bin/echo '%h'", "/bin/echo $HOME", '/bin/echo "${HOME}"',
                     "/bin/echo a ; /bin/true", "-/bin/echo"):
        with pytest.raises(AssertionError):
            exec_argv(expanded)


@pytest.mark.parametrize("args", HARD, ids=lambda a: repr(a[-1]))
def test_systemd_hands_every_argument_back(args: list[str]) -> None:
    argv = ("/opt/100% mig/bin/migplan", "replan", "--quiet", *args)
    service = unit_settings(schedule.replan_units(schedule.Schedule(argv=argv))[schedule.REPLAN_SERVICE])
    (value,) = service["Service"]["ExecStart"]
    assert exec_argv(value) == list(argv)


def test_the_issue_specifier_is_escaped_for_systemd() -> None:
    units = schedule.replan_units(schedule.Schedule(argv=("/usr/bin/migplan", "replan", "-p", "%h/p")))
    assert 'ExecStart=/usr/bin/migplan replan -p "%%h/p"\n' in units[schedule.REPLAN_SERVICE]
    restore = unit_settings(schedule.restore_unit("/opt/100%/migplan"))["Service"]["ExecStart"]
    assert [exec_argv(v) for v in restore] == [["/opt/100%/migplan", "apply", "--last", "--yes"]]


@pytest.mark.parametrize(("exe", "why"), [("migplan", "absolute path"), ("bin/migplan", "absolute path"),
                                          ("/opt/a'b/migplan", "'"), ('/opt/a"b/migplan', '"'),
                                          ("/opt/a\\b/migplan", "\\"), ("/opt/$x/migplan", "$")])
def test_an_executable_systemd_cannot_run_as_given_is_refused(exe: str, why: str) -> None:
    with pytest.raises(ValueError) as e:
        schedule.replan_units(schedule.Schedule(argv=(exe, "replan")))
    assert repr(exe) in str(e.value) and why in str(e.value).removeprefix(repr(exe)), e.value


def _verify(tmp_path: Path, units: dict[str, str]) -> list[str]:
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "verify", *(str(tmp_path / n) for n in units)], capture_output=True,
                          text=True, timeout=120)
    # verify also reports on units it loads as dependencies that this container lacks: only our files count
    return [ln for ln in (done.stdout + done.stderr).splitlines() if any(n in ln for n in units)]


@pytest.mark.slow
@NEEDS_ANALYZE
def test_systemd_analyze_verifies_units_with_every_hard_argument(tmp_path: Path) -> None:
    """systemd's own reading of the files: the executable (in a directory named with `%`, a space and `;`) must
    resolve to the file that exists, and every argument must parse (an unknown specifier would be refused)."""
    exe = _argv_script(tmp_path / "100% b;in" / "migplan")
    argv = (str(exe), "replan", "--quiet", *(a for args in HARD for a in args))
    units = {**schedule.replan_units(schedule.Schedule(every="15m", argv=argv)),
             schedule.RESTORE_SERVICE: schedule.restore_unit(str(exe))}
    assert _verify(tmp_path, units) == []
    # the check can fail: the same path written raw is refused ('% ' is no specifier)
    raw = units[schedule.REPLAN_SERVICE].replace(schedule.unit_word(str(exe), executable=True), str(exe))
    assert raw != units[schedule.REPLAN_SERVICE]
    assert _verify(tmp_path, {schedule.REPLAN_SERVICE: raw})


# --- exit codes ----------------------------------------------------------------------------------------------

def test_the_service_counts_exactly_replans_successes_as_success() -> None:
    """systemd.service(5) SuccessExitStatus=: exit 0 is always success, the listed codes too; read back from
    the file. "applied" (5) must not fail the unit; partial (1) must, so operators see it."""
    text = schedule.replan_units(schedule.Schedule(argv=("/usr/bin/migplan", "replan")))[schedule.REPLAN_SERVICE]
    service = unit_settings(text)["Service"]
    listed = {int(tok) for value in service.get("SuccessExitStatus", []) for tok in value.split()}
    success = {0} | listed
    assert {EXIT_NOTHING, EXIT_APPLIED} <= success
    assert not {EXIT_PARTIAL, EXIT_FAILED, EXIT_LOCKED, EXIT_USAGE} & success, success
    assert set(schedule.REPLAN_SUCCESS) == {EXIT_NOTHING, EXIT_APPLIED}


@pytest.mark.slow
@NEEDS_ANALYZE
def test_systemd_analyze_reads_the_success_exit_status(tmp_path: Path) -> None:
    exe = _argv_script(tmp_path / "bin" / "migplan")
    units = schedule.replan_units(schedule.Schedule(argv=(str(exe), "replan")))
    assert "\nSuccessExitStatus=5\n" in units[schedule.REPLAN_SERVICE]
    assert _verify(tmp_path, units) == []
    bad = units[schedule.REPLAN_SERVICE].replace("SuccessExitStatus=5", "SuccessExitStatus=five")
    assert _verify(tmp_path, {schedule.REPLAN_SERVICE: bad})  # and a value it cannot read is reported


# --- the CLI --------------------------------------------------------------------------------------------------

@pytest.fixture()
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    for var in MIGPLAN_ENV:
        monkeypatch.delenv(var, raising=False)
    exe = _argv_script(tmp_path / "100% bin" / "migplan")
    monkeypatch.setattr("migplan.cli.replan_cmd._migplan_path", lambda: str(exe))

    def invoke(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(app, list(args))

    return invoke


@pytest.mark.skipif(not os.access(SH, os.X_OK), reason="/bin/sh is not here")
def test_schedule_install_with_cron_writes_the_path_as_given(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("schedule", "install", "--with", "cron", "--root", str(tmp_path / "root"), "--",
            "-i", "/etc/100%/inv.yaml", "--config", "/etc/%h $HOME/c.yaml")
    assert r.exit_code == 0, r.output
    written = (tmp_path / "root" / "etc" / "cron.d" / "migplan").read_text()
    argv = [str(tmp_path / "100% bin" / "migplan"), "replan", "--quiet", "-i", "/etc/100%/inv.yaml",
            "--config", "/etc/%h $HOME/c.yaml"]
    assert run_as_cron(written) == [argv, argv]


def test_schedule_install_with_systemd_writes_the_path_as_given(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    files = tmp_path / "root"
    r = cli("schedule", "install", "--with", "systemd", "--at-boot", "--root", str(files), "--",
            "-p", "%h/profiles", "-i", "$HOME/inv.yaml")
    assert r.exit_code == 0, r.output
    unit = (files / "etc" / "systemd" / "system" / schedule.REPLAN_SERVICE).read_text()
    (value,) = unit_settings(unit)["Service"]["ExecStart"]
    assert exec_argv(value) == [str(tmp_path / "100% bin" / "migplan"), "replan", "--quiet", "-p", "%h/profiles",
                                "-i", "$HOME/inv.yaml"]


@pytest.mark.parametrize(("args", "words"), [
    (["--yes", "--allow-disrupt"], "replan has no option --yes"),
    (["--allow-disrupt"], "replan has no option --allow-disrupt"),
    (["--dry"], "replan has no option --dry (did you mean --drain or --dry-run?)"),
    (["-i"], "Option '-i' requires an argument"),
    (["--last", "many"], "'--last'"),
    (["-j", "0"], "'--parallel'"),
    (["-o", "html"], "'html'"),
    (["inventory.yaml"], "replan takes no argument 'inventory.yaml'"),
    (["-i", "x", "--", "y"], "replan takes no argument 'y'"),
    (["--help"], "replan -h/--help prints replan's help"),
    (["-h"], "replan -h/--help prints replan's help"),
    (["--history"], "replan --history lists past runs"),
    (["-i", "a\nb"], "a control character"),
    (["-i", ""], "an empty argument"),
])
@pytest.mark.parametrize("command", ["install", "show"])
def test_schedule_refuses_what_replan_would_refuse_in_one_line(cli, tmp_path: Path, command: str,  # type: ignore[no-untyped-def]
                                                               args: list[str], words: str) -> None:
    root = tmp_path / "root"
    where = ["--root", str(root)] if command == "install" else []
    r = cli("schedule", command, "--with", "cron", *where, "--", *args)
    assert r.exit_code == EXIT_USAGE, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], r.output
    assert not root.exists()  # nothing written


def test_schedule_accepts_each_replan_option(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["-i", "inv.yaml", "-p", "profiles", "--state-dir", "/var/lib/mp", "--metrics-file", "m.prom",
            "--history-store", "h", "--collect", "--window", "7d", "--dry-run", "-q", "-o", "json", "--config", "c",
            "--catalog", "a", "--catalog", "b", "-j", "4", "--accept-new-host-keys", "--known-hosts", "k",
            "--ssh-config", "none", "-l", "web*", "-l", "db", "--timeout", "30", "--connect-timeout", "5"]
    r = cli("schedule", "show", "--with", "systemd", "--", *args)
    assert r.exit_code == 0, r.output
    shown = {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in r.output.split("# /etc/systemd/system/")[1:]}
    (value,) = unit_settings(shown[schedule.REPLAN_SERVICE])["Service"]["ExecStart"]
    assert exec_argv(value)[3:] == args


def test_install_leaves_an_unchanged_file_alone(tmp_path: Path) -> None:
    files = {schedule.CRON_PATH: schedule.cron_entry(schedule.Schedule(argv=("/usr/bin/migplan", "-c", "ünï")))}
    assert [ln.split(":")[0] for ln in install(files, root=str(tmp_path))] == ["wrote"]
    assert [ln.split(":")[0] for ln in install(files, root=str(tmp_path))] == ["unchanged"]
