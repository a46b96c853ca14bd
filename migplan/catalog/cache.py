"""A cache of the shipped catalog, so that it is not parsed again on every run.

Parsing data/models.yaml strictly (yamldoc + `loader.parse_catalog`) takes 40-100 ms, a large part
of a short command. The first run parses it and writes the models as JSON to
`<cache dir>/catalog-<key>.json`; later runs read that file instead (about 1 ms).

* The key is a SHA-256 of the data file, of the code that turns it into models (loader.py,
  geometry.py, names.py, this file) and of migplan's version: any change to the data or to that
  code is a new key, so a stale cache is never read. Files of older keys are removed when a new
  one is written.
* Where: `$MIGPLAN_CACHE_DIR`, else `$XDG_CACHE_HOME/migplan`, else `~/.cache/migplan`;
  `MIGPLAN_CACHE_DIR=none` turns the cache off.
* Safe: the file is written atomically (`files.write_atomic`), and read only when it is a regular
  file (not a link) owned by this user and writable by nobody else. It is JSON (nothing in it can
  run); a file that cannot be read, is malformed or does not have the expected shape is ignored
  and the catalog is parsed as without a cache. A cache directory that cannot be written is not
  an error either: the catalog is then parsed on every run, as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
from collections.abc import Sequence
from typing import Any

from migplan import __version__
from migplan.catalog.geometry import Engines, Exclusion, GiProfile, GpuModel

CACHE_ENV = "MIGPLAN_CACHE_DIR"
FORMAT = 1  # bump when the JSON layout below changes
MAX_CACHE_BYTES = 4 * 1024 * 1024
_HERE = os.path.dirname(os.path.abspath(__file__))
_CODE = (os.path.join(_HERE, "loader.py"), os.path.join(_HERE, "geometry.py"),
         os.path.join(os.path.dirname(_HERE), "names.py"), os.path.abspath(__file__))
_log = logging.getLogger("migplan.catalog")


def cache_dir() -> str | None:
    """The cache directory, or None when the cache is turned off."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return None if explicit.lower() == "none" else explicit
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "migplan")


def key(data: bytes) -> str | None:
    """The cache key of the shipped catalog `data` (None when migplan's own code cannot be read)."""
    h = hashlib.sha256(f"migplan-catalog-cache {FORMAT} {__version__}\n".encode())
    h.update(hashlib.sha256(data).digest())
    for path in _CODE:
        try:
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
        except OSError:
            return None
    return h.hexdigest()[:32]


def _path(directory: str, k: str) -> str:
    return os.path.join(directory, f"catalog-{k}.json")


def load(data: bytes) -> tuple[GpuModel, ...] | None:
    """The models cached for `data`, or None (no cache, not ours, unreadable or malformed)."""
    directory, k = cache_dir(), key(data)
    if directory is None or k is None:
        return None
    path = _path(directory, k)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # the usual miss: not written yet
    try:
        st = os.fstat(fd)
        uid = getattr(os, "getuid", lambda: st.st_uid)()
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022 or st.st_size > MAX_CACHE_BYTES:
            _log.debug("catalog cache %s ignored: not a private regular file of this user", path)
            return None
        raw = os.read(fd, MAX_CACHE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw)
        if doc["format"] != FORMAT or doc["key"] != k:
            return None
        return tuple(_model(m) for m in doc["models"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        _log.debug("catalog cache %s ignored: %s", path, err)
        return None


def store(data: bytes, models: Sequence[GpuModel]) -> None:
    """Write the cache for `data` (best effort: a failure is logged at debug level, never raised)."""
    directory, k = cache_dir(), key(data)
    if directory is None or k is None:
        return
    from migplan.files import write_atomic  # only on a miss: it imports tempfile and threading

    doc = {"format": FORMAT, "key": k, "models": [dataclasses.asdict(m) for m in models]}
    try:
        write_atomic(_path(directory, k), json.dumps(doc, separators=(",", ":")), mode=0o644, keep_mode=False)
        for name in os.listdir(directory):  # older keys: never read again
            if name.startswith("catalog-") and name.endswith(".json") and name != f"catalog-{k}.json":
                os.unlink(os.path.join(directory, name))
    except Exception as err:  # a cache must never break a run (read-only home, full disk, ...)
        _log.debug("catalog cache not written to %s: %s", directory, err)


def _profile(d: dict[str, Any]) -> GiProfile:
    d = dict(d)
    d["starts"] = tuple(int(s) for s in d["starts"])
    d["engines"] = Engines(**d["engines"])
    return GiProfile(**d)


def _model(d: dict[str, Any]) -> GpuModel:
    d = dict(d)
    d["profiles"] = tuple(_profile(p) for p in d["profiles"])
    for name in ("aliases", "smi_names", "pci_device_ids"):
        d[name] = tuple(str(x) for x in d[name])
    if d["engine_budget"] is not None:
        d["engine_budget"] = tuple((str(kind), int(n)) for kind, n in d["engine_budget"])
    d["exclusions"] = tuple(Exclusion(tuple(str(n) for n in e["profiles"]), e["min_driver"], str(e["reason"]))
                            for e in d["exclusions"])
    return GpuModel(**d)
