"""A host behind a bastion, through real OpenSSH (issue 25): `jump_lab` (tests/fleet/conftest.py) runs the target's
sshd in a network namespace of its own, so the only way in is the jump host's sshd on 127.0.0.1; every test checks
host keys against a known_hosts file it writes. What is shown: the target refuses a direct connection; an
inventory's `ansible_ssh_common_args` ProxyJump (one hop, two hops, a jump host found in ~/.ssh/config with its own
ProxyJump) and ProxyCommand (the real `ssh -W`, DeepOps' own line) reach it; a bad or unknown jump host key is
refused before the target is contacted; UserKnownHostsFile is honoured; NVIDIA's DeepOps sample inventory
(tests/data/ansible/deepops-inventory), filled in as its comments say, is discovered through its bastion."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import paramiko
import pytest
import yaml
from conftest import JumpLab, _user
from simhosts import state, write
from typer.testing import CliRunner

from migplan.adapters.runner import HostKeyChangedError, HostKeyUnknownError, UnreachableError
from migplan.adapters.ssh import SshFleet
from migplan.adapters.ssh_options import SshOptions
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.cli.app import app
from migplan.documents import load_snapshot
from migplan.inventory import Host, Inventory, load_inventory

pytestmark = pytest.mark.slow  # starts sshd (two servers and a network namespace)

CATALOG = builtin_catalog()
DEEPOPS = Path(__file__).resolve().parents[1] / "data" / "ansible" / "deepops-inventory"
SHOW_SERVER = ["sh", "-c", "echo $SSH_CONNECTION"]  # client address, port, server address, port (as sshd saw it)


@pytest.fixture
def lab(jump_lab: JumpLab, monkeypatch: pytest.MonkeyPatch) -> JumpLab:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # never the developer's agent
    jump_lab.behind.reset()
    return jump_lab


def options(tmp_path: Path, lab: JumpLab, known: str | None = None, **kw: object) -> SshOptions:
    kh = tmp_path / "known_hosts"
    kh.write_text(lab.known_hosts_text() if known is None else known)
    base: dict[str, object] = {"known_hosts": str(kh), "ssh_config": None, "connect_timeout": 5.0,
                               "allow_agent": False, "look_for_keys": False}
    base.update(kw)
    return SshOptions(**base)  # type: ignore[arg-type]


def jump_spec(lab: JumpLab) -> str:
    return f"{_user()}@127.0.0.1:{lab.jump.port}"


def ssh_client_config(tmp_path: Path, lab: JumpLab) -> Path:
    """A config for the real OpenSSH client a ProxyCommand runs: the lab's key, host keys checked, never a prompt."""
    cfg = tmp_path / "openssh_config"
    cfg.write_text(f"Host *\n  IdentityFile {lab.client_key}\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
                   "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR\n")
    return cfg


def ansible_inventory(tmp_path: Path, lab: JumpLab, common_args: str, **host_vars: object) -> Inventory:
    """An Ansible YAML inventory: the target in group gpu_nodes, the ssh options in the `all` group's vars."""
    doc = {"all": {"vars": {"ansible_user": _user(), "ansible_ssh_private_key_file": str(lab.client_key),
                            "ansible_ssh_common_args": common_args},
                   "children": {"gpu_nodes": {"hosts": {"behind": {
                       "ansible_host": lab.behind.address, "ansible_port": lab.target.port, **host_vars}}}}}}
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_inventory(path, CATALOG)


def served_by(done_stdout: str) -> tuple[str, int]:
    client, cport, server, sport = done_stdout.split()
    return server, int(sport)


def test_the_target_refuses_a_direct_connection(lab: JumpLab, tmp_path: Path) -> None:
    assert lab.connect_directly_refused()
    host = Host(name="behind", address=lab.behind.address, port=lab.target.port, user=_user(),
                key_file=str(lab.client_key))
    with SshFleet(options(tmp_path, lab)) as ssh, pytest.raises(UnreachableError, match="connection refused"):
        ssh.runner(host).run(["true"], timeout=10)


def test_ansible_proxyjump_reaches_the_target_through_the_jump_host(lab: JumpLab, tmp_path: Path) -> None:
    inv = ansible_inventory(tmp_path, lab, f"-o ProxyJump={jump_spec(lab)} -o StrictHostKeyChecking=yes")
    host = inv.hosts[0]
    with SshFleet(options(tmp_path, lab)) as ssh:
        runner = ssh.runner(host)
        assert [str(j) for j in runner.target.jumps] == [f"{_user()}@127.0.0.1:{lab.jump.port}"]
        done = runner.run(SHOW_SERVER, timeout=10)
        assert done.ok and served_by(done.stdout) == (lab.behind.address, lab.target.port)
        jump_client, target_client = runner.connection.clients
        assert jump_client.get_transport().getpeername()[:2] == ("127.0.0.1", lab.jump.port)  # type: ignore[union-attr]
        assert isinstance(target_client.get_transport().sock, paramiko.Channel)  # type: ignore[union-attr]
        # the connection is kept: a second command does not log in again
        assert runner.run(["true"], timeout=10).ok and runner.connection.clients[1] is target_client


def test_a_two_hop_chain_and_a_jump_host_from_ssh_config(lab: JumpLab, tmp_path: Path) -> None:
    """`-J a,b`: b is reached through a (the target's own sshd serves as the second jump host, from inside the
    namespace); `-J hop2` where ~/.ssh/config gives hop2 its address, port and its own ProxyJump: the jump host's
    config is honoured as for any host (what `ssh -J` does)."""
    second = f"{_user()}@{lab.behind.address}:{lab.target.port}"
    inv = ansible_inventory(tmp_path, lab, f"-J {jump_spec(lab)},{second}")
    with SshFleet(options(tmp_path, lab)) as ssh:
        runner = ssh.runner(inv.hosts[0])
        done = runner.run(SHOW_SERVER, timeout=10)
        assert done.ok and served_by(done.stdout) == (lab.behind.address, lab.target.port)
        assert len(runner.connection.clients) == 3
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host hop2\n  HostName {lab.behind.address}\n  Port {lab.target.port}\n"
                   f"  ProxyJump {jump_spec(lab)}\n"
                   f"Host *\n  IdentityFile {lab.client_key}\n  User {_user()}\n")
    inv = ansible_inventory(tmp_path, lab, "-J hop2")
    with SshFleet(options(tmp_path, lab, ssh_config=str(cfg))) as ssh:
        runner = ssh.runner(inv.hosts[0])
        assert [j.hostname for j in runner.target.jumps] == ["127.0.0.1", lab.behind.address]
        assert runner.run(["true"], timeout=10).ok


def test_deepops_proxycommand_with_the_real_ssh_client(lab: JumpLab, tmp_path: Path) -> None:
    """DeepOps' line, `-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"`, with this lab's bastion (and -F for the
    client's key and known_hosts): paramiko.ProxyCommand runs the real OpenSSH `ssh -W`, %h:%p expanded."""
    opts = options(tmp_path, lab)
    cfg = ssh_client_config(tmp_path, lab)
    line = f'-o ProxyCommand="ssh -F {cfg} -W %h:%p -q -p {lab.jump.port} {_user()}@127.0.0.1"'
    inv = ansible_inventory(tmp_path, lab, line)
    with SshFleet(opts) as ssh:
        runner = ssh.runner(inv.hosts[0])
        assert runner.target.proxy_command[:5] == ("ssh", "-F", str(cfg), "-W",
                                                   f"{lab.behind.address}:{lab.target.port}")
        done = runner.run(SHOW_SERVER, timeout=10)
        assert done.ok and served_by(done.stdout) == (lab.behind.address, lab.target.port)
        sock = runner.connection.clients[0].get_transport().sock  # type: ignore[union-attr]
        assert isinstance(sock, paramiko.ProxyCommand) and sock.process.poll() is None
    assert sock.process.poll() is not None  # closing the fleet ended (and reaped) the ssh -W process


def test_ssh_config_proxycommand_works_the_same_way(lab: JumpLab, tmp_path: Path) -> None:
    opts = options(tmp_path, lab)
    client_cfg = ssh_client_config(tmp_path, lab)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host behind\n  HostName {lab.behind.address}\n  Port {lab.target.port}\n  User {_user()}\n"
                   f"  IdentityFile {lab.client_key}\n"
                   f"  ProxyCommand ssh -F {client_cfg} -W %h:%p -p {lab.jump.port} %r@127.0.0.1\n")
    with SshFleet(dataclasses.replace(opts, ssh_config=str(cfg))) as ssh:
        runner = ssh.runner(Host(name="behind", address="behind"))
        done = runner.run(SHOW_SERVER, timeout=10)
        assert done.ok and served_by(done.stdout) == (lab.behind.address, lab.target.port)


def test_a_bad_jump_host_key_is_refused_and_the_target_never_contacted(lab: JumpLab, tmp_path: Path) -> None:
    # the jump host's entry carries another server's key (the target's): a changed key, whatever the policy
    wrong = lab.known_hosts_text().replace(lab.jump.host_key_pub.split()[1], lab.target.host_key_pub.split()[1])
    inv = ansible_inventory(tmp_path, lab, f"-J {jump_spec(lab)}")
    target_log = lab.target.root / "sshd.0.log"
    before = len(target_log.read_text())
    with SshFleet(options(tmp_path, lab, known=wrong, accept_new_host_keys=True)) as ssh, \
            pytest.raises(HostKeyChangedError) as err:
        ssh.runner(inv.hosts[0]).run(["true"], timeout=10)
    assert f"[127.0.0.1]:{lab.jump.port}" in str(err.value) and err.value.code == "host-key-changed"
    assert "Connection from" not in target_log.read_text()[before:]  # the target never saw a connection
    # an unknown jump host: refused (not recorded without --accept-new-host-keys)
    only_target = lab.target.known_hosts_line(lab.behind.address)
    with SshFleet(options(tmp_path, lab, known=only_target)) as ssh, pytest.raises(HostKeyUnknownError) as unknown:
        ssh.runner(inv.hosts[0]).run(["true"], timeout=10)
    assert f"[127.0.0.1]:{lab.jump.port}" in str(unknown.value)


def test_a_proxycommand_that_fails_says_why_at_once(lab: JumpLab, tmp_path: Path) -> None:
    """The real ssh refuses the bastion's key: migplan reports the command's own stderr and its exit status, without
    waiting out the connect timeout (paramiko's ProxyCommand alone would not see the end of the command)."""
    cfg = ssh_client_config(tmp_path, lab)
    line = f"-o 'ProxyCommand=ssh -F {cfg} -W %h:%p -p {lab.jump.port} {_user()}@127.0.0.1'"
    inv = ansible_inventory(tmp_path, lab, line)
    only_target = lab.target.known_hosts_line(lab.behind.address)  # the bastion's key is not known to ssh either
    start = time.monotonic()
    with SshFleet(options(tmp_path, lab, known=only_target, connect_timeout=20.0)) as ssh, \
            pytest.raises(UnreachableError) as err:
        ssh.runner(inv.hosts[0]).run(["true"], timeout=10)
    assert time.monotonic() - start < 10
    assert "exited with status 255" in str(err.value) and "Host key verification failed" in str(err.value)


def test_user_known_hosts_file_from_the_inventory_verifies_the_target(lab: JumpLab, tmp_path: Path) -> None:
    own = tmp_path / "target_known_hosts"
    own.write_text(lab.target.known_hosts_line(lab.behind.address))
    jump_only = lab.jump.known_hosts_line("127.0.0.1")  # --known-hosts: the jump host alone
    inv = ansible_inventory(tmp_path, lab, f"-J {jump_spec(lab)} -o UserKnownHostsFile={own}")
    assert inv.hosts[0].ssh_args is not None and inv.hosts[0].ssh_args.known_hosts == str(own)
    with SshFleet(options(tmp_path, lab, known=jump_only)) as ssh:
        assert ssh.runner(inv.hosts[0]).run(["true"], timeout=10).ok
    own.write_text(jump_only)  # that file does not know the target: refused, naming the file
    with SshFleet(options(tmp_path, lab, known=jump_only)) as ssh, pytest.raises(HostKeyUnknownError) as err:
        ssh.runner(inv.hosts[0]).run(["true"], timeout=10)
    assert str(own) in str(err.value)


def deepops_filled_in(lab: JumpLab, tmp_path: Path) -> Path:
    """The DeepOps sample as an operator makes it theirs, as its header says ("Uncomment and change the IP
    addresses"): every commented host or variable line uncommented, gpu01 and the bastion at this lab's addresses
    (the bastion's port, user, key and known_hosts given to the real ssh with -F), the login user and key ours."""
    text = re.sub(r"(?m)^#(?=[^\s#])", "", DEEPOPS.read_text())
    cfg = ssh_client_config(tmp_path, lab)
    text = text.replace("gpu01      ansible_host=10.0.2.1",
                        f"gpu01      ansible_host={lab.behind.address} ansible_port={lab.target.port}")
    text = text.replace("ubuntu@10.0.0.1", f"-F {cfg} -p {lab.jump.port} {_user()}@127.0.0.1")
    text = text.replace("ansible_user=ubuntu", f"ansible_user={_user()}")
    text = text.replace("'~/.ssh/id_rsa'", f"'{lab.client_key}'")
    path = tmp_path / "inventory"
    path.write_text(text)
    return path


def test_the_deepops_sample_inventory_is_discovered_through_its_bastion(lab: JumpLab, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ansible", reason="the DeepOps inventory is INI: read with ansible-core (migplan[ansible])")
    write(lab.behind.state, state("A100-SXM4-40GB", 2, hostname="gpu01",
                                  layouts=[Layout.parse(["3g.20gb@0", "2g.10gb@4"]), None]))
    inv_path = deepops_filled_in(lab, tmp_path)
    kh = tmp_path / "known_hosts"
    kh.write_text(lab.known_hosts_text())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_KNOWN_HOSTS", "MIGPLAN_SSH_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    snap_path = tmp_path / "snap.json"
    r = CliRunner().invoke(app, ["-v", "discover", "-i", str(inv_path), "--limit", "gpu01", "--known-hosts", str(kh),
                                 "--ssh-config", "none", "--out", str(snap_path)])
    assert r.exit_code == 0, r.output
    assert "ProxyCommand 'ssh -W %h:%p -q -F" in r.stderr and "group 'all'" in r.stderr  # -v: what, from where
    snap = load_snapshot(snap_path, CATALOG)
    gpu01 = snap.host("gpu01")
    assert gpu01 is not None and gpu01.ok and [g.model for g in gpu01.gpus] == ["A100-SXM4-40GB"] * 2
    assert gpu01.gpus[0].layout == Layout.parse(["3g.20gb@0", "2g.10gb@4"])
    assert [h.name for h in snap.hosts] == ["gpu01"]
