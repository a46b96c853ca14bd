"""Workload profile documents: schema, versions and validation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from migplan.errors import InputError
from migplan.profiles import load_profiles

ROOT = Path(__file__).resolve().parent.parent

DOC = """\
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
    pin: {host: h1}
    anti_affinity: chat
    min_profile: 2g.10gb
    replicas: 2
  - name: embed
    memory_mib: {p50: 1000, p95: 1100, p99: 1200, max: 1300}
    compute: {p50: 0.01, p95: 0.02, max: 0.03}
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(text))
    return f


def test_example_profiles_load() -> None:
    ps = load_profiles(ROOT / "profiles" / "example")
    assert len(ps) == 40
    names = [w.name for w in ps]
    assert len(set(names)) == 40
    assert any(w.replicas == 2 for w in ps) and any(w.pin for w in ps) and any(w.min_profile for w in ps)


def test_fields(tmp_path: Path) -> None:
    chat, embed = load_profiles(write(tmp_path, DOC))
    assert chat.observed.mig_profile == "3g.20gb" and chat.observed.mig_start == 4
    assert chat.observed.window_start == "2026-11-01T00:00:00Z"
    assert chat.memory.percentile("p99") == 15400 and chat.compute.percentile("p95") == 0.21
    assert (chat.priority, chat.pin.host, chat.replicas, chat.min_profile) == (10, "h1", 2, "2g.10gb")  # type: ignore[union-attr]
    assert embed.priority == 1 and embed.observed.host is None and embed.replicas == 1
    assert chat.movable and embed.movable  # movable unless the profile says otherwise


def test_movable_and_whole(tmp_path: Path) -> None:
    doc = DOC.replace("min_profile: 2g.10gb", "min_profile: whole\n    movable: false")
    chat, embed = load_profiles(write(tmp_path, doc))
    assert chat.min_profile == "whole" and not chat.movable and embed.movable


@pytest.mark.parametrize(("old", "new", "key", "message"), [
    ("p50: 14000", "p50: -5", "workloads[0].memory_mib.p50", "must be at least 0"),
    ("p99: 15400", "p99: 14900", "workloads[0].memory_mib.p99", "below p95"),
    ("p95: 0.21", "p95: 1.5", "workloads[0].compute.p95", "must be at most 1"),
    ("replicas: 2", "replicas: 0", "workloads[0].replicas", "must be at least 1"),
    ("priority: 10", "priority: high", "workloads[0].priority", "expected an integer"),
    ("min_profile: 2g.10gb", "min_profile: big", "workloads[0].min_profile", "not a MIG profile name"),
    ("anti_affinity: chat", "anti_afinity: chat", "workloads[0].anti_afinity", "unknown key"),
    ("min_profile: 2g.10gb", "min_profile: 2g.10gb\n    movable: maybe", "workloads[0].movable", "expected"),
    ("min_profile: 2g.10gb", "min_profile: Whole", "workloads[0].min_profile", "'whole' for a whole"),
    ("end: 2026-11-08T00:00:00Z", "end: 2026-10-08T00:00:00Z", "workloads[0].observed.window.end",
     "ends before it starts"),
    ("version: 1", "version: 2", "version", "unsupported workload profile version 2"),
    ("  - name: embed\n", "  - name: chat\n", None, "defined twice"),
])
def test_bad_profiles(tmp_path: Path, old: str, new: str, key: str | None, message: str) -> None:
    assert old in DOC
    f = write(tmp_path, DOC.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_profiles(f)
    assert message in str(err.value) and str(f) in str(err.value)
    if key:
        assert err.value.key == key
    assert err.value.line is not None


def test_duplicate_across_files(tmp_path: Path) -> None:
    write(tmp_path, DOC, "a.yaml")
    write(tmp_path, DOC.replace("name: chat", "name: other"), "b.yaml")
    with pytest.raises(InputError, match=r"workload 'embed' is defined twice \(first at .*a.yaml:19\)") as err:
        load_profiles(tmp_path)
    assert err.value.source == str(tmp_path / "b.yaml")


def test_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no .yaml profile files"):
        load_profiles(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        load_profiles(tmp_path / "nope")
    write(tmp_path, "")
    with pytest.raises(InputError, match="file is empty"):
        load_profiles(tmp_path / "p.yaml")


def test_unknown_measured_model(tmp_path: Path) -> None:
    from migplan.catalog import builtin_catalog
    from migplan.profiles import check_models

    f = write(tmp_path, DOC.replace("gpu_model: A100-SXM4-40GB", "gpu_model: A100-SXM4-40G"))
    ps = load_profiles(f)
    with pytest.raises(InputError, match="unknown GPU model 'A100-SXM4-40G'") as err:
        check_models(ps, builtin_catalog())
    assert err.value.source == str(f) and err.value.line == 3 and "observed.gpu_model" in str(err.value)
    check_models(load_profiles(write(tmp_path, DOC)), builtin_catalog())

