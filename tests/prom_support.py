"""A real Prometheus for the tests: OpenMetrics data generated here, backfilled with
`promtool tsdb create-blocks-from openmetrics`, served by `prometheus` on 127.0.0.1.

The generator is the oracle: it knows every raw value it wrote and computes what Prometheus'
`max_over_time`/`avg_over_time` over each step must give, without any of migplan's code.
Samples sit at t0+15s, t0+45s, ... (every 30 s) and the queries step 60 s on t0+60k, so each window
[T-60s, T] holds exactly the two samples T-45s and T-15s whether the range is closed (Prometheus 2)
or left-open (Prometheus 3).
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from helpers import free_port

STEP = 60
INTERVAL = 30
POINTS = 240  # raw samples per series: 2 hours


def find_tool(name: str) -> str | None:
    for cand in (f"/usr/bin/{name}", f"/usr/local/bin/{name}"):
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which(name)


def ensure_prometheus() -> tuple[str | None, str | None, str]:
    """(prometheus, promtool, reason): installs Debian's `prometheus` when root and missing."""
    prom, tool = find_tool("prometheus"), find_tool("promtool")
    if prom and tool:
        return prom, tool, ""
    if os.geteuid() != 0:
        return None, None, "prometheus/promtool not installed and not root (apt-get install prometheus)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                               "prometheus"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            return None, None, f"{' '.join(cmd)} failed: {r.stderr.strip()[-300:]}"
    prom, tool = find_tool("prometheus"), find_tool("promtool")
    return (prom, tool, "") if prom and tool else (None, None, "prometheus installed but not found")


# --- the data ------------------------------------------------------------------------------------

@dataclass
class Raw:
    metric: str
    labels: dict[str, str]
    values: list[tuple[int, float]] = field(default_factory=list)


def _wave(i: int, base: float, amp: float, period: int, seed: int) -> float:
    return base + amp * (((i * 37 + seed * 11) % period) / (period - 1))


@dataclass
class Dataset:
    """The series the tests write, with what each stands for."""

    t0: int
    raws: list[Raw] = field(default_factory=list)

    def add(self, metric: str, labels: dict[str, str], fn: object) -> Raw:
        raw = Raw(metric, labels)
        for i in range(POINTS):
            ts = self.t0 + 15 + INTERVAL * i
            raw.values.append((ts, fn(i)))  # type: ignore[operator]
        self.raws.append(raw)
        return raw

    def openmetrics(self) -> str:
        out = []
        for metric in dict.fromkeys(r.metric for r in self.raws):
            out.append(f"# TYPE {metric} gauge")
            for r in (r for r in self.raws if r.metric == metric):
                lab = ",".join(f'{k}="{v}"' for k, v in sorted(r.labels.items()))
                for ts, v in r.values:
                    text = "NaN" if math.isnan(v) else repr(v)
                    out.append(f"{metric}{{{lab}}} {text} {ts}")
        out.append("# EOF")
        return "\n".join(out) + "\n"

    @property
    def query_start(self) -> int:
        return self.t0 + STEP

    @property
    def query_end(self) -> int:
        return self.t0 + INTERVAL * POINTS  # the last window ends after the last sample

    def expected(self, raw: Raw, how: str) -> dict[int, float]:
        """What `max_over_time`/`avg_over_time(M[60s])` gives at each step T, from the raw values."""
        out = {}
        for t in range(self.query_start, self.query_end + 1, STEP):
            window = [v for ts, v in raw.values if t - STEP <= ts <= t and not math.isnan(v)]
            if window:
                out[t] = max(window) if how == "max" else sum(window) / len(window)
        return out


def dcgm_dataset(now: float) -> tuple[Dataset, dict[str, Raw]]:
    """dcgm-exporter-like series (MIG and whole GPUs, exported_* and plain labels, Hostname and hostname)
    and the old nvidia_gpu_prometheus_exporter's, five hours in the past (older than any head block)."""
    t0 = int((now - 5 * 3600) // STEP * STEP)
    d = Dataset(t0)
    a100 = {"modelName": "NVIDIA A100-SXM4-40GB", "UUID": "GPU-1b2c3d4e-0000-1111-2222-333344445555",
            "device": "nvidia0", "gpu": "0", "Hostname": "gpu-node-a", "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "job": "dcgm-k8s", "instance": "10.0.0.5:9400",
            # target labels of the exporter's own pod: Prometheus renamed the workload's to exported_*
            "pod": "nvidia-dcgm-exporter-x7tzq", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
    chat = {**a100, "GPU_I_PROFILE": "3g.20gb", "GPU_I_ID": "1", "exported_pod": "chat-7d9f8c6b5d-x2x4z",
            "exported_namespace": "prod", "exported_container": "server"}
    embed = {**a100, "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "13", "exported_pod": "embed-0",
             "exported_namespace": "prod", "exported_container": "embed"}
    idle = {**a100, "GPU_I_PROFILE": "2g.10gb", "GPU_I_ID": "5"}  # no workload: only the exporter's pod labels
    h100 = {"modelName": "NVIDIA H100 80GB HBM3", "UUID": "GPU-9f8e7d6c-0000-1111-2222-333344445555",
            "hostname": "gpu-node-b", "job": "dcgm-honor", "instance": "10.0.0.6:9400"}  # honor_labels: true
    train = {**h100, "gpu": "1", "device": "nvidia1", "pod": "train-job-0", "namespace": "research",
             "container": "trainer"}
    infer = {**h100, "gpu": "2", "device": "nvidia2", "pod": "infer", "namespace": "research", "container": "srv"}
    legacy = {"minor_number": "0", "uuid": "GPU-aaaa0000-1111-2222-3333-444455556666", "name": "Tesla V100-SXM2-16GB",
              "job": "gpu-exporter", "instance": "gpu-node-c:9445"}
    r = {
        "chat.mem": d.add("DCGM_FI_DEV_FB_USED", chat, lambda i: round(_wave(i, 12000, 6000, 53, 1))),
        "chat.act": d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", chat, lambda i: round(_wave(i, 0.1, 0.8, 41, 2), 4)),
        "embed.mem": d.add("DCGM_FI_DEV_FB_USED", embed,
                           lambda i: math.nan if i == 100 else round(_wave(i, 2000, 2500, 29, 3))),
        "embed.act": d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", embed, lambda i: round(_wave(i, 0.0, 0.5, 31, 4), 4)),
        # GPU_UTIL on a MIG instance: not reported by the real exporter; migplan must not use it
        "embed.util": d.add("DCGM_FI_DEV_GPU_UTIL", embed, lambda i: 99.0),
        "idle.mem": d.add("DCGM_FI_DEV_FB_USED", idle, lambda i: 13.0),
        "train.mem": d.add("DCGM_FI_DEV_FB_USED", train, lambda i: round(_wave(i, 40000, 30000, 97, 5))),
        "train.util": d.add("DCGM_FI_DEV_GPU_UTIL", train, lambda i: float(int(_wave(i, 20, 80, 23, 6)))),
        "infer.mem": d.add("DCGM_FI_DEV_FB_USED", infer, lambda i: round(_wave(i, 9000, 1000, 17, 7))),
        "infer.act": d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", infer, lambda i: round(_wave(i, 0.2, 0.3, 19, 8), 4)),
        "infer.util": d.add("DCGM_FI_DEV_GPU_UTIL", infer, lambda i: 77.0),  # GR_ENGINE_ACTIVE wins
        "legacy.mem": d.add("nvidia_gpu_memory_used_bytes", legacy,
                            lambda i: float(int(_wave(i, 3000, 4000, 37, 9)) * 1048576)),
        "legacy.duty": d.add("nvidia_gpu_duty_cycle", legacy, lambda i: float(int(_wave(i, 0, 100, 43, 10)))),
    }
    return d, r


# --- the server --------------------------------------------------------------------------------------------

class PromServer:
    """`prometheus` on 127.0.0.1:PORT over a backfilled TSDB; `web_config` adds basic auth (bcrypt users)."""

    def __init__(self, prometheus: str, promtool: str, workdir: Path, openmetrics: str,
                 web_config: str | None = None, ready_auth: str | None = None) -> None:
        self.prometheus, self.promtool, self.dir = prometheus, promtool, workdir
        self.openmetrics, self.web_config, self.ready_auth = openmetrics, web_config, ready_auth
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        data, om = self.dir / "tsdb", self.dir / "data.om"
        om.write_text(self.openmetrics)
        if not data.exists():
            r = subprocess.run([self.promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"promtool failed: {r.stdout[-500:]} {r.stderr[-1000:]}")
        config = self.dir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        args = [self.prometheus, f"--storage.tsdb.path={data}", f"--config.file={config}",
                "--storage.tsdb.retention.time=30d", "--web.listen-address=127.0.0.1:{port}"]
        if self.web_config:
            wc = self.dir / "web.yml"
            wc.write_text(self.web_config)
            args.append(f"--web.config.file={wc}")
        for _attempt in range(3):  # the free port may be taken between choosing and binding it
            self.port = free_port()
            log = open(self.dir / f"prometheus-{self.port}.log", "wb")  # noqa: SIM115 - lives with the process
            self.proc = subprocess.Popen([a.replace("{port}", str(self.port)) for a in args], stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.dir)
            log.close()
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"prometheus did not become ready; see {self.dir}")

    def _wait_ready(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            req = urllib.request.Request(f"{self.url}/-/ready")
            if self.ready_auth:
                req.add_header("Authorization", self.ready_auth)
            try:
                with urllib.request.urlopen(req, timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def log(self) -> str:
        path = self.dir / f"prometheus-{self.port}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


# --- hostile servers (tests/test_prometheus_hostile.py, tests/test_prometheus_fuzz.py) ---------------------

Handler = Callable[[socket.socket, threading.Event], None]


def read_request(conn: socket.socket) -> bytes:
    """Read the request's head (bounded), so that the answer goes after it as a real server's would."""
    conn.settimeout(5)
    seen = b""
    while b"\r\n\r\n" not in seen and len(seen) < 65536:
        block = conn.recv(4096)
        if not block:
            break
        seen += block
    return seen


def send(conn: socket.socket, data: bytes) -> bool:
    try:
        conn.sendall(data)
        return True
    except OSError:
        return False


class RawServer:
    """A raw TCP server on 127.0.0.1 (TLS with `tls`): each connection gets `handler` on a thread of its own,
    after the request's head is read, until `stop`. Its loops are bounded (60 s at most)."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.threads = [threading.Thread(target=self._serve, daemon=True)]
        self.threads[0].start()

    def _serve(self) -> None:
        for _ in range(600):  # bounded: 60 s at most, stopped far sooner
            if self.stop.is_set():
                return
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._one, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _one(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn.settimeout(5)
                conn = self.tls.wrap_socket(conn, server_side=True)
            with conn:
                read_request(conn)
                self.handler(conn, self.stop)
        except OSError:  # the client left, or the watchdog cut it off: what these servers are for
            conn.close()

    def close(self) -> None:
        self.stop.set()
        for t in list(self.threads):
            t.join(10)
        self.sock.close()


@contextmanager
def blackhole() -> Iterator[int | None]:
    """A port on 127.0.0.1 whose connects hang: a listening socket (backlog 0) whose queue is filled and never
    accepted, so Linux drops further SYNs. None where the kernel refuses or accepts instead."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            with suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.05)
        probe = socket.socket()
        probe.settimeout(0.3)
        try:
            probe.connect(("127.0.0.1", port))
            hangs = False
        except TimeoutError:
            hangs = True
        except OSError:
            hangs = False
        finally:
            probe.close()
        yield port if hangs else None
    finally:
        for s in fillers:
            s.close()
        listener.close()
