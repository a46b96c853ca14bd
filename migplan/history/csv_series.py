"""The CSV time series that `migplan profiles import` reads: lines in, `Sample`s out (pure).

The documented format (docs/profiles.md): a header line, then one sample per line.

    timestamp,workload,host,memory_used_mib,util_pct,gpu_model
    2026-11-01T00:00:00Z,chat-llama,gpu-a100-01,14100.5,37,A100-SXM4-40GB

Columns (names case-insensitive, any order, extra columns ignored and listed in the summary):
`timestamp` (unix seconds or ISO 8601; a time without a zone is UTC), `workload`, optional `host`,
`memory_used_bytes` or `memory_used_mib` (a header may carry both, a row must fill exactly one),
optional `util_pct` (0..100 of the place it ran on; empty: not measured), optional `gpu_model`, and
two extensions for MIG: optional `gpu` (index) and `mig_profile` (e.g. 3g.20gb; util is then of the instance).

One physical line is one row (a quoted field may hold commas, not line breaks). A UTF-8 byte-order
mark and CRLF line ends are accepted. A file-level problem (no header, a missing or repeated column
name, a header that is not UTF-8) is an `InputError`; a bad row is rejected with its line number and
reason and the import goes on (`CsvStats`: rows read, kept and rejected; the first `MAX_REPORTED`
rejections listed, all counted by kind). Memory use is bounded: a line longer than `MAX_LINE_BYTES`
is rejected whole (the reader hands over at most MAX_LINE_BYTES + 1 bytes of it), and nothing is kept
per row beyond the counters.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from migplan import names
from migplan.errors import InputError
from migplan.history.samples import Place, Sample

MAX_LINE_BYTES = 64 * 1024
_LINE_LIMIT = f"{MAX_LINE_BYTES // 1024} KiB ({MAX_LINE_BYTES} bytes)"
MAX_NAME_CHARS = 253  # of a workload or host name (names.WORKLOAD_NAME, names.HOST_NAME)
MAX_REPORTED = 20  # rejected rows listed one by one; the rest are counted
MAX_MODEL_CHARS = 100
MAX_UNIX_S = 253_402_300_799.0  # 9999-12-31T23:59:59Z
MIB = 1 << 20
_CACHE = 100_000  # distinct workloads / places remembered as valid
BOM = b"\xef\xbb\xbf"

REQUIRED = ("timestamp", "workload")
MEMORY_COLUMNS = ("memory_used_bytes", "memory_used_mib")
OPTIONAL = ("host", "util_pct", "gpu_model", "gpu", "mig_profile")
KNOWN = (*REQUIRED, *MEMORY_COLUMNS, *OPTIONAL)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HINT = "see docs/profiles.md, 'CSV format'"


class RowError(ValueError):
    """One bad row: `kind` counts it, the message says what is wrong."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Rejected:
    line: int
    kind: str
    reason: str


@dataclass
class CsvStats:
    """What the import saw. `rows_read` counts data lines (not the header or blank lines)."""

    source: str
    rows_read: int = 0
    rows_kept: int = 0
    rows_rejected: int = 0
    rejected: list[Rejected] = field(default_factory=list)  # the first MAX_REPORTED
    kinds: Counter[str] = field(default_factory=Counter)  # every rejection, by kind
    ignored_columns: tuple[str, ...] = ()
    first: float | None = None  # earliest and latest timestamp of the kept rows
    last: float | None = None

    def reject(self, line: int, kind: str, reason: str) -> None:
        self.rows_rejected += 1
        self.kinds[kind] += 1
        if len(self.rejected) < MAX_REPORTED:
            self.rejected.append(Rejected(line, kind, reason))

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "rows_read": self.rows_read, "rows_kept": self.rows_kept,
                "rows_rejected": self.rows_rejected, "rejected_by_kind": dict(sorted(self.kinds.items())),
                "rejected": [{"line": r.line, "kind": r.kind, "reason": r.reason} for r in self.rejected],
                "rejected_not_listed": self.rows_rejected - len(self.rejected),
                "ignored_columns": list(self.ignored_columns)}


def _strip_eol(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw


def _fields(text: str) -> list[str]:
    if '"' not in text:
        return text.split(",")
    try:
        rows = list(csv.reader([text], strict=True))
    except csv.Error as err:
        raise RowError("syntax", f"not a CSV row ({err})") from None
    return rows[0] if rows else []


def _number(text: str, what: str, kind: str) -> float:
    """A plain decimal number (float() alone would also take 'nan', 'inf', '1_000' and non-ASCII digits)."""
    t = text.strip()
    try:
        v = float(t)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or "_" in t or not t.isascii():
        raise RowError(kind, f"{what} {_show(t)} is not a number")
    return v


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def parse_timestamp(text: str) -> float:
    """Unix seconds (fractions allowed) or ISO 8601 (`Z` or an offset; no zone: UTC) -> unix seconds."""
    t = text.strip()
    if not t:
        raise RowError("timestamp", "timestamp is empty")
    if _NUMBER.fullmatch(t):
        v = float(t)
        if v > MAX_UNIX_S and v / 1000 <= MAX_UNIX_S:
            raise RowError("timestamp", f"timestamp {t} is past the year 9999: milliseconds? give unix seconds")
        if not 0 <= v <= MAX_UNIX_S:
            raise RowError("timestamp", f"timestamp {t} is outside 1970..9999 (unix seconds)")
        return v
    try:
        when = dt.datetime.fromisoformat(t[:-1] + "+00:00" if t[-1:] in ("Z", "z") else t)
    except ValueError:
        raise RowError("timestamp", f"timestamp {_show(t)} is neither unix seconds nor ISO 8601 "
                                    "(such as 2026-11-01T00:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    try:
        v = when.timestamp()
    except (OverflowError, ValueError):
        raise RowError("timestamp", f"timestamp {_show(t)} is out of range") from None
    if not 0 <= v <= MAX_UNIX_S:
        raise RowError("timestamp", f"timestamp {_show(t)} is before 1970")
    return v


class CsvSeries:
    """Parses one CSV file's lines; `stats` holds what it saw. Use `samples(lines)` once per file."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stats = CsvStats(source)
        self.columns: dict[str, int] = {}
        self._header: list[str] = []
        self._places: dict[tuple[str, ...], Place] = {}  # raw (host, gpu_model, gpu, mig_profile) -> Place
        self._good_workloads: set[str] = set()
        self._idx: tuple[int, ...] = ()
        self._last_ts_text: str | None = None
        self._last_ts = 0.0

    # -- header -------------------------------------------------------------------------------
    def read_header(self, raw: bytes, line: int) -> None:
        if line == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        raw = _strip_eol(raw)
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"the header line is longer than {_LINE_LIMIT}", source=self.source,
                             line=line, hint=_HINT)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"the header line is not UTF-8 (byte {err.start + 1})", source=self.source,
                             line=line, hint="save the file as UTF-8") from None
        try:
            cols = [c.strip().lower() for c in _fields(text)]
        except RowError as err:
            raise InputError(f"the header: {err}", source=self.source, line=line, hint=_HINT) from None
        seen: dict[str, int] = {}
        for i, c in enumerate(cols):
            if c in seen and c:
                raise InputError(f"column {c!r} appears twice in the header (columns {seen[c] + 1} and {i + 1})",
                                 source=self.source, line=line, hint="remove or rename one of them")
            seen[c] = i
        missing = [c for c in REQUIRED if c not in seen]
        if not any(c in seen for c in MEMORY_COLUMNS):
            missing.append("memory_used_bytes or memory_used_mib")
        if missing:
            raise InputError(f"the header lacks the column(s) {', '.join(missing)} (it has {', '.join(cols)})",
                             source=self.source, line=line,
                             hint="the first line must name the columns: timestamp,workload,memory_used_mib[,...]; "
                                  + _HINT)
        self.columns = {c: i for c, i in seen.items() if c in KNOWN}
        self._idx = tuple(self.columns.get(c, -1) for c in ("timestamp", "workload", "memory_used_bytes",
                                                             "memory_used_mib", "util_pct", "host", "gpu_model",
                                                             "gpu", "mig_profile"))
        self._header = cols
        self.stats.ignored_columns = tuple(c for c in cols if c not in KNOWN)

    # -- rows -----------------------------------------------------------------------------------
    def samples(self, lines: Iterable[bytes]) -> Iterator[Sample]:
        """The samples of every good row; bad rows go to `stats`. Raises InputError for a bad header."""
        header_seen = False
        for number, raw in enumerate(lines, start=1):
            if not header_seen:
                if not raw.strip(b" \t\r\n" + (BOM if number == 1 else b"")):
                    continue
                self.read_header(raw, number)
                header_seen = True
                continue
            sample = self.parse_line(raw, number)
            if sample is not None:
                yield sample
        if not header_seen:
            raise InputError("the file is empty (no header line)", source=self.source, hint=_HINT)

    def parse_line(self, raw: bytes, line: int) -> Sample | None:
        """One data line: its sample, or None (blank, or rejected into `stats`)."""
        body = _strip_eol(raw)
        if not body.strip():
            return None
        self.stats.rows_read += 1
        try:
            sample = self._row(body, line)
        except RowError as err:
            self.stats.reject(line, err.kind, str(err))
            return None
        st = self.stats
        st.rows_kept += 1
        ts = sample.timestamp
        if st.first is None or ts < st.first:
            st.first = ts
        if st.last is None or ts > st.last:
            st.last = ts
        return sample

    def _row(self, body: bytes, line: int) -> Sample:
        if len(body) > MAX_LINE_BYTES:
            raise RowError("too-long", f"the line is longer than {_LINE_LIMIT}")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RowError("encoding", f"not UTF-8 (byte {err.start + 1} is 0x{body[err.start]:02x})") from None
        fields = _fields(text)
        if fields and fields[0].strip().lower() == self._header[0] and \
                [f.strip().lower() for f in fields] == self._header:
            raise RowError("header", "the header line again (files concatenated?)")
        if len(fields) != len(self._header):
            raise RowError("fields", f"{len(fields)} fields, the header has {len(self._header)}")
        i_ts, i_wl, i_b, i_m, i_u, i_h, i_model, i_gpu, i_prof = self._idx
        t = fields[i_ts].strip()
        if t == self._last_ts_text:  # rows of one scrape share their time: parse it once
            ts = self._last_ts
        else:
            ts = parse_timestamp(t)
            self._last_ts_text, self._last_ts = t, ts
        workload = fields[i_wl].strip()
        if workload not in self._good_workloads:
            if not workload:
                raise RowError("workload", "workload is empty")
            if len(workload) > MAX_NAME_CHARS:
                raise RowError("workload", f"workload {_show(workload)} is {len(workload)} characters long, "
                                           f"at most {MAX_NAME_CHARS}")
            if not names.WORKLOAD_NAME.fullmatch(workload):
                raise RowError("workload", f"workload {_show(workload)} must start with a letter or digit and use "
                                           "letters, digits, '.', '_', '/', ':' or '-'")
            if len(self._good_workloads) < _CACHE:
                self._good_workloads.add(workload)
        memory = self._memory(fields[i_b].strip() if i_b >= 0 else "", fields[i_m].strip() if i_m >= 0 else "")
        util = self._util(fields[i_u].strip()) if i_u >= 0 else None
        key = (fields[i_h].strip() if i_h >= 0 else "", fields[i_model].strip() if i_model >= 0 else "",
               fields[i_gpu].strip() if i_gpu >= 0 else "", fields[i_prof].strip() if i_prof >= 0 else "")
        place = self._places.get(key)
        if place is None:
            place = self._place(*key)
            if len(self._places) < _CACHE:
                self._places[key] = place
        return Sample(ts, workload, memory, util, place, f"csv:{self.source}:{line}")

    @staticmethod
    def _memory(as_bytes: str, as_mib: str) -> float:
        if as_bytes and as_mib:
            raise RowError("memory", "both memory_used_bytes and memory_used_mib are given; fill one")
        if not as_bytes and not as_mib:
            raise RowError("memory", "no memory value (memory_used_bytes or memory_used_mib)")
        if as_bytes:
            mib = _number(as_bytes, "memory_used_bytes", "memory") / MIB
        else:
            mib = _number(as_mib, "memory_used_mib", "memory")
        if mib < 0:
            raise RowError("memory", f"memory {_show(as_bytes or as_mib)} is negative")
        if mib > names.MAX_MEMORY_MIB:
            raise RowError("memory", f"memory {mib:.0f} MiB is above {names.MAX_MEMORY_MIB} MiB (1 TiB); "
                                     "bytes in the MiB column?")
        return mib

    @staticmethod
    def _util(text: str) -> float | None:
        if not text:
            return None
        v = _number(text, "util_pct", "util")
        if not 0 <= v <= 100:
            raise RowError("util", f"util_pct {_show(text)} is outside 0..100")
        return v

    @staticmethod
    def _place(host_text: str, model_text: str, gpu_text: str, profile_text: str) -> Place:
        host = host_text or None
        if host is not None and len(host) > MAX_NAME_CHARS:
            raise RowError("host", f"host {_show(host)} is {len(host)} characters long, at most {MAX_NAME_CHARS}")
        if host is not None and not names.HOST_NAME.fullmatch(host):
            raise RowError("host", f"host {_show(host)} is not a host name")
        model = model_text or None
        if model is not None and len(model) > MAX_MODEL_CHARS:
            raise RowError("gpu_model", f"gpu_model {_show(model)} is {len(model)} characters long, "
                                        f"at most {MAX_MODEL_CHARS}")
        if model is not None and not model.isprintable():
            raise RowError("gpu_model", f"gpu_model {_show(model)} is not a GPU model name")
        gpu = None
        if gpu_text:
            if not names.is_ascii_digits(gpu_text) or int(gpu_text) > names.MAX_GPU_INDEX:
                raise RowError("gpu", f"gpu {_show(gpu_text)} is not a GPU index 0..{names.MAX_GPU_INDEX}")
            gpu = int(gpu_text)
        profile = profile_text or None
        if profile is not None and names.profile_size(profile) is None:
            raise RowError("mig_profile", f"mig_profile {_show(profile)} is not a MIG profile name such as 3g.20gb")
        return Place(host=host, gpu=gpu, gpu_model=model, mig_profile=profile)
