"""`migplan collect --prometheus`: the parser against hostile JSON, the HTTP adapter against small local
servers (bearer token, redirects, size limits, TLS), and the whole path against a real Prometheus
(Debian's package) over data backfilled with promtool, checked against the generator's own numbers."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import logging
import math
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from prom_support import STEP, Dataset, PromServer, Raw, dcgm_dataset, ensure_prometheus
from typer.testing import CliRunner

from migplan.adapters import prometheus as adapter
from migplan.commands import collect_prometheus as cp
from migplan.commands.history import prometheus_history
from migplan.errors import InputError
from migplan.history import prom_series as ps
from migplan.history.samples import Sample

# --- the parser: hostile JSON ------------------------------------------------------------------------


def _matrix(*series: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}, **extra})


GOOD = {"metric": {"gpu": "0", "Hostname": "h1", "pod": "p", "namespace": "n"},
        "values": [[100, "1"], [160, "2.5"]]}


def test_parse_matrix_reads_values_as_numbers() -> None:
    [s] = ps.parse_matrix(_matrix(GOOD), source="q")
    assert s.labels["pod"] == "p"
    assert s.values == ((100.0, 1.0), (160.0, 2.5))


@pytest.mark.parametrize(("body", "needle"), [
    (b"", "invalid JSON"),
    (b"<html>502 Bad Gateway</html>", "invalid JSON"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[', "invalid JSON"),
    (b"\xff\xfe\x00", "invalid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON"),
    (b"[1, 2]", "top level is not an object"),
    (b'{"status":"weird"}', "status is 'weird'"),
    (b'{"status":"success","data":[]}', "'data' is not an object"),
    (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "not 'matrix'"),
    (b'{"status":"success","data":{"resultType":"matrix","result":{}}}', "not a list"),
    (_matrix("x").encode(), "series 0 is not an object"),
    (_matrix({"metric": {}}).encode(), "lacks 'metric'"),
    (_matrix({"metric": [], "values": []}).encode(), "lacks 'metric'"),
    (_matrix({"metric": {"a": 1}, "values": []}).encode(), "label 'a' is not a string"),
    (_matrix({"metric": {"a": "x" * 5000}, "values": []}).encode(), "at most 4096"),
    (_matrix({"metric": {f"l{i}": "v" for i in range(300)}, "values": []}).encode(), "300 labels"),
    (_matrix({"metric": {}, "values": [[1, 2]]}).encode(), "not a pair"),
    (_matrix({"metric": {}, "values": [[True, "2"]]}).encode(), "not a pair"),
    (_matrix({"metric": {}, "values": [["1", "2"]]}).encode(), "not a pair"),
    (_matrix({"metric": {}, "values": [[1, "2", 3]]}).encode(), "not a pair"),
    (_matrix({"metric": {}, "values": [None]}).encode(), "not a pair"),
])
def test_parse_matrix_refuses_what_is_not_a_matrix(body: bytes, needle: str) -> None:
    with pytest.raises(ps.PrometheusError) as info:
        ps.parse_matrix(body, source="DCGM_FI_DEV_FB_USED [a .. b]")
    assert needle in str(info.value)
    assert "DCGM_FI_DEV_FB_USED [a .. b]" in str(info.value)


def test_parse_matrix_reports_prometheus_error_envelope_without_control_characters() -> None:
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error\x1b[2J at char 3"})
    with pytest.raises(ps.PrometheusError) as info:
        ps.parse_matrix(body, source="q")
    assert "bad_data: parse error" in str(info.value)
    assert "\x1b" not in str(info.value)


def test_parse_matrix_drops_and_counts_non_finite_and_out_of_range_points() -> None:
    tally = ps.Tally()
    body = _matrix({"metric": {}, "values": [[100, "NaN"], [110, "+Inf"], [120, "-Inf"], [130, "abc"],
                                             [140, "1" * 5000], [150, "7"], [99999, "8"], [160, "1e999"]]})
    [s] = ps.parse_matrix(body, source="q", start=100, end=200, tally=tally)
    assert s.values == ((150.0, 7.0),)
    assert tally.points_read == 8
    assert tally.points_rejected == 7


def test_parse_matrix_refuses_too_many_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ps, "MAX_SERIES", 3)
    with pytest.raises(ps.PrometheusError, match="4 series in one answer"):
        ps.parse_matrix(_matrix(*[GOOD] * 4), source="q")


def test_parse_matrix_keeps_warnings_printable() -> None:
    tally = ps.Tally()
    ps.parse_matrix(_matrix(GOOD, warnings=["partial\x07 response", 7]), source="q", tally=tally)
    assert tally.warnings == ["partial response"]
    for odd in ("not a list", 5, {"a": 1}, None):
        other = ps.Tally()
        ps.parse_matrix(_matrix(GOOD, warnings=odd), source="q", tally=other)
        assert other.warnings == []


# --- labels to workloads ----------------------------------------------------------------------------------

FB = ps.QUERIES[0]
GR = ps.QUERIES[1]
UTIL = ps.QUERIES[2]
LEGACY_MEM = ps.QUERIES[3]


def _ident(q: ps.MetricQuery, labels: dict[str, str], opts: ps.Options | None = None,
           jobs: set[str] | None = None) -> ps.Identity | str:
    return ps.identify(q, labels, jobs or set(), opts or ps.Options())


def test_exported_labels_win_in_a_job_that_renames() -> None:
    labels = {"job": "dcgm", "pod": "dcgm-exporter-abcde", "namespace": "gpu-operator", "exported_pod": "web-1",
              "exported_namespace": "prod", "gpu": "3", "hostname": "n1", "GPU_I_PROFILE": "1g.10gb",
              "GPU_I_ID": "9", "modelName": "NVIDIA H100 80GB HBM3"}
    ident = _ident(FB, labels, jobs={"dcgm"})
    assert isinstance(ident, ps.Identity)
    assert ident.workload == "prod/web-1"
    assert (ident.place.host, ident.place.gpu, ident.place.mig_profile, ident.place.mig_start) == ("n1", 3,
                                                                                                   "1g.10gb", None)
    assert ident.place.gpu_model == "NVIDIA H100 80GB HBM3"


def test_plain_pod_in_a_renaming_job_is_the_exporter_not_a_workload() -> None:
    labels = {"job": "dcgm", "pod": "dcgm-exporter-abcde", "namespace": "gpu-operator", "gpu": "0", "Hostname": "n1"}
    assert _ident(FB, labels, jobs={"dcgm"}) == "unattributed"
    # the same labels from a job with honor_labels (no exported_* anywhere) are the workload's
    ident = _ident(FB, labels, jobs=set())
    assert isinstance(ident, ps.Identity) and ident.workload == "gpu-operator/dcgm-exporter-abcde"


def test_renaming_jobs_are_found_from_exported_labels() -> None:
    series = [ps.Series({"job": "a", "exported_pod": "x"}, ()), ps.Series({"job": "b", "pod": "y"}, ())]
    assert ps.renaming_jobs(series) == {"a"}


def test_host_from_hostname_Hostname_node_or_instance() -> None:
    base = {"gpu": "0", "pod": "p"}
    for labels, host in (({"hostname": "new"}, "new"), ({"Hostname": "old"}, "old"),
                         ({"hostname": "new", "Hostname": "old"}, "new"), ({"node": "k8s-n"}, "k8s-n"),
                         ({"instance": "10.1.2.3:9400"}, "10.1.2.3"), ({"Hostname": "bad host;rm"}, None)):
        ident = _ident(FB, {**base, **labels})
        assert isinstance(ident, ps.Identity)
        assert ident.place.host == host, labels


def test_old_namespace_labels_and_hpc_job() -> None:
    a = _ident(FB, {"gpu": "0", "pod_name": "p", "pod_namespace": "n"})
    assert isinstance(a, ps.Identity) and a.workload == "n/p"
    b = _ident(FB, {"gpu": "0", "hpc_job": "slurm-4242"})
    assert isinstance(b, ps.Identity) and b.workload == "slurm-4242"


@pytest.mark.parametrize(("labels", "needle"), [
    ({"gpu": "x", "pod": "p"}, "GPU index"),
    ({"gpu": "99", "pod": "p"}, "GPU index"),
    ({"gpu": "٣", "pod": "p"}, "GPU index"),
    ({"gpu": "0", "pod": "p", "GPU_I_PROFILE": "bogus", "GPU_I_ID": "1"}, "GPU_I_PROFILE"),
    ({"gpu": "0", "pod": "p", "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "-1"}, "GPU_I_ID"),
    ({"gpu": "0", "pod": "p\x1b[2J", "namespace": "n"}, "workload name"),
    ({"gpu": "0", "pod": "a b", "namespace": "n"}, "workload name"),
])
def test_hostile_labels_reject_the_series(labels: dict[str, str], needle: str) -> None:
    why = _ident(FB, labels)
    assert isinstance(why, str) and needle in why
    assert "\x1b" not in why


def test_unattributed_named_after_the_gpu_only_when_asked() -> None:
    labels = {"minor_number": "2", "name": "Tesla V100-SXM2-16GB", "instance": "node-c:9445", "pod": "exporter-x",
              "namespace": "monitoring"}
    assert _ident(LEGACY_MEM, labels) == "unattributed"  # the old exporter's pod labels are its own
    ident = _ident(LEGACY_MEM, labels, ps.Options(unattributed="gpu"))
    assert isinstance(ident, ps.Identity) and ident.workload == "node-c/gpu2"
    mig = _ident(FB, {"gpu": "1", "Hostname": "h", "GPU_I_PROFILE": "2g.10gb", "GPU_I_ID": "5"},
                 ps.Options(unattributed="gpu"))
    assert isinstance(mig, ps.Identity) and mig.workload == "h/gpu1/gi5"


def test_model_names_mapped_through_the_given_lookup() -> None:
    opts = ps.Options(model_of=lambda n: "A100-SXM4-40GB" if "A100" in n else None)
    a = _ident(FB, {"gpu": "0", "pod": "p", "modelName": "NVIDIA A100-SXM4-40GB"}, opts)
    b = _ident(FB, {"gpu": "0", "pod": "p", "modelName": "Mystery GPU"}, opts)
    assert isinstance(a, ps.Identity) and a.place.gpu_model == "A100-SXM4-40GB"
    assert isinstance(b, ps.Identity) and b.place.gpu_model == "Mystery GPU"


@pytest.mark.parametrize(("pod", "owner"), [
    ("web-7d9f8c6b5d-x2x4z", "web"), ("chat-llama-5c8d7f9b4-qwzxv", "chat-llama"), ("backfill-x7tzq", "backfill"),
    ("db-0", "db-0"), ("plain", "plain"), ("name-aeiou", "name-aeiou"),
])
def test_owner_name_strips_generated_suffixes(pod: str, owner: str) -> None:
    assert ps.owner_name(pod) == owner


def test_to_samples_joins_memory_and_activity_and_converts_units() -> None:
    labels = {"gpu": "0", "Hostname": "h", "pod": "p", "namespace": "n"}
    tally = ps.Tally()
    out = ps.to_samples([(FB, [ps.Series(labels, ((60.0, 1000.0), (120.0, 1500.0)))]),
                         (GR, [ps.Series(labels, ((60.0, 0.25), (180.0, 0.5)))]),
                         (UTIL, [ps.Series(labels, ((60.0, 99.0),))])], ps.Options(), tally)
    assert [(s.timestamp, s.memory_mib, s.util_pct) for s in out] == [(60.0, 1000.0, 25.0), (120.0, 1500.0, None),
                                                                     (180.0, None, 50.0)]
    assert all(s.workload == "n/p" and s.source == "prometheus" for s in out)


def test_gpu_util_is_the_fallback_for_whole_gpus_only() -> None:
    whole = {"gpu": "0", "Hostname": "h", "pod": "a"}
    mig = {"gpu": "1", "Hostname": "h", "pod": "b", "GPU_I_PROFILE": "1g.5gb", "GPU_I_ID": "7"}
    tally = ps.Tally()
    out = ps.to_samples([(UTIL, [ps.Series(whole, ((60.0, 40.0),)), ps.Series(mig, ((60.0, 99.0),))])],
                        ps.Options(), tally)
    assert [(s.workload, s.util_pct) for s in out] == [("a", 40.0)]
    assert tally.series_rejected == 1 and "MIG instance" in tally.problems[0]


def test_out_of_range_values_are_rejected_not_clamped() -> None:
    labels = {"gpu": "0", "pod": "p"}
    tally = ps.Tally()
    out = ps.to_samples([(FB, [ps.Series(labels, ((60.0, -5.0), (120.0, 2.0**40)))]),
                         (GR, [ps.Series(labels, ((60.0, 1.5),))])], ps.Options(), tally)
    assert out == []
    assert tally.points_rejected == 3


def test_duplicate_series_combine_by_maximum() -> None:
    labels = {"gpu": "0", "pod": "p"}
    out = ps.to_samples([(FB, [ps.Series({**labels, "job": "a"}, ((60.0, 100.0),)),
                               ps.Series({**labels, "job": "b"}, ((60.0, 300.0),))])], ps.Options(), ps.Tally())
    assert [s.memory_mib for s in out] == [300.0]


# --- time grid, selectors, durations --------------------------------------------------------------------------

def test_chunks_cover_the_grid_exactly_below_the_point_limit() -> None:
    start, step = 1_000.0, 15.0
    end = start + step * 25_000 + 7
    grid = ps.chunks(start, end, step)
    points = [start + k * step for k in range(int((end - start) // step) + 1)]
    covered = []
    for a, b in grid:
        n = round((b - a) / step) + 1
        assert (b - a) / step <= ps.PROMETHEUS_MAX_POINTS and n <= ps.CHUNK_POINTS
        covered += [a + k * step for k in range(n)]
    assert covered == points
    assert len(grid) == 3


def test_halves_split_a_chunk_on_its_grid() -> None:
    assert ps.halves(0.0, 540.0, 60.0) == [(0.0, 240.0), (300.0, 540.0)]
    assert ps.halves(0.0, 60.0, 60.0) == [(0.0, 0.0), (60.0, 60.0)]
    assert ps.halves(120.0, 120.0, 60.0) == [(120.0, 120.0)]


@pytest.mark.parametrize(("args", "needle"), [
    ((0.0, 0.0, 60.0), "after its start"), ((10.0, 0.0, 60.0), "after its start"),
    ((0.0, 100.0, 0.5), "step must be"), ((0.0, 100.0, math.nan), "finite"),
    ((0.0, 1e12, 1.0), "too many"),
])
def test_chunks_refuse_bad_ranges(args: tuple[float, float, float], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        ps.chunks(*args)


@pytest.mark.parametrize(("text", "expected"), [
    ('cluster="a"', 'cluster="a"'), ('{cluster="a", namespace=~"prod-.*"}', 'cluster="a",namespace=~"prod-.*"'),
    ('a!="x\\"y"', 'a!="x\\"y"'), ("", ""), ('a="b"\n,c="d"', 'a="b",c="d"'),
])
def test_selector_accepts_label_matchers(text: str, expected: str) -> None:
    assert ps.check_selector(text) == expected


@pytest.mark.parametrize("text", ['a="b"}) or vector(1) #', 'a="b"} or up{', "a=b", 'a="b" b="c"', '1a="b"',
                                  'a="b",,', 'a="b\nc"', "a=`b`"])
def test_selector_refuses_anything_else(text: str) -> None:
    with pytest.raises(InputError, match="--selector"):
        ps.check_selector(text)


def test_promql_uses_max_for_memory_and_avg_for_activity() -> None:
    assert FB.promql(60.0, 'cluster="a"') == 'max_over_time(DCGM_FI_DEV_FB_USED{cluster="a"}[60s])'
    assert GR.promql(1.5) == "avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{}[1500ms])"


def test_durations_and_times() -> None:
    assert ps.parse_duration("7d", "--window") == 7 * 86400
    assert ps.parse_duration("90", "--step") == 90
    assert ps.parse_duration("1.5h", "--window") == 5400
    for bad in ("", "7x", "-1s", "0s", "1e9d"):
        with pytest.raises(InputError):
            ps.parse_duration(bad, "--window")
    assert ps.parse_time("2026-11-01T00:00:00Z", "--start") == 1_793_491_200
    assert ps.parse_time("2026-11-01T00:00:00", "--start") == 1_793_491_200
    assert ps.parse_time("1793491200.5", "--start") == 1_793_491_200.5
    for bad in ("yesterday", "nan", "-5", "1e300"):
        with pytest.raises(InputError):
            ps.parse_time(bad, "--start")
    assert ps.time_range(1000.0, start=None, end=None, window="10m") == (400.0, 1000.0)
    with pytest.raises(InputError, match="exclude"):
        ps.time_range(1000.0, start="1", end=None, window="1h")


# --- the adapter: URLs and credential files ------------------------------------------------------------------

@pytest.mark.parametrize(("url", "needle"), [
    ("file:///etc/passwd", "not an http"), ("prometheus:9090", "not an http"),
    ("http://user:secret@prom:9090", "holds credentials"), ("http://prom:9090/?x=1", "query"),
    ("http://prom:99999", "invalid port"),
])
def test_check_url_refuses(url: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as info:
        adapter.check_url(url)
    assert "secret" not in str(info.value)


def test_check_url_keeps_a_path_prefix() -> None:
    assert adapter.check_url("https://example.com/prometheus/") == "https://example.com/prometheus"


def test_credential_files(tmp_path: Path) -> None:
    basic = tmp_path / "basic"
    basic.write_text("alice:s3cr:et\n")
    creds = adapter.basic_auth(str(basic))
    assert creds.header == "Basic " + base64.b64encode(b"alice:s3cr:et").decode()
    assert "s3cr" not in repr(creds)
    token = tmp_path / "token"
    token.write_text("  abc.DEF-123  \n")
    assert adapter.bearer_token(str(token)).header == "Bearer abc.DEF-123"
    for text, fn, needle in (("", adapter.bearer_token, "empty"), ("a b", adapter.bearer_token, "one word"),
                             ("nouser", adapter.basic_auth, "USER:PASSWORD"), (":pw", adapter.basic_auth,
                                                                               "USER:PASSWORD"),
                             ("tok\x00en", adapter.bearer_token, "control")):
        token.write_text(text)
        with pytest.raises(InputError, match=needle):
            fn(str(token))
    with pytest.raises(InputError, match="cannot read"):
        adapter.bearer_token(str(tmp_path / "missing"))


# --- the adapter against local HTTP servers -----------------------------------------------------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with `server.answer` (status, headers, body) and records the request headers."""

    def do_GET(self) -> None:  # http.server's name
        srv: Any = self.server
        srv.seen.append((self.path, dict(self.headers)))
        status, headers, body = srv.answer
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_http() -> Iterator[Any]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def make(status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None,
             tls: ssl.SSLContext | None = None) -> Any:
        srv: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        srv.seen, srv.answer = [], (status, headers or {}, body)
        if tls is not None:
            srv.socket = tls.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        srv.url = f"{'https' if tls else 'http'}://127.0.0.1:{srv.server_address[1]}"
        return srv

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


def test_bearer_token_from_a_file_is_sent_and_never_logged(local_http: Any, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    srv = local_http(body=_matrix(GOOD).encode())
    token = tmp_path / "token"
    token.write_text("tok-SECRET-42\n")
    client = adapter.PrometheusClient(srv.url, credentials=adapter.bearer_token(str(token)))
    with caplog.at_level(logging.DEBUG, logger="migplan"):
        body = client.query_range("up", 100, 200, 60)
    assert json.loads(body)["status"] == "success"
    [(path, headers)] = srv.seen
    assert headers["Authorization"] == "Bearer tok-SECRET-42"
    assert path.startswith("/api/v1/query_range?query=up&start=100.000&end=200.000&step=60")
    assert "tok-SECRET-42" not in caplog.text
    assert str(token) in caplog.text  # the file's name is what a log may show


def test_redirect_is_refused_and_credentials_never_follow(local_http: Any, tmp_path: Path) -> None:
    elsewhere = local_http(body=_matrix(GOOD).encode())
    srv = local_http(status=302, headers={"Location": f"{elsewhere.url}/api/v1/query_range?x=1"})
    token = tmp_path / "token"
    token.write_text("tok-SECRET-42")
    client = adapter.PrometheusClient(srv.url, credentials=adapter.bearer_token(str(token)))
    with pytest.raises(ps.PrometheusError, match="redirects are not followed") as info:
        client.query_range("up", 100, 200, 60)
    assert elsewhere.seen == []
    assert "tok-SECRET-42" not in str(info.value)


def test_answer_larger_than_the_limit_is_refused(local_http: Any) -> None:
    srv = local_http(body=b"x" * (3 << 20))
    client = adapter.PrometheusClient(srv.url, max_bytes=1 << 20)
    with pytest.raises(ps.PrometheusError, match="larger than 1 MiB"):
        client.query_range("up", 100, 200, 60)


def test_401_says_which_credentials_were_refused(local_http: Any, tmp_path: Path) -> None:
    srv = local_http(status=401, body=b"Unauthorized\n")
    with pytest.raises(ps.PrometheusError, match="HTTP 401") as info:
        adapter.PrometheusClient(srv.url).query_range("up", 1, 2, 1)
    assert "--bearer-token-file" in str(info.value)
    token = tmp_path / "token"
    token.write_text("wrong-token")
    with pytest.raises(ps.PrometheusError) as info:
        adapter.PrometheusClient(srv.url, credentials=adapter.bearer_token(str(token))).query_range("up", 1, 2, 1)
    assert f"bearer token from {token}" in str(info.value) and "wrong-token" not in str(info.value)


def test_connection_refused_is_a_clear_error() -> None:
    from helpers import free_port

    with pytest.raises(ps.PrometheusError, match="cannot connect"):
        adapter.PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=5).query_range("up", 1, 2, 1)


def test_tls_is_verified_and_a_ca_file_makes_it_trusted(local_http: Any, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv = local_http(body=_matrix(GOOD).encode(), tls=ctx)
    with pytest.raises(ps.PrometheusError, match="certificate not trusted") as info:
        adapter.PrometheusClient(srv.url).query_range("up", 1, 2, 1)
    assert "--ca-file" in str(info.value)
    body = adapter.PrometheusClient(srv.url, ca_file=str(cert)).query_range("up", 1, 2, 1)
    assert json.loads(body)["status"] == "success"


# --- a real Prometheus ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data() -> tuple[Dataset, dict[str, Raw]]:
    import time

    return dcgm_dataset(time.time())


def _server(tmp: Path, d: Dataset, **kw: Any) -> PromServer:
    prom, tool, reason = ensure_prometheus()
    if prom is None or tool is None:
        pytest.skip(reason)
    server = PromServer(prom, tool, tmp, d.openmetrics(), **kw)
    server.start()
    return server


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, data: tuple[Dataset, dict[str, Raw]]) -> Iterator[PromServer]:
    server = _server(tmp_path_factory.mktemp("prom"), data[0])
    try:
        yield server
    finally:
        server.stop()


@functools.lru_cache(maxsize=1)
def _catalog() -> Any:
    from migplan.catalog import load_catalog

    return load_catalog([])


def _catalog_model(name: str) -> str | None:
    found = _catalog().find(name)
    return found.id if found else None


def _collect(url: str, d: Dataset, **kw: Any) -> tuple[cp.PromResult, dict[str, list[Sample]]]:
    client = kw.pop("client", None)
    req = cp.PromRequest(url=url, start=str(d.query_start), end=str(d.query_end), step=f"{STEP}s", **kw)
    result = cp.collect_prometheus(cp.plan(req, model_of=_catalog_model, client=client), keep_samples=True)
    assert result.samples is not None
    by: dict[str, list[Sample]] = {}
    for s in result.samples:
        by.setdefault(s.workload, []).append(s)
    return result, by


def _check(samples: list[Sample], d: Dataset, mem: Raw | None, act: Raw | None, *, mem_scale: float = 1.0,
           act_scale: float = 100.0) -> None:
    want_mem = {t: v * mem_scale for t, v in d.expected(mem, "max").items()} if mem else {}
    want_act = {t: v * act_scale for t, v in d.expected(act, "avg").items()} if act else {}
    got_mem = {int(s.timestamp): s.memory_mib for s in samples if s.memory_mib is not None}
    got_act = {int(s.timestamp): s.util_pct for s in samples if s.util_pct is not None}
    assert sorted(got_mem) == sorted(want_mem)
    assert sorted(got_act) == sorted(want_act)
    for t, v in want_mem.items():
        assert got_mem[t] == pytest.approx(v, rel=1e-9), t
    for t, v in want_act.items():
        assert got_act[t] == pytest.approx(v, rel=1e-9), t


def test_real_prometheus_samples_match_what_was_generated(prom: PromServer,
                                                          data: tuple[Dataset, dict[str, Raw]]) -> None:
    d, r = data
    result, by = _collect(prom.url, d)
    assert sorted(by) == ["prod/chat-7d9f8c6b5d-x2x4z", "prod/embed-0", "research/infer", "research/train-job-0"]
    # MIG instances from exported_* labels (the plain pod is the exporter's), host from `Hostname`
    _check(by["prod/chat-7d9f8c6b5d-x2x4z"], d, r["chat.mem"], r["chat.act"])
    chat = by["prod/chat-7d9f8c6b5d-x2x4z"][0].place
    assert (chat.host, chat.gpu, chat.mig_profile, chat.gpu_model) == ("gpu-node-a", 0, "3g.20gb", "A100-SXM4-40GB")
    # the NaN sample is dropped; GPU_UTIL on a MIG instance is not used (activity from GR_ENGINE_ACTIVE)
    _check(by["prod/embed-0"], d, r["embed.mem"], r["embed.act"])
    assert {s.place.mig_profile for s in by["prod/embed-0"]} == {"1g.5gb"}
    # whole GPUs, host from `hostname`: GPU_UTIL is the fallback only where GR_ENGINE_ACTIVE is missing
    _check(by["research/train-job-0"], d, r["train.mem"], r["train.util"], act_scale=1.0)
    _check(by["research/infer"], d, r["infer.mem"], r["infer.act"])
    infer = by["research/infer"][0].place
    assert (infer.host, infer.gpu, infer.mig_profile, infer.gpu_model) == ("gpu-node-b", 2, None, "H100-SXM5-80GB")
    assert all(s.source == "prometheus" for ss in by.values() for s in ss)
    # the idle instance and the old exporter's two series have no workload labels
    assert result.tally.series_unattributed == 3
    assert result.tally.series_rejected == 1  # GPU_UTIL on the MIG instance
    assert result.workloads["prod/chat-7d9f8c6b5d-x2x4z"].memory_max == max(d.expected(r["chat.mem"], "max").values())


def test_real_prometheus_old_exporter_and_idle_gpus_profiled_per_gpu_when_asked(
        prom: PromServer, data: tuple[Dataset, dict[str, Raw]]) -> None:
    d, r = data
    result, by = _collect(prom.url, d, unattributed="gpu")
    _check(by["gpu-node-c/gpu0"], d, r["legacy.mem"], r["legacy.duty"], mem_scale=1 / 1048576, act_scale=1.0)
    assert by["gpu-node-c/gpu0"][0].place.gpu_model == "Tesla V100-SXM2-16GB"  # not in the catalog: as reported
    _check(by["gpu-node-a/gpu0/gi5"], d, r["idle.mem"], None)
    assert result.tally.series_unattributed == 0


def test_real_prometheus_owner_naming_merges_a_deployments_pods(prom: PromServer,
                                                                data: tuple[Dataset, dict[str, Raw]]) -> None:
    _, by = _collect(prom.url, data[0], naming="owner")
    assert "prod/chat" in by and "prod/embed-0" in by


def test_real_prometheus_selector_narrows_every_query(prom: PromServer, data: tuple[Dataset, dict[str, Raw]]) -> None:
    _, by = _collect(prom.url, data[0], selector='hostname="gpu-node-b"')
    assert sorted(by) == ["research/infer", "research/train-job-0"]


def test_real_prometheus_chunks_give_the_same_samples(prom: PromServer, data: tuple[Dataset, dict[str, Raw]]) -> None:
    d = data[0]
    whole, _ = _collect(prom.url, d)
    chunked, _ = _collect(prom.url, d, chunk_points=7)
    assert whole.samples is not None and chunked.samples is not None
    key = lambda s: (s.workload, s.timestamp)  # noqa: E731
    assert sorted(chunked.samples, key=key) == sorted(whole.samples, key=key)
    assert len(whole.samples) > 400


def test_real_prometheus_point_limit_and_bad_query_are_reported(prom: PromServer,
                                                                data: tuple[Dataset, dict[str, Raw]]) -> None:
    d = data[0]
    client = adapter.PrometheusClient(prom.url)
    with pytest.raises(ps.PrometheusError, match="11,000 points"):
        client.query_range("DCGM_FI_DEV_FB_USED", d.query_start, d.query_start + 20_000, 1)
    with pytest.raises(ps.PrometheusError, match="HTTP 400: bad_data"):
        client.query_range("max_over_time(", d.query_start, d.query_end, 60)


def test_cli_collect_prometheus_json(prom: PromServer, data: tuple[Dataset, dict[str, Raw]]) -> None:
    from migplan.cli import prometheus_cmd

    d, r = data
    app = typer.Typer()
    app.command("collect")(prometheus_cmd.collect_prometheus)
    res = CliRunner().invoke(app, ["--prometheus", prom.url, "--start", str(d.query_start), "--end",
                                   str(d.query_end), "--step", "1m", "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {w["name"]: w for w in doc["workloads"]}
    assert rows["research/train-job-0"]["memory_max_mib"] == max(d.expected(r["train.mem"], "max").values())
    assert rows["research/train-job-0"]["places"] == [{"host": "gpu-node-b", "gpu": 1,
                                                       "gpu_model": "H100-SXM5-80GB", "mig_profile": None}]
    assert doc["summary"]["series_unattributed"] == 3
    table = CliRunner().invoke(app, ["--prometheus", prom.url, "--start", str(d.query_start), "--end",
                                     str(d.query_end)])
    assert table.exit_code == 0 and "prod/embed-0" in table.stdout
    bad = CliRunner().invoke(app, ["--prometheus", "http://u:pw@127.0.0.1:1"])
    assert bad.exit_code == 2 and "holds credentials" in bad.output


@pytest.fixture(scope="module")
def prom_basic(tmp_path_factory: pytest.TempPathFactory,
               data: tuple[Dataset, dict[str, Raw]]) -> Iterator[PromServer]:
    import bcrypt  # installed with paramiko

    hashed = bcrypt.hashpw(b"correct horse", bcrypt.gensalt(rounds=4)).decode()
    web = f"basic_auth_users:\n  alice: {hashed}\n"
    ready = "Basic " + base64.b64encode(b"alice:correct horse").decode()
    server = _server(tmp_path_factory.mktemp("prom-auth"), data[0], web_config=web, ready_auth=ready)
    try:
        yield server
    finally:
        server.stop()


def test_real_prometheus_basic_auth_from_a_file(prom_basic: PromServer, data: tuple[Dataset, dict[str, Raw]],
                                                tmp_path: Path) -> None:
    d, r = data
    good = tmp_path / "good"
    good.write_text("alice:correct horse\n")
    os.chmod(good, 0o600)
    _, by = _collect(prom_basic.url, d, basic_auth_file=str(good))
    _check(by["prod/chat-7d9f8c6b5d-x2x4z"], d, r["chat.mem"], r["chat.act"])
    wrong = tmp_path / "wrong"
    wrong.write_text("alice:battery staple\n")
    with pytest.raises(ps.PrometheusError, match="HTTP 401") as info:
        _collect(prom_basic.url, d, basic_auth_file=str(wrong))
    assert f"basic auth from {wrong}" in str(info.value) and "battery" not in str(info.value)
    with pytest.raises(ps.PrometheusError, match="--basic-auth-file"):
        _collect(prom_basic.url, d)


def test_loose_credential_file_permissions_are_warned(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("tok")
    os.chmod(f, 0o644)
    notes: list[str] = []
    cp.credentials(cp.PromRequest(url="http://x", bearer_token_file=str(f)), notes.append)
    assert notes and "chmod 600" in notes[0]
    os.chmod(f, 0o600)
    notes.clear()
    cp.credentials(cp.PromRequest(url="http://x", bearer_token_file=str(f)), notes.append)
    assert notes == []


def _nearest_rank(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(pct / 100 * len(ordered))) - 1]


def test_cli_out_writes_profiles_that_migplan_reads(prom: PromServer, data: tuple[Dataset, dict[str, Raw]],
                                                    tmp_path: Path) -> None:
    from migplan.cli import prometheus_cmd
    from migplan.profiles import load_profiles

    d, r = data
    app = typer.Typer()
    app.command("collect")(prometheus_cmd.collect_prometheus)
    out = tmp_path / "profiles"
    res = CliRunner().invoke(app, ["--prometheus", prom.url, "--start", str(d.query_start), "--end",
                                   str(d.query_end), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["gpu-node-a.yaml", "gpu-node-b.yaml"]
    pset = load_profiles(str(out))
    by = {w.name: w for w in pset}
    assert sorted(by) == ["prod/chat-7d9f8c6b5d-x2x4z", "prod/embed-0", "research/infer", "research/train-job-0"]
    for name, raw in (("prod/chat-7d9f8c6b5d-x2x4z", "chat.mem"), ("research/train-job-0", "train.mem")):
        mem = list(d.expected(r[raw], "max").values())
        w = by[name]
        assert (w.memory.p50, w.memory.p99, w.memory.max) == (math.ceil(_nearest_rank(mem, 50)),
                                                              math.ceil(_nearest_rank(mem, 99)), math.ceil(max(mem)))
        assert w.observed.samples == len(mem)
    chat = by["prod/chat-7d9f8c6b5d-x2x4z"]
    assert (chat.observed.host, chat.observed.mig_profile, chat.observed.gpu_model) == ("gpu-node-a", "3g.20gb",
                                                                                        "A100-SXM4-40GB")
    # compute: a share of the whole GPU, so a 3g instance fully busy is at most 3/7 of an A100
    assert chat.compute.known and 0 < chat.compute.max <= 3 / 7 + 1e-3
    assert "written" in res.stdout


def test_history_source_passes_repeat_the_same_samples(prom: PromServer,
                                                       data: tuple[Dataset, dict[str, Raw]]) -> None:
    d = data[0]
    req = cp.PromRequest(url=prom.url, chunk_points=50)  # the span given replaces --start/--end/--window
    h = prometheus_history(req, (d.query_start, d.query_end), _catalog())
    first, second = list(h.passes()), list(h.passes())
    assert first == second and len(first) > 400
    assert h.latest_hint is not None and h.latest_hint() == d.query_end


def test_real_prometheus_answer_over_the_size_limit_is_asked_in_halves(
        prom: PromServer, data: tuple[Dataset, dict[str, Raw]]) -> None:
    d = data[0]
    whole, _ = _collect(prom.url, d)
    notes: list[str] = []
    req = cp.PromRequest(url=prom.url, start=str(d.query_start), end=str(d.query_end), step=f"{STEP}s")
    small = cp.plan(req, model_of=_catalog_model, client=adapter.PrometheusClient(prom.url, max_bytes=4000))
    split = cp.collect_prometheus(small, keep_samples=True, report=notes.append)
    assert any("asking for half the range" in n for n in notes)
    key = lambda s: (s.workload, s.timestamp)  # noqa: E731
    assert split.samples is not None and whole.samples is not None
    assert sorted(split.samples, key=key) == sorted(whole.samples, key=key)
    assert split.tally.points_read == whole.tally.points_read
    tiny = cp.plan(req, client=adapter.PrometheusClient(prom.url, max_bytes=10))
    with pytest.raises(ps.AnswerTooLarge, match="larger than"):
        cp.collect_prometheus(tiny)


def test_migplan_collect_prometheus_through_the_real_command_line(prom: PromServer,
                                                                  data: tuple[Dataset, dict[str, Raw]]) -> None:
    from migplan.cli.app import app

    d, r = data
    res = CliRunner().invoke(app, ["collect", "--prometheus", prom.url, "--start", str(d.query_start), "--end",
                                   str(d.query_end), "--step", "60s", "-o", "yaml"])
    assert res.exit_code == 0, res.output
    import yaml

    doc = yaml.safe_load(res.stdout)
    prof = {p["name"]: p for p in doc["profiles"]}
    assert prof["prod/embed-0"]["memory_mib"]["max"] == math.ceil(max(d.expected(r["embed.mem"], "max").values()))
    assert doc["written"] == []


# --- Prometheus as the history of `profiles build` and `backtest` ----------------------------------------------

def _window_args(d: Dataset) -> list[str]:
    """The dataset's whole query range as `--until END --window LENGTH`."""
    return ["--until", str(d.query_end), "--window", f"{d.query_end - d.query_start}s"]


def test_profiles_build_from_real_prometheus_matches_the_generator(prom: PromServer,
                                                                   data: tuple[Dataset, dict[str, Raw]],
                                                                   tmp_path: Path) -> None:
    from migplan.cli.app import app
    from migplan.profiles import load_profiles

    d, r = data
    out = tmp_path / "profiles"
    res = CliRunner().invoke(app, ["profiles", "build", "--prometheus", prom.url, *_window_args(d), "--step", "60s",
                                   "--out", str(out), "-o", "json"])
    assert res.exit_code == 0, res.output
    assert f"querying {prom.url}" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["source"] == prom.url and sorted(w["file"] for w in doc["written"]) == sorted(
        str(out / f) for f in ("gpu-node-a.yaml", "gpu-node-b.yaml"))
    by = {w.name: w for w in load_profiles(str(out))}
    assert sorted(by) == ["prod/chat-7d9f8c6b5d-x2x4z", "prod/embed-0", "research/infer", "research/train-job-0"]
    for name, raw in (("prod/chat-7d9f8c6b5d-x2x4z", "chat.mem"), ("prod/embed-0", "embed.mem"),
                      ("research/train-job-0", "train.mem"), ("research/infer", "infer.mem")):
        mem = list(d.expected(r[raw], "max").values())
        w = by[name]
        assert (w.memory.p50, w.memory.p99, w.memory.max) == (math.ceil(_nearest_rank(mem, 50)),
                                                              math.ceil(_nearest_rank(mem, 99)), math.ceil(max(mem)))
        assert w.observed.samples == len(mem)
    # whole GPU, activity from GR_ENGINE_ACTIVE (0..1 of the GPU): the profile's compute max is its max
    assert by["research/infer"].compute.max == pytest.approx(max(d.expected(r["infer.act"], "avg").values()),
                                                             abs=1e-3)
    assert (by["prod/embed-0"].observed.host, by["prod/embed-0"].observed.mig_profile) == ("gpu-node-a", "1g.5gb")


def test_profiles_build_from_prometheus_asks_only_for_the_window(prom: PromServer,
                                                                 data: tuple[Dataset, dict[str, Raw]]) -> None:
    from migplan.cli.app import app

    d, r = data
    until = d.query_start + 1800  # the first half hour only
    res = CliRunner().invoke(app, ["profiles", "build", "--prometheus", prom.url, "--until", str(until),
                                   "--window", "30m", "--dry-run", "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    prof = {p["name"]: p for p in doc["profiles"]}
    want = [v for t, v in d.expected(r["train.mem"], "max").items() if until - 1800 <= t <= until]
    assert prof["research/train-job-0"]["memory_mib"]["max"] == math.ceil(max(want))
    assert prof["research/train-job-0"]["observed"]["samples"] == len(want)
    assert doc["window"] == {"start": until - 1800, "end": until}


def test_backtest_from_real_prometheus_counts_what_the_generator_says(prom: PromServer,
                                                                      data: tuple[Dataset, dict[str, Raw]]) -> None:
    from migplan.cli.app import app

    d, r = data
    test_s = 3600
    train_s = d.query_end - d.query_start - test_s
    res = CliRunner().invoke(app, ["backtest", "--prometheus", prom.url, "--until", str(d.query_end),
                                   "--train", f"{train_s}s", "--test", f"{test_s}s", "--policy", "p50",
                                   "--policy", "max+10%", "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    split = d.query_end - test_s
    assert doc["train"]["start"] == d.query_start and doc["test"] == {"start": split, "end": d.query_end}
    rows = {(w["workload"], w["rule"]): w for w in doc["workloads"]}
    for name, raw in (("research/infer", "infer.mem"), ("prod/chat-7d9f8c6b5d-x2x4z", "chat.mem"),
                      ("research/train-job-0", "train.mem")):
        exp = d.expected(r[raw], "max")
        train = [v for t, v in exp.items() if t < split]
        test = [v for t, v in exp.items() if t >= split]
        for rule in ("p50", "max+10%"):
            w = rows[(name, rule)]
            assert w["status"] == "placed", w
            assert w["train_peak_mib"] == math.ceil(max(train)) and w["train_samples"] == len(train)
            assert w["test_samples"] == len(test) and w["test_peak_mib"] == math.ceil(max(test))
            assert w["oom_samples"] == sum(1 for v in test if v > w["instance_mib"]), (name, rule, w)
    totals = {t["rule"]: t for t in doc["totals"]}
    assert totals["p50"]["test_samples"] == sum(w["test_samples"] for (_, rule), w in rows.items() if rule == "p50")


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PromServer, Dataset, dict[str, Raw]]]:
    """A workload whose memory grows from 5,000 to 12,000 MiB halfway through the two hours (an OOM for an
    instance sized on the first hour), and a steady one."""
    import time

    d = Dataset(int((time.time() - 5 * 3600) // STEP * STEP))
    h100 = {"modelName": "NVIDIA H100 80GB HBM3", "UUID": "GPU-77777777-0000-1111-2222-333344445555",
            "hostname": "gpu-node-g", "job": "dcgm-honor", "instance": "10.0.0.7:9400", "namespace": "ml"}
    grow = {**h100, "gpu": "0", "pod": "grow-0"}
    steady = {**h100, "gpu": "1", "pod": "steady-0"}
    r = {"grow.mem": d.add("DCGM_FI_DEV_FB_USED", grow, lambda i: 5000.0 + (7000.0 if i >= 120 else 0.0) + i % 7),
         "grow.act": d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", grow, lambda i: 0.05),
         "steady.mem": d.add("DCGM_FI_DEV_FB_USED", steady, lambda i: 3000.0 + i % 11),
         "steady.act": d.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", steady, lambda i: 0.05)}
    server = _server(tmp_path_factory.mktemp("prom-growth"), d)
    try:
        yield server, d, r
    finally:
        server.stop()


def test_backtest_from_real_prometheus_finds_the_oom_the_generator_planted(
        growth: tuple[PromServer, Dataset, dict[str, Raw]]) -> None:
    from migplan.cli.app import app

    server, d, r = growth
    test_s = 3600
    split = d.query_end - test_s
    res = CliRunner().invoke(app, ["backtest", "--prometheus", server.url, "--until", str(d.query_end),
                                   "--train", f"{d.query_end - d.query_start - test_s}s", "--test", f"{test_s}s",
                                   "--policy", "max+10%", "--policy", "max+150%", "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {(w["workload"], w["rule"]): w for w in doc["workloads"]}
    exp = d.expected(r["grow.mem"], "max")
    train = [v for t, v in exp.items() if t < split]
    test = [v for t, v in exp.items() if t >= split]
    assert max(train) < 5100 and max(test) > 12000  # what the generator planted
    small, large = rows[("ml/grow-0", "max+10%")], rows[("ml/grow-0", "max+150%")]
    assert small["status"] == large["status"] == "placed"
    assert small["train_peak_mib"] == math.ceil(max(train)) and small["test_peak_mib"] == math.ceil(max(test))
    assert small["instance_mib"] < max(test)  # sized on the first hour: too small for the second
    want = sum(1 for v in test if v > small["instance_mib"])
    assert want > 30 and small["oom_samples"] == want
    assert small["oom_minutes"] == pytest.approx(want * STEP / 60)  # one step per sample
    assert large["instance_mib"] >= max(test) and large["oom_samples"] == 0
    assert rows[("ml/steady-0", "max+10%")]["oom_samples"] == 0
    totals = {t["rule"]: t for t in doc["totals"]}
    assert (totals["max+10%"]["oom_workloads"], totals["max+10%"]["oom_samples"]) == (1, want)
    assert (totals["max+150%"]["oom_workloads"], totals["max+150%"]["oom_samples"]) == (0, 0)


def test_history_commands_take_one_source_and_a_window_for_prometheus(tmp_path: Path) -> None:
    from migplan.cli.app import app

    csv = tmp_path / "s.csv"
    csv.write_text("timestamp,workload,memory_used_mib\n1793491000,a,100\n")
    res = CliRunner().invoke(app, ["profiles", "build", "--csv", str(csv), "--prometheus", "http://127.0.0.1:1",
                                   "--dry-run"])
    assert res.exit_code == 2 and "not --csv and --prometheus" in res.stderr, res.output
    res = CliRunner().invoke(app, ["backtest", "--history", str(tmp_path), "--prometheus", "http://127.0.0.1:1"])
    assert res.exit_code == 2 and "not --history and --prometheus" in res.stderr, res.output
    res = CliRunner().invoke(app, ["profiles", "build", "--prometheus", "http://127.0.0.1:1", "--window", "all",
                                   "--dry-run"])
    assert res.exit_code == 2 and "give it a length" in res.stderr, res.output
    res = CliRunner().invoke(app, ["backtest", "--prometheus", "http://127.0.0.1:1", "--train", "1h", "--test", "1h"])
    assert res.exit_code == 1 and "127.0.0.1:1" in res.stderr and "Traceback" not in res.output, res.output
    # the range options belong to `collect --prometheus`; here the command's own window says what is asked
    res = CliRunner().invoke(app, ["backtest", "--prometheus", "http://127.0.0.1:1", "--start", "0"])
    assert res.exit_code == 2 and "--start" in res.stderr
