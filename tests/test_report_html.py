"""The HTML report for a fleet, rendered in a real headless Chromium: the example plan (made by the real CBC), a
1,000-GPU plan and a 7,000-GPU one. The overview has one cell per GPU, grouped by host; the filters select exactly
the GPUs they name; a GPU's detail is drawn when it is opened, its SVG shapes matching the plan's instances (count
and slot positions, from the catalog's geometry); its nvidia-smi commands are the ones `apply --dry-run -o sh`
prints for it; a whole GPU has its memory bar; and the page loads nothing from outside.

Screenshots land in the test's temporary directory (and, with MIGPLAN_REPORT_SHOTS=DIR, in DIR).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import random
import re
import shutil
import subprocess
from collections import defaultdict
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import sim_runner
from helpers import isolate_cli
from helpers.samples import flat_workload, local_inventory, write_profiles
from sim.fleet import host_state, read_state, write_state
from typer.testing import CliRunner

from bench.report_html import Browser, synthetic_plan
from migplan import documents
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.cli.app import app
from migplan.model.diff import Op, diff
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.model.state import GpuState
from migplan.planner import Plan
from migplan.planner.plan import SolveInfo, Summary, instance_memory_mib
from migplan.report_html import AT_RISK, CHANGED, KEPT, LEFT_OUT, render

CAT = builtin_catalog()
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/test.sh installs "
                                    "Debian's chromium package when run as root)")


# --- plans ------------------------------------------------------------------------------------------

def _isolate(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    isolate_cli(mp, tmp)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path, Path]:
    """The README's example fleet planned by `migplan propose --report` (real CBC), and `migplan report`."""
    d = tmp_path_factory.mktemp("example")
    with pytest.MonkeyPatch.context() as mp:  # no config file or environment of the machine's user
        _isolate(mp, d)
        r = CliRunner().invoke(app, ["propose", "-i", str(ROOT / "inventory" / "example.yaml"), "-p",
                                     str(ROOT / "profiles" / "example"), "--allow-disrupt", "--out",
                                     str(d / "plan.json"), "--report", str(d / "propose.html"), "-o", "json"])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(app, ["report", str(d / "plan.json"), "--out", str(d / "report.html")])
        assert r.exit_code == 0, r.output
    return documents.load_plan(d / "plan.json", CAT), d / "propose.html", d / "report.html"


def big_plan(n_hosts: int = 125, per_host: int = 8, seed: int = 7) -> Plan:
    """1,000 A100/H100 GPUs with maximal layouts, a workload on most instances, a third of them changing."""
    rng = random.Random(seed)
    gpus, workloads = [], []
    layouts = {m: enumerate_layouts(CAT.get(m), maximal=True) for m in ("A100-SXM4-40GB", "H100-SXM5-80GB")}
    for h in range(n_hosts):
        model_id = "A100-SXM4-40GB" if h % 3 else "H100-SXM5-80GB"
        model = CAT.get(model_id)
        for i in range(per_host):
            host = f"gpu-{h:03d}.dc1"
            current = rng.choice(layouts[model_id])
            target = current if rng.random() < 0.66 else rng.choice(layouts[model_id])
            state = GpuState(host, i, model_id, mig_enabled=True, layout=current)
            gpus.append(GpuPlan(state, target, tuple(diff(current, target, gpu=(host, i),
                                                          architecture=model.architecture))))
            for inst in target.instances:
                if rng.random() < 0.2:
                    continue
                mib = instance_memory_mib(model, str(inst))
                peak = rng.randint(mib // 5, mib - 300)
                workloads.append(WorkloadPlan(name=f"svc-{h:03d}-{i}-{inst.start}", workload="svc", status="placed",
                                              host=host, gpu=i, instance=str(inst), memory_mib=peak + 256,
                                              peak_mib=peak, instance_mib=mib, margin_mib=mib - peak,
                                              slices=model.profile(inst.profile).memory_slices,
                                              kept=inst in current.instances))
    workloads.append(WorkloadPlan(name="too-big", workload="too-big", status="unplaced", memory_mib=90000,
                                  peak_mib=85000, reason="needs more memory than any GPU offers"))
    changed = sum(1 for g in gpus if g.actions)
    summary = Summary(gpus_total=len(gpus), gpus_planned=len(gpus), gpus_used=len(gpus), gpus_lower_bound=990,
                      gpus_changed=changed, free_whole_gpus=0, instances_destroyed=0, instances_created=0,
                      workloads_placed=len(workloads) - 1, workloads_unplaced=1, workloads_disrupted=0,
                      busy_disrupted=0, stranded_slices=0, placed_value=0.0, below_peak=0, min_margin_mib=300,
                      headroom_rule="+10%, at least 512 MiB", memory_warning=None)
    return Plan(fingerprint="sha256:" + "0" * 64, source="inventory", policy={}, created_at="2026-12-01T00:00:00Z",
                solve=SolveInfo("cbc", "optimal", 0.0, 0.0, 0.0, 1.0, 990), summary=summary, gpus=tuple(gpus),
                workloads=tuple(workloads))


def filter_plan() -> tuple[Plan, set[tuple[str, int]]]:
    """40 GPUs (more than 24: hosts start folded) from `big_plan`, three workloads kept at risk on different hosts,
    and two unchanged GPUs where processes run on an instance no workload of the plan holds (where a running
    workload left out stays); those two GPUs are returned with it."""
    p = big_plan(5, 8, seed=3)
    kept = [w for w in p.workloads if w.kept and w.status == "placed"]
    risky = {kept[0].name, kept[len(kept) // 2].name, kept[-1].name}
    workloads = tuple(replace(w, status="at_risk", reason="peak + headroom does not fit") if w.name in risky else w
                      for w in p.workloads)
    held = {(w.host, w.gpu, w.instance) for w in workloads if w.on_gpu}
    gpus, busy = list(p.gpus), set()
    for k, g in enumerate(gpus):
        free = [i for i in (g.current or Layout()).instances if (g.host, g.index, str(i)) not in held]
        if not g.actions and free and len(busy) < 2 and g.host not in {h for h, _ in busy}:
            gpus[k] = replace(g, observed=replace(g.observed, busy=(free[0],)))
            busy.add(g.key)
    assert len(busy) == 2 and len({(w.host, w.gpu) for w in workloads if w.status == "at_risk"}) == 3
    return replace(p, gpus=tuple(gpus), workloads=workloads), busy


def whole_gpu_plan() -> Plan:
    """The issue's case: an H100 with MIG off running one workload of 2,142 MiB (of 81,024), next to an A100."""
    h100, a100 = CAT.get("H100-SXM5-80GB"), CAT.get("A100-SXM4-40GB")
    layout = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
    gpus = (GpuPlan(GpuState("n1", 0, h100.id, mig_enabled=False, whole_gpu_busy=True), None, ()),
            GpuPlan(GpuState("n1", 1, a100.id, mig_enabled=True, layout=layout), layout, ()))
    workloads = (WorkloadPlan("embed-small", "embed-small", "placed", "n1", 0, None, 2700, 2142, h100.memory_mib,
                              h100.memory_mib - 2142, 8, kept=True),
                 WorkloadPlan("chat", "chat", "placed", "n1", 1, "3g.20gb@4", 15000, 14000, 19968, 5968, 4, kept=True))
    return replace(big_plan(1, 1), gpus=gpus, workloads=workloads)


# --- reading the page and the DOM back -------------------------------------------------------------

DATA = re.compile(r'<script id="data" type="application/json">(.*?)</script>', re.S)


def page_data(text: str) -> dict[str, Any]:
    """The page's data block (JSON)."""
    found = DATA.search(text)
    assert found is not None, "no data block"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


class Shapes(HTMLParser):
    """Per (host, gpu, side): the instance rectangles, memory bars and the SVG's attributes; the overview (per
    host group: its name and its cells), the sections, the hosts and the GPU rows drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.host: str | None = None
        self.gpu: int | None = None
        self.side: str | None = None
        self.rects: dict[tuple[str, int, str], list[dict[str, str]]] = defaultdict(list)
        self.bars: dict[tuple[str, int, str], list[dict[str, str]]] = defaultdict(list)
        self.texts: dict[tuple[str, int, str], list[str]] = defaultdict(list)
        self.svgs: dict[tuple[str, int, str], dict[str, str]] = {}
        self.hosts: list[dict[str, str]] = []
        self.rows: list[dict[str, str]] = []
        self.commands: dict[tuple[str, int], str] = {}
        self.grid: list[tuple[str, list[dict[str, str]]]] = []
        self.sections: list[dict[str, str]] = []
        self.buttons: dict[str, dict[str, str]] = {}
        self.count = ""
        self.scripts = 0
        self.body: dict[str, str] = {}
        self._text: str | None = None  # the element whose text is being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        cls = a.get("class", "").split()
        if not self._drawing(tag, a, cls):
            self._page(tag, a, cls)

    def _drawing(self, tag: str, a: dict[str, str], cls: list[str]) -> bool:
        """A host, GPU row, SVG or what is drawn in it (True: it was one)."""
        key = (self.host or "", self.gpu or 0, self.side or "")
        if tag == "details" and "host" in cls:
            self.host = a["data-host"]
            self.hosts.append(a)
        elif tag == "section" and "gpu-row" in cls:
            self.gpu = int(a["data-gpu"])
            self.rows.append({**a, "host": self.host or ""})
        elif tag == "svg" and "gpu" in cls:
            self.side = a["data-side"]
            assert self.host is not None and self.gpu is not None
            self.svgs[(self.host, self.gpu, self.side)] = a
            self.rects.setdefault((self.host, self.gpu, self.side), [])
        elif tag == "rect" and ("inst" in cls or "whole" in cls) and self.side is not None:
            self.rects[key].append(a)
        elif tag == "rect" and "memused" in cls and self.side is not None:
            self.bars[key].append(a)
        elif tag == "text" and self.side is not None:
            self._text = "svg"
        elif tag == "pre" and "cmds" in cls:
            self._text = "cmds"
            self.commands[(self.host or "", self.gpu or 0)] = ""
        else:
            return False
        return True

    def _page(self, tag: str, a: dict[str, str], cls: list[str]) -> None:
        """The sections, the overview, the controls."""
        if tag == "details" and "sec" in cls:
            self.sections.append(a)
        elif tag == "div" and "hg" in cls:
            self.grid.append(("", []))
        elif tag == "span" and "hn" in cls:
            self._text = "hn"
        elif tag == "a" and self.grid and not self.host and "href" in a:
            self.grid[-1][1].append(a)
        elif tag == "button" and "data-filter" in a:
            self.buttons[a["data-filter"]] = a
        elif tag == "span" and a.get("id") == "count":
            self._text = "count"
        elif tag == "script":
            self.scripts += 1
        elif tag == "body":
            self.body = a

    def handle_data(self, data: str) -> None:
        if self._text == "svg" and self.host is not None and self.gpu is not None and self.side is not None:
            self.texts[(self.host, self.gpu, self.side)].append(data)
        elif self._text == "cmds" and self.host is not None and self.gpu is not None:
            self.commands[(self.host, self.gpu)] += data
        elif self._text == "hn":
            self.grid[-1] = (self.grid[-1][0] + data, self.grid[-1][1])
        elif self._text == "count":
            self.count += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.side = None
        if tag in ("text", "pre", "span"):
            self._text = None


def shapes(text: str) -> Shapes:
    p = Shapes()
    p.feed(text)
    return p


def check_shapes(plan: Plan, s: Shapes, only: set[tuple[str, int]] | None = None) -> int:
    """Every GPU's current and target layout drawn exactly (every GPU of `only`, and no other, when given): one
    rectangle per instance, at its start slot, as many slots wide as its profile has memory slices (the
    catalog's), labelled with the workloads."""
    names: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    for w in plan.workloads:
        if w.status in ("placed", "at_risk") and w.instance:
            names[(w.host or "", w.gpu or 0, w.instance)].append(w.name)
    checked = 0
    drawn_gpus = {(h, g) for h, g, _ in s.svgs}
    assert drawn_gpus == (only if only is not None else {g.key for g in plan.gpus})
    for g in plan.gpus:
        if g.key not in drawn_gpus:
            continue
        model = CAT.get(g.model)
        for side, layout in (("current", g.current), ("target", g.target)):
            key = (g.host, g.index, side)
            svg, rects = s.svgs[key], s.rects[key]
            slot = float(svg["width"]) / model.memory_slices
            assert int(svg["data-slots"]) == model.memory_slices
            if layout is None:
                assert [r["class"] for r in rects] == ["whole"], key
                continue
            drawn = sorted((r["data-profile"], int(r["data-start"]), round((float(r["x"]) - 1) / slot),
                            round((float(r["width"]) + 2) / slot), r["data-workload"]) for r in rects)
            want = sorted((i.profile, i.start, i.start, model.profile(i.profile).memory_slices,
                           ", ".join(names[(g.host, g.index, str(i))]) if side == "target" else None)
                          for i in layout.instances)
            assert [d[:4] for d in drawn] == [w[:4] for w in want], key
            if side == "target":
                assert [d[4] for d in drawn] == [w[4] for w in want], key
            checked += len(rects)
    return checked


def check_data(plan: Plan, data: dict[str, Any]) -> int:
    """The data block holds every GPU (by host, then index) with its model, its current and target layout
    instance for instance, and its workloads on their instances; returns the instances it holds."""
    hosts, models = data["hosts"], {n: m for n, m in enumerate(data["models"])}
    assert hosts == sorted({g.host for g in plan.gpus})
    rows = data["gpus"]
    assert [(hosts[r[0]], r[1]) for r in rows] == sorted(g.key for g in plan.gpus)
    on: dict[tuple[str, int], list[tuple[str, str | None]]] = defaultdict(list)
    for w in plan.workloads:
        if w.on_gpu:
            on[(w.host or "", w.gpu or 0)].append((w.name, w.instance))
    seen = 0
    for r in rows:
        g = plan.gpu(hosts[r[0]], r[1])
        assert g is not None
        model = models[r[2]]
        assert model[0] == g.model and model[1] == CAT.get(g.model).memory_slices

        def layout(flat: list[int] | None, m: list[Any] = model) -> list[str] | None:
            return None if flat is None else [f"{m[5][flat[k]][0]}@{flat[k + 1]}" for k in range(0, len(flat), 2)]

        cur, tgt = layout(r[4]), layout(r[5])
        assert cur == ([str(i) for i in g.current.instances] if g.current is not None else None)
        assert tgt == ([str(i) for i in g.target.instances] if g.target is not None else None)
        assert r[7] == len(g.actions) and bool(r[3] & CHANGED) == bool(g.actions)
        assert sorted((w[0], tgt[w[1]] if w[1] >= 0 and tgt else None) for w in r[9]) == sorted(on[g.key])
        seen += len(cur or ()) + len(tgt or ())
    return seen


def cells_by_gpu(plan: Plan, s: Shapes) -> dict[tuple[str, int], dict[str, str]]:
    """The overview's cells, each to its GPU by where it is drawn: the k-th cell of a host's group is the host's
    k-th GPU by index (not through the page's own numbering)."""
    per_host: dict[str, list[GpuPlan]] = defaultdict(list)
    for g in sorted(plan.gpus, key=lambda x: x.index):
        per_host[g.host].append(g)
    assert [host for host, _ in s.grid] == sorted(per_host)
    out = {}
    for host, cells in s.grid:
        assert len(cells) == len(per_host[host]), host
        out.update({g.key: c for g, c in zip(per_host[host], cells, strict=True)})
    return out


def selected(cells: dict[tuple[str, int], dict[str, str]]) -> set[tuple[str, int]]:
    return {k for k, c in cells.items() if "off" not in c["class"].split()}


# --- Chromium ---------------------------------------------------------------------------------------

class DevTools(Browser):
    """bench/report_html.py's headless Chromium over its DevTools pipe (no name resolving), with what the tests
    need besides: `open` a page in a target of its own and wait for its load event, `requests` it made (the
    Network domain of the page's own target: the browser's background traffic is not the page's), `wait`."""

    def __init__(self, tmp: Path) -> None:
        assert CHROMIUM is not None
        super().__init__(CHROMIUM, str(tmp / "cdp-profile"))

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Network.enable")
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})
        assert self.read(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == self.session)

    def wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            self.read(lambda m: False, timeout=seconds)

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == self.session]


def page_requests(tmp: Path, page: Path, wait_s: float = 2.0) -> list[str]:
    """Every URL the page itself requests, as Chromium's DevTools protocol reports it; the network is off as well
    (no name resolves)."""
    browser = DevTools(tmp)
    try:
        browser.open(page.as_uri())
        browser.wait(wait_s)  # late requests (scripts, timers)
        return browser.requests()
    finally:
        browser.close()


def chromium(tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    net = ["--host-resolver-rules=MAP * ~NOTFOUND"]  # no name resolves: nothing outside can be reached
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            f"--user-data-dir={tmp / 'chrome-profile'}", "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-default-apps", "--disable-extensions", "--no-pings",
            "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--disable-breakpad",
            "--no-service-autorun", "--allow-browser-signin=false", "--disable-field-trial-config",
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,OptimizationGuideModelDownloading,"
            "MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
            "--enable-logging=stderr", "--v=1", *net, *extra, url]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(args, capture_output=True, text=True, timeout=180, env=env)


def dump_dom(tmp: Path, page: Path, query: str = "") -> tuple[str, str]:
    """The DOM after the page's script ran (`query`: ?PARAMS and/or #FRAGMENT)."""
    done = chromium(tmp, page.as_uri() + query, "--dump-dom", "--virtual-time-budget=5000")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


def screenshot(tmp: Path, page: Path, name: str, size: str = "1400,2000", query: str = "") -> Path:
    shot = tmp / name
    done = chromium(tmp, page.as_uri() + query, f"--screenshot={shot}", f"--window-size={size}", "--hide-scrollbars",
                    "--virtual-time-budget=5000")
    assert done.returncode == 0, done.stderr[-3000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    keep = os.environ.get("MIGPLAN_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / name)
    return shot


_URL_ATTRS = {"src", "href", "xlink:href", "srcset", "action", "formaction", "poster", "data", "background",
              "manifest", "ping", "cite", "longdesc"}
_CSS_URL = re.compile(r"url\(\s*(?!['\"]?(?:data:|#))|@import", re.I)


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_style = tag == "style"
        for k, v in attrs:
            v = (v or "").strip()
            if k in _URL_ATTRS and not (v.startswith("data:") or v.startswith("#")):
                self.found.append(f"<{tag} {k}={v}>")
            if k == "style" and _CSS_URL.search(v):
                self.found.append(f"<{tag} style={v}>")
            if k == "http-equiv" and v.lower() == "refresh":
                self.found.append(f"<{tag} refresh>")

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False

    def handle_data(self, data: str) -> None:
        if self.in_style and _CSS_URL.search(data):
            self.found.append(f"<style> {_CSS_URL.search(data).group(0)}")  # type: ignore[union-attr]


def outside_references(text: str) -> list[str]:
    """Everything in a page that could make the browser fetch something: an attribute that takes a URL
    (src, href, srcset, ...) not pointing at a data: URL or an in-page #anchor, CSS url(...) or @import
    in a <style> or style attribute, a meta refresh."""
    p = _References()
    p.feed(text)
    return p.found


# --- the tests --------------------------------------------------------------------------------------

def test_example_plan_data_holds_every_gpu_instance_and_workload(example: tuple[Plan, Path, Path]) -> None:
    plan, propose_page, report_page = example
    for page in (propose_page, report_page):
        data = page_data(page.read_text())
        assert check_data(plan, data) == sum(len(g.current or Layout()) + len(g.target or Layout())
                                             for g in plan.gpus)
        assert data["open"] is True  # 24 GPUs: every host opens (and is drawn) at once


def test_sections_fold_and_the_fleet_summary_comes_first(example: tuple[Plan, Path, Path]) -> None:
    plan, page, _ = example
    s = shapes(page.read_text())
    ids = [sec["id"] for sec in s.sections]
    assert ids[:2] == ["s-summary", "s-overview"] and ids[-1] == "s-gpus"
    assert ("s-moves" in ids) == bool(plan.migrations) and ("s-kept-at-risk" in ids) == any(
        w.status == "at_risk" for w in plan.workloads)
    assert all("open" in sec for sec in s.sections if sec["id"] in ("s-summary", "s-overview", "s-gpus"))


def test_overview_has_one_cell_per_gpu_by_host_linking_to_its_detail() -> None:
    """1,000 GPUs: 1,000 cells in 125 host groups, each a link to its GPU's place in the data block; changed
    GPUs ringed (class x), colour by memory used (the observed peaks of its workloads against its memory)."""
    plan = big_plan()
    text = render(plan, CAT)
    s, data = shapes(text), page_data(text)
    cells = cells_by_gpu(plan, s)
    assert len(cells) == len(plan.gpus) == 1000 and len(s.grid) == 125
    hosts = data["hosts"]
    peaks: dict[tuple[str, int], int] = defaultdict(int)
    for w in plan.workloads:
        if w.on_gpu:
            peaks[(w.host or "", w.gpu or 0)] += w.peak_mib
    for key, cell in cells.items():
        n = int(cell["href"].removeprefix("#g"))
        row = data["gpus"][n]
        assert (hosts[row[0]], row[1]) == key  # the link leads to this GPU's detail
        g = plan.gpu(*key)
        assert g is not None
        classes = cell["class"].split()
        assert ("x" in classes) == bool(g.actions)
        share = peaks[key] / CAT.get(g.model).memory_mib
        want = 0 if not peaks[key] else 1 if share < 0.25 else 2 if share < 0.5 else 3 if share < 0.75 else 4
        assert f"u{want}" in classes, (key, share, classes)
    assert {c["class"].split()[0] for c in cells.values()} >= {"u1", "u2", "u3"}


def test_the_overview_marks_at_risk_and_left_out_gpus() -> None:
    plan, busy = filter_plan()
    cells = cells_by_gpu(plan, shapes(render(plan, CAT)))
    risky = {(w.host or "", w.gpu or 0) for w in plan.workloads if w.status == "at_risk"}
    assert {k for k, c in cells.items() if "r" in c["class"].split()} == risky
    assert {k for k, c in cells.items() if "l" in c["class"].split()} == busy
    rows = {(page_data(render(plan, CAT))["hosts"][r[0]], r[1]): r[3] for r in page_data(render(plan, CAT))["gpus"]}
    assert {k for k, f in rows.items() if f & AT_RISK} == risky and {k for k, f in rows.items() if f & LEFT_OUT} == busy


def test_whole_gpu_memory_in_the_data() -> None:
    plan = whole_gpu_plan()
    text = render(plan, CAT)
    data = page_data(text)
    h100 = next(r for r in data["gpus"] if r[1] == 0)
    assert h100[4] is None and h100[5] is None  # MIG off before and after: a whole GPU
    assert h100[9] == [["embed-small", -1, 2142, KEPT, 81024]] and h100[11] == 2142
    assert data["models"][h100[2]][4] == 81024
    assert "u1" in cells_by_gpu(plan, shapes(text))[("n1", 0)]["class"]  # 2,142 of 81,024 MiB: under a quarter


def test_page_references_nothing_outside_itself(example: tuple[Plan, Path, Path]) -> None:
    _, page, _ = example
    text = page.read_text()
    assert outside_references(text) == []
    assert outside_references(render(filter_plan()[0], CAT)) == []
    assert outside_references(text.replace("</body>", '<img src="https://cdn.example.com/x.png"></body>')) != []
    assert outside_references("<style>a{background:url(http://x.example/a.png)}</style>") != []


EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;</script><!--'


def evil_plan() -> Plan:
    plan = big_plan(1, 2)
    w = next(w for w in plan.workloads if w.status == "placed")
    g = plan.gpus[0]
    evil_host = EVIL + "-host"
    gpus = (replace(g, observed=replace(g.observed, host=evil_host)), *plan.gpus[1:])
    moved = replace(w, name=EVIL, host=evil_host) if w.host == g.host and w.gpu == g.index else replace(w, name=EVIL)
    return replace(plan, gpus=gpus, workloads=(moved, *plan.workloads[1:]))


def test_untrusted_names_are_escaped() -> None:
    plan = evil_plan()
    text = render(plan, CAT, title=EVIL)
    assert EVIL not in text and "<img" not in text and text.count("<script") == 2 and text.count("</script>") == 2
    assert html.escape(EVIL) in text  # the title, and the host name in the overview
    data = page_data(text)  # the data block: no <, > or & (nothing can close it), the names intact
    assert EVIL in [w[0] for r in data["gpus"] for w in r[9]] and EVIL + "-host" in data["hosts"]
    assert outside_references(text) == []


@pytest.mark.slow
@needs_chromium
def test_untrusted_names_stay_text_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "evil.html"
    page.write_text(render(evil_plan(), CAT, title=EVIL))
    dom, _ = dump_dom(tmp_path, page, "?open=all")
    s = shapes(dom)
    assert s.body.get("data-ready") == "1" and s.scripts == 2
    assert "<img" not in dom and EVIL + "-host" in [h["data-host"] for h in s.hosts]
    assert any(EVIL in r["data-workload"] for rects in s.rects.values() for r in rects)


@pytest.mark.slow
@needs_chromium
def test_example_plan_in_chromium_dom_and_screenshot(example: tuple[Plan, Path, Path], tmp_path: Path) -> None:
    plan, page, _ = example
    dom, _ = dump_dom(tmp_path, page)
    s = shapes(dom)
    assert s.body.get("data-ready") == "1"  # the page's script ran
    assert check_shapes(plan, s) == sum(len(g.current or Layout()) + len(g.target or Layout()) for g in plan.gpus)
    assert s.scripts == 2  # the data block and the script
    assert len(cells_by_gpu(plan, s)) == len(plan.gpus)
    shot = screenshot(tmp_path, page, "example-plan.png")
    assert shot.exists()


@pytest.mark.slow
@needs_chromium
def test_thousand_gpus_in_chromium_drawn_on_demand_sorted_and_searched(tmp_path: Path) -> None:
    plan = big_plan()
    assert len(plan.gpus) == 1000
    page = tmp_path / "big.html"
    page.write_text(render(plan, CAT))
    s = shapes(dump_dom(tmp_path, page)[0])
    assert len(s.hosts) == 125 and all("open" not in h for h in s.hosts)  # 125 hosts start folded
    assert not s.svgs and not s.rows  # and nothing is drawn before it is opened
    assert len(cells_by_gpu(plan, s)) == 1000
    n = 517
    opened = shapes(dump_dom(tmp_path, page, f"#g{n}")[0])  # a cell's link: its host opened, only that one drawn
    host, index = sorted(g.key for g in plan.gpus)[n]
    assert [h["data-host"] for h in opened.hosts if "open" in h] == [host]
    assert [(r["host"], int(r["data-gpu"])) for r in opened.rows if "sel" in r["class"].split()] == [(host, index)]
    check_shapes(plan, opened, only={g.key for g in plan.gpus if g.host == host})
    drawn = check_shapes(plan, shapes(dump_dom(tmp_path, page, "?open=all")[0]))
    assert drawn == sum(len(g.current or Layout()) + len(g.target or Layout()) for g in plan.gpus)
    by_changes = shapes(dump_dom(tmp_path, page, "?sort=changes")[0]).hosts
    counts = [int(h["data-changes"]) for h in by_changes]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    searched = shapes(dump_dom(tmp_path, page, "?q=svc-017-3")[0])
    assert [h["data-host"] for h in searched.hosts if "hidden" not in h] == ["gpu-017.dc1"]
    assert selected(cells_by_gpu(plan, searched)) == {("gpu-017.dc1", 3)}
    screenshot(tmp_path, page, "thousand-gpus.png")


def _expected(plan: Plan, busy: set[tuple[str, int]], name: str) -> set[tuple[str, int]]:
    if name == "changes":
        return {g.key for g in plan.gpus if g.actions}
    if name == "at-risk":
        return {(w.host or "", w.gpu or 0) for w in plan.workloads if w.status == "at_risk"}
    if name == "left-out":
        return busy
    return {g.key for g in plan.gpus}


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("name", ["all", "changes", "at-risk", "left-out"])
def test_each_filter_selects_its_gpus_in_chromium(tmp_path: Path, name: str) -> None:
    """?filter=NAME: the overview's cells left lit, the hosts left shown and the count are exactly the GPUs the
    filter names (computed here from the plan), and the filter's button is the one pressed."""
    plan, busy = filter_plan()
    want = _expected(plan, busy, name)
    assert 0 < len(want) < len(plan.gpus) or name == "all"
    page = tmp_path / "f.html"
    page.write_text(render(plan, CAT))
    s = shapes(dump_dom(tmp_path, page, f"?filter={name}")[0])
    assert selected(cells_by_gpu(plan, s)) == want
    assert {h["data-host"] for h in s.hosts if "hidden" not in h} == {h for h, _ in want}
    assert s.count.startswith(f"{len(want)} of {len(plan.gpus)} GPU(s) on {len({h for h, _ in want})} host(s)")
    assert [k for k, b in s.buttons.items() if b["aria-pressed"] == "true"] == [name]


@pytest.mark.slow
@needs_chromium
def test_filter_clicks_search_and_a_cell_click_in_chromium(tmp_path: Path) -> None:
    """Through the DevTools protocol, as a person would: click each filter button, type a search next to a filter,
    click a cell; read back which cells are lit and which GPU rows are drawn."""
    plan, busy = filter_plan()
    page = tmp_path / "f.html"
    page.write_text(render(plan, CAT))
    order = sorted(g.key for g in plan.gpus)
    lit = ("Array.prototype.map.call(document.querySelectorAll('#grid a'),function(a){"
           "return !a.classList.contains('off');})")
    browser = DevTools(tmp_path)
    try:
        browser.open(page.as_uri())
        assert browser.evaluate("document.body.getAttribute('data-ready')") == "1"
        for name in ("changes", "at-risk", "left-out", "all"):
            browser.evaluate(f"document.querySelector('[data-filter=\"{name}\"]').click()")
            assert {k for k, on in zip(order, browser.evaluate(lit), strict=True) if on} == _expected(plan, busy, name)
        assert browser.evaluate("document.getElementById('s-kept-at-risk').open") is True  # at risk opened it
        browser.evaluate("document.querySelector('[data-filter=\"changes\"]').click();"
                         "var q=document.getElementById('q');q.value='gpu-002';q.dispatchEvent(new Event('input'))")
        want = {k for k in _expected(plan, busy, "changes") if k[0] == "gpu-002.dc1"}
        assert want and {k for k, on in zip(order, browser.evaluate(lit), strict=True) if on} == want
        assert browser.evaluate("document.querySelectorAll('section.gpu-row').length") == 0  # nothing drawn yet
        n = order.index(("gpu-003.dc1", 5))
        browser.evaluate(f"document.querySelectorAll('#grid a')[{n}].click()")
        rows = browser.evaluate("Array.prototype.map.call(document.querySelectorAll('section.gpu-row'),"
                                "function(r){return [r.closest('details').getAttribute('data-host'),"
                                "+r.getAttribute('data-gpu'),r.classList.contains('sel')];})")
        assert sorted(map(tuple, rows)) == [("gpu-003.dc1", i, i == 5) for i in range(8)]
    finally:
        browser.close()


@pytest.mark.slow
@needs_chromium
def test_whole_gpu_memory_bar_in_chromium(tmp_path: Path) -> None:
    """A whole GPU shows its memory: a bar of 2,142 of 81,024 MiB (the issue's H100), its width that share of the
    bar's, and the figures written on it."""
    page = tmp_path / "whole.html"
    page.write_text(render(whole_gpu_plan(), CAT))
    s = shapes(dump_dom(tmp_path, page)[0])
    for side in ("current", "target"):
        [used] = s.bars[("n1", 0, side)]
        assert (used["data-used"], used["data-total"]) == ("2142", "81024")
        svg_width = float(s.svgs[("n1", 0, side)]["width"])
        assert float(used["width"]) == pytest.approx((svg_width - 16) * 2142 / 81024, abs=0.1)
        assert "2,142 / 81,024 MiB used (peak)" in s.texts[("n1", 0, side)]
    [bar] = s.bars[("n1", 1, "target")]  # an instance's bar as before: its workload's peak against it
    assert (bar["data-used"], bar["data-total"]) == ("14000", "19968")


@pytest.mark.slow
def test_seven_thousand_gpus_hold_one_cell_each_within_three_megabytes() -> None:
    """The bench's 7,000-GPU plan (bench/report_html.py): 7,000 cells, and the page within 3 MB (the figure and
    the Chromium timings are in bench/README.md)."""
    plan = synthetic_plan(7000)
    text = render(plan, CAT)
    assert len(text.encode()) < 3_000_000
    s = shapes(text)
    assert len(cells_by_gpu(plan, s)) == 7000 and len(page_data(text)["gpus"]) == 7000
    assert outside_references(text) == []


def _per_gpu(lines: list[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for line in lines:
        found = re.search(r" -i (\d+)\b", line)
        assert found, line
        out[int(found.group(1))].append(line)
    return dict(out)


@pytest.mark.slow  # CBC, and every nvidia-smi of discover and the dry run is the simulator run as a process
def test_commands_per_gpu_are_the_dry_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated A100 host (GPU 0 with three idle instances, GPU 1 with MIG off), discovered into a snapshot and
    planned from it with ten new workloads: the page's commands per GPU are exactly the nvidia-smi lines of
    `migplan apply --dry-run -o sh` for it (destroys by the live GPU instance ids, the mode change and its reset,
    the creates). Without the snapshot, the destroy step names its instances and the rest is the same."""
    _isolate(monkeypatch, tmp_path)
    st = host_state("A100-SXM4-40GB", 2, hostname="h1",
                    layouts=[Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]), None])
    st["gpus"][1].update(mig_current=False, mig_pending=False, gpu_instances=[])
    state = write_state(tmp_path / "h.json", st)
    sim_runner.serve(monkeypatch, state)
    inv = local_inventory(tmp_path)
    profiles = write_profiles(tmp_path / "p.yaml", [flat_workload(f"w{i}", 4000) for i in range(10)])
    snap, plan_file, page = tmp_path / "snap.json", tmp_path / "plan.json", tmp_path / "plan.html"

    def run(*args: str) -> str:
        r = CliRunner().invoke(app, list(args))
        assert r.exit_code == 0, r.output
        return r.stdout

    run("discover", "-i", str(inv), "--out", str(snap))
    run("propose", "--snapshot", str(snap), "-p", str(profiles), "--reclaim-idle", "--out", str(plan_file))
    script = run("apply", str(plan_file), "-i", str(inv), "--dry-run", "-o", "sh")
    dry = _per_gpu([ln for ln in script.splitlines() if ln.startswith("nvidia-smi")])
    assert any(" -mig 1" in c for c in dry[1])  # a mode change (and its reset, Ampere)
    plan = documents.load_plan(plan_file, CAT)
    g0 = plan.gpu("h1", 0)
    assert g0 is not None
    doomed = [a.instance for a in g0.actions if a.op is Op.DESTROY_GI and a.instance is not None]
    live = {(gi["profile_id"], gi["start"]): gi["id"] for gi in read_state(state)["gpus"][0]["gpu_instances"]}
    a100 = CAT.get("A100-SXM4-40GB")
    ids = ",".join(str(live[(a100.profile(i.profile).id, i.start)]) for i in doomed)
    assert doomed and f"nvidia-smi mig -i 0 -dgi -gi {ids}" in dry[0]  # by the simulator's own instance ids

    run("report", str(plan_file), "--out", str(page))
    data = page_data(page.read_text())
    shown = {r[1]: r[8] for r in data["gpus"] if r[8]}
    assert shown == dry and data["ids"] == str(snap)

    before = snap.read_bytes()
    onto = CliRunner().invoke(app, ["report", str(plan_file), "--out", str(snap)])  # never over the plan's snapshot
    assert onto.exit_code == 2 and "refusing to write" in onto.output and snap.read_bytes() == before, onto.output

    snap.rename(tmp_path / "gone.json")  # the plan's snapshot gone: the destroys name their instances
    r = CliRunner().invoke(app, ["report", str(plan_file), "--out", str(page)])
    assert r.exit_code == 0 and "GPU instance ids are not known" in r.output, r.output
    named = list(dict.fromkeys(str(a.instance) for a in g0.actions if a.op in (Op.DESTROY_CI, Op.DESTROY_GI)))
    without = {r[1]: r[8] for r in page_data(page.read_text())["gpus"] if r[8]}
    assert without[0][0] == f"# destroy {' '.join(named)} by their GPU instance ids (apply reads them: " \
                            "nvidia-smi mig -i 0 -lgi)"
    assert without[0][1:] == [c for c in dry[0] if " -dci" not in c and " -dgi" not in c]
    assert without[1] == dry[1]
    bad = CliRunner().invoke(app, ["report", str(plan_file), "--snapshot", str(tmp_path / "gone.json"),
                                   "--out", str(page)])
    assert bad.exit_code == 0  # named on purpose: the same snapshot, found where it is now
    assert {r[1]: r[8] for r in page_data(page.read_text())["gpus"] if r[8]} == dry


def test_a_named_snapshot_of_another_state_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      example: tuple[Plan, Path, Path]) -> None:
    _isolate(monkeypatch, tmp_path)
    _, page, _ = example
    other = tmp_path / "snap.json"
    other.write_text(json.dumps({"version": 1, "kind": "migplan/snapshot", "taken_at": "2026-12-01T00:00:00Z",
                                 "hosts": []}))
    r = CliRunner().invoke(app, ["report", str(page.parent / "plan.json"), "--snapshot", str(other),
                                 "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2 and "not the state this plan was made from" in r.output, r.output
    assert not (tmp_path / "p.html").exists()


@pytest.mark.slow
@needs_chromium
def test_chromium_requests_nothing_from_outside(example: tuple[Plan, Path, Path], tmp_path: Path) -> None:
    """The page's only request is its own file; a page with one outside image and one outside stylesheet
    is seen requesting both (so the check can fail)."""
    _, page, _ = example
    assert page_requests(tmp_path, page) == [page.as_uri()]
    bad = tmp_path / "bad.html"
    bad.write_text(page.read_text().replace("</body>", '<img src="http://cdn.example.com/x.png">'
                                            '<link rel="stylesheet" href="https://fonts.example.net/a.css"></body>')
                   .replace("img-src data:", "img-src *; style-src * 'unsafe-inline'"))
    seen = page_requests(tmp_path, bad)
    assert "http://cdn.example.com/x.png" in seen and "https://fonts.example.net/a.css" in seen, seen


@pytest.mark.slow
@needs_chromium
def test_chromium_without_network_loads_the_page_without_errors(example: tuple[Plan, Path, Path],
                                                                 tmp_path: Path) -> None:
    _, page, _ = example
    for query in ("", "?filter=changes&q=gpu&sort=changes#g3"):
        dom, log = dump_dom(tmp_path, page, query)
        assert "data-ready=\"1\"" in dom
        # the page writes nothing to the console: any console line is an error (a script error, a CSP refusal);
        # the browser's own background services failing to resolve their names are not the page's
        assert not [ln for ln in log.splitlines() if "CONSOLE" in ln or "Content Security Policy" in ln
                    or "Uncaught" in ln or page.as_uri() in ln and "ERR" in ln]

def test_report_command_refuses_a_bad_plan_with_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, tmp_path)
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"version": 4, "kind": "migplan/plan"}))
    r = CliRunner().invoke(app, ["report", str(bad), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2 and str(bad) in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p.html").exists()


def test_propose_report_never_overwrites_an_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, tmp_path)
    inv = tmp_path / "inv.yaml"
    inv.write_text((ROOT / "inventory" / "example.yaml").read_text())
    before = inv.read_text()
    r = CliRunner().invoke(app, ["propose", "-i", str(inv), "-p", str(ROOT / "profiles" / "example"),
                                 "--report", str(inv)])
    assert r.exit_code == 2 and "refusing to write" in r.output
    assert inv.read_text() == before
