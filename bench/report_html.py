"""The HTML report at fleet scale: page size, render time, and how fast a real headless Chromium makes it usable.

    python -m bench.report_html                      # 1,000 and 7,000 GPUs, prints the results table (markdown)
    python -m bench.report_html --write              # also writes bench/results/report-html.md
    python -m bench.report_html --sizes 7000 --runs 3
    python -m bench.report_html --before OLD.py      # first the same with another report module's `render`
                                                     # (`git show f18e20e:migplan/report_html.py > /tmp/old.py`)
    python -m bench.report_html --screenshots docs/images   # the pictures of docs/report.md, from the real Chromium

The plans are synthetic (seeded): A100-40GB and H100-80GB GPUs, 8 per host, each with a random maximal layout, a
workload on 80% of the instances, a third of the GPUs changing layout. The page's content does not depend on how
the plan was found, so no solver runs here.

Chromium is driven over its DevTools protocol (`--remote-debugging-pipe`, no network: no name resolves), one fresh
browser per run, the page opened from a file. Per run, from the page's own clock (`performance`, milliseconds since
the navigation started): DOMContentLoaded (the HTML parsed and the page's script run: the overview, filters and
search work from then on), first contentful paint, the load event; then, timed inside the page from the input to
the next frame drawn (two `requestAnimationFrame`s): a click on the "changes only" filter, a search typed into the
search box, and a click on the middle GPU's overview cell (its host opened and its detail drawn). "start to load" is the
wall time from starting the browser process to the load event (the browser's own start-up included). The median
of `--runs` runs is printed. A step the page does not have (the filter, the overview on the old page) is "n/a".
Nothing here is asserted (tests/test_report_html.py checks the 7,000-GPU page's cells and its 3 MB bound).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import enumerate_layouts
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.model.state import GpuState
from migplan.planner import Plan
from migplan.planner.plan import SolveInfo, Summary, instance_memory_mib
from migplan.report_html import render

CAT = builtin_catalog()
Render = Callable[..., str]


def synthetic_plan(n_gpus: int, seed: int = 1) -> Plan:
    rng = random.Random(seed)
    layouts = {m: enumerate_layouts(CAT.get(m), maximal=True) for m in ("A100-SXM4-40GB", "H100-SXM5-80GB")}
    gpus, workloads = [], []
    for n in range(n_gpus):
        h, i = divmod(n, 8)
        model_id = "A100-SXM4-40GB" if h % 3 else "H100-SXM5-80GB"
        model, host = CAT.get(model_id), f"gpu-{h:04d}"
        current = rng.choice(layouts[model_id])
        target = current if rng.random() < 0.66 else rng.choice(layouts[model_id])
        gpus.append(GpuPlan(GpuState(host, i, model_id, mig_enabled=True, layout=current), target,
                            tuple(diff(current, target, gpu=(host, i), architecture=model.architecture))))
        for inst in target.instances:
            if rng.random() < 0.8:
                mib = instance_memory_mib(model, str(inst))
                peak = rng.randint(mib // 5, mib - 300)
                workloads.append(WorkloadPlan(f"svc-{h}-{i}-{inst.start}", "svc", "placed", host, i, str(inst),
                                              peak + 256, peak, mib, mib - peak,
                                              model.profile(inst.profile).memory_slices, inst in current.instances))
    s = Summary(n_gpus, n_gpus, n_gpus, None, sum(1 for g in gpus if g.actions), 0, 0, 0, len(workloads), 0, 0, 0,
                0, 0.0, 0, 300, "+10%, at least 512 MiB", None)
    return Plan("sha256:" + "0" * 64, "inventory", {}, SolveInfo("cbc", "optimal", 0, 0, 0, 0, None), s,
                tuple(gpus), tuple(workloads))


# --- Chromium over the DevTools protocol -----------------------------------------------------------------------

class Browser:
    """A headless Chromium driven over --remote-debugging-pipe (commands on fd 3, replies on fd 4)."""

    def __init__(self, exe: str, profile: str) -> None:
        self.to_r, self.to_w = os.pipe()
        self.from_r, self.from_w = os.pipe()

        def fds() -> None:  # dup2 onto the same number keeps close-on-exec: clear it then
            for fd, want in ((self.to_r, 3), (self.from_w, 4)):
                if fd == want:
                    os.set_inheritable(fd, True)
                else:
                    os.dup2(fd, want)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "--host-resolver-rules=MAP * ~NOTFOUND",
             "--window-size=1400,1000", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": profile})
        os.close(self.to_r)
        os.close(self.from_w)
        self.buf = b""
        self.n = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []  # every message read, replies and events (the tests look at them)

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.n += 1
        msg: dict[str, Any] = {"id": self.n, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        return self.n

    def read(self, until: Callable[[dict[str, Any]], bool], timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                msg: dict[str, Any] = json.loads(raw)
                self.events.append(msg)
                if until(msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer")
            ready, _, _ = select.select([self.from_r], [], [], left)
            if ready:
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed its pipe")
                self.buf += chunk

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        n = self.send(method, params)
        reply = self.read(lambda m: m.get("id") == n)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:60]}...: {res['exceptionDetails']}")
        return res["result"].get("value")

    def close(self) -> None:
        try:
            self.session = None
            self.send("Browser.close")
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self.to_w)
            os.close(self.from_r)


# Timed inside the page: from the input to the second animation frame after it (the frame that shows the result).
_FRAMES = "new Promise(function(r){requestAnimationFrame(function(){requestAnimationFrame(function(){r();});});})"
_TIMED = ("(async function(){var t=performance.now();var ok=(function(){ACT})();if(!ok)return null;"
          "await " + _FRAMES + ";return performance.now()-t;})()")
FILTER = "var b=document.querySelector('[data-filter=\"changes\"]');if(!b)return false;b.click();return true;"
SEARCH = ("var q=document.getElementById('q');if(!q)return false;q.value='gpu-0042';"
          "q.dispatchEvent(new Event('input'));return true;")
OPEN_GPU = ("var all=document.querySelectorAll('#grid a'),n=all.length>>1,a=all[n];if(!a)return false;a.click();"
            "return !!document.getElementById('g'+n);")
PAGE_TIMES = ("(async function(){for(var i=0;i<250&&!performance.getEntriesByName('first-contentful-paint').length;"
              "i++)await new Promise(function(r){setTimeout(r,20);});"  # the paint entry comes when it is presented
              "var n=performance.getEntriesByType('navigation')[0];var p={};"
              "performance.getEntriesByType('paint').forEach(function(e){p[e.name]=e.startTime;});"
              "return {dcl:n.domContentLoadedEventEnd,load:n.loadEventEnd,fcp:p['first-contentful-paint']||null,"
              "cells:document.querySelectorAll('#grid a').length};})()")


def chromium_run(exe: str, page: Path) -> dict[str, float | None]:
    """One fresh browser: the page's timings, the three interactions, the wall time from start to load."""
    with tempfile.TemporaryDirectory() as profile:
        t0 = time.perf_counter()
        b = Browser(exe, profile)
        try:
            target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            b.session = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            b.call("Page.enable")
            b.call("Runtime.enable")
            b.send("Page.navigate", {"url": page.as_uri()})
            b.read(lambda m: m.get("method") == "Page.loadEventFired", timeout=600)
            wall = time.perf_counter() - t0
            times = b.evaluate(PAGE_TIMES)
            out: dict[str, float | None] = {"wall_s": wall, "dcl_ms": times["dcl"], "fcp_ms": times["fcp"],
                                            "load_ms": times["load"], "cells": times["cells"]}
            for name, act in (("filter_ms", FILTER), ("search_ms", SEARCH), ("open_ms", OPEN_GPU)):
                out[name] = b.evaluate(_TIMED.replace("ACT", act))
                b.evaluate("(function(){var q=document.getElementById('q');if(q){q.value='';"
                           "q.dispatchEvent(new Event('input'));}var a=document.querySelector("
                           "'[data-filter=\"all\"]');if(a)a.click();})()")
        finally:
            b.close()
    return out


def median(runs: list[dict[str, float | None]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(v for v in values if v is not None) if values else None


def load_renderer(path: str | None) -> Render:
    if path is None:
        return render
    spec = importlib.util.spec_from_file_location("report_html_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    fn: Render = module.render
    return fn


def _version(exe: str | None) -> str:
    if exe is None:
        return "no Chromium"
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or "Chromium"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f} ms"


def _shot(exe: str, url: str, out: Path, size: str, profile: str) -> None:
    """`chromium --headless --screenshot` of one page as it is after its script ran."""
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                    "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars", f"--window-size={size}",
                    "--virtual-time-budget=5000", f"--screenshot={out}", url],
                   capture_output=True, timeout=300, check=True, env={**os.environ, "HOME": profile})


def _shot_at(exe: str, url: str, out: Path, profile: str) -> None:
    """A screenshot over the DevTools protocol (`Page.captureScreenshot`), for a page scrolled to a GPU's detail
    (`#g<n>`): `--screenshot` draws a page scrolled at load as a blank viewport."""
    b = Browser(exe, profile)
    try:
        target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        b.session = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        b.call("Page.enable")
        b.send("Page.navigate", {"url": url})
        b.read(lambda m: m.get("method") == "Page.loadEventFired")
        b.evaluate(_FRAMES)
        out.write_bytes(base64.b64decode(b.call("Page.captureScreenshot", {"format": "png"})["data"]))
    finally:
        b.close()


def screenshots(exe: str, where: Path) -> list[Path]:
    """The pictures of docs/report.md from the real Chromium: the example fleet's page (planned by `migplan
    propose --allow-disrupt`, the real CBC) and the 7,000-GPU page: its overview, the "changes only" filter, and
    one changed GPU's detail opened from its cell."""
    where.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    exe_migplan = shutil.which("migplan") or "migplan"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg")}  # not this machine's config file
        for var in ("MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_PROFILES", "MIGPLAN_CATALOG", "MIGPLAN_OUTPUT"):
            env.pop(var, None)
        subprocess.run([exe_migplan, "propose", "-i", str(root / "inventory" / "example.yaml"), "-p",
                        str(root / "profiles" / "example"), "--allow-disrupt", "--out", str(tmp / "plan.json"), "-q"],
                       check=True, env=env, capture_output=True, cwd=tmp)
        subprocess.run([exe_migplan, "report", "plan.json", "--out", "example.html", "--title",
                        "migplan plan: the example fleet"], check=True, env=env, capture_output=True, cwd=tmp)
        big = synthetic_plan(7000)
        page = tmp / "plan-7000.html"
        page.write_text(render(big, CAT, title="migplan plan: 7,000 GPUs (synthetic, bench/report_html.py)"))
        changed = next(n for n, g in enumerate(sorted(big.gpus, key=lambda g: g.key))
                       if any(a.op.value == "destroy-gi" for a in g.actions) and n > 3000)
        out = [where / "report-example.png", where / "report-7000-overview.png", where / "report-7000-changes.png",
               where / "report-7000-gpu.png"]
        _shot(exe, (tmp / "example.html").as_uri(), out[0], "1400,2200", str(tmp / "p0"))
        _shot(exe, page.as_uri(), out[1], "1400,1100", str(tmp / "p1"))
        _shot(exe, page.as_uri() + "?filter=changes", out[2], "1400,1100", str(tmp / "p2"))
        _shot_at(exe, page.as_uri() + f"?filter=changes#g{changed}", out[3], str(tmp / "p3"))
    return out


def measure(renderer: Render, label: str, sizes: list[int], runs: int, exe: str | None, where: Path) -> list[str]:
    """One table row per size: the page rendered by `renderer`, opened `runs` times in a fresh Chromium."""
    rows = []
    for n in sizes:
        plan = synthetic_plan(n)
        t = time.perf_counter()
        text = renderer(plan, CAT)
        render_s = time.perf_counter() - t
        page = where / f"{label}-{n}.html"
        page.write_text(text)
        done = [chromium_run(exe, page) for _ in range(runs)] if exe else []
        cells = median(done, "cells") if done else None
        rows.append(
            f"| {label} | {n:,} | {len(plan.workloads):,} | {len(text.encode()) / 1e6:.2f} MB | {render_s:.2f} s | "
            + " | ".join(_ms(median(done, k)) if done else "n/a" for k in ("dcl_ms", "fcp_ms", "load_ms"))
            + f" | {median(done, 'wall_s') or 0:.2f} s | "
            + " | ".join(_ms(median(done, k)) if done else "n/a" for k in ("filter_ms", "search_ms", "open_ms"))
            + f" | {int(cells) if cells else 'n/a'} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--screenshots", metavar="DIR", help="only write the pictures of docs/report.md into DIR")
    ap.add_argument("--sizes", default="1000,7000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", metavar="FILE", help="also measure this report module's `render` first (before)")
    ap.add_argument("--keep", help="keep the pages in this directory")
    args = ap.parse_args()
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if args.screenshots:
        if exe is None:
            raise SystemExit("chromium is not installed")
        for shot in screenshots(exe, Path(args.screenshots)):
            print(f"{shot} ({shot.stat().st_size:,} bytes)")
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        where = Path(args.keep or d)
        where.mkdir(parents=True, exist_ok=True)
        if args.before:
            rows += measure(load_renderer(args.before), "before", sizes, args.runs, exe, where)
        rows += measure(render, "now", sizes, args.runs, exe, where)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    out = "\n".join([
        "## HTML report at scale (`python -m bench.report_html`)", "",
        f"Machine: {os.cpu_count()} CPUs, load average {load} when the run ended; {_version(exe)}."
        + (f" Before: {args.before}." if args.before else ""), "",
        "Synthetic seeded plans, 8 GPUs per host; render = `render` in Python; the rest measured in a headless "
        f"Chromium over its DevTools protocol, median of {args.runs} fresh browsers (the page's own clock from the "
        "navigation: DOMContentLoaded, first contentful paint, load; start to load: wall time from starting the "
        "browser; filter / search / open: from the input to the next frame drawn).", "",
        "| page | GPUs | workloads | size | render | DOMContentLoaded | first paint | load | start to load | "
        "filter click | search | open a GPU | overview cells |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""])
    print(out)
    if args.write:
        Path(__file__).resolve().parent.joinpath("results", "report-html.md").write_text(out)


if __name__ == "__main__":
    main()
