"""Option types shared by every command, so each spells them the same way."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[
    Optional[OutputFormat],  # noqa: UP045 - typer needs Optional at runtime on 3.10
    typer.Option("-o", "--output", help="Output format: table, json or yaml.", envvar="MIGPLAN_OUTPUT",
                 show_default=False),
]
ConfigOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--config", help="Config file [default: ~/.config/migplan/config.yaml].",
                 envvar="MIGPLAN_CONFIG", show_default=False),
]
CatalogOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--catalog", help="Extra catalog file adding or overriding GPU models (repeatable).",
                 envvar="MIGPLAN_CATALOG", show_default=False),
]
InventoryOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--inventory", "-i", help="Inventory file (migplan or Ansible YAML).",
                 envvar="MIGPLAN_INVENTORY", show_default=False),
]
ProfilesOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--profiles", "-p", help="Workload profile file or directory.", envvar="MIGPLAN_PROFILES",
                 show_default=False),
]
