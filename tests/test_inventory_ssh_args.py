"""An inventory's ssh options (`ansible_ssh_common_args`, `ansible_ssh_extra_args`, `ssh_args`) and the hosts a
pattern selects (issue 25): what is honoured, what is refused and how the refusal reads (file, line, group, host,
option), where each comes from, the service hosts of DeepOps-like inventories, and `inventory check --limit`.
The connections themselves, through a real jump sshd, are in tests/fleet/test_jump_hosts.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from migplan.adapters.ssh import resolve_target
from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.fleet import select_hosts
from migplan.errors import InputError
from migplan.inventory import Host, JumpHop, ansible, load_inventory
from migplan.inventory.ssh_args import SshArgsError, expand, parse_ssh_args

CAT = builtin_catalog()
DEEPOPS = Path(__file__).resolve().parent / "data" / "ansible" / "deepops-inventory"
BASTION = '-o ProxyCommand="ssh -W %h:%p -q ubuntu@10.0.0.1"'  # DeepOps' line (config.example/inventory)


# --- the parser ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "proxy", "jumps", "command", "known"), [
    (BASTION, "command", (), ("ssh", "-W", "%h:%p", "-q", "ubuntu@10.0.0.1"), None),
    ("-o 'ProxyCommand ssh -W %h:%p bastion'", "command", (), ("ssh", "-W", "%h:%p", "bastion"), None),
    ("-J ops@bastion:2200,10.0.0.9", "jump", (JumpHop("bastion", 2200, "ops"), JumpHop("10.0.0.9")), (), None),
    ("-Jbastion", "jump", (JumpHop("bastion"),), (), None),
    ("-oProxyJump=ssh://[fd00::1]:2222", "jump", (JumpHop("fd00::1", 2222),), (), None),
    ("-o ProxyJump=bastion -J bastion", "jump", (JumpHop("bastion"),), (), None),  # the same value twice: fine
    ("-o ProxyJump=none", "none", (), (), None),
    ("-o proxycommand=NONE", "none", (), (), None),
    ("-o StrictHostKeyChecking=yes", None, (), (), None),
    ("-o StrictHostKeyChecking=ask -o UserKnownHostsFile=~/.ssh/fleet_known_hosts", None, (), (),
     "~/.ssh/fleet_known_hosts"),
])
def test_what_is_honoured(text: str, proxy: str | None, jumps: tuple[JumpHop, ...], command: tuple[str, ...],
                          known: str | None) -> None:
    args = parse_ssh_args(text, "ansible_ssh_common_args")
    assert (args.proxy, args.jumps, args.command, args.known_hosts) == (proxy, jumps, command, known)
    assert args.notes and all("ansible_ssh_common_args" in n for n in args.notes)  # each said with -v, and where


@pytest.mark.parametrize(("text", "message", "hint"), [
    ("-C", "option '-C' is not supported", "migplan honours -o ProxyJump"),
    ("-q -o ProxyJump=b", "option '-q' is not supported", "-J [user@]host"),
    ("-o ServerAliveInterval=30", "option '-o ServerAliveInterval=30' is not supported", "ProxyCommand"),
    ("-o ControlMaster=auto -o ControlPersist=60s", "ControlMaster", None),
    ("-o StrictHostKeyChecking=no", "would turn host-key checking off", "--accept-new-host-keys"),
    ("-o StrictHostKeyChecking=off", "would turn host-key checking off", None),
    ("-o StrictHostKeyChecking=accept-new", "record unknown host keys on first use", "--accept-new-host-keys"),
    ("-o StrictHostKeyChecking=maybe", "is not yes, ask, accept-new or no", None),
    ("-o UserKnownHostsFile=/dev/null", "would forget every host key", None),
    ("-o 'UserKnownHostsFile=~/a ~/b'", "names 2 files", None),
    ("-o UserKnownHostsFile=known_hosts", "not an absolute path", None),
    ("-o 'ProxyCommand=nc %h %p | cat'", "uses '|', which needs a shell", "ProxyJump"),
    ("-o 'ProxyCommand=ssh -W %h:%p $BASTION'", "uses '$'", None),
    ("-o 'ProxyCommand=ssh -W %h:%p b; rm -rf /'", "needs a shell", None),
    ("-o 'ProxyCommand=nc %h %p > /tmp/x'", "needs a shell", None),
    ("-o 'ProxyCommand=`which nc` %h %p'", "needs a shell", None),
    ("-o 'ProxyCommand=\"ssh -W %h:%p b\"'", "quoted as a whole", "remove the quotes"),
    ("-o 'ProxyCommand=ssh -W %h:%p -l %u b'", "%u is not expanded", "%h (host)"),
    ("-o 'ProxyCommand=echo 100%'", "a lone '%' ends", None),
    ("-o ProxyCommand=nc %h %p", "'%h' follows '-o ProxyCommand=nc' as a word of its own", "quote the whole"),
    ("-o ProxyCommand=", "-o ProxyCommand has no value", "or none"),
    ("-J ''", "-J has no value", None),
    ("-J a -o 'ProxyCommand=nc %h %p'", "both '-J a' and '-o ProxyCommand=nc %h %p'", "keep one"),
    ("-J a -o ProxyJump=b", "'-J a' and '-o ProxyJump=b' disagree", "keep one"),
    ("-o 'ProxyJump=bad host'", "is not [user@]host[:port]", None),
    ("-J ops@bastion:70000", "port '70000' is not a number in 1-65535", None),
    ("-J " + ",".join(f"j{i}" for i in range(9)), "9 hops, more than 8", None),
    ("-o ProxyJump={{ bastion }}", "Jinja2 template", None),
    ("-o 'ProxyCommand=nc %h %p", "cannot split", "check the quotes"),
    ("-o", "-o has no value", None),
    ("-o ProxyJump", "is not KEYWORD=VALUE", None),
    ("-o ProxyJump=b\x1b[2J", "control characters", None),
    ("-o 'ProxyCommand=sshpass -p hunter2 ssh -W %h:%p bastion'", "never a password", "give the jump host a key"),
])
def test_everything_else_is_refused_by_name(text: str, message: str, hint: str | None) -> None:
    with pytest.raises(SshArgsError) as err:
        parse_ssh_args(text, "ansible_ssh_common_args")
    assert message in str(err.value)
    if hint is not None:
        assert err.value.hint is not None and hint in err.value.hint


def test_proxycommand_tokens_expand_word_by_word() -> None:
    argv = parse_ssh_args("-o 'ProxyCommand=ssh -W %h:%p -l %r -o Tag=%n-100%% bastion'", "x").command
    assert expand(argv, host="10.0.2.1", port=2222, user="ops", name="gpu01") == (
        "ssh", "-W", "10.0.2.1:2222", "-l", "ops", "-o", "Tag=gpu01-100%", "bastion")


# --- inventories -------------------------------------------------------------------------------------

def _yaml(tmp_path: Path, doc: object, name: str = "hosts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _fleet(all_vars: dict[str, object], gpu_vars: dict[str, object] | None = None,
           host_vars: dict[str, object] | None = None) -> dict[str, object]:
    return {"all": {"vars": all_vars, "children": {
        "gpu_nodes": {"vars": gpu_vars or {}, "hosts": {
            "gpu01": {"ansible_host": "10.0.2.1", **(host_vars or {})}, "gpu02": {"ansible_host": "10.0.2.2"}}},
        "kube_control_plane": {"hosts": {"mgmt01": {"ansible_host": "10.0.0.1"}}}}}}


def test_a_refusal_names_the_file_line_group_host_and_option(tmp_path: Path) -> None:
    path = _yaml(tmp_path, _fleet({"ansible_ssh_common_args": "-o ProxyJump=bastion -o ServerAliveInterval=30"}))
    with pytest.raises(InputError) as err:
        load_inventory(path, CAT)
    text = str(err.value)
    assert text.startswith(f"{path}:3: all.vars.ansible_ssh_common_args: ansible_ssh_common_args for host ")
    assert "option '-o ServerAliveInterval=30' is not supported" in text and "migplan honours" in text
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(path)])  # one error line, exit 2, no traceback
    assert r.exit_code == 2 and "ServerAliveInterval" in r.stderr and "Traceback" not in r.output


def test_host_variables_win_and_extra_args_join_common_args(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    doc = _fleet({"ansible_ssh_common_args": BASTION},
                 host_vars={"ansible_ssh_common_args": "-J ops@jump1", "ansible_ssh_extra_args":
                            "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/migplan/known_hosts"})
    with caplog.at_level(logging.DEBUG, logger="migplan"):
        inv = load_inventory(_yaml(tmp_path, doc), CAT)
    by_name = {h.name: h.ssh_args for h in inv.hosts}
    gpu01, gpu02 = by_name["gpu01"], by_name["gpu02"]
    assert gpu01 is not None and gpu01.proxy == "jump" and gpu01.jumps == (JumpHop("jump1", None, "ops"),)
    assert gpu01.known_hosts == "/etc/migplan/known_hosts"
    assert gpu02 is not None and gpu02.proxy == "command" and gpu02.command[0] == "ssh"
    said = caplog.text
    assert "host gpu01: ProxyJump ops@jump1 (from ansible_ssh_common_args, all.children.gpu_nodes.hosts.gpu01" in said
    assert "StrictHostKeyChecking=yes (from ansible_ssh_extra_args" in said and "honoured" in said
    assert "UserKnownHostsFile=/etc/migplan/known_hosts" in said


def test_extra_args_that_disagree_with_common_args_are_refused(tmp_path: Path) -> None:
    doc = _fleet({"ansible_ssh_common_args": "-J bastion", "ansible_ssh_extra_args": "-o ProxyJump=other"})
    with pytest.raises(InputError, match="ansible_ssh_common_args and ansible_ssh_extra_args for host 'gpu01'"
                                         ".*'-J bastion' and '-o ProxyJump=other' disagree"):
        load_inventory(_yaml(tmp_path, doc), CAT)


def test_migplan_ssh_args_replaces_the_ansible_ones(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An inventory Ansible also uses may say StrictHostKeyChecking=no: migplan refuses it, and migplan_ssh_args
    (or ssh_args in migplan's own format) gives migplan its own options instead."""
    doc = _fleet({"ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                  "migplan_ssh_args": "-J bastion"})
    with caplog.at_level(logging.DEBUG, logger="migplan"):
        inv = load_inventory(_yaml(tmp_path, doc), CAT)
    args = inv.hosts[0].ssh_args
    assert args is not None and args.jumps == (JumpHop("bastion"),)
    assert "ansible_ssh_common_args not used: migplan_ssh_args replaces it" in caplog.text
    del doc["all"]["vars"]["migplan_ssh_args"]  # type: ignore[index]
    with pytest.raises(InputError, match="StrictHostKeyChecking=no' would turn host-key checking off"):
        load_inventory(_yaml(tmp_path, doc), CAT)
    native = {"version": 1, "vars": {"ssh_args": "-J ops@bastion:2200"},
              "hosts": {"gpu01": {"discover": True}, "gpu02": {"discover": True, "ssh_args": "-o ProxyJump=none"}}}
    inv = load_inventory(_yaml(tmp_path, native, "native.yaml"), CAT)
    assert [h.ssh_args.proxy for h in inv.hosts if h.ssh_args] == ["jump", "none"]
    native["hosts"]["gpu02"]["ssh_args"] = "-A"  # type: ignore[index]
    with pytest.raises(InputError, match=r"native.yaml:\d+: hosts.gpu02.ssh_args: ssh_args: option '-A'"):
        load_inventory(_yaml(tmp_path, native, "native.yaml"), CAT)


def test_ansible_ssh_args_is_not_read_but_a_proxy_there_is_not_lost(tmp_path: Path) -> None:
    """`ansible_ssh_args` tunes OpenSSH's client (ControlMaster, -C): nothing for paramiko, so it is not read; a proxy
    put there would be lost, so that is an error saying where the proxy goes instead."""
    doc = _fleet({"ansible_ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s"})
    assert all(h.ssh_args is None for h in load_inventory(_yaml(tmp_path, doc), CAT).hosts)
    doc = _fleet({"ansible_ssh_args": "-C -o ControlMaster=auto -J bastion"})
    with pytest.raises(InputError, match="ansible_ssh_args for host 'gpu01' names a proxy") as err:
        load_inventory(_yaml(tmp_path, doc), CAT)
    assert err.value.hint is not None and "ansible_ssh_common_args" in err.value.hint


def test_list_json_ssh_args_name_the_host(tmp_path: Path) -> None:
    doc = {"_meta": {"hostvars": {"gpu01": {"ansible_ssh_common_args": "-o ForwardAgent=yes"}}},
           "all": {"children": ["ungrouped"]}, "ungrouped": {"hosts": ["gpu01"]}}
    path = tmp_path / "inv.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        load_inventory(path, CAT)
    assert "_meta.hostvars.gpu01.ansible_ssh_common_args" in str(err.value) and "ForwardAgent" in str(err.value)


def test_the_inventory_proxy_wins_over_ssh_config(tmp_path: Path) -> None:
    from migplan.adapters.ssh import load_ssh_config

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host 10.0.2.*\n  ProxyJump cfg-jump\n  User cfg-user\n")
    config = load_ssh_config(str(cfg))
    inv = load_inventory(_yaml(tmp_path, _fleet({"ansible_ssh_common_args": BASTION})), CAT)
    target = resolve_target(inv.hosts[0], config)
    assert target.jumps == () and target.proxy_command == ("ssh", "-W", "10.0.2.1:22", "-q", "ubuntu@10.0.0.1")
    none = Host(name="g", address="10.0.2.1", ssh_args=parse_ssh_args("-o ProxyJump=none", "x"))
    assert resolve_target(none, config).jumps == ()
    assert [j.hostname for j in resolve_target(Host(name="g", address="10.0.2.1"), config).jumps] == ["cfg-jump"]


# --- which hosts are selected, and why the others are left out ---------------------------------------------------

def test_service_hosts_without_gpus_are_left_out_unless_asked(tmp_path: Path) -> None:
    doc = _fleet({})
    doc["all"]["children"]["etcd"] = {"hosts": {"mgmt01": None}}  # type: ignore[index]
    doc["all"]["children"]["slurm-master"] = {"hosts": {"login01": {"ansible_host": "10.0.1.1"}}}  # type: ignore[index]
    doc["all"]["children"]["kube_node"] = {"hosts": {"mgmt02": {"ansible_host": "10.0.0.2"}}}  # type: ignore[index]
    doc["all"]["children"]["kube_control_plane"]["hosts"]["mgmt02"] = None  # type: ignore[index]
    path = _yaml(tmp_path, doc)
    inv = load_inventory(path, CAT)
    # mgmt02 also runs jobs (kube_node, as DeepOps' comment says): a discovery target
    assert [h.name for h in inv.hosts] == ["gpu01", "gpu02", "mgmt02"]
    reasons = {lo.name: lo.reason for lo in inv.left_out}
    assert reasons == {"mgmt01": "no GPUs declared, only in service groups: kube_control_plane, etcd",
                       "login01": "no GPUs declared, only in service groups: slurm-master"}
    # a --limit that selects a service host asks for it; the others it leaves out say so
    chosen = select_hosts(inv, ["gpu01,login01"])
    assert [h.name for h in chosen.hosts] == ["gpu01", "login01"] and chosen.hosts[1].discover
    assert {lo.name: lo.reason for lo in chosen.left_out}["mgmt01"] == "not in --limit 'gpu01,login01'"
    assert "selecting service hosts without GPUs: login01" in chosen.selected_by[-1]
    # migplan_discover: true asks for it too; with migplan_limit the pattern alone decides
    doc["all"]["children"]["slurm-master"]["vars"] = {"migplan_discover": True}  # type: ignore[index]
    assert "login01" in [h.name for h in load_inventory(_yaml(tmp_path, doc), CAT).hosts]
    doc["all"]["vars"] = {"migplan_limit": "all"}  # type: ignore[index]
    inv = load_inventory(_yaml(tmp_path, doc), CAT)
    assert len(inv.hosts) == 5 and inv.left_out == () and inv.selected_by == ("migplan_limit 'all'",)
    doc["all"]["vars"] = {"migplan_limit": "gpu_nodes"}  # type: ignore[index]
    inv = load_inventory(_yaml(tmp_path, doc), CAT)
    assert {lo.name: lo.reason for lo in inv.left_out}["mgmt02"] == "not in migplan_limit 'gpu_nodes'"


def test_a_fleet_command_with_every_host_left_out_says_so(tmp_path: Path) -> None:
    path = _yaml(tmp_path, {"all": {"children": {"etcd": {"hosts": {"e1": {"ansible_host": "10.9.0.1"}}}}}})
    inv = load_inventory(path, CAT)
    with pytest.raises(InputError, match=r"no host of .* is selected: all 1 are left out \(e1: no GPUs declared"):
        select_hosts(inv, None)
    assert [h.name for h in select_hosts(inv, ["e1"]).hosts] == ["e1"]
    r = CliRunner().invoke(app, ["discover", "-i", str(path), "--ssh-config", "none"])
    assert r.exit_code == 2 and "inventory check" in r.stderr and "Traceback" not in r.output


def test_inventory_check_limit_prints_the_selection_and_why_others_are_out(tmp_path: Path) -> None:
    doc = _fleet({"ansible_ssh_common_args": BASTION})
    doc["all"]["children"]["slurm-master"] = {"hosts": {"login01": {"ansible_host": "10.0.1.1"}}}  # type: ignore[index]
    path = _yaml(tmp_path, doc)
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(path)])
    assert r.exit_code == 0, r.output
    assert re.search(r"gpu01 +10\.0\.2\.1 +ProxyCommand ssh -W %h:%p -q ubuntu@10\.0\.0\.1 +- +\(discover\)", r.stdout)
    assert re.search(r"mgmt01 +kube_control_plane +no GPUs declared, only in service groups: kube_control_plane",
                     r.stdout)
    assert "selected 2 of 4 hosts (2 to discover, 0 with GPUs declared)" in r.stdout
    assert "left out 2: 2 service hosts without GPUs" in r.stdout and "--limit selects it" in r.stdout
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(path), "--limit", "slurm-master:gpu01", "-o", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [h["name"] for h in data["hosts"]] == ["gpu01", "login01"]
    assert {d["name"]: d["reason"] for d in data["left_out"]} == {
        "gpu02": "not in --limit 'slurm-master:gpu01'", "mgmt01": "not in --limit 'slurm-master:gpu01'"}
    assert data["hosts"][1]["ssh_args"]["proxy_command"] == ["ssh", "-W", "%h:%p", "-q", "ubuntu@10.0.0.1"]
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(path), "--limit", "nothing-here"])
    assert r.exit_code == 2 and "matches no host" in r.stderr


needs_ansible = pytest.mark.skipif(not ansible.has_ansible_core() or shutil.which("ansible-inventory") is None,
                                   reason="ansible-core is not installed (it is in the test extra)")


@pytest.mark.slow  # ansible-core reads the INI file
@needs_ansible
def test_the_deepops_sample_reads_with_its_bastion(tmp_path: Path) -> None:
    """NVIDIA DeepOps' config.example/inventory, uncommented as its header says: the bastion's ProxyCommand (in
    [all:vars]) reaches every host, the management and login nodes are left out as service hosts, and `inventory
    check --limit` previews what a pattern would select."""
    text = re.sub(r"(?m)^#(?=[^\s#])", "", DEEPOPS.read_text())
    assert "ansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p -q ubuntu@10.0.0.1\"'" in text
    path = tmp_path / "inventory"
    path.write_text(text)
    inv = load_inventory(path, CAT)
    assert [(h.name, h.address, h.user, h.discover) for h in inv.hosts] == [
        ("gpu01", "10.0.2.1", "ubuntu", True), ("gpu02", "10.0.2.2", "ubuntu", True)]
    for h in inv.hosts:
        assert h.ssh_args is not None and h.ssh_args.command == ("ssh", "-W", "%h:%p", "-q", "ubuntu@10.0.0.1")
        keyless = dataclasses.replace(h, key_file=None)  # ~/.ssh/id_rsa is the operator's, not here
        assert resolve_target(keyless, None).proxy_command == ("ssh", "-W", f"{h.address}:22", "-q", "ubuntu@10.0.0.1")
        assert "group 'all'" in h.ssh_args.notes[0]
    assert {lo.name: lo.reason.split(": ")[1] for lo in inv.left_out} == {
        "mgmt01": "kube_control_plane, etcd", "mgmt02": "kube_control_plane, etcd",
        "mgmt03": "kube_control_plane, etcd", "login01": "slurm-master, slurm-nfs"}
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(path), "--limit", "slurm-cluster"])
    assert r.exit_code == 0, r.output
    out = textwrap.dedent(r.stdout)
    assert re.search(r"login01 +ubuntu@10\.0\.1\.1 +ProxyCommand ssh -W %h:%p -q ubuntu@10\.0\.0\.1", out)
    assert "selecting service hosts without GPUs: login01" in out
    assert re.search(r"mgmt01 +kube_control_plane, k8s_cluster, etcd +not in --limit 'slurm-cluster'", out)
