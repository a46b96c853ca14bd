"""Ansible inventories: `ansible-inventory --list` JSON, INI and directories through the real ansible-core,
GPU hosts chosen by host pattern, become passwords never used or written, `ansible_connection: local`."""

from __future__ import annotations

import io
import json
import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from sim.fleet import host_state, write_state

from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.fleet import select_hosts
from migplan.errors import InputError
from migplan.inventory import Inventory, ansible, load_inventory

CAT = builtin_catalog()
DATA = Path(__file__).resolve().parent / "data" / "ansible"
SECRET = "hunter2-not-for-logs"
needs_ansible = pytest.mark.skipif(not ansible.has_ansible_core()
                                   or shutil.which("ansible-inventory") is None,
                                   reason="ansible-core is not installed (it is in the test extra)")

# The --list form Ansible documents (script inventory convention), with a control plane beside the GPUs.
LIST_JSON = {
    "_meta": {"hostvars": {
        "gpu01": {"ansible_host": "10.0.1.1", "migplan_gpus": {"model": "A100-SXM4-40GB", "count": 2}},
        "gpu02": {"ansible_host": "10.0.1.2", "ansible_port": 2222},
        "gpu03": {"ansible_host": "10.0.1.3"},
        "10.240.0.11": {},
        "laptop": {"ansible_connection": "local"},
    }},
    "all": {"children": ["ungrouped", "gpu_nodes", "control_plane"], "vars": {"migplan_limit": "gpu_nodes:!drained"}},
    "gpu_nodes": {"children": ["a100"], "hosts": ["laptop"], "vars": {"ansible_user": "deploy"}},
    "a100": {"hosts": ["gpu01", "gpu02", "gpu03"], "vars": {"ansible_become": True}},
    "drained": {"hosts": ["gpu03"]},
    "control_plane": {"hosts": ["10.240.0.11"]},
    "ungrouped": {},
}


def _json(tmp_path: Path, doc: object, name: str = "inv.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, indent=2))
    return p


def _hosts(inv: Inventory) -> dict[str, tuple[object, ...]]:
    return {h.name: (h.address, h.port, h.user, h.become, h.connection, h.discover, len(h.gpus), h.groups)
            for h in inv.hosts}


def test_list_json_selects_gpu_hosts_and_discovers_the_ones_without_facts(tmp_path: Path) -> None:
    inv = load_inventory(_json(tmp_path, LIST_JSON), CAT)
    assert _hosts(inv) == {
        "gpu01": ("10.0.1.1", None, "deploy", ("sudo", "-n"), "ssh", False, 2, ("a100", "gpu_nodes")),
        "gpu02": ("10.0.1.2", 2222, "deploy", ("sudo", "-n"), "ssh", True, 0, ("a100", "gpu_nodes")),
        "laptop": ("laptop", None, "deploy", (), "local", True, 0, ("gpu_nodes",)),
    }  # gpu03 is drained, 10.240.0.11 is not a GPU node: both ignored


def test_list_json_without_a_limit_takes_every_host_and_a_gpu_less_one_is_no_error(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(LIST_JSON))
    del doc["all"]["vars"]
    inv = load_inventory(_json(tmp_path, doc), CAT)
    assert sorted(h.name for h in inv.hosts) == ["10.240.0.11", "gpu01", "gpu02", "gpu03", "laptop"]
    assert inv.host("10.240.0.11").discover  # type: ignore[union-attr]
    # --limit narrows with Ansible's pattern syntax, through the one --limit mechanism
    assert [h.name for h in select_hosts(inv, ["gpu_nodes:!drained:!laptop"]).hosts] == ["gpu01", "gpu02"]
    assert [h.name for h in select_hosts(inv, ["drained", "control_plane"]).hosts] == ["10.240.0.11", "gpu03"]
    # as in Ansible, the values are one list: the plain patterns first, then '&' (so control_plane is dropped)
    assert [h.name for h in select_hosts(inv, ["a100:&drained", "control_plane"]).hosts] == ["gpu03"]


def test_export_form_merges_group_vars_as_ansible_does(tmp_path: Path) -> None:
    """`--export` keeps group vars in the groups: all < parent < child (by depth), then
    ansible_group_priority, then name; host vars win over all of them."""
    doc = {
        "_meta": {"hostvars": {"g1": {"ansible_port": 2201}, "g2": {}}},
        "all": {"children": ["dc", "zz_site", "aa_site"], "vars": {"ansible_user": "all-user", "ansible_port": 2000}},
        "dc": {"children": ["rack"], "vars": {"ansible_user": "dc-user"}},
        "rack": {"hosts": ["g1", "g2"], "vars": {"ansible_user": "rack-user"}},
        "aa_site": {"hosts": ["g2"], "vars": {"ansible_port": 2100, "ansible_group_priority": 5}},
        "zz_site": {"hosts": ["g2"], "vars": {"ansible_port": 2200}},
    }
    inv = load_inventory(_json(tmp_path, doc), CAT)
    g1, g2 = inv.host("g1"), inv.host("g2")
    assert g1 is not None and g2 is not None
    assert (g1.user, g1.port) == ("rack-user", 2201)
    assert (g2.user, g2.port) == ("rack-user", 2100)  # aa_site's priority 5 beats zz_site's name order


def test_the_issue_example_host_without_gpus_is_not_an_error_in_an_ansible_yaml_inventory(tmp_path: Path) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_text(textwrap.dedent("""\
        all:
          vars:
            migplan_limit: gpu_nodes
          children:
            control_plane:
              hosts:
                10.240.0.11:
            gpu_nodes:
              hosts:
                gpu01: {migplan_gpus: {model: A100-SXM4-40GB, count: 1}}
                gpu02:
        """))
    inv = load_inventory(p, CAT)
    assert _hosts(inv) == {"gpu01": ("gpu01", None, None, (), "ssh", False, 1, ("gpu_nodes",)),
                           "gpu02": ("gpu02", None, None, (), "ssh", True, 0, ("gpu_nodes",))}


@pytest.mark.slow
@needs_ansible
@pytest.mark.parametrize("export", [False, True])
def test_ini_through_ansible_core_equals_ansible_inventory_list_json(tmp_path: Path, export: bool) -> None:
    """The INI file read by Ansible's InventoryManager in-process gives the same fleet as the JSON the real
    `ansible-inventory -i FILE --list` prints (both ways of using Ansible's own reader agree)."""
    ini = DATA / "site.ini"
    args = ["ansible-inventory", "-i", str(ini), "--list", *(["--export"] if export else [])]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True,
                         env={"PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent), "HOME": str(tmp_path),
                              "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}).stdout
    from_json = load_inventory(_json(tmp_path, json.loads(out), "list.json"), CAT)
    direct = load_inventory(ini, CAT)
    assert _hosts(from_json) == _hosts(direct)
    assert _hosts(direct) == {
        "gpu-a100-01": ("10.0.1.1", None, "deploy", ("sudo", "-n"), "ssh", False, 8, ("a100", "gpu_nodes")),
        "gpu-a100-02": ("10.0.1.2", None, "deploy", ("sudo", "-n"), "ssh", True, 0, ("a100", "gpu_nodes")),
        "gpu-h100-01": ("10.0.2.1", 2222, "deploy", ("sudo", "-n"), "ssh", True, 0, ("h100", "gpu_nodes")),
        "gpu-h100-02": ("10.0.2.2", 2200, "deploy", ("sudo", "-n"), "ssh", True, 0, ("h100", "gpu_nodes")),
        "workstation": ("workstation", None, None, (), "local", True, 0, ("local_gpu",)),
    }  # [all:vars] migplan_limit=gpu_nodes:local_gpu:!drained; the bastion, control plane and etcd are ignored


@pytest.mark.slow
@needs_ansible
def test_directory_with_group_vars_is_read_by_ansible_core(tmp_path: Path) -> None:
    (tmp_path / "inv" / "group_vars").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.ini").write_text("[gpu]\ng1\ng2 ansible_port=2022\n[etcd]\ne1\n")
    (tmp_path / "inv" / "group_vars" / "gpu.yml").write_text(
        "migplan_gpus: {model: H100-SXM5-80GB, count: 4}\nansible_user: ops\n")
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text("migplan_limit: gpu\n")
    inv = load_inventory(tmp_path / "inv", CAT)
    assert _hosts(inv) == {"g1": ("g1", None, "ops", (), "ssh", False, 4, ("gpu",)),
                           "g2": ("g2", 2022, "ops", (), "ssh", False, 4, ("gpu",))}


@pytest.mark.slow
@needs_ansible
def test_yaml_inventory_with_group_vars_beside_it_gets_those_vars(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yaml").write_text("ansible_user: from-group-vars\n")
    p = tmp_path / "hosts.yaml"
    p.write_text("all:\n  children:\n    gpu:\n      hosts:\n        g1: {migplan_discover: true}\n")
    assert load_inventory(p, CAT).hosts[0].user == "from-group-vars"


def test_without_ansible_core_an_ini_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ansible, "has_ansible_core", lambda: False)
    p = tmp_path / "hosts"
    p.write_text("[gpu]\ng1 ansible_host=10.0.0.1\n")
    with pytest.raises(InputError) as err:
        load_inventory(p, CAT)
    assert str(p) in str(err.value) and "migplan[ansible]" in str(err.value) and "--list" in str(err.value)


def test_stdin_dash_reads_list_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(LIST_JSON)))
    inv = load_inventory("-", CAT)
    assert inv.source == "<stdin>" and [h.name for h in inv.hosts] == ["laptop", "gpu01", "gpu02"]


@pytest.mark.parametrize(("doc", "message"), [
    ({"_meta": {"hostvars": {"h1": {"migplan_gpuz": 1}}}, "g": {"hosts": ["h1"]}},
     "_meta.hostvars.h1.migplan_gpuz: unknown migplan variable"),
    ({"_meta": {"hostvars": {}}, "g": {"hostz": ["h1"]}}, "g.hostz: unknown key 'hostz'"),
    ({"_meta": {"hostvars": {"h1": {"ansible_port": "ssh"}}}, "g": {"hosts": ["h1"]}},
     "_meta.hostvars.h1.ansible_port: expected an integer"),
    ({"_meta": {"hostvars": {}}, "all": {"vars": {"migplan_limit": "nothing"}}, "g": {"hosts": ["h1"]}},
     "host pattern 'nothing' (migplan_limit) selects no host"),
    ({"_meta": {"hostvars": {}}, "a": {"children": ["b"]}, "b": {"children": ["a"], "hosts": ["h1"]},
      "all": {"children": ["a"]}},
     "contains itself"),
])
def test_bad_list_json_names_file_key_and_what_is_wrong(tmp_path: Path, doc: object, message: str) -> None:
    p = _json(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_inventory(p, CAT)
    assert str(p) in str(err.value) and message in str(err.value)


# --- the become password: one warning per host, never in any output or file ----------------------------

PROFILE = """\
version: 1
workloads:
- name: tiny-embedder
  observed: {gpu_model: A100-SXM4-40GB}
  memory_mib: {p50: 1500, p95: 1800, p99: 1900, max: 2000}
  compute: {p50: 0.02, p95: 0.05, max: 0.08}
"""


@pytest.mark.slow
def test_become_password_is_warned_once_per_host_and_appears_nowhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """discover -> propose -> apply on a simulated local host (ansible_connection: local) whose inventory
    sets ansible_become_password: the password is in no output, snapshot, plan or journal."""
    state = write_state(tmp_path / "state.json", host_state("A100-SXM4-40GB", 1, hostname="workstation"))
    sim_runner.serve(monkeypatch, state)  # the CLI builds its own (local) runner
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_CATALOG"):
        monkeypatch.delenv(var, raising=False)
    inv = _json(tmp_path, {
        "_meta": {"hostvars": {
            "workstation": {"ansible_connection": "local", "ansible_become_password": SECRET,
                            "migplan_lock_file": str(tmp_path / "apply.lock"),
                            "migplan_state_dir": str(tmp_path / "st")},
            "bastion": {"ansible_become_password": SECRET}}},
        "all": {"children": ["gpu", "ungrouped"], "vars": {"migplan_limit": "gpu"}},
        "gpu": {"hosts": ["workstation"]}, "ungrouped": {"hosts": ["bastion"]}})
    (tmp_path / "profiles.yaml").write_text(PROFILE)
    snap, plan, journal = tmp_path / "snap.json", tmp_path / "plan.json", tmp_path / "journal.jsonl"
    runner = CliRunner()
    outputs = []
    caplog.set_level(logging.WARNING, logger="migplan")
    for args in (["inventory", "check", "-i", str(inv), "-o", "json"],
                 ["discover", "-i", str(inv), "--out", str(snap)],
                 ["propose", "--snapshot", str(snap), "-p", str(tmp_path / "profiles.yaml"), "--out", str(plan)],
                 ["apply", str(plan), "-i", str(inv), "--yes", "--journal", str(journal)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, (args, r.output)
        outputs.append(r.output)
    warnings = [rec.getMessage() for rec in caplog.records if "ansible_become_password" in rec.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("host workstation:")  # the bastion is not selected
    assert "NOPASSWD: /usr/bin/nvidia-smi" in warnings[0]
    texts = [*outputs, *(rec.getMessage() for rec in caplog.records), snap.read_text(), plan.read_text(),
             journal.read_text(), *(p.read_text() for p in (tmp_path / "st").rglob("*") if p.is_file())]
    assert journal.read_text().strip() and json.loads(plan.read_text())["gpus"][0]["actions"]
    assert not [t for t in texts if SECRET in t]


def test_explicit_discover_false_without_gpus_is_still_an_error(tmp_path: Path) -> None:
    doc = {"_meta": {"hostvars": {"h1": {"migplan_discover": False}}}, "g": {"hosts": ["h1"]}}
    with pytest.raises(InputError, match="lists no GPUs"):
        load_inventory(_json(tmp_path, doc), CAT)


def test_login_password_is_warned_and_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = {"_meta": {"hostvars": {"h1": {"ansible_password": SECRET, "migplan_discover": True}}},
           "g": {"hosts": ["h1"]}}
    caplog.set_level(logging.WARNING, logger="migplan")
    inv = load_inventory(_json(tmp_path, doc), CAT)
    assert inv.hosts[0].name == "h1"
    msgs = [r.getMessage() for r in caplog.records]
    assert any("ansible_password is set, but migplan logs in with SSH keys" in m for m in msgs)
    assert not [m for m in msgs if SECRET in m] and SECRET not in repr(inv)
