"""Inventory formats: migplan's own and Ansible YAML, with strict validation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.errors import InputError
from migplan.inventory import expand_pattern, load_inventory
from migplan.model.state import state_from_inventory

CAT = builtin_catalog()
ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(text))
    return f


def test_example_inventory_loads() -> None:
    inv = load_inventory(ROOT / "inventory" / "example.yaml", CAT)
    assert [h.name for h in inv.hosts] == ["gpu-a100-01", "gpu-a100-02", "gpu-a100-80-01", "gpu-h100-01"]
    h = inv.host("gpu-a100-01")
    assert h is not None
    assert (h.user, h.become, h.groups) == ("ops", ("sudo", "-n"), ("dc1", "k8s-workers"))
    assert h.hooks.pre_apply == ("kubectl-drain-gpu-node --timeout 300",)
    assert dict(h.labels) == {"site": "dc1"}
    assert h.gpus[0].layout == Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
    assert h.gpus[7].reserved and not h.gpus[6].reserved
    h100 = inv.host("gpu-h100-01")
    assert h100 is not None and [g.index for g in h100.gpus if g.excluded] == [6, 7]
    assert dict(h100.labels) == {"site": "dc1", "tier": "premium"}
    assert inv.host("gpu-a100-80-01").port == 2222  # type: ignore[union-attr]
    assert sum(1 for _ in inv.gpus()) == 24


def test_state_from_inventory() -> None:
    inv = load_inventory(ROOT / "inventory" / "example.yaml", CAT)
    state = state_from_inventory(inv)
    g = state.gpu("gpu-a100-02", 0)
    assert g is not None and not g.mig_enabled and g.layout is None
    g2 = state.gpu("gpu-a100-02", 2)
    assert g2 is not None and g2.mig_enabled and g2.layout == Layout()
    assert state.fingerprint() == state_from_inventory(inv).fingerprint()
    assert state.fingerprint().startswith("sha256:")


def test_ansible_inventory(tmp_path: Path) -> None:
    f = write(tmp_path, """\
        all:
          vars:
            ansible_user: ops
            ansible_become: true
            some_other_var: ignored
          children:
            gpu:
              children:
                a100:
                  hosts:
                    gpu[01:03].dc1:
                  vars:
                    ansible_ssh_private_key_file: ~/.ssh/fleet
                    migplan_gpus: {model: A100-SXM4-40GB, count: 8}
                    migplan_reserved_gpus: [7]
                h100:
                  hosts:
                    h100-a:
                      ansible_host: 10.0.4.21
                      ansible_port: 2222
                      ansible_user: admin
                      migplan_discover: true
    """)
    inv = load_inventory(f, CAT)
    assert [h.name for h in inv.hosts] == ["gpu01.dc1", "gpu02.dc1", "gpu03.dc1", "h100-a"]
    g1 = inv.hosts[0]
    assert (g1.address, g1.user, g1.key_file, g1.become) == ("gpu01.dc1", "ops", "~/.ssh/fleet", ("sudo", "-n"))
    assert len(g1.gpus) == 8 and g1.gpus[7].reserved and g1.groups == ("gpu", "a100")
    h = inv.hosts[3]
    assert (h.address, h.port, h.user, h.discover, h.gpus) == ("10.0.4.21", 2222, "admin", True, ())
    assert inv.select(["a100"]).hosts == inv.hosts[:3]
    assert inv.select(["h100-*"]).hosts == inv.hosts[3:]


def test_ansible_example_loads() -> None:
    inv = load_inventory(ROOT / "inventory" / "ansible-example.yaml", CAT)
    assert len(inv.hosts) == 3


@pytest.mark.parametrize(("pattern", "expected"), [
    ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
    ("n[1:5:2].x", ["n1.x", "n3.x", "n5.x"]),
    ("db-[a:c]", ["db-a", "db-b", "db-c"]),
    ("plain", ["plain"]),
])
def test_host_ranges(pattern: str, expected: list[str]) -> None:
    assert expand_pattern(pattern) == expected


BASE = """\
version: 1
hosts:
  h1:
    address: 10.0.0.1
    gpus:
      - {index: 0, model: A100-SXM4-40GB}
      - {index: 1, model: A100-SXM4-40GB, layout: [3g.20gb@0]}
"""


@pytest.mark.parametrize(("old", "new", "line", "key", "message"), [
    ("address: 10.0.0.1", "address: [10.0.0.1", 4, None, "not valid YAML"),
    ("address: 10.0.0.1", "adress: 10.0.0.1", 4, "hosts.h1.adress", "unknown key 'adress'"),
    ("{index: 0,", "{index: zero,", 6, "hosts.h1.gpus[0].index", "expected an integer"),
    ("{index: 0,", "{index: -1,", 6, "hosts.h1.gpus[0].index", "must be at least 0"),
    ("model: A100-SXM4-40GB}", "model: A100-FANTASY}", 6, "hosts.h1.gpus[0].model", "unknown GPU model"),
    ("{index: 1,", "{index: 0,", 7, "hosts.h1.gpus[1]", "GPU index 0 listed twice (first at line 6)"),
    ("[3g.20gb@0]", "[3g.20gb@2]", 7, "hosts.h1.gpus[1].layout", "may start only at {0,4}"),
    ("[3g.20gb@0]", "[3g.20gb]", 7, "hosts.h1.gpus[1].layout[0]", "PROFILE@START"),
    ("version: 1", "version: 7", 1, "version", "unsupported inventory version 7"),
    ("    address: 10.0.0.1\n", "    address: 10.0.0.1\n    port: 70000\n", 5, "hosts.h1.port", "out of range"),
    ("    address: 10.0.0.1\n", "    address: 10.0.0.1\n    become: sudo -n; rm -rf /\n", 5, "hosts.h1.become",
     "plain words"),
    ("    address: 10.0.0.1\n", "    address: 10.0.0.1\n    reserved_gpus: [5]\n", 5,
     "hosts.h1.reserved_gpus", "GPU 5 is not among"),
])
def test_bad_inventory(tmp_path: Path, old: str, new: str, line: int, key: str | None, message: str) -> None:
    assert old in BASE
    f = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_inventory(f, CAT)
    e = err.value
    assert message in str(e)
    assert e.source == str(f) and e.line == line and e.key == key


def test_duplicate_host(tmp_path: Path) -> None:
    f = write(tmp_path, BASE + "  h1:\n    discover: true\n")
    with pytest.raises(InputError, match=r"duplicate key 'h1' \(first at line 3\)") as err:
        load_inventory(f, CAT)
    assert err.value.line == 8


def test_same_address_twice(tmp_path: Path) -> None:
    f = write(tmp_path, BASE + "  h2:\n    address: 10.0.0.1\n    discover: true\n")
    with pytest.raises(InputError, match="same address"):
        load_inventory(f, CAT)


def test_host_without_gpus(tmp_path: Path) -> None:
    f = write(tmp_path, "version: 1\nhosts:\n  h1: {address: 10.0.0.1}\n")
    with pytest.raises(InputError, match="lists no GPUs") as err:
        load_inventory(f, CAT)
    assert "discover: true" in str(err.value)


def test_unknown_migplan_var_in_ansible(tmp_path: Path) -> None:
    f = write(tmp_path, "all:\n  hosts:\n    h1:\n      migplan_discovr: true\n")
    with pytest.raises(InputError, match="unknown migplan variable 'migplan_discovr'"):
        load_inventory(f, CAT)


def test_reserved_and_excluded_apply_to_discovered_hosts(tmp_path: Path) -> None:
    f = write(tmp_path, "version: 1\nhosts:\n  h1: {discover: true, reserved_gpus: [1], excluded_gpus: [6, 7]}\n")
    (h,) = load_inventory(f, CAT).hosts
    assert h.gpus == () and h.is_reserved(1) and h.is_excluded(7) and not h.is_excluded(1)


def test_shorthand_takes_mig_and_check_shows_undeclared_as_mig_off(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from migplan.cli.app import app
    from migplan.model.state import state_from_inventory

    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nhosts:\n  a: {gpus: {model: A100-SXM4-40GB, count: 2, mig: true}}\n"
                   "  b: {gpus: {model: A100-SXM4-40GB, count: 1}}\n")
    st = state_from_inventory(load_inventory(str(inv), builtin_catalog()))
    assert [g.mig_enabled for g in st.gpus] == [True, True, False]
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(inv)])
    assert r.exit_code == 0 and "(not declared)" not in r.stdout and "MIG off: not declared" in r.stdout


def _one_host(tmp_path: Path, name: str, gpus: str) -> Path:
    """An inventory of one host whose `gpus:` list is `gpus` (its entries' lines, not indented)."""
    head = "version: 1\nhosts:\n  a:\n    address: 10.0.0.1\n    gpus:\n"
    f = tmp_path / name
    f.write_text(head + textwrap.indent(gpus, "      "))
    return f


def test_a_layout_written_again_is_checked_again_for_each_gpu(tmp_path: Path) -> None:
    """Layouts are read once per text and shared by the GPUs that write them; each GPU's model still checks
    it (3g.40gb exists on an A100-80GB, not on an A100-40GB), and a bad entry is refused at its own line."""
    first = "- {index: 0, model: A100-SXM4-80GB, mig: true, layout: [3g.40gb@0, 3g.40gb@4]}\n"
    ok = _one_host(tmp_path, "ok.yaml", first + "- {index: 1, model: A100-SXM4-80GB, mig: true, "
                                                "layout: [3g.40gb@0, 3g.40gb@4]}\n")
    gpus = load_inventory(ok, CAT).hosts[0].gpus
    assert gpus[0].layout == gpus[1].layout == Layout.parse(["3g.40gb@0", "3g.40gb@4"])
    other = _one_host(tmp_path, "other.yaml", first + "- {index: 1, model: A100-SXM4-40GB, mig: true, "
                                                      "layout: [3g.40gb@0, 3g.40gb@4]}\n")
    with pytest.raises(InputError, match="3g.40gb") as err:
        load_inventory(other, CAT)
    assert err.value.line == 7
    bad = _one_host(tmp_path, "bad.yaml", first + textwrap.dedent("""\
        - index: 1
          model: A100-SXM4-80GB
          mig: true
          layout:
            - 3g.40gb@0
            - 3g.40gb@x
        """))
    with pytest.raises(InputError) as err:
        load_inventory(bad, CAT)
    assert err.value.line == 12 and "3g.40gb@x" in str(err.value)
