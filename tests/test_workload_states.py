"""The three states of a workload in a plan: placed, kept at risk, left out (issue 23).

placed: fits its instance with headroom. at_risk: runs where it is, its observed peak fits there, its peak
plus headroom does not; it stays, with its margin, counted apart. unplaced ("left out"): no place at all.
Each state through the planner, the plan document (written and read back strictly) and the table.
"""

from __future__ import annotations

import json

import pytest

from migplan.adapters.solver import PulpSolver
from migplan.errors import InputError
from migplan.planner import Policy, plan
from migplan.planner.plan import plan_from_dict, plan_to_dict
from tests.planner_fixtures import A100, CAT, fleet, gpu, profiles, wl

A100_80 = "A100-SXM4-80GB"
HEADROOM = Policy()  # +10%, at least 512 MiB: the default sizing
MIB_2G10 = CAT.get(A100).profile("2g.10gb").memory_mib
MIB_80 = CAT.get(A100_80).memory_mib


def _plan(state, ps, policy=HEADROOM):  # type: ignore[no-untyped-def]
    return plan(state, ps, CAT, policy, PulpSolver(time_limit=30))


def _by_name(p):  # type: ignore[no-untyped-def]
    return {w.name: w for w in p.workloads}


def _running_on_2g(peak: int):  # type: ignore[no-untyped-def]
    """One A100 laid out 2g.10gb x3 + 1g.5gb, a workload running on 2g.10gb@0 with this peak."""
    state = fleet(gpu("h", 0, layout=["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"]))
    return state, wl("svc", peak, host="h", gpu_idx=0, inst="2g.10gb@0")


def test_a_workload_that_fits_with_headroom_is_placed() -> None:
    state, w = _running_on_2g(7000)  # 7000 + 10% = 7700 <= 9856
    got = _by_name(_plan(state, profiles(w)))["svc"]
    assert (got.status, got.kept, got.instance, got.reason) == ("placed", True, "2g.10gb@0", None)


def test_a_running_workload_whose_peak_fits_but_not_its_headroom_is_kept_at_risk() -> None:
    peak = MIB_2G10 - 300  # fits; + 10% does not
    state, w = _running_on_2g(peak)
    p = _plan(state, profiles(w))
    got = _by_name(p)["svc"]
    assert got.status == "at_risk" and got.on_gpu and got.kept and not got.moved
    assert (got.host, got.gpu, got.instance) == ("h", 0, "2g.10gb@0")
    assert got.margin_mib == 300 and got.instance_mib == MIB_2G10 and got.memory_mib > MIB_2G10
    assert "peak" in (got.reason or "") and "--allow-disrupt" in (got.reason or "")
    s = p.summary
    assert (s.workloads_placed, s.workloads_at_risk, s.workloads_unplaced) == (0, 1, 0)
    assert s.min_margin_mib == 300 and s.workloads_disrupted == 0
    assert p.gpu("h", 0).actions == ()  # its GPU is left as it is  # type: ignore[union-attr]


def test_a_running_workload_whose_peak_no_longer_fits_is_left_out() -> None:
    state, w = _running_on_2g(MIB_2G10 + 100)  # its peak is above its instance's memory
    got = _by_name(_plan(state, profiles(w)))["svc"]
    assert got.status == "unplaced" and not got.on_gpu and got.instance is None
    assert "no longer fits" in (got.reason or "")


def test_new_demand_that_fits_nowhere_is_left_out() -> None:
    got = _by_name(_plan(fleet(gpu("h", 0)), profiles(wl("huge", 90_000))))["huge"]
    assert got.status == "unplaced" and got.reason


def test_allow_disrupt_moves_an_at_risk_workload_to_a_place_that_fits() -> None:
    # its own GPU's idle instances can make way for a 3g.20gb, which fits the workload's peak + headroom
    state, w = _running_on_2g(MIB_2G10 - 300)
    p = _plan(state, profiles(w), Policy(allow_disrupt=True))
    got = _by_name(p)["svc"]
    assert got.status == "placed" and got.moved and (got.instance_mib or 0) >= got.memory_mib
    (m,) = p.migrations
    assert m.target is not None and "at risk where it runs" in m.reason


def test_allow_disrupt_never_stops_a_whole_gpu_workload_that_runs_within_its_gpu() -> None:
    # issue 23: peak 78,055 MiB on a whole 80 GB A100, +10% = 85,861 MiB: nothing fits that, it runs fine
    state = fleet(gpu("h", 0, model=A100_80))
    w = wl("big", 78_055, share=0.5, host="h", gpu_idx=0, model=A100_80)
    p = _plan(state, profiles(w), Policy(allow_disrupt=True))
    got = _by_name(p)["big"]
    assert got.status == "at_risk" and got.instance is None and got.margin_mib == MIB_80 - 78_055
    assert p.migrations == () and p.summary.workloads_disrupted == 0 and p.gpu("h", 0).target is None  # type: ignore[union-attr]


def test_an_at_risk_workload_is_not_moved_when_that_would_move_another() -> None:
    # the only room that fits it is taken by another running workload: two moves to restore one headroom
    state = fleet(gpu("h", 0, layout=["2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.5gb@6"]),
                  gpu("h", 1, layout=["3g.20gb@0", "3g.20gb@4"]))
    ws = profiles(wl("svc", MIB_2G10 - 300, host="h", gpu_idx=0, inst="2g.10gb@0"),
                  wl("a", 12_000, host="h", gpu_idx=1, inst="3g.20gb@0"),
                  wl("b", 12_000, host="h", gpu_idx=1, inst="3g.20gb@4"),
                  wl("c", 7_000, host="h", gpu_idx=0, inst="2g.10gb@2"),
                  wl("d", 7_000, host="h", gpu_idx=0, inst="2g.10gb@4"))
    p = _plan(state, ws, Policy(allow_disrupt=True))
    got = _by_name(p)
    assert got["svc"].status == "at_risk" and p.migrations == ()
    assert all(got[n].status == "placed" and not got[n].moved for n in "abcd")


def test_the_at_risk_state_survives_the_plan_document() -> None:
    state, w = _running_on_2g(MIB_2G10 - 300)
    p = _plan(state, profiles(w))
    doc = json.loads(json.dumps(plan_to_dict(p)))
    back = plan_from_dict(doc, CAT)
    assert back.workloads == p.workloads and back.summary == p.summary and back.version == 5
    (entry,) = doc["workloads"]
    assert entry["status"] == "at_risk" and doc["summary"]["workloads_at_risk"] == 1


@pytest.mark.parametrize(("field", "value", "says"), [
    ("kept", False, "kept where it runs"),
    ("reason", None, "kept where it runs"),
])
def test_the_reader_refuses_an_at_risk_entry_that_is_not_one(field: str, value: object, says: str) -> None:
    state, w = _running_on_2g(MIB_2G10 - 300)
    doc = json.loads(json.dumps(plan_to_dict(_plan(state, profiles(w)))))
    doc["workloads"][0][field] = value
    with pytest.raises(InputError, match=says):
        plan_from_dict(doc, CAT)


def test_the_reader_refuses_a_summary_whose_at_risk_count_disagrees() -> None:
    state, w = _running_on_2g(MIB_2G10 - 300)
    doc = json.loads(json.dumps(plan_to_dict(_plan(state, profiles(w)))))
    doc["summary"]["workloads_at_risk"] = 0
    with pytest.raises(InputError, match="kept at risk"):
        plan_from_dict(doc, CAT)


def test_a_version_4_plan_without_the_at_risk_count_is_still_read() -> None:
    state, w = _running_on_2g(7000)
    doc = json.loads(json.dumps(plan_to_dict(_plan(state, profiles(w)))))
    doc["version"] = 4
    del doc["summary"]["workloads_at_risk"]
    assert plan_from_dict(doc, CAT).summary.workloads_at_risk == 0


def test_the_html_report_lists_the_at_risk_and_the_left_out_apart() -> None:
    from html.parser import HTMLParser

    from migplan.report_html import render

    state, w = _running_on_2g(MIB_2G10 - 300)
    p = _plan(state, profiles(w, wl("huge", 90_000)))

    class Tables(HTMLParser):  # the rows of each folded listing, by its class
        def __init__(self) -> None:
            super().__init__()
            self.rows: dict[str, list[list[str]]] = {}
            self.table: str | None = None
            self.cell = False

        def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
            a = dict(attrs)
            if tag == "table" and a.get("class") in ("kept-at-risk", "left-out"):
                self.table = a["class"]
                self.rows[self.table] = []
            elif tag == "tr" and self.table:
                self.rows[self.table].append([])
            elif tag == "td" and self.table:
                self.cell = True

        def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
            if tag == "table":
                self.table = None
            elif tag == "td":
                self.cell = False

        def handle_data(self, data):  # type: ignore[no-untyped-def]
            if self.cell and self.table:
                self.rows[self.table][-1].append(data)

    t = Tables()
    t.feed(render(p, CAT))
    risky = [r for r in t.rows["kept-at-risk"] if r]
    left = [r for r in t.rows["left-out"] if r]
    assert [r[0] for r in risky] == ["svc"] and risky[0][-1] == "300"  # its margin, MiB
    assert [r[0] for r in left] == ["huge"]
