"""Fuzzing every input format migplan reads: loading either succeeds or raises InputError naming the
file and line (never another exception, never a hang), and the CLI turns that into exit code 2
and an `error:` line without a traceback.

Documents are random mutations of a valid one (tokens replaced by hostile values, snippets
inserted, lines deleted, duplicated or re-indented) and well-formed random trees of each format's
own keys with hostile values. Bounded: a fixed number of examples, derandomized (the same inputs
on every run) and a deadline per example, so the file runs in a few seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migplan.catalog import builtin_catalog, load_catalog
from migplan.config import load_config
from migplan.errors import InputError
from migplan.inventory import load_inventory
from migplan.profiles import load_profiles

ROOT = Path(__file__).resolve().parent.parent
CAT = builtin_catalog()
WORK = Path(tempfile.mkdtemp(prefix="migplan-fuzz-"))
# MIGPLAN_FUZZ_EXAMPLES=5000 runs a long, randomized search (not derandomized) for a deeper look.
_DEEP = int(os.environ.get("MIGPLAN_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_DEEP or 60, deadline=timedelta(seconds=10), derandomize=not _DEEP, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

NATIVE = (ROOT / "inventory" / "example.yaml").read_text()
ANSIBLE = (ROOT / "inventory" / "ansible-example.yaml").read_text() + """\
    merged:
      hosts:
        gpu-b-[a:c]:
          <<: &common {ansible_user: ops, ansible_port: 22}
          migplan_gpus: {model: H100-SXM5-80GB, count: 2}
        gpu-c-[01:02]:
          <<: *common
          migplan_discover: true
          migplan_reserved_gpus: [0]
"""
PROFILES = next((ROOT / "profiles" / "example").glob("*.yaml")).read_text()
CONFIG = """\
version: 1
inventory: inventory.yaml
profiles: profiles/
catalog: [extra.yaml]
output: table
planner:
  solver: cbc
  time_limit: 30
  gap: 0.001
  allow_disrupt: false
  keep_free: 1
  memory_percentile: p99
  compute_percentile: p95
  headroom: 0.1
  headroom_min_mib: 512
  anti_affinity_scope: gpu
  weights: {unplaced: 10000, disrupt: 1000, gpu: 100, change: 5, fragment: 1, waste: 0.5}
"""
CATALOG = """\
version: 1
models:
  - id: RTX-PRO-6000
    architecture: blackwell
    memory_slices: 4
    compute_slices: 4
    smi_names: ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    pci_device_ids: ["0x2bb5"]
    profiles:
      - {name: 1g.24gb, id: 14, compute_slices: 1, memory_slices: 1, memory_mib: 24064, max_count: 4,
         starts: [0, 1, 2, 3]}
      - {name: 2g.48gb, id: 5, compute_slices: 2, memory_slices: 2, memory_mib: 48384, max_count: 2, starts: [0, 2]}
      - {name: 4g.96gb, id: 0, compute_slices: 4, memory_slices: 4, memory_mib: 96896, max_count: 1, starts: [0]}
"""

HOSTILE = [
    ".nan", ".inf", "-.inf", "1.0e+309", "-1", "0", "64", "100000000", "100000000000000000000", "9" * 80,
    "0x1F", "0755", "007", "1_000", "1:30", "yes", "off", "~", "null", "''", '"a\\nb"', '"x\\0y"', "2026-02-30",
    "2026-11-01 10:00:00", "!vault |\n  abc", "!!python/name:os.system", "!!binary aGk=", "!!set {a}",
    "!!int abc", "!!timestamp x", "!custom v", "&a x", "*a", "*undefined", "<<", "[", "]", "{", "}", "[[[[[[[[",
    "{a: {b: {c: [1, [2]]}}}", "[1, 2, 3]", "{}", "[]", "'", '"', "|", ">", "#", "@", "`", "%", "?", "- x",
    "gpu[01:10:0]", "gpu[0:99999999]", "gpu[10:01]", "gpu[a:9]", "3g.20gb@²", "1g.5gb@٣", "1g.5gb@99999",
    "/tmp", "/dev/zero", "~/.ssh/nope", "A100-FANTASY", "٣", "２", "é", "\u2028", "\ufeff", "x" * 300,
]
INSERTS = [
    "\n", "\n  ", "\n    - ", ": ", "- ", "\t", "<<: *a\n", "  <<: {x: 1}\n", "&a ", "*a ", "? ", "!!str ",
    "---\n", "...\n", "%YAML 1.1\n", "\nzz: " + "[" * 200, "\na: &a [1,1,1,1,1,1,1,1,1,1]\nb: [*a,*a,*a,*a]\n",
    "\u0007", "\r", "\x85",
]
TOKEN = re.compile(r"[A-Za-z0-9_.:@/~+-]+")


@st.composite
def mutated(draw: st.DrawFn, base: str) -> str:
    """`base` with one to four random edits."""
    text = base
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["token", "token", "insert", "delete", "line", "indent"]))
        if kind == "token":
            tokens = list(TOKEN.finditer(text))
            if tokens:
                m = tokens[draw(st.integers(0, len(tokens) - 1))]
                text = text[: m.start()] + draw(st.sampled_from(HOSTILE)) + text[m.end():]
        elif kind == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(INSERTS) | st.text(max_size=8)) + text[at:]
        elif kind == "delete":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        else:
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            if kind == "line":
                lines.insert(i, lines[i]) if draw(st.booleans()) else lines.pop(i)
            else:
                lines[i] = " " * draw(st.integers(0, 6)) + lines[i].lstrip()
            text = "\n".join(lines)
    return text


HOSTILE_SCALARS = st.sampled_from([
    float("nan"), float("inf"), -1, 0, 1, 63, 64, 10**20, 1.5, True, False, None, "", "x", "0755", "gpu01",
    "gpu01\n", "A100-SXM4-40GB", "3g.20gb", "3g.20gb@0", "1g.5gb@²", "sudo -n", "p99", "host", "cbc", "/tmp",
    "2026-11-01T00:00:00Z", "2026-11-01T00:00:00", "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f", "gpu[0:3]",
]) | st.integers() | st.floats() | st.text(max_size=12)


def tree(keys: list[str]) -> st.SearchStrategy[object]:
    """Well-formed YAML values built from a format's own keys, with hostile leaves."""
    return st.recursive(
        HOSTILE_SCALARS,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(keys), children, max_size=5),
        max_leaves=25,
    )


INVENTORY_KEYS = ["version", "vars", "groups", "hosts", "h1", "h2", "address", "port", "user", "key_file", "become",
                  "labels", "gpus", "discover", "reserved_gpus", "excluded_gpus", "hooks", "pre_apply", "index",
                  "model", "uuid", "mig", "layout", "count", "all", "children", "ansible_host", "ansible_port",
                  "ansible_user", "ansible_become", "ansible_become_user", "migplan_gpus", "migplan_discover",
                  "gpu[01:02]", "<<"]
PROFILE_KEYS = ["version", "workloads", "name", "observed", "host", "gpu", "gpu_model", "mig_profile", "mig_start",
                "window", "start", "end", "samples", "memory_mib", "p50", "p95", "p99", "max", "compute", "priority",
                "pin", "anti_affinity", "min_profile", "replicas"]
CONFIG_KEYS = ["version", "inventory", "profiles", "catalog", "output", "snapshot", "planner", "solver", "time_limit",
               "gap", "allow_disrupt", "keep_free", "memory_percentile", "headroom", "weights", "gpu", "waste"]
CATALOG_KEYS = ["version", "models", "id", "architecture", "memory_slices", "compute_slices", "profiles", "name",
                "memory_mib", "max_count", "starts", "sm_count", "engines", "ce", "aliases", "smi_names"]


def _write(text: str, name: str) -> Path:
    f = WORK / name
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    return f


def check(load: Callable[[Path], object], text: str, name: str) -> None:
    """Load `text` from a file: success, or an InputError that names the file (and, from a line, where)."""
    try:
        f = _write(text, name)
    except UnicodeEncodeError:
        return  # lone surrogates cannot be written as UTF-8 text
    try:
        load(f)
    except InputError as err:
        assert err.source is not None and str(f) in err.source, repr(err)
        assert err.line is not None or "file is empty" in str(err) or "MIGPLAN_MAX_FILE_MB" in str(err), repr(err)
        if err.line is not None:
            assert str(err).startswith(f"{f}:{err.line}:"), repr(err)


def _inventory(f: Path) -> object:
    return load_inventory(f, CAT)


def _config(f: Path) -> object:
    return load_config(str(f))


def _catalog(f: Path) -> object:
    return load_catalog([f])


@pytest.mark.slow
@FUZZ
@given(mutated(NATIVE))
def test_fuzz_native_inventory(text: str) -> None:
    check(_inventory, text, "native.yaml")


@FUZZ
@given(mutated(ANSIBLE))
def test_fuzz_ansible_inventory(text: str) -> None:
    check(_inventory, text, "ansible.yaml")


@FUZZ
@given(mutated(PROFILES))
def test_fuzz_profiles(text: str) -> None:
    check(load_profiles, text, "profiles.yaml")


@FUZZ
@given(mutated(CONFIG))
def test_fuzz_config(text: str) -> None:
    check(_config, text, "config.yaml")


@FUZZ
@given(mutated(CATALOG))
def test_fuzz_catalog_override(text: str) -> None:
    check(_catalog, text, "catalog.yaml")


def _dump(doc: object) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, default_flow_style=None)


@FUZZ
@given(tree(INVENTORY_KEYS), st.booleans())
def test_fuzz_inventory_trees(doc: object, native: bool) -> None:
    if native and isinstance(doc, dict):
        doc = {"version": 1, **doc}
    check(_inventory, _dump(doc), "tree-inventory.yaml")


@FUZZ
@given(tree(PROFILE_KEYS))
def test_fuzz_profile_trees(doc: object) -> None:
    check(load_profiles, _dump({"version": 1, "workloads": [doc]}), "tree-profiles.yaml")


@FUZZ
@given(tree(CONFIG_KEYS))
def test_fuzz_config_trees(doc: object) -> None:
    check(_config, _dump(doc), "tree-config.yaml")


@FUZZ
@given(tree(CATALOG_KEYS))
def test_fuzz_catalog_trees(doc: object) -> None:
    check(_catalog, _dump({"version": 1, "models": [doc]}), "tree-catalog.yaml")


# --- through the CLI ------------------------------------------------------------------------------

BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
CLI_CASES = {
    "alias-bomb": "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + BOMB,
    "stride-0": "all:\n  hosts:\n    gpu[01:10:0]:\n",
    "bad-date": "all:\n  vars:\n    built: 2026-02-30\n  hosts:\n    h1:\n",
    "python-tag": "version: 1\nhosts:\n  h1: !!python/object/apply:os.system [echo pwned]\n",
    "deep": "version: 1\nhosts: " + "[" * 5000 + "\n",
    "huge-count": "version: 1\nhosts:\n  h1: {gpus: {model: A100-SXM4-40GB, count: 100000000}}\n",
    "huge-index": "version: 1\nhosts:\n  h1: {gpus: [{index: 100000000000000000000, model: A100-SXM4-40GB}]}\n",
    "key-dir": "version: 1\nhosts:\n  h1: {key_file: /, discover: true}\n",
}


def _cli(path: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env.pop("MIGPLAN_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "migplan.cli.app", "inventory", "check", "-i", path],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_cli_reports_hostile_inventories_cleanly(case: str, tmp_path: Path) -> None:
    f = tmp_path / f"{case}.yaml"
    f.write_text(CLI_CASES[case])
    proc = _cli(str(f), tmp_path)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert re.match(rf"error: {re.escape(str(f))}:\d+: ", first), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("path", ["/dev/zero", "FIFO"])
def test_cli_refuses_devices_and_fifos_at_once(path: str, tmp_path: Path) -> None:
    if path == "FIFO":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        path = str(tmp_path / "pipe.yaml")
        os.mkfifo(path)
    elif not os.path.exists(path):
        pytest.skip(f"no {path}")
    proc = _cli(path, tmp_path)  # a hang fails with TimeoutExpired after 60 s
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {path}: is a "), proc.stderr
    assert "Traceback" not in proc.stderr


# --- the documents migplan writes and reads back: plan and snapshot -------------------------------

def _plan_text() -> str:
    from planner_fixtures import fleet, gpu, profiles, run, wl

    from migplan.documents import dump
    from migplan.planner import plan_to_dict

    st_ = fleet(gpu("h", 0, layout=["3g.20gb@0"], busy=()), gpu("h", 1), gpu("h", 2, reserved=True))
    ps = profiles(wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 9000),
                  wl("d", 4000, anti_affinity="x"), wl("e", 4000, anti_affinity="x"))
    return dump(plan_to_dict(run(st_, ps)), "yaml")


def _snapshot_text() -> str:
    from migplan.catalog.layout import Instance
    from migplan.documents import dump
    from migplan.fleet.snapshot import (
        ComputeInstance,
        DiscoveredGpu,
        DiscoveredHost,
        DiscoveredInstance,
        GpuProcess,
        HostFailure,
        Snapshot,
        snapshot_to_dict,
    )

    inst = DiscoveredInstance(Instance(0, "3g.20gb"), 1, (ComputeInstance(0, "3g.20gb"),),
                              (GpuProcess(42, "python", 1024),))
    gpus = (DiscoveredGpu(0, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f",
                          "00000000:07:00.0", 40960, True, True, True, (inst,)),
            DiscoveredGpu(1, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", mig_current=False))
    snap = Snapshot((DiscoveredHost("gpu01", "192.0.2.11", gpus, notes=("GPU 1: note",)),
                     DiscoveredHost("gpu02", "192.0.2.12", error=HostFailure("unreachable", "down", "check"))),
                    taken_at="2026-12-01T08:00:00Z")
    return dump(snapshot_to_dict(snap), "yaml")


PLAN = _plan_text()
SNAPSHOT = _snapshot_text()


def _plan(f: Path) -> object:
    from migplan.documents import load_plan

    return load_plan(f, CAT)


def _snapshot(f: Path) -> object:
    from migplan.documents import load_snapshot

    return load_snapshot(f, CAT)


def test_plan_and_snapshot_seeds_are_valid() -> None:
    """The fuzz seeds load as they are (so mutations start from a real document)."""
    _plan(_write(PLAN, "seed-plan.yaml"))
    _snapshot(_write(SNAPSHOT, "seed-snapshot.yaml"))


@FUZZ
@given(mutated(PLAN))
def test_fuzz_plan(text: str) -> None:
    check(_plan, text, "plan.yaml")


@FUZZ
@given(mutated(SNAPSHOT))
def test_fuzz_snapshot(text: str) -> None:
    check(_snapshot, text, "snapshot.yaml")
