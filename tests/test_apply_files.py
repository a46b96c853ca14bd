"""The files an apply leaves on a host (issue 20): all of them in one `put_files` round trip, unchanged ones not
rewritten, env files reconciled (only for workloads whose instance exists; every other env file migplan wrote
removed, nothing else), and the become route's script constant (the data on stdin, never on the command line).

Each runner-level test runs twice: LocalRunner's own calls (as the SFTP route) and the become route (a
pass-through stand-in for `sudo -n` runs FILES_SCRIPT with `sh`). The SFTP and real-sshd runs are in
tests/fleet/test_transfer.py; the real sudo's refusal in tests/fleet/test_sudo.py."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.local_runners import Counted, pass_through_sudo
from sim.fleet import host_state, read_state, write_state

from migplan import names
from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import (
    _MAX_TOKEN,
    FILES_SCRIPT,
    BadCommand,
    BadPath,
    FilesDone,
    FileToPut,
    LocalRunner,
    Prune,
    TransferError,
    command_line,
    files_payload,
)
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.commands.apply import _Journal, apply_one_host
from migplan.errors import InputError
from migplan.fleet.apply import ApplyOptions, GpuOutcome
from migplan.fleet.assignments import (
    ENV_FILE_NAME,
    ENV_MARKER,
    ENV_PRUNE_RULE,
    Assignment,
    LastApplied,
    Placement,
    env_file,
    env_file_name,
    parse_last_applied,
)
from migplan.inventory import Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
AFTER = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
PRUNE = Prune(*ENV_PRUNE_RULE)
ROUTES = ["os-calls", "become-script"]


def _runner(tmp: Path, route: str, state: Path | None = None) -> Counted:
    """A counting local runner by `route`; with `state`, its nvidia-smi is that simulated host's."""
    become = pass_through_sudo(tmp / "bin") if route == "become-script" else ()
    if state is None:
        return Counted(host="h1", become=become)
    return sim_runner.local(state, "h1", become=become, runner=Counted)


def _set(*items: tuple[str, bytes] | tuple[str, bytes, int]) -> list[FileToPut]:
    return [FileToPut(*i) for i in items]


def _stamp(p: Path) -> tuple[int, int]:
    st_ = p.stat()
    return st_.st_ino, st_.st_mtime_ns


# --- the runner operation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("route", ROUTES)
def test_one_call_writes_the_set_and_leaves_unchanged_files_alone(tmp_path: Path, route: str) -> None:
    r = _runner(tmp_path, route)
    etc = tmp_path / "etc"
    files = _set(("env/a.env", b"MIGPLAN_WORKLOAD=a\n"), ("assignments.json", b"{}\n"),
                 ("last-applied.json", os.urandom(70_000), 0o600))
    assert r.put_files(str(etc), files, prune=PRUNE) == FilesDone(written=("env/a.env", "assignments.json",
                                                                            "last-applied.json"))
    assert len(r.execs) == (1 if route == "become-script" else 0)  # one exec at most: the round trip
    assert (etc / "last-applied.json").read_bytes() == files[2].data
    assert oct((etc / "last-applied.json").stat().st_mode & 0o7777) == "0o600"
    assert oct((etc / "env" / "a.env").stat().st_mode & 0o7777) == "0o644"
    stamps = {p: _stamp(p) for p in etc.rglob("*") if p.is_file()}
    changed = [files[0], FileToPut("assignments.json", b'{"new": 1}\n'), files[2]]
    assert r.put_files(str(etc), changed, prune=PRUNE) == FilesDone(
        written=("assignments.json",), unchanged=("env/a.env", "last-applied.json"))
    after = {p: _stamp(p) for p in etc.rglob("*") if p.is_file()}
    assert after.pop(etc / "assignments.json") != stamps.pop(etc / "assignments.json")
    assert after == stamps  # same inode and mtime: not rewritten
    # the same content with another mode is rewritten: the mode given is the mode it gets
    assert r.put_files(str(etc), [FileToPut("env/a.env", files[0].data, 0o640)]).written == ("env/a.env",)
    assert oct((etc / "env" / "a.env").stat().st_mode & 0o7777) == "0o640"
    assert sorted(p.name for p in etc.rglob(".*")) == []  # no temporary file left


@pytest.mark.parametrize("route", ROUTES)
def test_stale_env_files_are_removed_and_nothing_else(tmp_path: Path, route: str) -> None:
    r = _runner(tmp_path, route)
    env = tmp_path / "etc" / "env"
    env.mkdir(parents=True)
    (env / "moved.env").write_text(f"{ENV_MARKER}moved\nMIGPLAN_GPU=0\n")  # migplan's: stale, removed
    (env / "ns_app_1-0123abcd.env").write_text(f"{ENV_MARKER}ns/app:1\n")  # migplan's (hashed name): removed
    (env / "custom.env").write_text("FOO=1\n")  # an admin's env file: not migplan's content
    (env / "notes.txt").write_text(f"{ENV_MARKER}x\n")  # not migplan's name
    (env / ".hidden.env").write_text(f"{ENV_MARKER}x\n")  # not migplan's name (hidden)
    (env / "sub.env").mkdir()  # a directory
    outside = tmp_path / "outside.env"
    outside.write_text(f"{ENV_MARKER}outside\n")
    (env / "link.env").symlink_to(outside)  # a link: never followed, never removed
    (tmp_path / "etc" / "other.env").write_text(f"{ENV_MARKER}x\n")  # outside env/: not pruned
    done = r.put_files(str(tmp_path / "etc"), _set(("env/kept.env", f"{ENV_MARKER}kept\n".encode()),
                                                   ("assignments.json", b"{}\n")), prune=PRUNE)
    assert done.removed == ("env/moved.env", "env/ns_app_1-0123abcd.env")
    assert sorted(p.name for p in env.iterdir()) == [".hidden.env", "custom.env", "kept.env", "link.env",
                                                     "notes.txt", "sub.env"]
    assert outside.read_text() == f"{ENV_MARKER}outside\n" and (tmp_path / "etc" / "other.env").exists()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("where", ["env", "state-dir"])
def test_a_symlinked_directory_is_refused_before_anything_is_written(tmp_path: Path, route: str,
                                                                    where: str) -> None:
    r = _runner(tmp_path, route)
    real = tmp_path / "real"
    real.mkdir()
    (real / "victim.env").write_text(f"{ENV_MARKER}victim\n")
    etc = tmp_path / "etc"
    if where == "env":
        etc.mkdir()
        (etc / "env").symlink_to(real)
    else:
        etc.symlink_to(real)
    with pytest.raises(TransferError, match="symbolic link"):
        r.put_files(str(etc), _set(("assignments.json", b"{}\n")), prune=PRUNE)
    assert sorted(p.name for p in real.iterdir()) == ["victim.env"]  # nothing written, nothing pruned
    if where == "env":
        assert sorted(p.name for p in etc.iterdir()) == ["env"]  # assignments.json not written either


@pytest.mark.parametrize("route", ROUTES)
def test_a_symlink_at_a_file_is_replaced_not_followed(tmp_path: Path, route: str) -> None:
    r = _runner(tmp_path, route)
    etc = tmp_path / "etc"
    etc.mkdir()
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    (etc / "assignments.json").symlink_to(target)
    assert r.put_files(str(etc), _set(("assignments.json", b"root:x:0:0\n"))).written == ("assignments.json",)
    assert not (etc / "assignments.json").is_symlink() and target.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("name", ["../x", ".hidden", "a/b/c", "x y", "-rf", "env/", "a" * 201, "x\ny", "*.env",
                                  "env/$(id)"])
def test_a_name_that_is_not_a_plain_file_name_is_refused_before_sending(tmp_path: Path, name: str) -> None:
    r = _runner(tmp_path, "become-script")
    with pytest.raises(BadPath):
        r.put_files(str(tmp_path / "etc"), _set((name, b"x")))
    assert r.execs == [] and not (tmp_path / "etc").exists()


def test_bad_sets_and_directories_are_refused_before_sending(tmp_path: Path) -> None:
    r = _runner(tmp_path, "become-script")
    for directory in ("relative", "/etc/../x", f"{tmp_path}/a b", f"{tmp_path}/*", "/"):
        with pytest.raises(BadPath):
            r.put_files(directory, _set(("a", b"x")))
    with pytest.raises(BadCommand, match="twice"):
        r.put_files(str(tmp_path), _set(("a", b"x"), ("a", b"y")))
    for bad in (Prune("../env", ".env", "M="), Prune("env", "env", "M="), Prune("env", ".env", "M x=")):
        with pytest.raises(BadCommand):
            r.put_files(str(tmp_path), [], prune=bad)
    assert r.execs == []


def test_the_become_script_is_constant_and_the_data_never_on_the_command_line(tmp_path: Path) -> None:
    log = tmp_path / "argv.log"
    stub = tmp_path / "bin" / "sudo"
    stub.parent.mkdir()
    stub.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" >> {log}\nprintf "\\n" >> {log}\nexec "$@"\n')
    stub.chmod(0o755)
    r = LocalRunner(become=(str(stub),))
    secret = "CUDA_VISIBLE_DEVICES=MIG-5ecret"
    r.put_files(str(tmp_path / "etc"), _set(("env/one.env", f"{ENV_MARKER}one\n{secret}\n".encode())), prune=PRUNE)
    r.put_files(str(tmp_path / "other"), _set(("x.json", b"{}"), ("y.json", os.urandom(1000))))
    calls = log.read_bytes().split(b"\n")[:-1]
    assert calls == [b"sh\0-c\0" + FILES_SCRIPT.encode() + b"\0"] * 2  # the same argv, whatever the set
    assert b"one.env" not in calls[0] and b"5ecret" not in calls[0] and str(tmp_path).encode() not in calls[0]
    assert "\n" not in FILES_SCRIPT and len(FILES_SCRIPT) <= _MAX_TOKEN  # one token of a checked command line
    command_line(["sudo", "-n", "sh", "-c", FILES_SCRIPT])
    assert (tmp_path / "etc" / "env" / "one.env").read_text().endswith(f"{secret}\n")


@pytest.mark.parametrize("cut", ["short", "extra", "lying-size"])
def test_a_cut_short_or_padded_upload_replaces_nothing(tmp_path: Path, cut: str) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "a.json").write_text("old a\n")
    (etc / "b.json").write_text("old b\n")
    token = secrets.token_hex(16)
    payload = files_payload(str(etc), _set(("a.json", b"new a\n"), ("b.json", b"new b\n")), None, token)
    if cut == "short":
        payload = payload[:-12]
    elif cut == "extra":
        payload += b"f 0644 1 c.json\nx"
    else:
        payload = payload.replace(b"f 0644 6 b.json", b"f 0644 60 b.json")
    done = subprocess.run(["sh", "-c", FILES_SCRIPT], input=payload, capture_output=True, timeout=30)
    assert done.returncode == 1 and done.stderr.startswith(b"migplan-files: "), done
    assert (etc / "a.json").read_text() == "old a\n" and (etc / "b.json").read_text() == "old b\n"
    assert sorted(p.name for p in etc.iterdir()) == ["a.json", "b.json"]  # its temporary files removed too


def test_the_script_rechecks_the_header_it_is_given(tmp_path: Path) -> None:
    """The header is migplan's own, but the script trusts none of it: a name or mode that the Python side would
    have refused stops it before anything is written."""
    token = secrets.token_hex(16)
    for line in (b"f 0644 1 ../x\n", b"f 9999 1 x\n", b"f 0644 -1 x\n", b"p ../env .env M=\n", b"q\n"):
        payload = f"migplan-files 1\n{tmp_path}/etc\n{token}\n".encode() + line + b"x" + b"end\n"
        done = subprocess.run(["sh", "-c", FILES_SCRIPT], input=payload, capture_output=True, timeout=30)
        assert done.returncode == 1 and b"migplan-files: bad" in done.stderr, (line, done)
    assert not (tmp_path / "x").exists() and sorted(p.name for p in (tmp_path / "etc").iterdir()) == []


def test_a_dry_run_records_the_set_as_one_step(tmp_path: Path) -> None:
    rec = RecordingRunner(host="h1")
    done = rec.put_files(str(tmp_path / "etc"), _set(("env/a.env", b"abc"), ("assignments.json", b"{}\n")),
                         prune=PRUNE)
    assert done == FilesDone() and not (tmp_path / "etc").exists()
    [step] = rec.commands
    assert str(step) == (f"put files in {tmp_path}/etc: env/a.env (3 bytes, mode 0644), assignments.json "
                         f"(3 bytes, mode 0644); remove the other env/*.env files that begin with {ENV_MARKER}")
    with pytest.raises(BadPath):
        rec.put_files(str(tmp_path), _set(("../a", b"x")))  # refused where a real run would be


# --- env file names and contents --------------------------------------------------------------------------

_WORKLOAD = st.from_regex(names.WORKLOAD_NAME, fullmatch=True)


@pytest.mark.slow  # 300 examples of up to 20 regex-drawn names
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_WORKLOAD, st.one_of(st.none(), st.integers(0, 9999))), min_size=1, max_size=20))
def test_env_file_names_are_plain_distinct_and_what_the_prune_recognises(raw: list[tuple[str, int | None]]) -> None:
    taken: set[str] = set()
    workloads = list(dict.fromkeys(w if n is None else f"{w}#{n}" for w, n in raw))
    got = [env_file_name(w, taken) for w in workloads]
    assert len(set(got)) == len(got)  # one file per workload of a host
    for w, name in zip(workloads, got, strict=True):
        assert ENV_FILE_NAME.fullmatch(name) and PRUNE.matches(name) and len(name) <= 200, (w, name)
        text = env_file(Assignment(w, 3, "1g.5gb@6", "MIG-0f0e"))
        assert text.startswith(f"{ENV_MARKER}{w}\n")
        for line in text.splitlines():  # KEY=VALUE of plain characters: nothing a shell or systemd reads as syntax
            key, _, value = line.partition("=")
            assert key.isupper() and all(c.isalnum() or c in "._/:-#@" for c in value), line


@pytest.mark.parametrize("name", ["a b", "$(id)", "x;rm -rf /", "a`b`", "a\tb", "", "-x", "'q'"])
def test_a_hostile_workload_name_never_reaches_an_env_file(name: str) -> None:
    with pytest.raises(InputError):
        env_file(Assignment(name, 0, None, "GPU-1234"))
    doc = {"version": 1, "kind": "migplan/last-applied", "host": "h1", "plan": "sha256:x",
           "applied_at": "2026-12-01T00:00:00Z",
           "gpus": [{"index": 0, "uuid": None, "model": "A100-SXM4-40GB", "layout": ["7g.40gb@0"]}],
           "workloads": [{"name": name, "gpu": 0, "instance": "7g.40gb@0"}]}
    with pytest.raises(InputError, match="workload name"):
        parse_last_applied(json.dumps(doc), "last-applied.json", CAT)


# --- reconciled by the apply -----------------------------------------------------------------------------

def _two_gpu_host(tmp: Path, faults: Sequence[dict[str, Any]] = ()) -> tuple[Path, Host, list[GpuPlan]]:
    st_ = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[BEFORE, BEFORE])
    st_["faults"] = list(faults)
    state = write_state(tmp / "h1.json", st_)
    host = Host(name="h1", address="h1", state_dir=str(tmp / "etc"), lock_file=str(tmp / "apply.lock"))
    plans = [GpuPlan(GpuState(host="h1", index=g["index"], model=MODEL.id, uuid=g["uuid"], mig_enabled=True,
                              layout=BEFORE), AFTER, tuple(diff(BEFORE, AFTER, gpu=("h1", g["index"]),
                                                                architecture=MODEL.architecture)))
             for g in st_["gpus"]]
    return state, host, plans


def _apply(runner: Any, host: Host, plans: list[GpuPlan], items: list[Placement], journal: Path) -> Any:
    last = LastApplied("h1", "sha256:" + "0" * 64, "2026-12-01T00:00:00Z", (), ())
    return apply_one_host(host, runner, plans, CAT, fingerprint=last.plan, items=items, last=last, migrations=(),
                          dry_run=False, options=ApplyOptions(), journal=_Journal(str(journal), None),
                          stamp=last.applied_at)


def _assigned(etc: Path) -> list[str]:
    return [w["name"] for w in json.loads((etc / "assignments.json").read_text())["workloads"]]


@pytest.mark.slow  # an apply through real processes (each nvidia-smi the simulator as a process)
@pytest.mark.parametrize("route", ROUTES)
def test_a_rolled_back_gpu_gets_no_env_file_and_its_old_ones_go(tmp_path: Path, route: str) -> None:
    state, host, plans = _two_gpu_host(tmp_path, [{"match": "-cgi", "gpu": 1, "times": 1,
                                                   "error": "Insufficient Resources"}])
    etc = tmp_path / "etc"
    (etc / "env").mkdir(parents=True)
    (etc / "env" / "ocr.env").write_text(f"{ENV_MARKER}ocr\nMIGPLAN_GPU=1\n")  # from an earlier apply
    (etc / "env" / "mine.conf").write_text("an admin's file\n")
    items = [Placement("chat", 0, "2g.10gb@4"), Placement("big", 1, "3g.20gb@0"), Placement("ocr", 1, "2g.10gb@4")]
    runner = _runner(tmp_path, route, state)
    rep = _apply(runner, host, plans, items, tmp_path / "j.jsonl")
    assert [g.outcome for g in rep.gpus] == [GpuOutcome.APPLIED, GpuOutcome.ROLLED_BACK], rep
    assert read_state(state)["faults"][0].get("fired") == 1
    # GPU 1 is back to 3g@0 3g@4: big's instance (kept) exists, ocr's 2g.10gb@4 does not
    assert sorted(p.name for p in (etc / "env").iterdir()) == ["big.env", "chat.env", "mine.conf"]
    assert "CUDA_VISIBLE_DEVICES=MIG-" in (etc / "env" / "big.env").read_text()
    assert _assigned(etc) == ["chat", "big"] == [a.workload for a in rep.assignments]
    events = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert [e["removed"] for e in events if e["event"] == "files"] == [["env/ocr.env"]]


@pytest.mark.slow  # two applies through real processes
def test_a_workload_no_longer_on_the_host_loses_its_file_and_the_others_are_not_rewritten(tmp_path: Path) -> None:
    state, host, plans = _two_gpu_host(tmp_path)
    etc = tmp_path / "etc"
    first = [Placement("chat", 0, "2g.10gb@4"), Placement("ns/moved:1", 1, "1g.5gb@6")]
    _apply(sim_runner.local(state), host, plans, first, tmp_path / "j.jsonl")
    assert sorted(p.name for p in (etc / "env").iterdir()) == ["chat.env", "ns_moved_1.env"]
    chat = _stamp(etc / "env" / "chat.env")
    again = [GpuPlan(dataclasses.replace(p.observed, layout=AFTER), AFTER, ()) for p in plans]
    # the next plan put ns/moved:1 on another host: this host's apply removes its file, leaves chat's alone
    rep = _apply(sim_runner.local(state), host, again, first[:1], tmp_path / "j2.jsonl")
    assert {g.outcome for g in rep.gpus} == {GpuOutcome.UNCHANGED}
    assert [p.name for p in (etc / "env").iterdir()] == ["chat.env"] and _stamp(etc / "env" / "chat.env") == chat
    assert _assigned(etc) == ["chat"]


@pytest.mark.slow  # plans with CBC, then apply and apply --last through real processes
def test_apply_last_reconciles_the_env_files_too(tmp_path: Path) -> None:
    """After a reboot one GPU is another one (its UUID changed): apply --last refuses it, and the env files of its
    workloads go, while the other GPU's workloads get theirs with the new MIG devices."""
    from sim.fleet import reboot
    from test_apply_last import _last, _setup

    from migplan.commands.apply import ApplyRequest, apply, apply_last
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest

    state, inv, plan_file = _setup(tmp_path, "A100-SXM4-40GB")
    ctx = build_context(None, None, None)
    assert apply(ctx, ApplyRequest(plan=str(plan_file), fleet=FleetRequest(inventory=str(inv))),
                 connect=sim_runner.connect(state)).exit_code == 0
    etc = tmp_path / "etc"
    before = json.loads((etc / "assignments.json").read_text())["workloads"]
    on1 = {w["name"] for w in before if w["gpu"] == 1}
    assert on1 and {w["name"] for w in before} - on1
    booted = reboot(state)
    booted["gpus"][1]["uuid"] = "GPU-00000000-1111-2222-3333-444444444444"  # another GPU in that slot
    write_state(state, booted)
    (etc / "env" / "gone.env").write_text(f"{ENV_MARKER}gone\n")
    res = apply_last(ctx, _last(state_dir=str(etc), lock_file=str(tmp_path / "apply.lock")),
                     connect=sim_runner.connect(state))
    assert {g.gpu: g.outcome for g in res.hosts[0].gpus}[1] is GpuOutcome.REFUSED
    names_now = set(_assigned(etc))
    assert names_now == {w["name"] for w in before} - on1
    assert {p.name for p in (etc / "env").iterdir()} == {env_file_name(n, set()) for n in names_now}
