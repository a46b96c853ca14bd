"""The host apply lock over the real sshd (issue 21): a symbolic link planted at the lock's name is refused on
the host before flock opens it (migplan.adapters.host_lock.LOCK_SCRIPT, run by the login user's shell), and a
plain lock still works."""

from __future__ import annotations

import os

import pytest
from conftest import Fleet
from simhosts import state, write

from migplan.adapters.host_lock import HostLocked, acquire
from migplan.adapters.runner import HostError
from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog
from migplan.inventory import load_inventory


def test_a_planted_lock_link_is_refused_over_ssh_and_its_target_untouched(fleet: Fleet) -> None:
    write(fleet.host(0).state, state("A30", 1, hostname="a"))
    inv = load_inventory(fleet.inventory({"a": fleet.host_entry(fleet.host(0))}), builtin_catalog())
    host = inv.hosts[0]
    victim = fleet.tmp / "shadow"
    victim.write_text("root:secret\n")
    os.symlink(victim, host.lock_file)
    try:
        with SshFleet(fleet.options()) as ssh:
            with pytest.raises(HostError, match="is a symbolic link; refusing to follow it") as err:
                acquire(ssh.runner(host), host.lock_file)
            assert not isinstance(err.value, HostLocked) and host.lock_file in str(err.value)
            assert victim.read_text() == "root:secret\n"
            os.unlink(host.lock_file)
            held = acquire(ssh.runner(host), host.lock_file)  # nothing there: created (0600) and taken
            try:
                assert oct(os.lstat(host.lock_file).st_mode & 0o777) == "0o600"
                with pytest.raises(HostLocked):
                    acquire(ssh.runner(host), host.lock_file)
            finally:
                held.release()
    finally:
        if os.path.islink(host.lock_file):
            os.unlink(host.lock_file)
