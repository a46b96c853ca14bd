"""Sizing rules: one grammar (planner/sizing.py) for propose, replan, backtest and the config; the spread term,
the floor and the cap, worked out by hand; and the rules that existed before it evaluating exactly as before."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from pathlib import Path

import pytest
from helpers import migplan_cli
from hypothesis import given
from hypothesis import strategies as st
from planner_fixtures import A100, CAT, fleet, gpu, profiles, run, wl
from typer.testing import CliRunner

from migplan.cli.app import app
from migplan.errors import InputError
from migplan.planner import Policy, plan_from_dict, plan_to_dict
from migplan.planner.demand import demand_of, headroom_rule, policy_from_mapping
from migplan.planner.sizing import expand, headroom_words, need_mib, parse_rule, rule_text
from migplan.profiles import MemoryStats

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


@pytest.fixture()
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


# --- the grammar ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fields"), [
    ("max+10%", ("max", 0.10, 512, 0.0, None)),
    ("p99+25%", ("p99", 0.25, 512, 0.0, None)),
    ("max+0%+0MiB", ("max", 0.0, 0, 0.0, None)),
    ("p95", ("p95", 0.0, 512, 0.0, None)),
    ("max+1spread", ("max", 0.0, 512, 1.0, None)),
    ("max+1.0spread", ("max", 0.0, 512, 1.0, None)),
    ("max+0.5spread+1024MiB", ("max", 0.0, 1024, 0.5, None)),
    ("max+5%+1.5spread,cap=8192MiB", ("max", 0.05, 512, 1.5, 8192)),
    ("p99+5%+2spread+0MiB,cap=4096MiB", ("p99", 0.05, 0, 2.0, 4096)),
    (" max+10%,cap=512MiB ", ("max", 0.10, 512, 0.0, 512)),
])
def test_parse_rule(text: str, fields: tuple[object, ...]) -> None:
    r = parse_rule(text)
    assert (r.memory_percentile, r.headroom, r.headroom_min_mib, r.headroom_spread, r.headroom_max_mib) == fields
    assert r.text == text.strip()
    assert parse_rule(r.canonical).fields() == r.fields()  # the shortest form reads back to the same rule


@pytest.mark.parametrize(("text", "match"), [
    ("max+10", "is not STAT"), ("p90+10%", "is not STAT"), ("max-10%", "is not STAT"), ("", "is not STAT"),
    ("max+10%+5GiB", "is not STAT"), ("max+spread", "is not STAT"), ("max+1spread+5%", "is not STAT"),
    ("max,cap=100MiB+10%", "is not STAT"), ("auto", "'auto' is not allowed here"),
    ("max+1001%", "above 1000"), ("max+101spread", "above 100"), ("max+10%+2000000MiB", "above 1048576"),
    ("max+1spread+1024MiB,cap=512MiB", "cap 512 MiB is below the floor 1024 MiB"),
    ("max+10%,cap=100MiB", "below the floor 512 MiB"),
])
def test_parse_rule_refuses_with_the_form(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as e:
        parse_rule(text, key="sizing")
    assert e.value.key == "sizing"


def test_the_default_floor_is_the_callers() -> None:
    assert parse_rule("max+10%", 1024).headroom_min_mib == 1024
    assert parse_rule("max+10%+0MiB", 1024).headroom_min_mib == 0
    assert rule_text("max", 0.1, 0.0, 1024, None, default_floor=1024) == "max+10%"


def test_canonical_family_and_words() -> None:
    r = parse_rule("max+5%+1.50spread+1024MiB,cap=8192MiB")
    assert r.canonical == "max+5%+1.5spread+1024MiB,cap=8192MiB"
    assert r.family == "max+PCT%+Kspread,cap"
    assert parse_rule("max+1spread").family == "max+Kspread" and parse_rule("p99+10%").family == "p99+PCT%"
    assert headroom_words(0.05, 1.5, 1024, 8192) == "+5% +1.5 x spread (max - p50), at least 1024 MiB, at most 8192 MiB"
    assert headroom_words(0.0, 1.0, 512, None) == "+1 x spread (max - p50), at least 512 MiB"


@pytest.mark.parametrize(("pattern", "rules"), [
    ("max+{5,10,25}%", ["max+5%", "max+10%", "max+25%"]),
    ("max+{0.5,1}spread,cap={4096,8192}MiB", ["max+0.5spread,cap=4096MiB", "max+0.5spread,cap=8192MiB",
                                             "max+1spread,cap=4096MiB", "max+1spread,cap=8192MiB"]),
    ("{p99,max}+10%", ["p99+10%", "max+10%"]),
    ("max+10%", ["max+10%"]),
])
def test_a_family_expands_to_the_product_of_its_lists(pattern: str, rules: list[str]) -> None:
    assert [r.text for r in expand(pattern)] == rules


@pytest.mark.parametrize(("pattern", "match"), [
    ("max+{5,,10}%", "comma-separated list"), ("max+{5,10%", "comma-separated list"),
    ("max+{5,x}%", "sizing rule 'max\\+x%'"), ("max+{" + ",".join(map(str, range(40))) + "}%+{"
                                              + ",".join(map(str, range(40))) + "}MiB", "at most 1000"),
])
def test_a_bad_family_is_refused(pattern: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        expand(pattern)


# --- the evaluator ---------------------------------------------------------------------------------------------------

def test_need_worked_out_by_hand() -> None:
    # peak 10000, median 6000: spread 4000
    assert need_mib(10000, 4000, 0.10, 0.0, 512, None) == 11000  # max+10%: 10% (1000) above the 512 floor
    assert need_mib(10000, 4000, 0.0, 1.0, 512, None) == 14000  # max+1spread: the spread again
    assert need_mib(10000, 4000, 0.05, 0.5, 512, None) == 12500  # 500 + 2000
    assert need_mib(10000, 4000, 0.0, 2.0, 512, 3000) == 13000  # 8000 of headroom, capped at 3000
    assert need_mib(10000, 0, 0.0, 1.0, 512, None) == 10512  # a steady workload: the floor
    assert need_mib(10000, 100, 0.0, 1.0, 0, None) == 10100


@given(st.integers(0, 1_048_576), st.integers(0, 1_048_576), st.floats(0, 10, allow_nan=False),
       st.integers(0, 1_048_576))
def test_rules_without_a_spread_are_the_planners_formula_before(stat: int, spread: int, headroom: float,
                                                                floor: int) -> None:
    before = max(math.ceil(round(stat * (1 + headroom), 6)), stat + floor)  # the formula planner/demand.py had
    assert need_mib(stat, spread, headroom, 0.0, floor, None) == before


def test_demand_uses_the_profiles_own_spread() -> None:
    w = dataclasses.replace(wl("v", 0), memory=MemoryStats(p50=6000, p95=9000, p99=9500, max=10000))
    a100 = CAT.get(A100)
    assert demand_of(w, Policy(headroom=0.0, headroom_spread=1.0), a100, a100).memory_mib == 14000
    assert demand_of(w, Policy(memory_percentile="p99", headroom=0.0, headroom_spread=1.0), a100,
                     a100).memory_mib == 13500  # p99 + (max - p50)
    assert demand_of(w, Policy(headroom=0.0, headroom_spread=1.0, headroom_max_mib=1000), a100,
                     a100).memory_mib == 11000


def test_policy_refuses_bad_spread_and_cap() -> None:
    with pytest.raises(InputError, match="headroom_spread"):
        Policy(headroom_spread=-1.0)
    with pytest.raises(InputError, match="headroom_max_mib"):
        Policy(headroom_max_mib=100)  # below the 512 floor
    with pytest.raises(InputError, match="headroom_max_mib"):
        policy_from_mapping({"headroom_max_mib": 1.5})


# --- plans: written only where set, read back and checked ------------------------------------------------------------

def test_a_plan_without_spread_or_cap_has_the_policy_keys_it_always_had() -> None:
    p = run(fleet(gpu("h", 0)), profiles(wl("a", 4000)), Policy())
    assert "headroom_spread" not in p.policy and "headroom_max_mib" not in p.policy


def test_a_spread_rule_plan_round_trips_and_a_forged_rule_is_refused() -> None:
    w = dataclasses.replace(wl("v", 0), memory=MemoryStats(p50=6000, p95=9000, p99=9500, max=10000))
    policy = parse_rule("max+1spread,cap=8192MiB").policy(Policy())
    p = run(fleet(gpu("h", 0)), profiles(w), policy)
    (pw,) = p.workloads
    assert pw.memory_mib == 14000 and pw.instance_mib == 19968  # 3g.20gb on an A100-40GB
    assert p.summary.headroom_rule == "+1 x spread (max - p50), at least 512 MiB, at most 8192 MiB"
    doc = plan_to_dict(p)
    assert doc["policy"]["headroom_spread"] == 1.0 and doc["policy"]["headroom_max_mib"] == 8192
    back = plan_from_dict(json.loads(json.dumps(doc)), CAT)
    assert back.policy == p.policy
    doc["summary"]["headroom_rule"] = "+10%, at least 512 MiB"
    with pytest.raises(InputError, match="is not the policy's rule"):
        plan_from_dict(doc, CAT)


def test_the_headroom_rule_words_of_old_policies_are_unchanged() -> None:
    assert headroom_rule(Policy()) == "+10%, at least 512 MiB"
    assert headroom_rule(Policy(headroom=0.0, headroom_min_mib=0)) == "none"


# --- the same grammar at the command line and in the config ----------------------------------------------------------

def test_propose_sizing_rule(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "max+1spread", "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["policy"]["headroom_spread"] == 1.0 and doc["policy"]["headroom"] == 0.0
    assert doc["summary"]["headroom_rule"] == "+1 x spread (max - p50), at least 512 MiB"
    t = cli("propose", "-i", INV, "-p", PROF, "--sizing", "max+1spread")
    assert "memory sized from max (observed peak), headroom +1 x spread (max - p50), at least 512 MiB;" in t.stdout


def test_propose_sizing_and_a_memory_option_together_are_refused(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "max+1spread", "--headroom", "0.2")
    assert r.exit_code == 2 and "--sizing states the whole memory rule: leave out --headroom" in r.stderr
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "max+1spreads")
    assert r.exit_code == 2 and "sizing rule 'max+1spreads' is not STAT" in r.stderr and "Traceback" not in r.output


def _config(tmp_path: Path, body: str) -> str:
    f = tmp_path / "config.yaml"
    f.write_text(textwrap.dedent(body))
    return str(f)


def test_config_sizing_rule_is_the_plans_rule(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = _config(tmp_path, """\
        version: 1
        sizing: max+5%+0.5spread,cap=4096MiB
        """)
    r = cli("propose", "--config", cfg, "-i", INV, "-p", PROF, "-o", "json")
    assert r.exit_code == 0, r.output
    pol = json.loads(r.stdout)["policy"]
    assert (pol["headroom"], pol["headroom_spread"], pol["headroom_max_mib"]) == (0.05, 0.5, 4096)
    # a flag still wins over the config for its own part
    r = cli("propose", "--config", cfg, "-i", INV, "-p", PROF, "--headroom", "0.2", "-o", "json")
    assert json.loads(r.stdout)["policy"]["headroom"] == 0.2
    # the mapping form says the same
    cfg = _config(tmp_path, "version: 1\nsizing: {rule: max+1spread}\n")
    r = cli("propose", "--config", cfg, "-i", INV, "-p", PROF, "-o", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["policy"]["headroom_spread"] == 1.0


@pytest.mark.parametrize(("body", "match"), [
    ("version: 1\nsizing: max+1spreads\n", "config.yaml:2: sizing: sizing rule 'max+1spreads' is not STAT"),
    ("version: 1\nsizing: {rule: p90}\n", "config.yaml:2: sizing.rule: sizing rule 'p90' is not STAT"),
    ("version: 1\nsizing: {rules: max}\n", "unknown sizing setting 'rules'"),
    ("version: 1\nsizing: [max+10%]\n", "expected a sizing rule, 'auto' or a mapping"),
    ("version: 1\nsizing: {rule: max, target_oom: 2}\n", "config.yaml:2: sizing.target_oom: 2 is not a share"),
    ("version: 1\nsizing: {rule: auto, train: forever}\n", "sizing.train: 'forever' is not a length of time"),
    ("version: 1\nsizing: {rule: auto, splits: 0}\n", "sizing.splits"),
])
def test_bad_config_sizing_names_the_line_and_key(cli, tmp_path: Path, body: str, match: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "--config", _config(tmp_path, body), "-i", INV, "-p", PROF)
    assert r.exit_code == 2 and match in r.stderr, r.stderr
    assert "Traceback" not in r.output


def test_config_sizing_and_planner_headroom_together_are_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = _config(tmp_path, "version: 1\nsizing: max+1spread\nplanner:\n  headroom: 0.2\n")
    r = cli("propose", "--config", cfg, "-i", INV, "-p", PROF)
    assert r.exit_code == 2 and "sizing: max+1spread and planner.headroom both state the memory rule" in r.stderr


def test_backtest_takes_the_same_rules(tmp_path: Path) -> None:
    t0 = 1_790_000_000
    lines = ["timestamp,workload,memory_used_mib,gpu_model"]
    # training: 6000 most of the time, a spike to 10000 (spread 4000); test: a spike to 13000
    lines += [f"{t0 + i * 60},v,{10000 if i == 50 else 6000},A100-SXM4-40GB" for i in range(100)]
    lines += [f"{t0 + 6000 + i * 60},v,{13000 if i == 50 else 6000},A100-SXM4-40GB" for i in range(100)]
    path = tmp_path / "h.csv"
    path.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["backtest", "--csv", str(path), "--train", "100m", "--test", "100m",
                                   "--policy", "max+10%", "--policy", "max+1spread", "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    got = {w["rule"]: (w["need_mib"], w["instance_mib"], w["oom_samples"]) for w in doc["workloads"]}
    # max+10%: 11000 -> 3g.20gb holds 13000; max+1spread: 14000 -> the same 20 GB instance
    assert got == {"max+10%": (11000, 19968, 0), "max+1spread": (14000, 19968, 0)}
    assert {t["rule"]: t["headroom_rule"] for t in doc["totals"]}["max+1spread"] == \
        "+1 x spread (max - p50), at least 512 MiB"
