"""The HTML report, rendered in a real headless Chromium: the example plan (made by the real CBC) and a
1,000-GPU plan; the SVG shapes in the DOM after the scripts ran match the plan's instances (count and
slot positions per GPU, from the catalog's geometry), and the page loads nothing from outside.

Screenshots land in the test's temporary directory (and, with MIGPLAN_REPORT_SHOTS=DIR, in DIR).
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import select
import shutil
import subprocess
import time
from collections import defaultdict
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan import documents
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.cli.app import app
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.model.state import GpuState
from migplan.planner import Plan
from migplan.planner.plan import SolveInfo, Summary, instance_memory_mib
from migplan.report_html import render

CAT = builtin_catalog()
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/test.sh installs "
                                    "Debian's chromium package when run as root)")


# --- plans ------------------------------------------------------------------------------------------

def _isolate(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    mp.setenv("XDG_CONFIG_HOME", str(tmp / "xdg"))
    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_PROFILES", "MIGPLAN_CATALOG"):
        mp.delenv(var, raising=False)


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


# --- reading the DOM back ---------------------------------------------------------------------------

class Shapes(HTMLParser):
    """Per (host, gpu, side): the instance rectangles and the SVG's width and slot count."""

    def __init__(self) -> None:
        super().__init__()
        self.host: str | None = None
        self.gpu: int | None = None
        self.side: str | None = None
        self.rects: dict[tuple[str, int, str], list[dict[str, str]]] = defaultdict(list)
        self.svgs: dict[tuple[str, int, str], dict[str, str]] = {}
        self.hosts: list[dict[str, str]] = []
        self.scripts = 0
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        cls = a.get("class", "").split()
        if tag == "details" and "host" in cls:
            self.host = a["data-host"]
            self.hosts.append(a)
        elif tag == "section" and "gpu-row" in cls:
            self.gpu = int(a["data-gpu"])
        elif tag == "svg" and "gpu" in cls:
            self.side = a["data-side"]
            assert self.host is not None and self.gpu is not None
            self.svgs[(self.host, self.gpu, self.side)] = a
            self.rects.setdefault((self.host, self.gpu, self.side), [])
        elif tag == "rect" and ("inst" in cls or "whole" in cls) and self.side is not None:
            assert self.host is not None and self.gpu is not None
            self.rects[(self.host, self.gpu, self.side)].append(a)
        elif tag == "script":
            self.scripts += 1
        elif tag == "body":
            self.body = a

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.side = None


def shapes(text: str) -> Shapes:
    p = Shapes()
    p.feed(text)
    return p


def check_shapes(plan: Plan, s: Shapes) -> int:
    """Every GPU's current and target layout drawn exactly: one rectangle per instance, at its start slot,
    as many slots wide as its profile has memory slices (the catalog's), labelled with the workloads."""
    names: dict[tuple[str, int, str], list[str]] = defaultdict(list)
    for w in plan.workloads:
        if w.status in ("placed", "at_risk") and w.instance:
            names[(w.host or "", w.gpu or 0, w.instance)].append(w.name)
    checked = 0
    for g in plan.gpus:
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


# --- Chromium ---------------------------------------------------------------------------------------

def page_requests(tmp: Path, page: Path, wait_s: float = 2.0) -> list[str]:
    """Every URL the page itself requests, as Chromium's DevTools protocol reports it (the Network domain
    of the page's own target, over --remote-debugging-pipe): the browser's own background traffic is not
    the page's and is not counted. The network is off as well (no name resolves)."""
    assert CHROMIUM is not None
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def fds() -> None:  # the pipe protocol: Chromium reads commands on fd 3 and writes on fd 4
        os.dup2(to_chrome_r, 3)
        os.dup2(from_chrome_w, 4)

    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            f"--user-data-dir={tmp / 'cdp-profile'}", "--remote-debugging-pipe",
            "--host-resolver-rules=MAP * ~NOTFOUND", "about:blank"]
    proc = subprocess.Popen(args, preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(tmp)})
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    buf = b""
    events: list[dict[str, Any]] = []
    ids = iter(range(1, 1000))

    def send(method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        n = next(ids)
        msg: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(to_chrome_w, json.dumps(msg).encode() + b"\0")
        return n

    def read(until: Any, timeout: float = 60.0) -> dict[str, Any] | None:
        nonlocal buf
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                events.append(msg)
                if until(msg):
                    return msg  # type: ignore[no-any-return]
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([from_chrome_r], [], [], left)
            if ready:
                chunk = os.read(from_chrome_r, 1 << 16)
                if not chunk:
                    return None
                buf += chunk

    def call(method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        n = send(method, params, session)
        reply = read(lambda m: m.get("id") == n)
        assert reply is not None and "error" not in reply, (method, reply)
        return reply.get("result", {})  # type: ignore[no-any-return]

    try:
        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        call("Network.enable", session=session)
        call("Page.enable", session=session)
        call("Page.navigate", {"url": page.as_uri()}, session=session)
        assert read(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session)
        read(lambda m: False, timeout=wait_s)  # late requests (scripts, timers)
        send("Browser.close")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(to_chrome_w)
        os.close(from_chrome_r)
    return [e["params"]["request"]["url"] for e in events
            if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session]


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
    done = chromium(tmp, page.as_uri() + query, "--dump-dom", "--virtual-time-budget=5000")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


def screenshot(tmp: Path, page: Path, name: str, size: str = "1400,2000") -> Path:
    shot = tmp / name
    done = chromium(tmp, page.as_uri(), f"--screenshot={shot}", f"--window-size={size}", "--hide-scrollbars")
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

def test_example_plan_page_has_every_instance_at_its_slots(example: tuple[Plan, Path, Path]) -> None:
    plan, propose_page, report_page = example
    for page in (propose_page, report_page):
        s = shapes(page.read_text())
        assert check_shapes(plan, s) == sum(len(g.current or Layout()) + len(g.target or Layout()) for g in plan.gpus)
        assert sorted(h["data-host"] for h in s.hosts) == sorted({g.host for g in plan.gpus})


def test_page_references_nothing_outside_itself(example: tuple[Plan, Path, Path]) -> None:
    _, page, _ = example
    text = page.read_text()
    assert outside_references(text) == []
    assert outside_references(text.replace("</body>", '<img src="https://cdn.example.com/x.png"></body>')) != []
    assert outside_references("<style>a{background:url(http://x.example/a.png)}</style>") != []


def test_untrusted_names_are_escaped() -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;'
    plan = big_plan(1, 1)
    w = next(w for w in plan.workloads if w.status == "placed")
    plan = replace(plan, workloads=(replace(w, name=evil), *plan.workloads[1:]))
    text = render(plan, CAT, title=evil)
    assert evil not in text and "<img" not in text and text.count("<script>") == 1
    assert html.escape(evil) in text
    assert outside_references(text) == []


@pytest.mark.slow
@needs_chromium
def test_example_plan_in_chromium_dom_and_screenshot(example: tuple[Plan, Path, Path], tmp_path: Path) -> None:
    plan, page, _ = example
    dom, _ = dump_dom(tmp_path, page)
    s = shapes(dom)
    assert s.body.get("data-ready") == "1"  # the page's script ran
    assert check_shapes(plan, s) > 0
    assert s.scripts == 1
    shot = screenshot(tmp_path, page, "example-plan.png")
    assert shot.exists()


@pytest.mark.slow
@needs_chromium
def test_thousand_gpus_in_chromium_sorted_searched_and_drawn(tmp_path: Path) -> None:
    plan = big_plan()
    assert len(plan.gpus) == 1000
    page = tmp_path / "big.html"
    page.write_text(render(plan, CAT))
    s = shapes(page.read_text())
    assert all("open" not in h for h in s.hosts)  # 125 hosts start collapsed
    dom, _ = dump_dom(tmp_path, page)
    drawn = check_shapes(plan, shapes(dom))
    assert drawn == sum(len(g.current or Layout()) + len(g.target or Layout()) for g in plan.gpus)
    by_changes = shapes(dump_dom(tmp_path, page, "?sort=changes")[0]).hosts
    counts = [int(h["data-changes"]) for h in by_changes]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    searched = shapes(dump_dom(tmp_path, page, "?q=svc-017-3")[0]).hosts
    shown = [h["data-host"] for h in searched if "hidden" not in h]
    assert shown == ["gpu-017.dc1"]
    screenshot(tmp_path, page, "thousand-gpus.png")


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
    dom, log = dump_dom(tmp_path, page)
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
