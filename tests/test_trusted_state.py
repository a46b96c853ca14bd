"""Hostile state and output paths (issue 21): the replan state directory and apply --last's last-applied.json are
trusted only when ours (or root's) and not writable by others, read without following links or blocking on FIFOs,
bounded in size and depth; output options are checked before any host is touched, refused with exit 2 and one
`error:` line naming the option and the path; an OSError on output names the path and the operation."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from migplan.adapters.state_dir import StateDir
from migplan.cli.app import app
from migplan.commands.apply import LastRequest, apply_last
from migplan.commands.context import build_context
from migplan.errors import InputError
from migplan.files import append_durable, check_output_option, read_trusted, write_atomic

NOBODY = 65534


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _tree(root: Path) -> list[tuple[str, int]]:
    """Every path under root with its size (links not followed): what a refusal must leave as it was."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            out.append((os.path.relpath(p, root), os.lstat(p).st_size))
    return sorted(out)


# --- the state directory ---------------------------------------------------------------------------------------

def test_a_lock_linked_to_another_file_is_refused_and_the_file_is_not_truncated(tmp_path: Path) -> None:
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "replan.lock").symlink_to(victim)
    with pytest.raises(InputError, match="replan.lock is a symbolic link"), StateDir(state).lock():
        pass
    assert victim.read_text() == "root:secret\n"


def test_a_hard_linked_lock_is_refused_and_the_file_is_not_truncated(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.link(victim, state / "replan.lock")
    with pytest.raises(InputError, match="2 links"), StateDir(state).lock():
        pass
    assert victim.read_text() == "keep\n"


def test_a_runs_link_is_refused_and_nothing_is_written_where_it_points(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "runs").symlink_to(elsewhere)
    with pytest.raises(InputError, match=r"runs is a symbolic link"):
        StateDir(state).record("r1", {"id": "r1"}, None, keep=5)
    with pytest.raises(InputError, match=r"runs is a symbolic link"), StateDir(state).lock():
        pass
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("how", ["mode-0777", "group-writable", "other-owner"])
def test_an_untrusted_state_directory_is_refused_naming_it(tmp_path: Path, how: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if how == "mode-0777":
        os.chmod(state, 0o777)
    elif how == "group-writable":
        os.chmod(state, 0o770)
    else:
        os.chown(state, NOBODY, NOBODY)
    before = _tree(tmp_path)
    with pytest.raises(InputError, match=str(state)) as err, StateDir(state).lock():
        pass
    assert ("owned by uid 65534" if how == "other-owner" else "writable by group or others") in str(err.value)
    assert _tree(tmp_path) == before  # no lock, no runs/ created
    with pytest.raises(InputError, match=str(state)):
        StateDir(state).runs()


def test_an_untrusted_subdirectory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "journal").mkdir(mode=0o700)
    os.chmod(state / "journal", 0o777)
    with pytest.raises(InputError, match=r"journal is writable by group or others \(mode 0777\)"), \
            StateDir(state).lock():
        pass
    assert not (state / "replan.lock").exists()


def test_the_state_directory_is_created_alone_never_its_parents(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="parent directory does not exist"), StateDir(tmp_path / "a" / "b").lock():
        pass
    assert not (tmp_path / "a").exists()
    with StateDir(tmp_path / "b").lock():
        pass
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o700
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["fetched", "journal", "plans", "replan.lock", "runs"]


def test_a_fifo_state_file_is_refused_at_once_never_blocking(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    os.mkfifo(sd.path / "gpu-changes.json")
    os.mkfifo(sd.path / "workload-hosts.json")
    os.mkfifo(sd.path / "runs" / "20260101T000000-000000.json")
    with pytest.raises(InputError, match=r"gpu-changes.json is a FIFO \(named pipe\), not a regular file"):
        sd.last_changed()
    with pytest.raises(InputError, match=r"workload-hosts.json is a FIFO"):
        sd.last_hosts()
    assert sd.runs() == [{"id": "20260101T000000-000000", "error": f"unreadable: {sd.path}/runs/"
                          "20260101T000000-000000.json is a FIFO (named pipe), not a regular file; refusing to "
                          "read it"}]
    with pytest.raises(InputError, match="not a regular file"):
        sd.mark_changed([("h1", 0)], 1.0)
    assert stat.S_ISFIFO(os.lstat(sd.path / "gpu-changes.json").st_mode)


def test_a_linked_state_file_is_neither_read_nor_replaced(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    target = tmp_path / "target.json"
    target.write_text('{"h1:0": 5}')
    (sd.path / "gpu-changes.json").symlink_to(target)
    with pytest.raises(InputError, match="gpu-changes.json is a symbolic link"):
        sd.last_changed()
    with pytest.raises(InputError, match="symbolic link"):
        sd.mark_changed([("h1", 0)], 1.0)
    assert target.read_text() == '{"h1:0": 5}'


def test_a_deep_state_document_is_a_clear_error_not_a_recursion_error(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    (sd.path / "gpu-changes.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError, match="JSON nested deeper than 64 levels"):
        sd.last_changed()
    (sd.path / "runs" / "r.json").write_text("{\"a\":" * 200_000 + "1" + "}" * 200_000)
    assert sd.runs() == [{"id": "r", "error": f"unreadable: {sd.path}/runs/r.json: JSON nested deeper than 64 "
                          "levels"}]


def test_an_oversized_state_file_is_refused(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    with open(sd.path / "workload-hosts.json", "wb") as fh:
        fh.truncate(5 * 1024 * 1024)
    with pytest.raises(InputError, match="more than the 4194304 a state file may be"):
        sd.last_hosts()


def test_non_ascii_digits_and_non_numbers_never_reach_int(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    (sd.path / "gpu-changes.json").write_text(json.dumps({"h1:\u0663": 5.0, "h1:\u00b2": 6.0, "h1:1": True,
                                                          "h1:2": 7.5}))
    assert sd.last_changed() == {("h1", 2): 7.5}
    (sd.path / "gpu-changes.json").write_text('{"h1:0": NaN}')
    with pytest.raises(InputError, match="NaN is not a JSON number"):
        sd.last_changed()


def test_replan_history_on_a_fifo_and_an_untrusted_dir_exits_2_without_blocking(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    os.mkfifo(sd.path / "runs" / "x.json")
    r = CliRunner().invoke(app, ["replan", "--history", "--state-dir", str(sd.path), "-o", "json"])
    assert r.exit_code == 0 and "FIFO" in r.output
    os.chmod(sd.path, 0o777)
    r = CliRunner().invoke(app, ["replan", "--history", "--state-dir", str(sd.path)])
    assert r.exit_code == 2
    assert _errors(r.output) == [f"error: --state-dir {sd.path} is writable by group or others (mode 0777);"
                                 " refusing to trust it"]  # the option that named it


def test_a_refused_state_dir_is_named_by_where_it_came_from(tmp_path: Path) -> None:
    """The option, the config key, or the default: what the operator has to change."""
    from migplan.adapters.state_dir import state_dir_option

    assert state_dir_option("/x", None) == "--state-dir"
    assert state_dir_option(None, "/y") == "replan.state_dir"
    assert state_dir_option(None, None) == "the state directory (default)"
    bad = tmp_path / "cfg-state"
    bad.mkdir()
    os.chmod(bad, 0o777)
    cfg = tmp_path / "migplan.yaml"
    cfg.write_text(f"replan:\n  state_dir: {bad}\n")
    r = CliRunner().invoke(app, ["replan", "--history", "--config", str(cfg)])
    assert r.exit_code == 2, r.output
    assert _errors(r.output) == [f"error: replan.state_dir {bad} is writable by group or others (mode 0777);"
                                 " refusing to trust it"]


# --- apply --last: last-applied.json -----------------------------------------------------------------------------

def _last(etc: Path, tmp: Path) -> LastRequest:
    return LastRequest(state_dir=str(etc), lock_file=str(tmp / "apply.lock"))


@pytest.mark.parametrize("how", ["symlink", "fifo", "dir-0777", "dir-nobody", "deep"])
def test_apply_last_refuses_an_untrusted_last_applied(tmp_path: Path, how: str) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o700)
    real = tmp_path / "real.json"
    real.write_text("{}")
    f = etc / "last-applied.json"
    if how == "symlink":
        f.symlink_to(real)
    elif how == "fifo":
        os.mkfifo(f)
    elif how == "deep":
        f.write_text("[" * 200_000 + "]" * 200_000)
    else:
        f.write_text("{}")
        if how == "dir-0777":
            os.chmod(etc, 0o777)
        else:
            os.chown(etc, NOBODY, NOBODY)
    want = {"symlink": "is a symbolic link", "fifo": "is a FIFO", "dir-0777": "writable by group or others",
            "dir-nobody": "owned by uid 65534", "deep": "JSON nested too deep"}[how]
    before = _tree(tmp_path)
    with pytest.raises(InputError, match=want) as err:
        apply_last(build_context(None, None, None), _last(etc, tmp_path))
    assert str(etc) in str(err.value)
    assert _tree(tmp_path) == before  # no lock taken, no journal, nothing discovered


# --- output options, before any host ------------------------------------------------------------------------------

def _inventory(tmp: Path) -> Path:
    inv = tmp / "inv.yaml"
    inv.write_text("version: 1\nhosts:\n  h1:\n    address: 192.0.2.1\n")
    return inv


def _plan(tmp: Path) -> Path:
    p = tmp / "plan.json"
    p.write_text("{}")
    return p


@pytest.mark.parametrize("case", ["dangling-journal", "journal-dir", "journal-device", "journal-no-dir",
                                  "state-dir-file", "state-dir-no-parent", "lock-file-dir"])
def test_apply_path_options_are_refused_before_any_host(tmp_path: Path, case: str) -> None:
    inv, plan = _inventory(tmp_path), _plan(tmp_path)
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "missing" / "x")
    option, path, why = {
        "dangling-journal": ("--journal", str(link), f"the directory {tmp_path}/missing does not exist"),
        "journal-dir": ("--journal", str(tmp_path / "a-dir"), "is a directory, not a regular file"),
        "journal-device": ("--journal", "/dev/null", "is a character device, not a regular file"),
        "journal-no-dir": ("--journal", str(tmp_path / "nodir" / "j.jsonl"), "does not exist"),
        "state-dir-file": ("--state-dir", str(tmp_path / "a-file"), "not a directory"),
        "state-dir-no-parent": ("--state-dir", str(tmp_path / "nodir" / "sd"), "does not exist"),
        "lock-file-dir": ("--lock-file", str(tmp_path / "a-dir"), "is a directory"),
    }[case]
    args = ["apply", str(plan), "-i", str(inv), "--yes", option, path] if option != "--lock-file" else \
        ["apply", "--last", "--yes", option, path]
    before = _tree(tmp_path)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    errors = _errors(r.output)
    assert len(errors) == 1 and errors[0].startswith(f"error: {option} {path}") and why in errors[0], r.output
    assert _tree(tmp_path) == before  # the plan ({}) would be refused too had it been read: it was not


def test_replan_metrics_file_dev_null_is_refused_before_the_run(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    r = CliRunner().invoke(app, ["replan", "-i", str(inv), "--state-dir", str(tmp_path / "state"),
                                 "--metrics-file", "/dev/null"])
    assert r.exit_code == 2, r.output
    assert _errors(r.output) == ["error: --metrics-file /dev/null is a character device, not a regular file; "
                                 "migplan only writes regular files"]
    assert not (tmp_path / "state").exists()  # no lock taken, nothing discovered


def test_replan_state_dir_without_its_parent_is_refused_and_nothing_created(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["replan", "-i", str(_inventory(tmp_path)), "--state-dir",
                                 str(tmp_path / "no" / "state")])
    assert r.exit_code == 2, r.output
    assert _errors(r.output) == [f"error: --state-dir {tmp_path}/no/state: the directory {tmp_path}/no does not "
                                 "exist; migplan does not create it"]
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("option", ["--out", "--report"])
def test_propose_outputs_are_refused_before_the_solve(tmp_path: Path, option: str) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "gone" / "plan.json")
    r = CliRunner().invoke(app, ["propose", "-i", str(tmp_path / "missing-inventory.yaml"), option, str(link)])
    assert r.exit_code == 2, r.output
    assert _errors(r.output) == [f"error: {option} {link} (a symbolic link to {tmp_path}/gone/plan.json): the "
                                 f"directory {tmp_path}/gone does not exist; migplan does not create it"]
    assert not (tmp_path / "gone").exists()


def test_check_output_option_accepts_what_can_be_written(tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    (tmp_path / "to-old").symlink_to(tmp_path / "old.json")
    for p in ("old.json", "new.json", "to-old"):
        check_output_option(str(tmp_path / p), "--out")
    check_output_option(str(tmp_path), "--state-dir", kind="dir")
    check_output_option(str(tmp_path / "new-dir"), "--state-dir", kind="dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json", "to-old"]


# --- OSErrors on output name the path ------------------------------------------------------------------------------

def test_a_failed_write_names_the_file_and_the_operation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def too_large(fd: int, data: object) -> int:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(os, "write", too_large)
    with pytest.raises(OSError) as err:
        write_atomic(tmp_path / "out.json", "{}")
    assert (err.value.errno, err.value.strerror) == (errno.EFBIG, f"cannot write {tmp_path}/out.json: File too large")
    with pytest.raises(OSError) as err:
        append_durable(tmp_path / "j.jsonl", "{}")
    assert err.value.strerror == f"cannot append to {tmp_path}/j.jsonl: File too large"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.jsonl"]  # the new journal, empty; no temporary left
    assert (tmp_path / "j.jsonl").read_bytes() == b""


def test_a_failed_write_is_one_error_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    import migplan.files as files
    from migplan.cli.render import handle_errors

    def too_large(fd: int, data: object) -> None:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(files, "_write_all", too_large)

    @handle_errors
    def export() -> None:
        write_atomic(tmp_path / "plan.json", "{}")

    with pytest.raises(typer.Exit) as code:
        export()
    assert code.value.exit_code == 1
    assert capsys.readouterr().err == f"error: cannot write {tmp_path}/plan.json: File too large\n"
    assert list(tmp_path.iterdir()) == []


def test_read_trusted_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p")
    with pytest.raises(InputError, match="is a FIFO"):
        read_trusted(tmp_path / "p")


def test_an_oserror_on_a_host_is_named_not_an_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from migplan.adapters.pool import as_host_error

    def too_large(fd: int, data: object) -> int:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(os, "write", too_large)
    try:
        append_durable(tmp_path / "j.jsonl", "{}")
    except OSError as e:
        err = as_host_error("h1", e)
    assert err.code == "io-error"
    assert err.detail == f"cannot append to {tmp_path}/j.jsonl: File too large"


# --- writes inside trusted state directories never follow a link (final name, temporary name) -------------------

def _trusted_with_victim(tmp_path: Path) -> tuple[StateDir, Path]:
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    return sd, victim


@pytest.mark.parametrize("name", ["plans/r1.json", "runs/r1.json", "gpu-changes.json", "fetched/h1.jsonl"])
def test_write_atomic_refuses_a_link_at_the_final_name_in_a_trusted_dir(tmp_path: Path, name: str) -> None:
    sd, victim = _trusted_with_victim(tmp_path)
    (sd.path / name).symlink_to(victim)
    before = _tree(tmp_path)
    with pytest.raises(InputError, match="is a symbolic link in a trusted state directory; refusing to follow it"):
        write_atomic(sd.path / name, "{}\n", mode=0o600)
    assert victim.read_text() == "root:secret\n" and os.path.islink(sd.path / name) and _tree(tmp_path) == before


def test_the_plan_replan_writes_through_documents_refuses_a_planted_link(tmp_path: Path) -> None:
    from migplan import documents

    sd, victim = _trusted_with_victim(tmp_path)
    sd.plan_path("r1").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link in a trusted state directory"):
        documents.write_document(sd.plan_path("r1"), {"kind": "x"})  # write_plan's writer
    assert victim.read_text() == "root:secret\n"


def test_append_durable_refuses_a_link_at_the_journal_in_a_trusted_dir(tmp_path: Path) -> None:
    sd, victim = _trusted_with_victim(tmp_path)
    journal = sd.subdir("journal") / "r1.jsonl"
    journal.symlink_to(victim)
    with pytest.raises(InputError, match="is a symbolic link in a trusted state directory"):
        append_durable(journal, '{"event": "x"}')
    assert victim.read_text() == "root:secret\n"
    dangling = sd.subdir("journal") / "r2.jsonl"
    dangling.symlink_to(tmp_path / "nonexistent" / "x")  # never created through the link either
    with pytest.raises(InputError, match="symbolic link"):
        append_durable(dangling, '{"event": "x"}')
    assert not (tmp_path / "nonexistent").exists()


def test_apply_journal_in_the_state_dir_refuses_a_planted_link(tmp_path: Path) -> None:
    from migplan.commands.apply import _Journal

    sd, victim = _trusted_with_victim(tmp_path)
    journal = sd.subdir("journal") / "r1.jsonl"
    journal.symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        _Journal(str(journal), None)("h1", {"event": "start"})
    assert victim.read_text() == "root:secret\n"


def test_write_atomic_never_opens_a_link_planted_at_the_temporary_name(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import migplan.files as files

    sd, victim = _trusted_with_victim(tmp_path)
    (sd.path / "runs" / ".r1.json.guessed.tmp").symlink_to(victim)
    tokens = iter(["guessed", "fresh"])
    monkeypatch.setattr(files, "_temp_token", lambda: next(tokens))
    write_atomic(sd.path / "runs" / "r1.json", '{"ok": true}\n', mode=0o600)
    assert victim.read_text() == "root:secret\n"
    assert (sd.path / "runs" / "r1.json").read_text() == '{"ok": true}\n'
    assert os.path.islink(sd.path / "runs" / ".r1.json.guessed.tmp")  # left alone, not replaced or followed


def test_a_link_outside_trusted_dirs_is_still_followed_as_documented(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("old\n")
    (tmp_path / "out.yaml").symlink_to(tmp_path / "real.yaml")
    write_atomic(tmp_path / "out.yaml", "new\n")
    assert (tmp_path / "real.yaml").read_text() == "new\n" and os.path.islink(tmp_path / "out.yaml")


# --- the directories above a trusted path (StrictModes) -----------------------------------------------------------

def _above(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """(a state directory path, the directory above it that makes it untrusted) for each way to be unsafe."""
    if how == "parent-0777":
        bad = tmp_path / "shared"
        bad.mkdir()
        bad.chmod(0o777)
        return bad / "state", bad
    if how == "grandparent-0775":
        bad = tmp_path / "group"
        (bad / "srv").mkdir(parents=True)
        bad.chmod(0o775)
        return bad / "srv" / "state", bad
    if how == "ancestor-nobody":
        bad = tmp_path / "theirs"
        (bad / "srv").mkdir(parents=True)
        os.chown(bad, NOBODY, NOBODY)
        return bad / "srv" / "state", bad
    if how == "sticky-entry-nobody":  # /tmp-like: shared, sticky; the entry in it belongs to another user
        sticky = tmp_path / "tmp"
        sticky.mkdir()
        sticky.chmod(0o1777)
        (sticky / "alice").mkdir()
        os.chown(sticky / "alice", NOBODY, NOBODY)
        return sticky / "alice" / "state", sticky / "alice"
    if how == "link-to-0777":  # a link (in a safe directory) leading into an unsafe one
        bad = tmp_path / "open"
        bad.mkdir()
        bad.chmod(0o777)
        (tmp_path / "via").symlink_to(bad)
        return tmp_path / "via" / "state", bad
    if how == "sticky-link-nobody":  # a link planted in a sticky directory by another user
        sticky = tmp_path / "tmp"
        sticky.mkdir()
        sticky.chmod(0o1777)
        (tmp_path / "real").mkdir()
        (sticky / "link").symlink_to(tmp_path / "real")
        os.lchown(sticky / "link", NOBODY, NOBODY)
        return sticky / "link" / "state", sticky / "link"
    raise AssertionError(how)


HOW_ABOVE = ["parent-0777", "grandparent-0775", "ancestor-nobody", "sticky-entry-nobody", "link-to-0777",
             "sticky-link-nobody"]


@pytest.mark.parametrize("how", HOW_ABOVE)
def test_a_state_dir_below_an_unsafe_directory_is_refused_and_nothing_created(tmp_path: Path, how: str) -> None:
    state, bad = _above(tmp_path, how)
    before = _tree(tmp_path)
    with pytest.raises(InputError) as err:
        StateDir(state).prepare()
    assert str(state) in err.value.message and str(bad) in err.value.message, err.value.message
    assert "refusing to trust it" in err.value.message
    assert _tree(tmp_path) == before


def test_a_sticky_directory_with_our_own_entry_is_accepted(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    StateDir(sticky / "mine" / "state").prepare()  # /tmp/mine/state, /tmp/mine ours: nobody can swap either
    assert (sticky / "mine" / "state" / "runs").is_dir()


@pytest.mark.parametrize("how", ["parent-0777", "sticky-entry-nobody"])
def test_replan_state_dir_below_an_unsafe_directory_exits_2_naming_it(tmp_path: Path, how: str) -> None:
    state, bad = _above(tmp_path, how)
    r = CliRunner().invoke(app, ["replan", "-i", str(_inventory(tmp_path)), "--state-dir", str(state)])
    assert r.exit_code == 2, r.output
    errors = _errors(r.stderr)
    assert len(errors) == 1 and str(state) in errors[0] and str(bad) in errors[0], r.stderr
    assert not state.exists()


def test_apply_last_state_dir_below_an_unsafe_directory_exits_2_naming_the_option(tmp_path: Path) -> None:
    state, bad = _above(tmp_path, "parent-0777")
    state.mkdir(mode=0o700)
    r = CliRunner().invoke(app, ["apply", "--last", "--yes", "--state-dir", str(state), "--lock-file",
                                 str(tmp_path / "apply.lock")])
    assert r.exit_code == 2, r.output
    assert _errors(r.stderr) == [f"error: --state-dir {state}: the directory {bad} above it is writable by group or "
                                 "others (mode 0777); refusing to trust it"], r.stderr
    assert not (tmp_path / "apply.lock").exists()


def test_apply_last_lock_file_below_an_unsafe_directory_exits_2_naming_the_option(tmp_path: Path) -> None:
    lock, bad = _above(tmp_path, "ancestor-nobody")
    (tmp_path / "etc").mkdir(mode=0o700)
    r = CliRunner().invoke(app, ["apply", "--last", "--yes", "--state-dir", str(tmp_path / "etc"), "--lock-file",
                                 str(lock)])
    assert r.exit_code == 2, r.output
    assert _errors(r.stderr) == [f"error: --lock-file {lock}: the directory {bad} above it is owned by uid {NOBODY}, "
                                 f"not by root or uid {os.geteuid()}; refusing to trust it"], r.stderr


def test_collect_local_history_below_an_unsafe_directory_exits_2_naming_the_option(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    hist, bad = _above(tmp_path, "parent-0777")
    r = CliRunner().invoke(app, ["collect", "--local", "--history", str(hist), "-q"])
    assert r.exit_code == 2, r.output
    assert _errors(r.stderr) == [f"error: --history {hist}: the directory {bad} above it is writable "
                                 "by group or others (mode 0777); refusing to trust it"]
    assert not hist.exists()
