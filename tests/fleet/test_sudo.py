"""`become: sudo -n` against the real sudo: discovery over the real sshd as two local users, one allowed to run
the simulated nvidia-smi as root without a password (sudoers NOPASSWD), one that sudo asks for a password.
Set-up in sshd.py (SudoUsers) and conftest.py (`sudo_users`); skipped unless root with sudo installable."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Fleet
from simhosts import Proc, read, state, write
from sshd import SudoUsers

from migplan.adapters.runner import BecomeError, FileToPut, Prune
from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.discover import discover_fleet
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host, Inventory, load_inventory

CATALOG = builtin_catalog()


def discover(fleet: Fleet, inventory: Inventory) -> Snapshot:
    with SshFleet(fleet.options()) as ssh:
        return discover_fleet(inventory, CATALOG, ssh.runner, parallel=4)


def test_nopasswd_sudo_runs_nvidia_smi_as_root_for_each_host(fleet: Fleet, sudo_users: SudoUsers) -> None:
    h100, a30 = fleet.host(0), fleet.host(1)
    layout = Layout.parse(["3g.40gb@4", "2g.20gb@0"])
    write(h100.state, state("H100-SXM5-80GB", 2, hostname="s1", layouts=[layout, None],
                            busy={0: [Proc(4321, start=4)]}))
    write(a30.state, state("A30", 1, hostname="s2", mig=[False]))
    inv = load_inventory(fleet.inventory({
        "s1": fleet.host_entry(h100, user=sudo_users.ok, become="sudo -n"),
        "s2": fleet.host_entry(a30, user=sudo_users.ok, become="sudo -n"),
    }), CATALOG)
    s1, s2 = discover(fleet, inv).hosts
    assert s1.ok and s2.ok, (s1.error, s2.error)
    assert [(g.model, g.layout) for g in s1.gpus] == [("H100-SXM5-80GB", layout), ("H100-SXM5-80GB", Layout())]
    # plain nvidia-smi's Processes table puts the process on 3g.40gb@4: 2g.20gb@0 beside it is idle
    assert s1.gpus[0].processes == ()
    assert s1.gpus[0].busy_instances == tuple(i for i in layout.instances if i.start == 4)
    assert [p.pid for i in s1.gpus[0].instances for p in i.processes] == [4321]
    assert [(g.model, g.mig_current) for g in s2.gpus] == [("A30", False)]
    for h in (h100, a30):  # sudo kept each host's own state file; the simulator ran as root, started by sudo
        st = read(h.state)
        assert st["log"] and st["ran_as"] == [f"euid=0 sudo_user={sudo_users.ok}"]


def test_sudo_asking_for_a_password_is_become_failed(fleet: Fleet, sudo_users: SudoUsers) -> None:
    h, other = fleet.host(2), fleet.host(3)
    write(h.state, state("A30", 1, hostname="p"))
    write(other.state, state("A30", 1, hostname="q"))
    inv = load_inventory(fleet.inventory({
        "p": fleet.host_entry(h, user=sudo_users.pw, become="sudo -n"),
        "q": fleet.host_entry(other, user=sudo_users.ok, become="sudo -n"),
    }), CATALOG)
    p, q = discover(fleet, inv).hosts
    assert p.error is not None and p.error.code == "become-failed", p.error
    assert "sudo: a password is required" in p.error.message  # sudo's own text (sudo -n, exit 1)
    assert read(h.state)["log"] == []  # refused before nvidia-smi ran
    assert q.ok and [g.model for g in q.gpus] == ["A30"]  # the other host is unaffected


def test_files_through_a_sudo_that_refuses_are_become_failed_and_nothing_is_written(
        fleet: Fleet, sudo_users: SudoUsers, tmp_path: Path) -> None:
    """put_files through `sudo -n`: one exec of `sh -c FILES_SCRIPT`, which these sudoers rules do not allow without
    a password (they allow only the simulator): sudo's refusal is `become-failed`, never a write or a traceback."""
    h = fleet.host(4)
    etc = tmp_path / "etc"
    files = [FileToPut("env/a.env", b"MIGPLAN_WORKLOAD=a\n"), FileToPut("assignments.json", b"{}\n")]
    with SshFleet(fleet.options()) as ssh:
        for user in (sudo_users.pw, sudo_users.ok):
            r = ssh.runner(Host(name=f"files-{user}", address=h.address, port=fleet.server.port, user=user,
                                key_file=str(fleet.server.client_key), become=("sudo", "-n")))
            with pytest.raises(BecomeError, match="a password is required"):
                r.put_files(str(etc), files, prune=Prune("env", ".env", "MIGPLAN_WORKLOAD="))
    assert not etc.exists()
