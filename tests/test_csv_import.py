"""CSV import: every kind of bad row is rejected with its line number, the good ones kept."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from migplan.cli.app import app
from migplan.commands.history import csv_lines
from migplan.errors import InputError
from migplan.history.csv_series import MAX_LINE_BYTES, MAX_REPORTED, CsvSeries, parse_timestamp

HEADER = b"timestamp,workload,host,memory_used_mib,util_pct,gpu_model\n"
GOOD = b"2026-11-01T00:00:00Z,chat,gpu1,14100.5,37,A100-SXM4-40GB\n"


def _parse(data: bytes):
    p = CsvSeries("f.csv")
    out = list(p.samples(data.splitlines(keepends=True)))
    return out, p.stats


def test_a_good_row_becomes_a_sample() -> None:
    (s,), st = _parse(HEADER + GOOD)
    assert (s.workload, s.memory_mib, s.util_pct, s.place.host, s.place.gpu_model) == \
        ("chat", 14100.5, 37.0, "gpu1", "A100-SXM4-40GB")
    assert s.timestamp == 1_793_491_200.0 and s.source == "csv:f.csv:2"
    assert (st.rows_read, st.rows_kept, st.rows_rejected) == (1, 1, 0)


@pytest.mark.parametrize(("row", "kind", "words"), [
    (b"yesterday,chat,gpu1,100,,\n", "timestamp", "neither unix seconds nor ISO 8601"),
    (b"2026-13-01T00:00:00Z,chat,gpu1,100,,\n", "timestamp", "neither unix seconds"),
    (b"1793491200000,chat,gpu1,100,,\n", "timestamp", "milliseconds"),
    (b"-5,chat,gpu1,100,,\n", "timestamp", "outside 1970"),
    (b",chat,gpu1,100,,\n", "timestamp", "empty"),
    (b"1793491200,chat,gpu1,-1,,\n", "memory", "negative"),
    (b"1793491200,chat,gpu1,NaN,,\n", "memory", "not a number"),
    (b"1793491200,chat,gpu1,inf,,\n", "memory", "not a number"),
    (b"1793491200,chat,gpu1,1_000,,\n", "memory", "not a number"),
    (b"1793491200,chat,gpu1,,,\n", "memory", "no memory value"),
    (b"1793491200,chat,gpu1,2000000,,\n", "memory", "above 1048576 MiB"),
    (b"1793491200,chat,gpu1,100,101,\n", "util", "outside 0..100"),
    (b"1793491200,chat,gpu1,100,-1,\n", "util", "outside 0..100"),
    (b"1793491200,chat,gpu1,100,nan,\n", "util", "not a number"),
    (b"1793491200,,gpu1,100,,\n", "workload", "empty"),
    (b"1793491200,-bad,gpu1,100,,\n", "workload", "must start with a letter"),
    (b"1793491200,chat,bad host,100,,\n", "host", "not a host name"),
    (b"1793491200,chat,gpu1,100\n", "fields", "4 fields, the header has 6"),
    (b"1793491200,chat,gpu1,100,,,extra\n", "fields", "7 fields"),
    (b'1793491200,"chat,gpu1,100,,\n', "syntax", "not a CSV row"),
    (b"1793491200,chat,gpu\xff1,100,,\n", "encoding", "not UTF-8"),
    (HEADER, "header", "the header line again"),
])
def test_each_kind_of_bad_row_is_rejected_with_its_line(row, kind, words) -> None:
    samples, st = _parse(HEADER + GOOD + row + GOOD)
    assert len(samples) == 2 and (st.rows_read, st.rows_kept, st.rows_rejected) == (3, 2, 1)
    (bad,) = st.rejected
    assert bad.line == 3 and bad.kind == kind and words in bad.reason, bad.reason


def test_both_memory_columns_in_one_row_are_rejected() -> None:
    head = b"timestamp,workload,memory_used_bytes,memory_used_mib\n"
    samples, st = _parse(head + b"1793491200,a,1048576,\n1793491200,a,,2\n1793491200,a,1048576,1\n")
    assert [s.memory_mib for s in samples] == [1.0, 2.0]
    assert st.rejected[0].line == 4 and "both memory_used_bytes and memory_used_mib" in st.rejected[0].reason


def test_bytes_are_converted_to_mib() -> None:
    (s,), _ = _parse(b"timestamp,workload,memory_used_bytes\n1793491200,a,1572864\n")
    assert s.memory_mib == 1.5


@pytest.mark.parametrize(("header", "words"), [
    (b"timestamp,workload\n", "lacks the column(s) memory_used_bytes or memory_used_mib"),
    (b"workload,memory_used_mib\n", "lacks the column(s) timestamp"),
    (b"timestamp,workload,memory_used_mib,workload\n", "'workload' appears twice"),
    (b"time\xffstamp,workload,memory_used_mib\n", "not UTF-8"),
])
def test_a_bad_header_is_an_input_error_naming_line_1(header, words) -> None:
    with pytest.raises(InputError, match="f.csv:1") as err:
        _parse(header + GOOD)
    assert words in str(err.value)


def test_an_empty_file_is_an_input_error() -> None:
    with pytest.raises(InputError, match="empty"):
        _parse(b"\n\n")


def test_bom_crlf_case_and_column_order_are_accepted() -> None:
    data = b"\xef\xbb\xbfMemory_Used_MiB,Workload,TimeStamp,notes\r\n100,a,1793491200,x\r\n\r\n200,a,1793491260,y\r\n"
    samples, st = _parse(data)
    assert [s.memory_mib for s in samples] == [100.0, 200.0]
    assert st.ignored_columns == ("notes",) and st.rows_read == 2


def test_quoted_fields_may_hold_commas() -> None:
    (s,), st = _parse(b'timestamp,workload,memory_used_mib,gpu_model\n1793491200,a,1,"A100, SXM"\n')
    assert s.place.gpu_model == "A100, SXM"


def test_iso_and_unix_times() -> None:
    assert parse_timestamp("2026-11-01T00:00:00Z") == parse_timestamp("1793491200")
    assert parse_timestamp("2026-11-01T01:00:00+01:00") == 1_793_491_200.0
    assert parse_timestamp("2026-11-01 00:00:00") == 1_793_491_200.0  # no zone: UTC
    assert parse_timestamp("1793491200.5") == 1_793_491_200.5


def test_rejections_are_listed_up_to_a_cap_and_all_counted() -> None:
    _, st = _parse(HEADER + b"bad,a,h,1,,\n" * (MAX_REPORTED + 5))
    assert st.rows_rejected == MAX_REPORTED + 5 and len(st.rejected) == MAX_REPORTED
    assert st.kinds["timestamp"] == MAX_REPORTED + 5 and st.to_dict()["rejected_not_listed"] == 5


def test_a_huge_line_is_rejected_without_being_read_into_memory(tmp_path) -> None:
    path = tmp_path / "big.csv"
    with open(path, "wb") as fh:
        fh.write(HEADER + GOOD)
        fh.write(b"1793491200,chat,gpu1,100,," + b"x" * (8 * MAX_LINE_BYTES) + b"\n")
        fh.write(GOOD)
    lines = list(csv_lines(str(path)))
    assert len(lines) == 4 and max(len(x) for x in lines) == MAX_LINE_BYTES + 1
    p = CsvSeries(str(path))
    assert len(list(p.samples(lines))) == 2
    assert p.stats.rejected[0].line == 3 and p.stats.rejected[0].kind == "too-long"


def test_profiles_import_cli_reports_rows_and_writes_one_file_per_host(tmp_path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + GOOD + b"bad,chat,gpu1,1,,\n"
                     + b"2026-11-01T00:01:00Z,emb,gpu2,3000,10,A30\n")
    out = tmp_path / "profiles"
    res = CliRunner().invoke(app, ["profiles", "import", str(path), "--out", str(out), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["csv"]["rows_read"], doc["csv"]["rows_kept"], doc["csv"]["rows_rejected"]) == (3, 2, 1)
    assert doc["csv"]["rejected"][0]["line"] == 3
    assert sorted(p.name for p in out.iterdir()) == ["gpu1.yaml", "gpu2.yaml"]
    assert "1 rows of" in res.stderr


def test_profiles_import_of_a_missing_file_is_exit_2(tmp_path) -> None:
    res = CliRunner().invoke(app, ["profiles", "import", str(tmp_path / "nope.csv"), "--out", str(tmp_path)])
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_profiles_import_with_only_bad_rows_is_exit_1(tmp_path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + b"bad,chat,gpu1,1,,\n")
    res = CliRunner().invoke(app, ["profiles", "import", str(path), "--dry-run"])
    assert res.exit_code == 1 and "no profile built" in res.stderr


def _series_file(tmp_path, times):
    path = tmp_path / "s.csv"
    path.write_text("timestamp,workload,memory_used_mib\n" + "".join(f"{t},w,{t - 1_793_491_000}\n" for t in times))
    return path


def _build(*args):
    res = CliRunner().invoke(app, ["profiles", "build", *args, "--dry-run", "-o", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_window_ends_at_the_last_sample_by_default(tmp_path) -> None:
    day = 86_400
    path = _series_file(tmp_path, [1_793_491_000 + k * day for k in range(10)])  # memory = k * day
    doc = _build("--csv", str(path), "--window", "3d")
    (p,) = doc["profiles"]
    assert p["observed"]["samples"] == 4 and p["memory_mib"]["max"] == 9 * day  # days 6..9, both ends kept
    assert doc["notes"] == []


def test_a_file_not_in_time_order_is_read_again_with_the_true_end(tmp_path, monkeypatch) -> None:
    import migplan.commands.history as history

    monkeypatch.setattr(history, "TAIL_BYTES", 40)  # the "last MiB" is the last two rows here
    day = 86_400
    times = [1_793_491_000 + k * day for k in (9, *range(9))]  # the latest row comes first
    path = _series_file(tmp_path, times)
    doc = _build("--csv", str(path), "--window", "3d")
    (p,) = doc["profiles"]
    assert p["observed"]["samples"] == 4 and p["memory_mib"]["max"] == 9 * day
    assert "not in time order" in doc["notes"][0]


def test_until_and_window_all(tmp_path) -> None:
    path = _series_file(tmp_path, [1_793_491_000 + k * 60 for k in range(100)])
    doc = _build("--csv", str(path), "--window", "all")
    assert doc["profiles"][0]["observed"]["samples"] == 100
    doc = _build("--csv", str(path), "--window", "10m", "--until", str(1_793_491_000 + 50 * 60))
    assert doc["profiles"][0]["observed"]["samples"] == 11 and doc["profiles"][0]["memory_mib"]["max"] == 3000


@pytest.mark.parametrize(("args", "words"), [
    (["--window", "7x"], "not a duration"), (["--until", "soon"], "--until"),
    ([], "exactly one of --history PATH and --csv FILE")])
def test_build_refuses_bad_options(tmp_path, args, words) -> None:
    path = _series_file(tmp_path, [1_793_491_000])
    csv = ["--csv", str(path)] if args else []
    res = CliRunner().invoke(app, ["profiles", "build", *csv, *args, "--dry-run"])
    assert res.exit_code == 2 and words in res.stderr, res.output


@pytest.mark.slow
def test_the_import_benchmark_file_parses_except_its_planted_bad_rows(tmp_path) -> None:
    from bench.csv_import import generate

    path = tmp_path / "g.csv"
    rows = generate(str(path), 5.5, 10)  # just over 100,000 rows: one planted bad row (negative memory)
    p = CsvSeries(str(path))
    kept = sum(1 for _ in p.samples(csv_lines(str(path))))
    assert rows >= 100_000 and p.stats.rows_read == rows and kept == rows - 1
    assert p.stats.rejected[0].kind == "memory" and p.stats.rejected[0].line == 100_001  # header + 99,999 rows


def test_a_large_file_reports_its_progress(tmp_path, monkeypatch) -> None:
    import migplan.commands.history as history

    monkeypatch.setattr(history, "PROGRESS_BYTES", 1 << 10)
    path = tmp_path / "p.csv"
    path.write_bytes(HEADER + GOOD * 100)  # 100 rows of 59 bytes: about 5.8 KiB
    said: list[str] = []
    assert len(list(csv_lines(str(path), said.append))) == 101
    assert len(said) == 5 and said[0] == f"{path}: read 0 of 0 MiB"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_arbitrary_bytes_are_rejected_or_kept_never_a_crash(rows) -> None:
    p = CsvSeries("f.csv")
    p.read_header(HEADER, 1)
    kept = [p.parse_line(r.replace(b"\n", b" ") + b"\n", i + 2) for i, r in enumerate(rows)]
    st_ = p.stats
    assert st_.rows_kept == sum(1 for s in kept if s is not None)
    assert st_.rows_read == st_.rows_kept + st_.rows_rejected
    for s in kept:
        if s is not None:
            assert s.memory_mib is not None and 0 <= s.memory_mib <= 1 << 20
            assert s.util_pct is None or 0 <= s.util_pct <= 100


# --- the documented limits, named in the rejection when exceeded ------------------------------------

@pytest.mark.parametrize(("row", "kind", "words"), [
    (b"1793491200," + b"w" * 254 + b",gpu1,100,,\n", "workload", "is 254 characters long, at most 253"),
    (b"1793491200,chat," + b"h" * 254 + b",100,,\n", "host", "is 254 characters long, at most 253"),
    (b"1793491200,chat,gpu1,100,," + b"M" * 101 + b"\n", "gpu_model", "is 101 characters long, at most 100"),
])
def test_a_name_over_its_length_limit_is_rejected_naming_the_limit(row, kind, words) -> None:
    samples, st = _parse(HEADER + GOOD + row)
    (bad,) = st.rejected
    assert len(samples) == 1 and bad.kind == kind and words in bad.reason, bad.reason


def test_names_at_their_length_limit_are_kept() -> None:
    row = b"1793491200," + b"w" * 253 + b"," + b"h" * 253 + b",100,," + b"M" * 100 + b"\n"
    (s,), st = _parse(HEADER + row)
    assert st.rows_rejected == 0 and len(s.workload) == 253 and len(s.place.host or "") == 253


def test_a_row_over_64_kib_is_rejected_naming_the_limit_and_one_at_it_is_read() -> None:
    at = b"1793491200,chat,gpu1,100,,A30,"  # padded in an extra column, which is ignored
    at += b"x" * (MAX_LINE_BYTES - len(at))
    samples, st = _parse(HEADER[:-1] + b",comment\n" + at + b"\n" + at + b"y\n")
    assert len(samples) == 1 and len(at) == MAX_LINE_BYTES
    (bad,) = st.rejected
    assert bad.line == 3 and bad.kind == "too-long" and "longer than 64 KiB (65536 bytes)" in bad.reason


def test_a_header_over_64_kib_is_an_input_error_naming_the_limit() -> None:
    with pytest.raises(InputError, match=r"f.csv:1.*longer than 64 KiB \(65536 bytes\)"):
        _parse(HEADER[:-1] + b",x" * MAX_LINE_BYTES + b"\n" + GOOD)


@pytest.mark.slow
def test_a_written_file_above_the_read_cap_gets_a_note_naming_the_cap(tmp_path, monkeypatch) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + b"".join(b"2026-11-01T00:00:00Z,w%d,gpu1,100,10,A30\n" % i for i in range(3000)))
    monkeypatch.setenv("MIGPLAN_MAX_FILE_MB", "1")
    res = CliRunner().invoke(app, ["profiles", "import", str(path), "--out", str(tmp_path / "p"), "-o", "json"])
    assert res.exit_code == 0, res.output
    (note,) = json.loads(res.stdout)["notes"]
    size = (tmp_path / "p" / "gpu1.yaml").stat().st_size
    assert size > 2**20 and "gpu1.yaml" in note and "above the 1 MiB" in note and "MIGPLAN_MAX_FILE_MB" in note
    monkeypatch.setenv("MIGPLAN_MAX_FILE_MB", "64")
    res = CliRunner().invoke(app, ["profiles", "import", str(path), "--out", str(tmp_path / "p"), "-o", "json"])
    assert json.loads(res.stdout)["notes"] == []
