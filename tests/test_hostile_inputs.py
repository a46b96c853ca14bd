"""Hostile inventories, profiles, catalogs, layouts and configs: clean InputErrors with file, line
and key, bounded numbers, and no hangs (classes 3, 4, 6, 7, 8 and 9 of the hardening brief)."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path

import pytest
from timebox import within

from migplan import names
from migplan.catalog import GiProfile, GpuModel, builtin_catalog, load_catalog
from migplan.catalog.layout import Instance, Layout, enumerate_layouts, free_placements
from migplan.config import PLANNER_SETTINGS, WEIGHT_KEYS, load_config
from migplan.errors import CatalogError, InputError
from migplan.inventory import MAX_HOSTS_PER_PATTERN, expand_pattern, load_inventory
from migplan.profiles import MAX_PRIORITY, MAX_REPLICAS, load_profiles

CAT = builtin_catalog()




def write(tmp_path: Path, text: str, name: str = "doc.yaml") -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(text))
    return f


def refused(load, f: Path, line: int, key: str | None, match: str) -> InputError:  # type: ignore[no-untyped-def]
    with within(20), pytest.raises(InputError) as err:
        load(f)
    e = err.value
    assert e.source == str(f) and e.line == line, str(e)
    if key is not None:
        assert e.key == key, str(e)
    assert str(e).startswith(f"{f}:{line}: "), str(e)
    assert match in str(e), str(e)
    return e


def inventory(f: Path) -> object:
    return load_inventory(f, CAT)


NATIVE = """\
version: 1
hosts:
  h1:
    address: 10.0.0.1
    gpus:
      - {index: 0, model: A100-SXM4-40GB}
"""


# --- 3. names as written; 4. whole-string validation --------------------------------------------

def test_host_keys_are_read_as_written(tmp_path: Path) -> None:
    f = write(tmp_path, """\
        version: 1
        hosts:
          0755: {address: 10.0.0.1, gpus: {model: A100-SXM4-40GB, count: 1}}
          on: {address: 10.0.0.2, gpus: {model: A100-SXM4-40GB, count: 1}}
          007: {address: 10.0.0.3, user: 007, gpus: {model: A100-SXM4-40GB, count: 1}}
          1e3: {address: 1e3, gpus: {model: A100-SXM4-40GB, count: 1}}
        """)
    inv = load_inventory(f, CAT)
    assert [h.name for h in inv.hosts] == ["0755", "on", "007", "1e3"]
    h007 = inv.host("007")
    assert h007 is not None and h007.user == "007"
    h1e3 = inv.host("1e3")
    assert h1e3 is not None and h1e3.address == "1e3"


@pytest.mark.parametrize(("old", "new", "line", "key", "match"), [
    ("  h1:\n", '  "h1\\n":\n', 3, "hosts.h1\n", "host name 'h1\\n' must be"),
    ("address: 10.0.0.1", 'address: "10.0.0.1\\n"', 4, "hosts.h1.address", "is not a host name or IP address"),
    ("address: 10.0.0.1", 'address: 10.0.0.1\n    user: "ops\\n"', 5, "hosts.h1.user", "is not a valid user name"),
    ("address: 10.0.0.1", "address: 10.0.0.1\n    user: yes", 5, "hosts.h1.user", "expected a string, got a boolean"),
    ("model: A100-SXM4-40GB}", 'model: A100-SXM4-40GB, uuid: "GPU-5c89852c-d268-c3f3\\n"}', 6,
     "hosts.h1.gpus[0].uuid", "is not a GPU UUID"),
    ("address: 10.0.0.1", 'address: 10.0.0.1\n    labels: {"rack\\n": r1}', 5, "hosts.h1.labels.rack\n",
     "label name"),
    ("address: 10.0.0.1", 'address: 10.0.0.1\n    become: "sudo -n\\n;reboot"', 5, "hosts.h1.become",
     "plain words"),
])
def test_names_must_match_the_whole_string(tmp_path: Path, old: str, new: str, line: int, key: str,
                                           match: str) -> None:
    assert old in NATIVE
    refused(inventory, write(tmp_path, NATIVE.replace(old, new, 1)), line, key, match)


def test_patterns_are_anchored_for_match_and_fullmatch() -> None:
    for pattern in (names.HOST_NAME, names.ADDRESS, names.WORKLOAD_NAME, names.USER_NAME, names.SAFE_TOKEN):
        assert pattern.match("gpu01") and not pattern.match("gpu01\n") and not pattern.fullmatch("gpu01\n")
    assert names.GPU_UUID.match("GPU-5c89852c-d268") and not names.GPU_UUID.match("GPU-5c89852c-d268\n")
    assert names.profile_size("3g.20gb") == (3, 20)
    assert names.profile_size("３g.２０gb") is None and names.profile_size("3g.20gb\nx") is None
    assert names.split_become("sudo -n") == ("sudo", "-n") and names.split_become("sudo\n-n x\n") is not None
    assert names.split_become("sudo '-n\n'") is None


# --- 6. numbers bounded by hardware -------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "line", "key", "match"), [
    ("{index: 0,", "{index: 100000000000000000000,", 6, "hosts.h1.gpus[0].index", "out of range 0..63"),
    ("{index: 0,", "{index: 64,", 6, "hosts.h1.gpus[0].index", "out of range 0..63"),
    ("{index: 0,", "{index: 0x10000,", 6, "hosts.h1.gpus[0].index", "out of range 0..63"),
    ("{index: 0,", "{index: ٣,", 6, "hosts.h1.gpus[0].index", "expected an integer"),
    ("{index: 0,", "{index: .nan,", 6, "hosts.h1.gpus[0].index", "expected an integer"),
    ("address: 10.0.0.1", "address: 10.0.0.1\n    reserved_gpus: [99999999999]", 5, "hosts.h1.reserved_gpus[0]",
     "out of range 0..63"),
    ("address: 10.0.0.1", "address: 10.0.0.1\n    port: 1e400", 5, "hosts.h1.port", "expected an integer"),
    ("gpus:\n      - {index: 0, model: A100-SXM4-40GB}", "gpus: {model: A100-SXM4-40GB, count: 100000000}", 5,
     "hosts.h1.gpus.count", "more than the 64 a host can have"),
    ("gpus:\n      - {index: 0, model: A100-SXM4-40GB}", "gpus: {model: A100-SXM4-40GB, count: 65}", 5,
     "hosts.h1.gpus.count", "more than the 64"),
    ("model: A100-SXM4-40GB}", "model: A100-SXM4-40GB, layout: ['1g.5gb@²']}", 6, "hosts.h1.gpus[0].layout[0]",
     "is not an instance"),
    ("model: A100-SXM4-40GB}", "model: A100-SXM4-40GB, layout: ['1g.5gb@٣']}", 6, "hosts.h1.gpus[0].layout[0]",
     "is not an instance"),
    ("model: A100-SXM4-40GB}", "model: A100-SXM4-40GB, layout: [1g.5gb@" + "9" * 5000 + "]}", 6,
     "hosts.h1.gpus[0].layout[0]", "out of range 0..255"),
])
def test_inventory_numbers_are_bounded(tmp_path: Path, old: str, new: str, line: int, key: str, match: str) -> None:
    assert old in NATIVE
    refused(inventory, write(tmp_path, NATIVE.replace(old, new, 1)), line, key, match)


# a layout's entries are texts: anything else is read (a number as written) or refused as its Node reads it
@pytest.mark.parametrize(("layout", "entry", "match"), [
    ("1g.5gb@0", "", "expected a list, got a string"),
    ("[1g.5gb@0, 5]", "[1]", "'5' is not an instance"),
    ("[~]", "[0]", "expected a string, got nothing"),
    ("[1g.5gb@0, yes]", "[1]", "expected a string, got a boolean"),
    ("[[1g.5gb@0]]", "[0]", "expected a string, got a list"),
    ("[1g.5gb@0, 1g.5gb@0]", "", "invalid layout"),
])
def test_a_layout_is_a_list_of_instance_texts(tmp_path: Path, layout: str, entry: str, match: str) -> None:
    text = NATIVE.replace("model: A100-SXM4-40GB}", f"model: A100-SXM4-40GB, layout: {layout}}}", 1)
    refused(inventory, write(tmp_path, text), 6, f"hosts.h1.gpus[0].layout{entry}", match)


def test_gpu_index_and_count_at_the_bound(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, NATIVE.replace("{index: 0,", "{index: 63,")), CAT)
    assert inv.hosts[0].gpus[0].index == 63
    inv = load_inventory(write(tmp_path, NATIVE.replace("gpus:\n      - {index: 0, model: A100-SXM4-40GB}",
                                                        "gpus: {model: A100-SXM4-40GB, count: 64}")), CAT)
    assert len(inv.hosts[0].gpus) == 64


@pytest.mark.parametrize(("text", "expected"), [
    ("1g.5gb@3", Instance(3, "1g.5gb")), (" 3g.20gb @ 4 ", Instance(4, "3g.20gb")),
    ("7g.40gb@0", Instance(0, "7g.40gb")),
])
def test_instances_parse(text: str, expected: Instance) -> None:
    assert Instance.parse(text) == expected


@pytest.mark.parametrize("text", ["1g.6gb@²", "1g.5gb@٣", "1g.5gb@３", "1g.5gb@-1", "1g.5gb@256", "1g.5gb@1 2",
                                  "1g.5gb@", "@3", "1g 5gb@3", "1g.5gb@" + "9" * 5000, "1g.5gb@0x3", "²@0",
                                  "1g.٣gb@0"])
def test_instances_refused(text: str) -> None:
    with pytest.raises(InputError, match="instance|out of range"):
        Instance.parse(text)
    with pytest.raises(InputError):
        Layout.parse(["7g.40gb@0", text])


def test_unicode_digit_profile_names_are_unknown_profiles_not_crashes(tmp_path: Path) -> None:
    from migplan.catalog.layout import check_layout

    a100 = CAT.get("A100-SXM4-40GB")
    assert [c.rule for c in check_layout(a100, Layout.of([Instance(0, "²")]))] == ["unknown-profile"]
    f = write(tmp_path, NATIVE.replace("model: A100-SXM4-40GB}", "model: A100-SXM4-40GB, layout: ['²@0']}"))
    refused(inventory, f, 6, "hosts.h1.gpus[0].layout[0]", "is not an instance")


# --- Ansible host ranges --------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "match"), [
    ("gpu[01:10:0]", "stride 0 must be"),
    ("gpu[0:99999999]", f"more than the {MAX_HOSTS_PER_PATTERN} migplan expands"),
    ("gpu[10:01]", "runs backwards"),
    ("gpu[z:a]", "runs backwards"),
    ("gpu[01:100]", "differ in width"),
    ("gpu[0:999][0:999]", "more than the"),
    ("gpu[a:99]", "neither a number range nor a single-letter range"),
    ("gpu[1:]", "has no end"),
    ("gpu[1:5:]", "stride after the second ':' is empty"),
    ("gpu[0:" + "9" * 5000 + "]", "at most 9 digits"),
    ("gpu[1:5:" + "9" * 5000 + "]", "stride"),
])
def test_bad_host_ranges(pattern: str, match: str) -> None:
    with within(5), pytest.raises(InputError, match="host range") as err:
        expand_pattern(pattern)
    assert match in str(err.value)


def test_good_host_ranges() -> None:
    assert expand_pattern("gpu[:2]") == ["gpu0", "gpu1", "gpu2"]
    assert expand_pattern("r[1:2]-n[a:b]") == ["r1-na", "r1-nb", "r2-na", "r2-nb"]
    assert expand_pattern("x[y:B]") == ["xy", "xz", "xA", "xB"]
    assert len(expand_pattern(f"n[1:{MAX_HOSTS_PER_PATTERN}]")) == MAX_HOSTS_PER_PATTERN


def test_ansible_range_errors_name_file_line_and_key(tmp_path: Path) -> None:
    f = write(tmp_path, "all:\n  children:\n    a100:\n      hosts:\n        gpu[01:10:0]:\n")
    refused(inventory, f, 5, "all.children.a100.hosts.gpu[01:10:0]", "stride 0")
    f = write(tmp_path, "all:\n  hosts:\n    gpu[0:99999999]:\n      migplan_discover: true\n")
    refused(inventory, f, 3, "all.hosts.gpu[0:99999999]", "more than the 10000")
    f = write(tmp_path, "all:\n  hosts:\n    gpu[10:01]:\n")
    refused(inventory, f, 3, None, "runs backwards")


# --- 1./3. Ansible with merge keys, vault and YAML 1.1 names ---------------------------------------

def test_ansible_merge_keys(tmp_path: Path) -> None:
    f = write(tmp_path, """\
        all:
          vars:
            ansible_become: true
          children:
            gpu:
              hosts:
                0755:
                  <<: &common {ansible_user: ops, migplan_gpus: {model: A100-SXM4-40GB, count: 2}, ansible_port: 22}
                  ansible_host: 10.0.0.1
                on:
                  <<: *common
                  ansible_host: 10.0.0.2
                  ansible_port: 2222
                  ansible_user: 007
        """)
    inv = load_inventory(f, CAT)
    a, b = inv.host("0755"), inv.host("on")
    assert a is not None and b is not None
    assert (a.user, a.port, a.address, len(a.gpus), a.become) == ("ops", 22, "10.0.0.1", 2, ("sudo", "-n"))
    assert (b.user, b.port, b.address, len(b.gpus)) == ("007", 2222, "10.0.0.2", 2)


def test_ansible_vault_value_is_refused_with_a_hint(tmp_path: Path) -> None:
    f = write(tmp_path, """\
        all:
          hosts:
            h1:
              ansible_become_password: !vault |
                $ANSIBLE_VAULT;1.1;AES256
                6162636465
        """)
    e = refused(inventory, f, 4, "all.hosts.h1.ansible_become_password", "Ansible Vault")
    assert e.hint is not None and "group_vars" in e.hint


def test_ansible_bomb_and_nesting(tmp_path: Path) -> None:
    bomb = "x: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i > 1 else '*a'] * 10)}]\n" for i in range(1, 9))
    f = write(tmp_path, "all:\n  vars:\n" + textwrap.indent(bomb, "    ") + "  hosts:\n    h1:\n")
    with within(10), pytest.raises(InputError, match="aliases expand to more than"):
        load_inventory(f, CAT)
    f = write(tmp_path, "all:\n  vars:\n    x: " + "[" * 5000 + "]" * 5000 + "\n")
    with within(10), pytest.raises(InputError, match="nested more than 100 levels"):
        load_inventory(f, CAT)


# --- 8. key files ---------------------------------------------------------------------------------

def test_key_file_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path, NATIVE.replace("address: 10.0.0.1", f"address: 10.0.0.1\n    key_file: {tmp_path}"))
    refused(inventory, f, 5, "hosts.h1.key_file", "is a directory")
    f = write(tmp_path, "all:\n  vars:\n    ansible_ssh_private_key_file: /tmp\n  hosts:\n    h1:\n"
                        "      migplan_discover: true\n")
    refused(inventory, f, 3, "all.vars.ansible_ssh_private_key_file", "is a directory")
    f = write(tmp_path, NATIVE.replace("address: 10.0.0.1", "address: 10.0.0.1\n    key_file: ''"))
    refused(inventory, f, 5, "hosts.h1.key_file", "is not a key file path")


def test_key_file_with_tilde_is_expanded_before_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "fleet").mkdir(parents=True)
    f = write(tmp_path, NATIVE.replace("address: 10.0.0.1", "address: 10.0.0.1\n    key_file: ~/.ssh/fleet"))
    refused(inventory, f, 5, "hosts.h1.key_file", "is a directory")


def test_key_file_missing_or_regular_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key\n")
    for path, expected in ((str(key), str(key)), ("~/.ssh/not-yet", "~/.ssh/not-yet")):
        f = write(tmp_path, NATIVE.replace("address: 10.0.0.1", f"address: 10.0.0.1\n    key_file: {path}"))
        assert load_inventory(f, CAT).hosts[0].key_file == expected


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_inventory_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    with within(5), pytest.raises(InputError, match="FIFO"):
        load_inventory(fifo, CAT)


# --- profiles --------------------------------------------------------------------------------------

PROFILE = """\
version: 1
workloads:
  - name: chat
    observed:
      host: h1
      gpu: 0
      gpu_model: A100-SXM4-40GB
      mig_profile: 3g.20gb
      mig_start: 4
      window: {start: 2026-11-01T00:00:00Z, end: 2026-11-08T00:00:00Z}
      samples: 10080
    memory_mib: {p50: 14000, p95: 15000, p99: 15400, max: 15900}
    compute: {p50: 0.08, p95: 0.21, max: 0.35}
    priority: 10
    pin: {host: h1, gpu: 0}
    replicas: 2
"""


@pytest.mark.parametrize(("old", "new", "line", "key", "match"), [
    ("p50: 0.08", "p50: .nan", 13, "workloads[0].compute.p50", "must be a finite number"),
    ("max: 0.35", "max: .inf", 13, "workloads[0].compute.max", "must be a finite number"),
    ("p95: 0.21", "p95: -.inf", 13, "workloads[0].compute.p95", "must be a finite number"),
    ("max: 15900", "max: 1.0e+309", 12, "workloads[0].memory_mib.max", "expected an integer"),
    ("max: 15900", "max: 99999999999999", 12, "workloads[0].memory_mib.max", "must be at most 1048576"),
    ("p50: 14000", "p50: 2026-02-30", 12, "workloads[0].memory_mib.p50", "not a valid date"),
    ("priority: 10", "priority: 100000000000", 14, "workloads[0].priority", f"must be at most {MAX_PRIORITY}"),
    ("replicas: 2", "replicas: 100000000", 16, "workloads[0].replicas", f"must be at most {MAX_REPLICAS}"),
    ("      gpu: 0\n", "      gpu: 100000000000000000000\n", 6, "workloads[0].observed.gpu", "out of range 0..63"),
    ("pin: {host: h1, gpu: 0}", "pin: {host: h1, gpu: 64}", 15, "workloads[0].pin.gpu", "out of range 0..63"),
    ("pin: {host: h1, gpu: 0}", 'pin: {host: "h1\\n"}', 15, "workloads[0].pin.host", "is not a host name"),
    ("mig_start: 4", "mig_start: 99", 9, "workloads[0].observed.mig_start", "must be at most 15"),
    ("samples: 10080", "samples: 1e400", 11, "workloads[0].observed.samples", "expected an integer"),
    ("  - name: chat", '  - name: "chat\\n"', 3, "workloads[0].name", "workload name"),
    ("mig_profile: 3g.20gb", 'mig_profile: "3g.20gb\\n"', 8, "workloads[0].observed.mig_profile",
     "is not a MIG profile name"),
    ("mig_profile: 3g.20gb", "mig_profile: ３g.２０gb", 8, "workloads[0].observed.mig_profile", "not a MIG profile"),
    ("end: 2026-11-08T00:00:00Z", "end: 2026-10-31 23:00:00", 10, "workloads[0].observed.window.end",
     "ends before it starts"),
    ("end: 2026-11-08T00:00:00Z", "end: '2026-11-08T00:00:00+99:00'", 10, "workloads[0].observed.window.end",
     "not an ISO 8601 time"),
    ("start: 2026-11-01T00:00:00Z", "start: 9999-12-31T23:59:59-23:00", 10, "workloads[0].observed.window.start",
     "out of the range of times"),
    ("start: 2026-11-01T00:00:00Z", "start: !!python/object:datetime.datetime x", 10,
     "workloads[0].observed.window.start", "not supported"),
])
def test_bad_profiles(tmp_path: Path, old: str, new: str, line: int, key: str, match: str) -> None:
    assert old in PROFILE
    refused(load_profiles, write(tmp_path, PROFILE.replace(old, new, 1)), line, key, match)


@pytest.mark.parametrize(("start", "end"), [
    ("2026-11-01 00:00:00", "2026-11-08T00:00:00Z"),  # naive and aware in one window: no crash
    ("'2026-11-01T00:00:00'", "2026-11-08T00:00:00+01:00"),  # naive string and aware timestamp
    ("2026-11-01", "'2026-11-08T00:00:00Z'"),  # a date: midnight UTC
])
def test_naive_and_aware_times_compare_as_utc(tmp_path: Path, start: str, end: str) -> None:
    text = PROFILE.replace("start: 2026-11-01T00:00:00Z", f"start: {start}").replace(
        "end: 2026-11-08T00:00:00Z", f"end: {end}")
    (w,) = load_profiles(write(tmp_path, text))
    assert w.observed.window_start is not None and w.observed.window_end is not None


def test_workload_names_are_read_as_written(tmp_path: Path) -> None:
    text = PROFILE + """\
  - name: 007
    memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}
    compute: {p50: 0, p95: 0, max: 0}
  - name: 0x1F
    memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}
    compute: {p50: 0, p95: 0, max: 0}
"""
    assert [w.name for w in load_profiles(write(tmp_path, text))] == ["chat", "007", "0x1F"]


# --- 7. catalog overrides -------------------------------------------------------------------------

OVERRIDE = """\
version: 1
models:
  - id: RTX-PRO-6000
    architecture: blackwell
    memory_slices: 4
    compute_slices: 4
    profiles:
      - {name: 1g.24gb, id: 14, compute_slices: 1, memory_slices: 1, memory_mib: 24064, max_count: 4,
         starts: [0, 1, 2, 3]}
      - {name: 2g.48gb, id: 5,  compute_slices: 2, memory_slices: 2, memory_mib: 48384, max_count: 2, starts: [0, 2]}
      - {name: 4g.96gb, id: 0,  compute_slices: 4, memory_slices: 4, memory_mib: 96896, max_count: 1, starts: [0]}
"""


def catalog(f: Path) -> object:
    return load_catalog([f])


def test_override_loads(tmp_path: Path) -> None:
    cat = load_catalog([write(tmp_path, OVERRIDE)])
    assert len(enumerate_layouts(cat.get("RTX-PRO-6000"))) > 1


def _many_slices(n: int) -> str:
    return OVERRIDE.replace("memory_slices: 4\n    compute_slices: 4", f"memory_slices: {n}\n    compute_slices: {n}")


@pytest.mark.parametrize(("text", "line", "key", "match"), [
    (_many_slices(40), 5, "models[0].memory_slices", "40 slices is more than the 16 migplan accepts"),
    (_many_slices(3000), 5, "models[0].memory_slices", "3000 slices is more than the 16"),
    (OVERRIDE.replace("compute_slices: 4\n", "compute_slices: 17\n", 1), 6, "models[0].compute_slices",
     "more than the 16"),
    (OVERRIDE.replace("id: 14,", "id: 256,"), 8, "models[0].profiles[0].id", "must be at most 255"),
    (OVERRIDE.replace("memory_mib: 24064", "memory_mib: 99999999999"), 8, "models[0].profiles[0].memory_mib",
     "must be at most 1048576"),
    (OVERRIDE.replace("max_count: 4,", "max_count: 1000,"), 8, "models[0].profiles[0].max_count",
     "must be at most 16"),
    (OVERRIDE.replace("starts: [0, 1, 2, 3]", "starts: [0, 100000000000000000000]"), 9,
     "models[0].profiles[0].starts[1]", "must be at most 3"),
    (OVERRIDE.replace("memory_mib: 24064", "memory_mib: .nan"), 8, "models[0].profiles[0].memory_mib",
     "expected an integer"),
    (OVERRIDE.replace("  - id: RTX-PRO-6000", '  - id: ""'), 3, "models[0].id", "must not be empty"),
    (OVERRIDE.replace("name: 2g.48gb", "name: 2g.٤٨gb"), 10, "models[0].profiles[1].name", "ASCII"),
])
def test_bad_overrides(tmp_path: Path, text: str, line: int, key: str, match: str) -> None:
    refused(catalog, write(tmp_path, text), line, key, match)


def test_too_many_profiles(tmp_path: Path) -> None:
    extra = "".join(f"      - {{name: 1g.{i}gb, id: {100 + i}, compute_slices: 1, memory_slices: 1, memory_mib: 1000, "
                    f"max_count: 1, starts: [0]}}\n" for i in range(40))
    refused(catalog, write(tmp_path, OVERRIDE + extra), 8, "models[0].profiles", "43 profiles")
    refused(catalog, write(tmp_path, OVERRIDE + extra[: extra.index("      - {name: 1g.30gb")]), 8,
            "models[0].profiles", "33 profiles is more than the 32")


def test_layout_explosion_is_refused_at_load_time(tmp_path: Path) -> None:
    """16 slices and 31 interchangeable one-slice profiles: astronomically many layouts."""
    profiles = "".join(f"      - {{name: 1g.{i}gb, id: {i}, compute_slices: 1, memory_slices: 1, memory_mib: 1000, "
                       f"max_count: 16, starts: [{', '.join(map(str, range(16)))}]}}\n" for i in range(1, 32))
    profiles += ("      - {name: 16g.99gb, id: 99, compute_slices: 16, memory_slices: 16, memory_mib: 99000, "
                 "max_count: 1, starts: [0]}\n")
    text = "version: 1\nmodels:\n  - id: X\n    architecture: hopper\n    memory_slices: 16\n" \
           "    compute_slices: 16\n    profiles:\n" + profiles
    refused(catalog, write(tmp_path, text), 8, "models[0].profiles", "layouts; no MIG GPU has that many")


def _model(slices: int, max_count: int) -> GpuModel:
    one = GiProfile("1g.1gb", 1, 1, 1, 1000, max_count, 1, tuple(range(slices)))
    full = GiProfile(f"{slices}g.big", 0, slices, slices, 1000 * slices, 1, slices, (0,))
    return GpuModel("BIG", "hopper", slices, slices, (one, full))


@pytest.mark.slow
@pytest.mark.parametrize(("slices", "maximal"), [(40, False), (40, True), (3000, False), (3000, True)])
def test_enumeration_is_iterative_and_bounded(slices: int, maximal: bool) -> None:
    """Models built in code (not through the loader's bounds) neither recurse nor hang."""
    with within(20), pytest.raises(CatalogError, match="no MIG GPU has that many"):
        enumerate_layouts(_model(slices, slices), maximal=maximal)


def test_enumeration_of_a_wide_narrow_model_works() -> None:
    # 500 slices, one-slice instances at most once: few layouts, many candidates
    m = _model(500, 1)
    layouts = enumerate_layouts(m)
    assert len(layouts) == 1 + 500 + 1  # empty, each single 1g instance, and the full profile
    assert len(free_placements(m, Layout())) == 501


def test_shipped_models_enumerate_as_before() -> None:
    a100 = CAT.get("A100-SXM4-40GB")
    assert len(enumerate_layouts(a100)) == 723 and len(enumerate_layouts(a100, maximal=True)) == 78


# --- 9. config ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("planner", "line", "key", "match"), [
    ("allow_disrupt: 'false'", 3, "planner.allow_disrupt", "expected true or false, got the string 'false'"),
    ("allow_disrupt: 0", 3, "planner.allow_disrupt", "expected true or false"),
    ("gap: 5", 3, "planner.gap", "must be at most 0.99"),
    ("gap: .nan", 3, "planner.gap", "must be a finite number"),
    ("gap: -0.1", 3, "planner.gap", "must be at least 0"),
    ("weights: {gpu: -1}", 3, "planner.weights.gpu", "must be at least 0"),
    ("weights: {gpu: .nan}", 3, "planner.weights.gpu", "must be a finite number"),
    ("weights: {gpu: 1.0e+300}", 3, "planner.weights.gpu", "must be at most 1e+09"),
    ("weights: {gpu: 1e300}", 3, "planner.weights.gpu", "must be at most 1e+09"),
    ("weights: {gpus: 1}", 3, "planner.weights.gpus", "unknown key 'gpus'"),
    ("weights: [1, 2]", 3, "planner.weights", "expected a mapping"),
    ("keep_free: 1.5", 3, "planner.keep_free", "expected an integer"),
    ("keep_free: -1", 3, "planner.keep_free", "must be at least 0"),
    ("headroom: 11", 3, "planner.headroom", "must be at most 10"),
    ("headroom_min_mib: 1.0e+309", 3, "planner.headroom_min_mib", "expected an integer"),
    ("headroom_min_mib: 2000000", 3, "planner.headroom_min_mib", "must be at most 1048576"),
    ("time_limit: abc", 3, "planner.time_limit", "expected a number"),
    ("time_limit: 0", 3, "planner.time_limit", "must be at least 0.1"),
    ("time_limit: 1.0e+9", 3, "planner.time_limit", "must be at most 86400"),
    ("solver: glpk", 3, "planner.solver", "expected one of: cbc, highs"),
    ("memory_percentile: p90", 3, "planner.memory_percentile", "one of: p50, p95, p99, max"),
    ("compute_percentile: true", 3, "planner.compute_percentile", "one of: p50, p95, p99, max"),
    ("anti_affinity_scope: rack", 3, "planner.anti_affinity_scope", "one of: gpu, host"),
    ("alow_disrupt: true", 3, "planner.alow_disrupt", "unknown planner setting 'alow_disrupt'"),
])
def test_bad_planner_settings(tmp_path: Path, planner: str, line: int, key: str, match: str) -> None:
    f = write(tmp_path, f"version: 1\nplanner:\n  {planner}\n", "config.yaml")
    refused(lambda p: load_config(str(p)), f, line, key, match)


def test_planner_section_must_be_a_mapping(tmp_path: Path) -> None:
    f = write(tmp_path, "version: 1\nplanner: [gap]\n", "config.yaml")
    refused(lambda p: load_config(str(p)), f, 2, "planner", "expected a mapping of planner settings")


def test_good_planner_settings_are_typed(tmp_path: Path) -> None:
    f = write(tmp_path, """\
        version: 1
        planner:
          allow_disrupt: false
          gap: 0
          time_limit: 30
          keep_free: 2
          headroom: 0.2
          headroom_min_mib: 1024
          memory_percentile: max
          anti_affinity_scope: host
          solver: highs
          weights: {gpu: 50, waste: 0}
        """, "config.yaml")
    cfg = load_config(str(f))
    assert cfg.planner == {"allow_disrupt": False, "gap": 0.0, "time_limit": 30.0, "keep_free": 2, "headroom": 0.2,
                           "headroom_min_mib": 1024, "memory_percentile": "max", "anti_affinity_scope": "host",
                           "solver": "highs", "weights": {"gpu": 50.0, "waste": 0.0}}
    from migplan.planner.demand import policy_from_mapping

    policy = policy_from_mapping(dict(cfg.planner), source=str(f))
    assert not policy.allow_disrupt and policy.keep_free == 2 and policy.weights.gpu == 50.0


def test_planner_schema_agrees_with_the_planner_and_the_cli() -> None:
    from migplan.adapters.solver import SOLVERS
    from migplan.planner.demand import COMPUTE_PERCENTILES, MEMORY_PERCENTILES, Policy, Weights

    assert tuple(f.name for f in dataclasses.fields(Weights)) == WEIGHT_KEYS
    assert PLANNER_SETTINGS["memory_percentile"].choices == MEMORY_PERCENTILES
    assert PLANNER_SETTINGS["compute_percentile"].choices == COMPUTE_PERCENTILES
    assert PLANNER_SETTINGS["solver"].choices == SOLVERS
    policy_keys = {f.name for f in dataclasses.fields(Policy)}
    assert policy_keys | {"solver", "time_limit", "gap"} == set(PLANNER_SETTINGS)
    for name, setting in PLANNER_SETTINGS.items():
        assert setting.help and setting.describe(), name
        assert setting.kind in ("bool", "int", "number", "choice", "weights", "spare")
    assert (PLANNER_SETTINGS["time_limit"].minimum, PLANNER_SETTINGS["time_limit"].maximum) == (0.1, 86400.0)
    assert (PLANNER_SETTINGS["gap"].minimum, PLANNER_SETTINGS["gap"].maximum) == (0.0, 0.99)


@pytest.mark.parametrize(("text", "line", "key", "match"), [
    ("version: 1\ninventory: ''\n", 2, "inventory", "is not a file path"),
    ("version: 1\ncatalog: [a.yaml, 5, '']\n", 2, "catalog[2]", "is not a file path"),
    ("version: 1\noutput: yes\n", 2, "output", "expected a string"),
    ("version: 1\nplanner: &p {gap: 0.1}\nextra: *p\n", 3, "extra", "unknown key 'extra'"),
])
def test_bad_config_paths_and_keys(tmp_path: Path, text: str, line: int, key: str, match: str) -> None:
    f = write(tmp_path, text, "config.yaml")
    refused(lambda p: load_config(str(p)), f, line, key, match)


def test_config_that_is_a_device_is_refused() -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with within(5), pytest.raises(InputError, match="not a regular file"):
        load_config("/dev/zero")


def test_catalog_names_with_terminal_escapes_are_refused(tmp_path: Path) -> None:
    """`catalog list` prints model ids as they are: an escape sequence in an override is an input error."""
    f = tmp_path / "cat.yaml"
    f.write_text(OVERRIDE.replace("id: RTX-PRO-6000", 'id: "RTX\\e[2J\\e]0;pwned\\a"'))
    with pytest.raises(InputError, match="control characters") as err:
        load_catalog([str(f)])
    assert str(f) in str(err.value) and "models[0].id" in str(err.value)
