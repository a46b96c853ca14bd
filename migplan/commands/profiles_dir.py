"""Profiles files written to a directory, one document per host (`DIR/HOST.yaml`): the writer of
`profiles build` and of `collect --prometheus --out`, which both roll samples up the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from migplan import files, yamldoc, yamlemit
from migplan.errors import InputError
from migplan.history.rollup import Rollup


def check_out_dir(directory: str) -> None:
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError("--out must be a directory (one profiles file per host is written in it)",
                         source=directory, key="--out")


def write_profiles(rolled: Rollup, directory: str, *,
                   forbid: Iterable[str] = ()) -> tuple[list[tuple[str, int]], list[str]]:
    """One profiles document per host, `DIR/HOST.yaml`, each written atomically (never over a file in
    `forbid`: the inputs). Returns (written: (file, workloads), stale: the other profiles files in DIR,
    which a later `--profiles DIR` would read with these)."""
    check_out_dir(directory)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    docs = rolled.documents()
    written = []
    for host, doc in docs.items():
        path = d / f"{host}.yaml"
        with yamldoc.paused_gc():  # the text's many small strings: no cycles to find
            text = yamlemit.dump(doc)  # the bytes PyYAML (libyaml) writes, 8x faster (migplan.yamlemit)
        files.write_atomic(path, text, forbid=list(forbid))
        written.append((str(path), len(doc["workloads"])))  # type: ignore[arg-type]  # Rollup.documents made it a list
    mine = {f"{h}.yaml" for h in docs}
    stale = sorted(str(p) for p in d.iterdir() if p.suffix in (".yaml", ".yml") and p.name not in mine)
    return written, stale
