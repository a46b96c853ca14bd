"""User settings: the config file (`~/.config/migplan/config.yaml`) and MIGPLAN_* variables.

Precedence (clig.dev): command-line flag > environment variable > config file > default. Flags
and environment variables are resolved by the CLI (typer `envvar=`); this module reads the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from migplan import yamldoc
from migplan.errors import InputError

CONFIG_VERSION = 1
OUTPUT_FORMATS = ("table", "json", "yaml")


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "migplan" / "config.yaml"


@dataclass(frozen=True)
class Config:
    """Settings a config file may hold; None means 'not set here'."""

    inventory: str | None = None
    profiles: str | None = None
    catalog: tuple[str, ...] = ()
    output: str | None = None
    snapshot: str | None = None
    planner: dict[str, object] = field(default_factory=dict)  # passed to the planner's policy
    source: str | None = None


_KEYS = {"version", "inventory", "profiles", "catalog", "output", "snapshot", "planner"}


def load_config(path: str | None) -> Config:
    """Read the config file named by `path`, or the default one if it exists (else defaults)."""
    explicit = path is not None
    file = Path(path) if path else default_config_path()
    if not file.exists():
        if explicit:
            raise InputError("config file not found", source=str(file),
                             hint="check --config / MIGPLAN_CONFIG, or remove it to use defaults")
        return Config()
    root = yamldoc.load(file)
    f = root.fields(_KEYS)
    if "version" in f:
        yamldoc.check_version(f, root, CONFIG_VERSION, "config")
    rel = file.parent

    def _path(key: str) -> str | None:
        if key not in f:
            return None
        p = os.path.expanduser(f[key].str())
        return p if os.path.isabs(p) else str(rel / p)

    catalog: tuple[str, ...] = ()
    if "catalog" in f:
        items = f["catalog"].list() if f["catalog"].is_list else [f["catalog"]]
        catalog = tuple(str(rel / os.path.expanduser(n.str())) for n in items)
    output = None
    if "output" in f:
        output = f["output"].str()
        if output not in OUTPUT_FORMATS:
            f["output"].fail(f"unknown output format {output!r}", hint="one of: table, json, yaml")
    planner = f["planner"].value("map") if "planner" in f else {}
    return Config(inventory=_path("inventory"), profiles=_path("profiles"), catalog=catalog, output=output,
                  snapshot=_path("snapshot"), planner=planner, source=str(file))
