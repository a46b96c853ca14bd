"""dashboards/migplan.json: checked against Grafana's published JSON Schema (tests/data/grafana, see its README),
and every query of every panel run against a real Prometheus (Debian's package, tests/prom_support.py) over data
backfilled with promtool: dcgm-exporter's series shaped as the exporter writes them (MIG instances with
GPU_I_PROFILE/GPU_I_ID, a whole GPU, `Hostname` on one host and `hostname` on the other, two pods time-sharing
one instance, a layout change), and migplan's textfile metrics written by migplan's own writer
(migplan.replan.metrics.render) for six replan runs, scraped every 30 s. Template variables are resolved the way
Grafana resolves them (the variable's own query against that Prometheus) and substituted as Grafana formats
them; each query must return series, and the key panels the values the generator planted."""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prom_support import INTERVAL, POINTS, STEP, Dataset, PromServer, Raw, ensure_prometheus

from migplan.replan import metrics

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "dashboards" / "migplan.json"
SCHEMAS = Path(__file__).resolve().parent / "data" / "grafana"
# panel plugin id -> the grafana-foundation-sdk schema of its options (tests/data/grafana/README.md)
PANEL_SCHEMAS = {"timeseries": "timeseries", "stat": "stat", "table": "table", "state-timeline": "statetimeline",
                 "bargauge": "bargauge"}
MIB = 1048576


@functools.cache
def _schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMAS / f"{name}.jsonschema.json").read_text())
    return doc


def _definition(name: str, definition: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}",
                                       "definitions": _schema(name)["definitions"]})


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out += [p, *p.get("panels", [])]  # a collapsed row carries its panels inside
    return [p for p in out if p["type"] != "row"]


def _targets(dash: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in _panels(dash) for t in p.get("targets", [])]


def schema_errors(dash: dict[str, Any]) -> list[str]:
    """Every way `dash` departs from Grafana's published schemas: the dashboard model (the import wrapper's
    `__inputs`, `__elements`, `__requires` aside: Grafana's import reads and drops them), each panel's options and
    custom field config against its plugin's schema, each query against the Prometheus query schema."""
    errors = []
    model = {k: v for k, v in dash.items() if k not in ("__inputs", "__elements", "__requires")}
    errors += [f"dashboard {list(e.absolute_path)}: {e.message[:200]}"
               for e in jsonschema.Draft7Validator(_schema("dashboard")).iter_errors(model)]
    for p in _panels(dash):
        kind = PANEL_SCHEMAS.get(p["type"])
        if kind is None:
            errors.append(f"panel {p.get('title')!r}: type {p['type']!r} has no schema here")
            continue
        errors += [f"panel {p.get('title')!r} options {list(e.absolute_path)}: {e.message[:200]}"
                   for e in _definition(kind, "Options").iter_errors(p.get("options", {}))]
        custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if custom is not None:
            if "FieldConfig" not in _schema(kind)["definitions"]:
                errors.append(f"panel {p.get('title')!r}: {p['type']} has no custom field config")
            else:
                errors += [f"panel {p.get('title')!r} custom {list(e.absolute_path)}: {e.message[:200]}"
                           for e in _definition(kind, "FieldConfig").iter_errors(custom)]
        for t in p.get("targets", []):
            errors += [f"panel {p.get('title')!r} target {t.get('refId')} {list(e.absolute_path)}: {e.message[:200]}"
                       for e in jsonschema.Draft7Validator(_schema("prometheus")).iter_errors(t)]
    return errors


def wrapper_errors(dash: dict[str, Any]) -> list[str]:
    """What Grafana's import and the dashboard's own references need beyond the schema: every `${DS_...}` used is
    an input of type datasource or a variable; every panel type is required; ids unique; refIds unique per panel;
    panels inside the 24-column grid and not overlapping."""
    errors = []
    inputs = {i["name"]: i for i in dash.get("__inputs", [])}
    variables = {v["name"] for v in dash["templating"]["list"]}
    text = json.dumps({k: v for k, v in dash.items() if k != "__inputs"})
    for name in sorted(set(re.findall(r"\$\{(DS_[A-Z0-9_]+)\}", text))):
        if inputs.get(name, {}).get("type") != "datasource" or name not in variables:
            errors.append(f"${{{name}}} is used but is not both a datasource input and a variable")
    required = {(r["type"], r["id"]) for r in dash.get("__requires", [])}
    for p in _panels(dash):
        if ("panel", p["type"]) not in required:
            errors.append(f"panel type {p['type']} not in __requires")
    ids = [p["id"] for p in dash["panels"]] + [q["id"] for p in dash["panels"] for q in p.get("panels", [])]
    if len(ids) != len(set(ids)):
        errors.append(f"panel ids repeat: {sorted(ids)}")
    taken: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g, title = p["gridPos"], p.get("title", "")
        refs = [t["refId"] for t in p.get("targets", [])]
        if len(refs) != len(set(refs)):
            errors.append(f"panel {title!r}: refIds repeat")
        if g["x"] + g["w"] > 24:
            errors.append(f"panel {title!r} runs past the grid's 24 columns")
        for cell in ((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])):
            if cell in taken:
                errors.append(f"panel {title!r} overlaps {taken[cell]!r} at {cell}")
                break
            taken[cell] = title
    return errors


# --- the dashboard against the schema -------------------------------------------------------------------------

def test_the_dashboard_validates_against_grafanas_published_schemas() -> None:
    dash = _dashboard()
    assert schema_errors(dash) == []
    assert wrapper_errors(dash) == []
    assert {p["type"] for p in _panels(dash)} <= set(PANEL_SCHEMAS)


@pytest.mark.parametrize(("what", "change", "needle"), [
    ("an unknown top-level key", lambda d: d.update(style="dark"), "dashboard []"),
    ("no templating", lambda d: d.pop("templating"), "'templating' is a required property"),
    ("a panel wider than the grid", lambda d: d["panels"][1]["gridPos"].update(w=30), "dashboard ['panels', 1]"),
    ("a misspelt panel key", lambda d: d["panels"][1].update(fieldconfig={}), "dashboard ['panels', 1]"),
    ("a bad stat option", lambda d: d["panels"][1]["options"].update(colorMode="rainbow"), "options ['colorMode']"),
    ("a timeseries legend without its mode", lambda d: _first(d, "timeseries")["options"]["legend"].pop(
        "displayMode"), "options ['legend']"),
    ("a custom key of another panel type", lambda d: _first(d, "state-timeline")["fieldConfig"]["defaults"][
        "custom"].update(drawStyle="line"), "custom []"),
    ("a query without expr", lambda d: _first(d, "table")["targets"][0].pop("expr"), "'expr' is a required"),
    ("a query with a bad format", lambda d: _first(d, "table")["targets"][0].update(format="csv"), "['format']"),
    ("a variable of an unknown type", lambda d: d["templating"]["list"][1].update(type="dropdown"),
     "['templating', 'list', 1, 'type']"),
])
def test_the_schema_check_rejects_what_grafana_would_not_read(what: str, change: Callable[[dict[str, Any]], object],
                                                              needle: str) -> None:
    dash = copy.deepcopy(_dashboard())
    change(dash)
    errors = schema_errors(dash)
    assert any(needle in e for e in errors), (what, errors)


@pytest.mark.parametrize(("what", "change", "needle"), [
    ("an undeclared datasource input", lambda d: d["__inputs"].clear(), "${DS_PROMETHEUS} is used"),
    ("a panel type not required", lambda d: d["__requires"].pop(), "not in __requires"),
    ("two panels in one place", lambda d: d["panels"][2]["gridPos"].update(x=0), "overlaps"),
    ("a repeated panel id", lambda d: d["panels"][2].update(id=d["panels"][1]["id"]), "panel ids repeat"),
])
def test_the_wrapper_check_rejects_a_broken_import(what: str, change: Callable[[dict[str, Any]], object],
                                                   needle: str) -> None:
    dash = copy.deepcopy(_dashboard())
    change(dash)
    assert any(needle in e for e in wrapper_errors(dash)), what


def _first(dash: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(p for p in _panels(dash) if p["type"] == kind)


def _all_run_metrics() -> metrics.RunMetrics:
    return metrics.RunMetrics(1.0, "applied", gpus_used=1, gpus_lower_bound=1, gap=0.0, workloads_unplaced=0,
                              workloads_at_risk=0, idle_instances_kept=0, workloads_below_instance=0,
                              stranded_slices=0, gpus_changed=0, solve_seconds=1.0, apply_seconds=1.0, reasons=(),
                              gpu_changed_at=(("h", 0, 1.0),), at_risk=(metrics.AtRisk("w", "h", 0, None, 1),))


def test_every_migplan_metric_the_dashboard_reads_is_one_replan_writes() -> None:
    """Names cannot drift: the dashboard's `migplan_*` names are those of a metrics file with every field set."""
    written = set(re.findall(r"^# TYPE (\S+) ", metrics.render(_all_run_metrics()), re.M))
    text = json.dumps(_dashboard())
    used = set(re.findall(r"\bmigplan_[a-z_]+\b", text))
    assert used and used <= written, used - written
    assert "migplan_gpu_last_change_timestamp_seconds" in used and "migplan_workload_at_risk_margin_bytes" in used
    # dcgm-exporter: only fields of its default counters (etc/default-counters.csv)
    assert set(re.findall(r"\bDCGM_FI_[A-Z_]+\b", text)) == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}


# --- the data: dcgm-exporter and migplan's textfile, as scraped -------------------------------------------------

A100 = {"modelName": "NVIDIA A100-SXM4-40GB", "UUID": "GPU-1b2c3d4e-0000-1111-2222-333344445555",
        "Hostname": "gpu-node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15", "job": "dcgm-k8s",
        "instance": "10.0.0.5:9400", "pod": "nvidia-dcgm-exporter-x7tzq", "namespace": "gpu-operator",
        "container": "nvidia-dcgm-exporter"}
H100 = {"modelName": "NVIDIA H100 80GB HBM3", "UUID": "GPU-9f8e7d6c-0000-1111-2222-333344445555",
        "hostname": "gpu-node-b", "job": "dcgm-honor", "instance": "10.0.0.6:9400"}  # exporter after d5e5f51
HALF = POINTS // 2  # gpu-node-b's GPU 1 is re-partitioned at the half: t0 + 15 + 30 * HALF
RUN_EVERY = 1200  # replan runs at t0, t0 + 20 min, ...; node_exporter serves the last file at every scrape
TEXTFILE = {"job": "node", "instance": "mgmt-01:9100"}


def _wave(i: int, lo: float, hi: float, period: int, seed: int) -> float:
    return round(lo + (hi - lo) * (((i * 37 + seed * 11) % period) / (period - 1)))


class Fleet:
    """What was generated, and what each key panel must show."""

    def __init__(self, now: float) -> None:
        self.t0 = int((now - 5 * 3600) // STEP * STEP)
        self.d = Dataset(self.t0)
        self.instances: dict[tuple[str, str, str, str], tuple[Callable[[int], float], int]] = {}
        self._dcgm()
        self.runs = self._runs()
        self._textfile()

    def _mig(self, base: dict[str, str], gpu: str, profile: str | None, gi: str | None, total: int,
             used: Callable[[int], float], points: range = range(POINTS), **workload: str) -> None:
        labels = {**base, "gpu": gpu, "device": f"nvidia{gpu}", **workload}
        if profile is not None and gi is not None:
            labels |= {"GPU_I_PROFILE": profile, "GPU_I_ID": gi}
        for metric, fn in (("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", lambda i: total - used(i))):
            raw = Raw(metric, labels)
            raw.values = [(self.t0 + 15 + INTERVAL * i, float(fn(i))) for i in points]
            self.d.raws.append(raw)
        host = base.get("Hostname") or base["hostname"]
        if POINTS - 1 in points:
            self.instances[(host, gpu, profile or "whole GPU", gi or "")] = (used, total)

    def _dcgm(self) -> None:
        a, b = A100, H100
        self._mig(a, "0", "3g.20gb", "1", 19968, lambda i: _wave(i, 12000, 19000, 53, 1),
                  exported_pod="chat-7d9f8c6b5d-x2x4z", exported_namespace="prod", exported_container="server")
        self._mig(a, "0", "2g.10gb", "5", 9856, lambda i: 13.0)  # idle: only the exporter's own pod labels
        for pod in ("embed-0", "embed-1"):  # two pods time-share one instance: one instance, two series
            self._mig(a, "0", "1g.5gb", "13", 4864, lambda i: _wave(i, 2000, 4500, 29, 3),
                      exported_pod=pod, exported_namespace="prod", exported_container="embed")
        self._mig(a, "0", "1g.5gb", "14", 4864, lambda i: _wave(i, 100, 900, 31, 4))
        self._mig(a, "1", None, None, 40536, lambda i: _wave(i, 20000, 38000, 41, 5),  # MIG off: the whole GPU
                  exported_pod="train-big-0", exported_namespace="research", exported_container="trainer")
        before, after = range(HALF), range(HALF, POINTS)
        self._mig(b, "1", "4g.40gb", "1", 40320, lambda i: _wave(i, 30000, 39000, 37, 6), before,
                  pod="infer-0", namespace="research", container="srv")
        self._mig(b, "1", "3g.40gb", "2", 40320, lambda i: _wave(i, 25000, 39500, 43, 7),
                  pod="train-job-0", namespace="research", container="trainer")
        for gi, seed in (("3", 8), ("5", 9)):
            self._mig(b, "1", "2g.20gb", gi, 20096, lambda i, s=seed: _wave(i, 5000, 15000, 23, s), after,
                      pod=f"infer-{gi}", namespace="research", container="srv")

    def _runs(self) -> list[metrics.RunMetrics]:
        t0, day = self.t0, 86400.0
        chat = metrics.AtRisk("prod/chat-7d9f8c6b5d-x2x4z", "gpu-node-a", 0, "3g.20gb@4", 700)
        train = metrics.AtRisk("research/train-job-0", "gpu-node-b", 1, "3g.40gb@4", 1536)

        def run(k: int, result: str, reasons: tuple[str, ...], changed: dict[tuple[str, int], float],
                at_risk: tuple[metrics.AtRisk, ...], gpus_changed: int = 0, unplaced: int = 0) -> metrics.RunMetrics:
            return metrics.RunMetrics(
                t0 + RUN_EVERY * k, result, gpus_used=3, gpus_lower_bound=2, gap=0.0, workloads_unplaced=unplaced,
                workloads_at_risk=len(at_risk), idle_instances_kept=1, workloads_below_instance=0, stranded_slices=1,
                gpus_changed=gpus_changed, solve_seconds=0.5 + k, apply_seconds=30.0 + k if gpus_changed else None,
                reasons=reasons, gpu_changed_at=tuple((h, i, t) for (h, i), t in changed.items()), at_risk=at_risk)

        b1 = {("gpu-node-b", 1): t0 - day}
        a1 = {("gpu-node-a", 1): t0 + RUN_EVERY * 1.0}
        b1_new = {("gpu-node-b", 1): t0 + RUN_EVERY * 3.0}  # the layout change dcgm-exporter shows at HALF
        a1_new = {("gpu-node-a", 1): t0 + RUN_EVERY * 5.0}
        return [
            run(0, "nothing_to_do", (), b1, (chat,)),
            run(1, "applied", ("frees 1 GPU(s) (threshold 1)",), {**b1, **a1}, (chat,), gpus_changed=1),
            run(2, "not_applied", (), {**b1, **a1}, (chat,), unplaced=1),
            run(3, "applied", ("places 1 workload(s) now left out",
                               "gives 1 workload(s) that outgrew their instance a larger one"),
                {**b1_new, **a1}, (chat, train), gpus_changed=1),
            run(4, "nothing_to_do", (), {**b1_new, **a1}, (chat, train)),
            run(5, "applied", ("cuts unneeded memory by 20% (threshold 10%)",), {**b1_new, **a1_new}, (chat, train),
                gpus_changed=1, unplaced=1),
        ]

    def _textfile(self) -> None:
        """Each run's file as migplan writes it, read by node_exporter at every scrape until the next run."""
        rendered = [_parse_text(metrics.render(r)) for r in self.runs]
        series: dict[tuple[str, tuple[tuple[str, str], ...]], Raw] = {}
        for i in range(POINTS):
            ts = self.t0 + 15 + INTERVAL * i
            for name, labels, value in rendered[min((ts - self.t0) // RUN_EVERY, len(self.runs) - 1)]:
                key = (name, tuple(sorted(_scraped(labels, TEXTFILE).items())))
                series.setdefault(key, Raw(name, dict(key[1]))).values.append((ts, value))
        self.d.raws += series.values()

    @property
    def last_run(self) -> metrics.RunMetrics:
        return self.runs[-1]


def _scraped(labels: dict[str, str], target: dict[str, str]) -> dict[str, str]:
    """A scraped series' labels with its target's, as Prometheus joins them by default (honor_labels: false): a
    label of the series that the target has too is kept as exported_<label>."""
    return {**{(f"exported_{k}" if k in target else k): v for k, v in labels.items()}, **target}


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def _parse_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a text-format (0.0.4) file; `promtool check metrics` checks the format itself elsewhere."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = {k: re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), v)
                  for k, v in _LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, float(m.group(3))))
    return out


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet(time.time())


@pytest.fixture(scope="module")
def grafana_prom(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[PromServer]:
    prom, tool, reason = ensure_prometheus()
    if prom is None or tool is None:
        pytest.skip(reason)
    server = PromServer(prom, tool, tmp_path_factory.mktemp("prom-grafana"), fleet.d.openmetrics())
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- Grafana's side: variables and their formatting, the queries as a panel sends them ------------------------

def _api(server: PromServer, path: str, **params: str | int) -> Any:
    url = f"{server.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=60) as resp:
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def variable_values(server: PromServer, var: dict[str, Any], start: int, end: int) -> list[str]:
    """A query variable's options, as Grafana's Prometheus data source finds them: `label_values(METRIC, LABEL)`
    (the series API over the range) or `query_result(EXPR)` (an instant query, each sample as the text
    `{a="x", b="y"} VALUE TIMESTAMP`), then the variable's regex (first capture group)."""
    query = var["query"]
    if m := re.fullmatch(r"label_values\((.+), *(\w+)\)", query):
        rows = _api(server, "series", **{"match[]": m.group(1)}, start=start, end=end)
        texts = [r[m.group(2)] for r in rows if m.group(2) in r]
    elif m := re.fullmatch(r"query_result\((.+)\)", query, re.S):
        rows = _api(server, "query", query=m.group(1), time=end)["result"]
        texts = ["{" + ", ".join(f'{k}="{v}"' for k, v in r["metric"].items()) + "} "
                 f"{r['value'][1]} {int(r['value'][0] * 1000)}" for r in rows]
    else:
        raise AssertionError(f"variable {var['name']}: query {query!r} is not one this test resolves")
    if var.get("regex"):
        rx = re.compile(var["regex"].strip("/"))
        texts = [g.group(1) for t in texts if (g := rx.search(t))]
    return sorted(set(texts))


def grafana_format(var: dict[str, Any], chosen: list[str] | None) -> str:
    """How Grafana writes a multi-value variable into a Prometheus query: All is the variable's allValue as it
    stands; one value or several are regex-escaped and joined as `(a|b)`."""
    if chosen is None:
        return str(var["allValue"])
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", v) for v in chosen]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, values: dict[str, str], range_s: int) -> str:
    out = expr.replace("$__range", f"{range_s}s")
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    left = re.findall(r"\$\{?[A-Za-z_]\w*", out)  # "$1" in label_replace is PromQL's, not a variable
    assert not left, f"unresolved variables {left} in {expr}"
    return out


class Panels:
    """Every target of the dashboard, run as Grafana runs it for one choice of the variables."""

    def __init__(self, server: PromServer, fleet: Fleet, **chosen: list[str] | None) -> None:
        self.server, self.fleet = server, fleet
        self.start, self.end = fleet.d.query_start, fleet.d.query_end
        self.dash = _dashboard()
        self.variables = {v["name"]: v for v in self.dash["templating"]["list"] if v["type"] == "query"}
        self.values = {name: grafana_format(v, chosen.get(name)) for name, v in self.variables.items()}

    def run(self, target: dict[str, Any]) -> list[dict[str, Any]]:
        expr = substitute(target["expr"], self.values, self.end - self.start)
        if target.get("instant"):
            result: list[dict[str, Any]] = _api(self.server, "query", query=expr, time=self.end)["result"]
        else:
            result = _api(self.server, "query_range", query=expr, start=self.start, end=self.end,
                          step=STEP)["result"]
        return result

    def panel(self, title: str, ref: str = "A") -> list[dict[str, Any]]:
        p = next(p for p in _panels(self.dash) if p["title"] == title)
        return self.run(next(t for t in p["targets"] if t["refId"] == ref))

    def instant(self, title: str, *keys: str, ref: str = "A") -> dict[tuple[str, ...], float]:
        """Each series' value at the end of the range (an instant query's, or a range query's last point)."""
        return {tuple(r["metric"].get(k, "") for k in keys): float(r["value"][1] if "value" in r else
                                                                   r["values"][-1][1]) for r in self.panel(title, ref)}


# --- every query against the real Prometheus -----------------------------------------------------------------

@pytest.mark.slow
def test_every_variable_resolves_to_the_fleets_hosts_and_gpus(grafana_prom: PromServer, fleet: Fleet) -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    start, end = fleet.d.query_start, fleet.d.query_end
    # both label spellings of dcgm-exporter (Hostname, hostname) and migplan's own host label
    assert variable_values(grafana_prom, variables["host"], start, end) == ["gpu-node-a", "gpu-node-b"]
    assert variable_values(grafana_prom, variables["gpu"], start, end) == ["0", "1"]


@pytest.mark.slow
def test_every_panel_query_returns_series_on_the_backfilled_data(grafana_prom: PromServer, fleet: Fleet) -> None:
    every = Panels(grafana_prom, fleet)  # All hosts, all GPUs: each variable's allValue
    targets = _targets(every.dash)
    assert len(targets) >= 20
    empty = [f"{p['title']} / {t['refId']}" for p, t in targets if not every.run(t)]
    assert empty == [], empty
    # one host, one GPU, chosen as a user picks them: each query that filters on them still finds series, of them only
    one = Panels(grafana_prom, fleet, host=["gpu-node-b"], gpu=["1"])
    for p, t in targets:
        if "$host" not in t["expr"]:
            continue
        result = one.run(t)
        assert result, f"{p['title']} / {t['refId']}: no series for gpu-node-b GPU 1"
        assert {(r["metric"].get("host"), r["metric"].get("gpu")) for r in result} == {("gpu-node-b", "1")}, p["title"]


@pytest.mark.slow
def test_the_replan_panels_show_what_the_runs_wrote(grafana_prom: PromServer, fleet: Fleet) -> None:
    view, last = Panels(grafana_prom, fleet), fleet.last_run
    assert view.instant("Since the last replan run") == {(): view.end - last.finished_at}
    assert view.instant("Last result", "result") == {("applied",): 1.0}
    assert view.instant("Workloads at risk") == {(): 2.0}
    assert view.instant("Workloads left out") == {(): float(last.workloads_unplaced or 0)}
    assert view.instant("Above instance memory") == {(): 0.0}
    assert view.instant("GPUs used / lower bound") == {(): 3.0}
    assert view.instant("GPUs used / lower bound", ref="B") == {(): 2.0}
    results = {r["metric"]["result"] for r in view.panel("Replan result over time")}
    assert results == {"nothing_to_do", "applied", "not_applied"}
    reasons = {r["metric"]["reason"]: r["values"] for r in view.panel("Decision reasons over time")}
    assert set(reasons) == {c for _, c in metrics.REASONS}
    # frees_gpus is the reason of run 1 only: filled from its file's first scrape to the next run's
    t1 = fleet.t0 + RUN_EVERY
    assert {int(t) for t, _ in reasons["frees_gpus"]} == set(range(t1 + STEP, t1 + RUN_EVERY + 1, STEP))
    changed = view.panel("Plan size and GPUs changed", "C")
    assert {float(v) for _, v in changed[0]["values"]} == {0.0, 1.0}


@pytest.mark.slow
def test_the_reconfiguration_panels_count_each_change_once(grafana_prom: PromServer, fleet: Fleet) -> None:
    view = Panels(grafana_prom, fleet)
    # gpu-node-a GPU 1: first changed at run 1 (its series starts then), again at run 5; gpu-node-b GPU 1: changed a
    # day before the range, then at run 3
    assert view.instant("GPU reconfigurations in the time range", "host", "gpu") == {
        ("gpu-node-a", "1"): 2.0, ("gpu-node-b", "1"): 1.0}
    age = view.instant("Layout age per GPU", "host", "gpu")
    assert age == {("gpu-node-a", "1"): view.end - (fleet.t0 + 5 * RUN_EVERY),
                   ("gpu-node-b", "1"): view.end - (fleet.t0 + 3 * RUN_EVERY)}
    one = Panels(grafana_prom, fleet, host=["gpu-node-b"], gpu=None)
    assert one.instant("GPU reconfigurations in the time range", "host", "gpu") == {("gpu-node-b", "1"): 1.0}


@pytest.mark.slow
def test_the_layout_panels_count_instances_per_profile_from_dcgm_labels(grafana_prom: PromServer,
                                                                       fleet: Fleet) -> None:
    view = Panels(grafana_prom, fleet)
    now = {("gpu-node-a", "0", "3g.20gb"): 1.0, ("gpu-node-a", "0", "2g.10gb"): 1.0,
           ("gpu-node-a", "0", "1g.5gb"): 2.0,  # GI 13 (two pods on it) and GI 14
           ("gpu-node-a", "1", "whole GPU"): 1.0,
           ("gpu-node-b", "1", "3g.40gb"): 1.0, ("gpu-node-b", "1", "2g.20gb"): 2.0}
    assert view.instant("MIG instances per profile per GPU", "host", "gpu", "GPU_I_PROFILE") == now
    over_time = {(r["metric"]["host"], r["metric"]["gpu"], r["metric"]["GPU_I_PROFILE"]): r["values"]
                 for r in view.panel("MIG instances per GPU over time")}
    assert over_time[("gpu-node-b", "1", "4g.40gb")][0] == [view.start, "1"]  # before the change at the half
    assert over_time[("gpu-node-b", "1", "2g.20gb")][-1] == [view.end, "2"]
    both = Panels(grafana_prom, fleet, host=["gpu-node-a", "gpu-node-b"], gpu=["0", "1"])
    assert both.instant("MIG instances per profile per GPU", "host", "gpu", "GPU_I_PROFILE") == now


@pytest.mark.slow
def test_the_memory_panels_give_each_instance_its_used_share(grafana_prom: PromServer, fleet: Fleet) -> None:
    view = Panels(grafana_prom, fleet)
    last = POINTS - 1  # the sample an instant query at the end of the range reads
    want = {k: used(last) / total for k, (used, total) in fleet.instances.items()}
    got = view.instant("Used of instance memory now", "host", "gpu", "GPU_I_PROFILE", "GPU_I_ID")
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert math.isclose(got[k], v, rel_tol=1e-12), k
    series = {(r["metric"]["host"], r["metric"]["gpu"], r["metric"].get("GPU_I_ID")): r for r in
              view.panel("Used and instance memory", "B")}
    assert {float(v) for _, v in series[("gpu-node-a", "0", "1")]["values"]} == {19968.0}  # used + free: 3g.20gb
    assert {float(v) for _, v in series[("gpu-node-a", "1", None)]["values"]} == {40536.0}  # the whole GPU


@pytest.mark.slow
def test_the_at_risk_panels_list_each_workload_with_its_margin(grafana_prom: PromServer, fleet: Fleet) -> None:
    view = Panels(grafana_prom, fleet)
    assert view.instant("Workloads kept at risk", "workload", "host", "gpu", "mig_instance") == {
        ("prod/chat-7d9f8c6b5d-x2x4z", "gpu-node-a", "0", "3g.20gb@4"): 700.0 * MIB,
        ("research/train-job-0", "gpu-node-b", "1", "3g.40gb@4"): 1536.0 * MIB}
    assert view.instant("At-risk workloads per GPU", "host", "gpu") == {("gpu-node-a", "0"): 1.0,
                                                                       ("gpu-node-b", "1"): 1.0}
    one = Panels(grafana_prom, fleet, host=["gpu-node-a"], gpu=["0"])
    assert list(one.instant("Workloads kept at risk", "workload")) == [("prod/chat-7d9f8c6b5d-x2x4z",)]
