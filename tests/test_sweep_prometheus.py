"""`backtest --sweep` and `sizing: auto` with a real Prometheus as the history (tests/prom_support.py: dcgm-exporter
series backfilled with promtool, served on 127.0.0.1).

The fleet is tests/helpers/sizing_fleets.py's ground truth in minutes instead of days: four steady pods at 17,000
MiB and four volatile ones at 8,000 MiB with one spike every 20 minutes, `SPIKES[period]` high, on H100s (whose
20 GB and 40 GB instances are 19,968 and 40,192 MiB, as the A100-80GB's). With --train 40m, --test 20m and 3
splits ending at the data's end the answer is the one of days: max+1spread is the cheapest rule with no workload
out of memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prom_support import INTERVAL, Dataset, PromServer, ensure_prometheus
from typer.testing import CliRunner

from migplan.cli.app import app

pytestmark = pytest.mark.slow  # a real Prometheus
SPIKES = [14000.0, 14000.0, 14000.0, 21000.0, 15000.0, 26000.0]  # one per 20 minutes (40 raw points)
PERIOD = 40
ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


def _memory(w: int) -> Any:
    def value(i: int) -> float:
        if w < 4:
            return 17000.0
        return SPIKES[i // PERIOD] if i % PERIOD == PERIOD // 2 else 8000.0
    return value


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PromServer, Dataset]]:
    d = Dataset(int((time.time() - 5 * 3600) // 60 * 60))
    for w in range(8):
        labels = {"modelName": "NVIDIA H100 80GB HBM3", "UUID": f"GPU-5a5a5a5a-0000-1111-2222-33334444555{w}",
                  "hostname": f"gpu-node-{w // 4}", "gpu": str(w % 4), "job": "dcgm-honor", "instance": "10.0.0.9:9400",
                  "namespace": "ml", "pod": f"{'steady' if w < 4 else 'volatile'}-{w}"}
        d.add("DCGM_FI_DEV_FB_USED", labels, _memory(w))
        d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, lambda i: 0.05)
    prom, tool, reason = ensure_prometheus()
    if prom is None or tool is None:
        pytest.skip(reason)
    s = PromServer(prom, tool, tmp_path_factory.mktemp("prom-sweep"), d.openmetrics())
    s.start()
    try:
        yield s, d
    finally:
        s.stop()


def test_backtest_sweep_from_prometheus_finds_the_planted_answer(server: tuple[PromServer, Dataset],
                                                                  tmp_path: Path) -> None:
    s, d = server
    assert d.query_end - d.t0 == INTERVAL * 6 * PERIOD  # six periods of 20 minutes
    res = CliRunner().invoke(app, ["backtest", "--sweep", "--prometheus", s.url, "--until", str(d.query_end),
                                   "--train", "40m", "--test", "20m", "--policy", "max+{10,60}%",
                                   "--policy", "max+{0.75,1}spread", "--state-dir", str(tmp_path / "state"),
                                   "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(x["workloads"], x["replayed"]) for x in doc["splits"]] == [(8, 8)] * 3
    assert doc["recommended"] == "max+1spread", doc["reason"]
    per = {r["rule"]: [x["oom_workloads"] for x in r["splits"]] for r in doc["rules"]}
    # split 1 tests the 21,000 MiB spike against a training peak of 14,000 (need: 15,400; 18,500; 22,400; 20,000)
    assert per == {"max+10%": [4, 0, 0], "max+60%": [0, 0, 0], "max+0.75spread": [4, 0, 0], "max+1spread": [0, 0, 0]}
    assert (tmp_path / "state" / "sizing.json").exists()
    # propose --sizing auto from that kept calibration (made with other windows than auto's own: used, and said so)
    r = CliRunner().invoke(app, ["propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir",
                                 str(tmp_path / "state"), "-o", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["sizing"]
    assert (got["rule"], got["recommended"], got["source"]) == ("max+1spread", True, s.url)
    assert "made otherwise" in r.stderr


def test_sizing_auto_calibrates_from_prometheus_itself(server: tuple[PromServer, Dataset], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`sizing.history: URL`: auto asks Prometheus for the windows ending now. The data ends three hours before now
    (backfilled blocks are older than any head block), so one split of a 200-minute test after 100 minutes of
    training holds it: trained on periods 0-4 (peak 21,000 MiB), tested on period 5 (26,000): max+0% (21,512 MiB,
    a 40 GB instance) is the cheapest rule that holds it."""
    s, _ = server
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"version": 1, "sizing": {"rule": "auto", "history": s.url, "train": "100m",
                                                            "test": "200m", "splits": 1},
                                   "replan": {"state_dir": str(tmp_path / "state")}}))
    r = CliRunner().invoke(app, ["propose", "--config", str(cfg), "-i", INV, "-p", PROF, "-o", "json"])
    assert r.exit_code == 0, r.output
    assert f"querying {s.url}" in r.stderr and "event=sizing-calibrated" in r.stderr
    got = json.loads(r.stdout)["sizing"]
    assert (got["rule"], got["recommended"], got["source"], got["splits"]) == ("max+0%", True, s.url, 1)
    # windows that hold no test sample: the default rule, and why
    cfg.write_text(yaml.safe_dump({"version": 1, "sizing": {"rule": "auto", "history": s.url, "train": "1h",
                                                            "test": "1h", "splits": 1},
                                   "replan": {"state_dir": str(tmp_path / "state2")}}))
    r = CliRunner().invoke(app, ["propose", "--config", str(cfg), "-i", INV, "-p", PROF, "-o", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["sizing"]
    assert (got["rule"], got["recommended"]) == ("max+10%", False)
    assert got["reason"].startswith("too little history to calibrate from"), got["reason"]
