"""migplan.host_patterns against the real ansible-core: the same inventory, the same patterns, the same hosts.

The oracle is Ansible itself (`InventoryManager.get_hosts`), reading the INI inventory below; migplan's
side is built from the groups Ansible read (direct hosts and child groups only), so that what is
compared is the pattern semantics and the group ordering, not two parsers.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from migplan import host_patterns
from migplan.errors import InputError

ansible_manager = pytest.importorskip("ansible.inventory.manager", reason="ansible-core is in the test extra")
from ansible.errors import AnsibleError  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402

INI = """\
bastion
10.240.0.11
gpu-a100-09.example.com

[control_plane]
10.240.0.11
10.240.0.12

[etcd]
etcd-[1:3]

[a100]
gpu-a100-0[1:4]

[h100]
gpu-h100-01
gpu-h100-02
h100-spare

[drained]
gpu-a100-03
gpu-h100-02

[rack12]
gpu-a100-02
gpu-h100-01
etcd-2

[gpu_nodes:children]
a100
h100

[dc1:children]
gpu_nodes
control_plane

[special]
ungrouped
all-in
"""

FIXED = [
    "all", "gpu_nodes", "gpu_nodes:!drained", "gpu_nodes:&rack12", "gpu_nodes:!drained:&rack12",
    "!drained", "&rack12", "a100*", "gpu-*", "~gpu-(a|h)100-0[12]", "~h100", "gpu_nodes[0]", "gpu_nodes[1:3]",
    "gpu_nodes[-1]", "gpu_nodes[2:]", "h100,a100", "h100:a100", "h100,!gpu-h100-02", "gpu-a100-0?",
    "*.example.com", "gpu-a100-01", "nothing", "ungrouped", "al*", "all-in", "gpu_nodes,&rack12,!drained",
    "10.240.0.11", "10.240.0.*", "control_plane:!10.240.0.12", "dc1", "dc1:!gpu_nodes", "etcd[1]", "*",
    "gpu-a100-0[12]", "rack12:&etcd", " h100 , a100 ", "~.*-spare", "gpu_nodes:!~.*-0[34]", "bastion:etcd",
    "special:&ungr*", "dc1[0:1]", "a100[3:0]", "10.240.0.11:22", "fe80::1", "etcd-[1:2]", "etcd[0:1]:rack12",
    "gpu-a100-0[1:2]", "h100[-1]:a100[0]", "~(", "a100[9]",
]


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, host_patterns.PatternInventory]:
    path = Path(tmp_path_factory.mktemp("inv")) / "hosts.ini"
    path.write_text(INI)
    im = ansible_manager.InventoryManager(loader=DataLoader(), sources=[str(path)])
    groups = im.groups
    direct = {name: [h.name for h in g.hosts] for name, g in groups.items()}
    children = {name: [c.name for c in g.child_groups] for name, g in groups.items()}
    ours = host_patterns.PatternInventory(
        tuple(im.hosts), {name: tuple(host_patterns.group_hosts(direct, children, name)) for name in groups})
    return im, ours


def _ansible(im: object, pattern: str | list[str]) -> list[str] | str:
    im.clear_pattern_cache()  # type: ignore[attr-defined]
    try:
        return [h.name for h in im.get_hosts(pattern)]  # type: ignore[attr-defined]
    except AnsibleError:
        return "error"


def _ours(inv: host_patterns.PatternInventory, pattern: str | list[str]) -> list[str] | str:
    try:
        return host_patterns.select(inv, pattern)
    except InputError:
        return "error"


def test_group_host_order_is_ansibles(inventories: tuple[object, host_patterns.PatternInventory]) -> None:
    im, ours = inventories
    for name, g in im.groups.items():  # type: ignore[attr-defined]
        assert list(ours.groups[name]) == [h.name for h in g.get_hosts()], name


@pytest.mark.parametrize("pattern", FIXED)
def test_pattern_selects_what_ansible_selects(inventories: tuple[object, host_patterns.PatternInventory],
                                              pattern: str) -> None:
    im, ours = inventories
    assert _ours(ours, pattern) == _ansible(im, pattern)


def test_random_combinations_select_what_ansible_selects(
        inventories: tuple[object, host_patterns.PatternInventory]) -> None:
    im, ours = inventories
    atoms = ["gpu_nodes", "a100", "h100", "drained", "rack12", "etcd", "dc1", "control_plane", "gpu-*", "*-0[12]",
             "~gpu", "~.*[0-9]$", "bastion", "gpu-h100-01", "10.240.0.11", "a*", "h100[0]", "gpu_nodes[1:2]", "none"]
    rng = random.Random(13)
    tried = 0
    for _ in range(300):
        parts = [rng.choice(["", "", "&", "!"]) + rng.choice(atoms) for _ in range(rng.randint(1, 4))]
        sep = rng.choice([",", ":"])
        if sep == ":" and any("[" in p or p.startswith("~") for p in parts):
            sep = ","  # a regex or subscript next to ':' is ambiguous in Ansible too
        pattern = sep.join(parts)
        assert _ours(ours, pattern) == _ansible(im, pattern), pattern
        tried += 1
    assert tried == 300


def test_list_of_patterns_is_the_union_as_in_ansible(
        inventories: tuple[object, host_patterns.PatternInventory]) -> None:
    im, ours = inventories
    for patterns in (["gpu_nodes:!drained", "etcd"], ["a100", "&rack12"], ["h100", "!gpu-h100-01"]):
        assert _ours(ours, patterns) == _ansible(im, patterns)


def test_split_keeps_addresses_and_ranges_whole() -> None:
    assert host_patterns.split_patterns("gpu_nodes:!drained") == ["gpu_nodes", "!drained"]
    assert host_patterns.split_patterns("web[1:3]:db") == ["web[1:3]", "db"]
    assert host_patterns.split_patterns("fe80::1") == ["fe80::1"]
    assert host_patterns.split_patterns("host.example.com:22") == ["host.example.com:22"]
    assert host_patterns.split_patterns("a, b ,c") == ["a", "b", "c"]


def test_bad_patterns_are_input_errors() -> None:
    inv = host_patterns.from_membership([("h1", ["g"])])
    with pytest.raises(InputError, match="invalid host pattern"):
        host_patterns.select(inv, "~gpu(")
    with pytest.raises(InputError, match="@FILE"):
        host_patterns.select(inv, "@retry.txt")
    with pytest.raises(InputError, match="subscripted"):
        host_patterns.select(inv, "g[5]")


def test_random_inventories_select_what_ansible_selects(tmp_path: Path) -> None:
    """Random group trees (nested children, hosts in several groups, ungrouped hosts) and random patterns."""
    rng = random.Random(2026)
    for n in range(15):
        hosts = [f"h{i:02d}" for i in range(rng.randint(3, 12))]
        groups = [f"g{j}" for j in range(rng.randint(2, 6))]
        lines = [h for h in hosts if rng.random() < 0.2]
        for g in groups:
            lines += [f"[{g}]", *rng.sample(hosts, rng.randint(0, len(hosts)))]
        for j, g in enumerate(groups[1:], 1):  # children only from earlier groups: no cycles
            kids = rng.sample(groups[:j], rng.randint(0, min(2, j)))
            if kids:
                lines += [f"[{g}:children]", *kids]
        path = tmp_path / f"inv{n}.ini"
        path.write_text("\n".join(lines) + "\n")
        im = ansible_manager.InventoryManager(loader=DataLoader(), sources=[str(path)])
        direct = {name: [h.name for h in g.hosts] for name, g in im.groups.items()}
        children = {name: [c.name for c in g.child_groups] for name, g in im.groups.items()}
        ours = host_patterns.PatternInventory(
            tuple(im.hosts), {name: tuple(host_patterns.group_hosts(direct, children, name)) for name in im.groups})
        atoms = [*groups, *rng.sample(hosts, 2), "h0*", "~h1", "g*", "ungrouped", "all", f"{groups[0]}[0]",
                 f"{groups[-1]}[1:]"]
        for _ in range(30):
            parts = [rng.choice(["", "", "&", "!"]) + rng.choice(atoms) for _ in range(rng.randint(1, 4))]
            pattern = ",".join(parts)
            assert _ours(ours, pattern) == _ansible(im, pattern), (path.read_text(), pattern)
