"""The commands layer works without typer: settings in, results out, progress through a callback."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from migplan.commands.context import build_context
from migplan.commands.propose import ProposeRequest, planner_policy, propose
from migplan.commands.results import HostOutcome, Outcome, discovery_outcomes, exit_code
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.fleet.snapshot import DiscoveredHost, HostFailure, Snapshot

REPO = Path(__file__).resolve().parents[1]


def test_propose_as_a_plain_function_reports_progress_and_writes_the_plan(tmp_path: Path) -> None:
    ctx = build_context(None, None, "json")
    lines: list[str] = []
    out = tmp_path / "plan.json"
    when = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.timezone.utc)
    plan = propose(ctx, ProposeRequest(inventory=str(REPO / "inventory/example.yaml"),
                                       profiles=str(REPO / "profiles/example"), out=str(out)),
                   report=lines.append, now=when)
    assert plan.created_at == "2026-12-01T08:00:00Z"
    assert any(line.startswith("model:") for line in lines) and f"plan written to {out}" in lines
    assert load_plan(out, ctx.catalog) == plan


def test_flag_beats_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: 1\nplanner:\n  headroom: 0.25\n  keep_free: 1\n")
    ctx = build_context(str(cfg), None, None)
    pol = planner_policy(ctx, {"headroom": 0.5, "keep_free": None})
    assert pol.headroom == 0.5 and pol.keep_free == 1


def test_propose_refuses_to_overwrite_its_inventory(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text((REPO / "inventory/example.yaml").read_text())
    before = inv.read_text()
    ctx = build_context(None, None, None)
    with pytest.raises(InputError, match="refusing to write"):
        propose(ctx, ProposeRequest(inventory=str(inv), profiles=str(REPO / "profiles/example"), out=str(inv)))
    assert inv.read_text() == before


def test_outcomes_and_exit_code() -> None:
    snap = Snapshot((DiscoveredHost("a"), DiscoveredHost("b", error=HostFailure("unreachable", "down"))))
    outcomes = discovery_outcomes(snap)
    assert [o.outcome for o in outcomes] == [Outcome.OK, Outcome.FAILED]
    assert outcomes[1].code == "unreachable" and exit_code(outcomes) == 1
    assert exit_code([HostOutcome("a", Outcome.OK)]) == 0
    assert exit_code([HostOutcome("a", Outcome.PARTIAL)]) == 1


def test_profiles_document_round_trip(tmp_path: Path) -> None:
    """The profiles that collect will write read back as the same workloads (documents.write_profiles)."""
    from migplan.documents import write_profiles
    from migplan.profiles import load_profiles

    original = load_profiles(str(REPO / "profiles/example"))
    out = tmp_path / "all.yaml"
    write_profiles(out, original.workloads)
    again = load_profiles(str(out))
    strip = [dataclasses.replace(w, source="") for w in original.workloads]
    assert [dataclasses.replace(w, source="") for w in again.workloads] == strip
    assert "kind: migplan/profiles" in out.read_text()


@pytest.mark.parametrize(("field", "value", "words"), [
    ("gap", 5.0, "--gap: expected a number 0..0.99"), ("gap", float("nan"), "--gap"),
    ("time_limit", -1.0, "--time-limit"), ("solver", "gurobi", "unknown solver 'gurobi'"),
])
def test_caller_values_use_the_config_schema(field: str, value: object, words: str) -> None:
    """A caller of the commands layer (not only typer) gets the same bounds as the config file."""
    ctx = build_context(None, None, None)
    req = ProposeRequest(inventory=str(REPO / "inventory/example.yaml"), profiles=str(REPO / "profiles/example"),
                         **{field: value})  # type: ignore[arg-type]
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(".", r"\.")):
        propose(ctx, req)


@pytest.mark.parametrize(("field", "value"), [("keep_free", 1.5), ("allow_disrupt", "false"), ("headroom", -1.0)])
def test_policy_overrides_use_the_config_schema(field: str, value: object) -> None:
    ctx = build_context(None, None, None)
    req = ProposeRequest(inventory=str(REPO / "inventory/example.yaml"), profiles=str(REPO / "profiles/example"),
                         policy={field: value})
    with pytest.raises(InputError, match="--" + field.replace("_", "-")):
        propose(ctx, req)


def test_two_workloads_on_one_instance_is_an_input_error_naming_both(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from migplan.cli.app import app

    prof = tmp_path / "p.yaml"
    obs = "observed: {host: gpu-a100-01, gpu: 0, gpu_model: A100-SXM4-40GB, mig_profile: 3g.20gb, mig_start: 0}"
    stats = "memory_mib: {p50: 1000, p95: 1000, p99: 1000, max: 1000}\n    compute: {p50: 0.1, p95: 0.1, max: 0.1}"
    prof.write_text(f"version: 1\nworkloads:\n  - name: one\n    {obs}\n    {stats}\n"
                    f"  - name: two\n    {obs}\n    {stats}\n")
    r = CliRunner().invoke(app, ["propose", "-i", str(REPO / "inventory/example.yaml"), "-p", str(prof)])
    assert r.exit_code == 2, r.output
    assert "'one'" in r.output and "'two'" in r.output and "3g.20gb@0" in r.output and "Traceback" not in r.output
