"""User settings: the config file (`~/.config/migplan/config.yaml`) and MIGPLAN_* variables.

Precedence (clig.dev): command-line flag > environment variable > config file > default. Flags
and environment variables are resolved by the CLI (typer `envvar=`); this module reads the file.

Every value is checked where it is read, with the file, line and key in the error: the `planner:`
section against `PLANNER_SETTINGS`, a typed and bounded schema (kind, bounds, choices, help) with
the same bounds as `migplan propose`'s options, exported so that the CLI can share it. So
`allow_disrupt: "false"` (a string) is refused instead of enabling disruption, and `gap: 5`,
`gap: .nan`, a negative weight, `keep_free: 1.5` or `time_limit: abc` are refused with the bound.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from migplan import yamldoc
from migplan.errors import InputError
from migplan.solvers import SOLVERS  # not migplan.planner.milp: that imports the whole planner
from migplan.yamldoc import Node

CONFIG_VERSION = 1
OUTPUT_FORMATS = ("table", "json", "yaml")
PERCENTILES = ("p50", "p95", "p99", "max")
# The objective weights (migplan.planner.demand.Weights fields; tested to agree).
WEIGHT_KEYS = ("unplaced", "disrupt", "gpu", "change", "fragment", "waste", "mode", "reset", "risk", "idle")
MAX_WEIGHT = 1e9  # far above the defaults (10,000 at most); keeps the integer program's numbers sane


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "migplan" / "config.yaml"


@dataclass(frozen=True)
class Setting:
    """One `planner:` setting: what it holds, its bounds or choices, and its help text.

    kind: "bool", "int" (whole numbers, no 1.5), "number" (finite; ints allowed), "choice" (one
    of `choices`) or "weights" (a mapping of `WEIGHT_KEYS` to numbers within the bounds).
    """

    kind: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The accepted values in words, e.g. '0..0.99' or 'one of: gpu, host'."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of: " + ", ".join(self.choices)
        lo, hi = _number_text(self.minimum), _number_text(self.maximum)
        what = {"int": "a whole number", "number": "a number", "weights": f"weights ({', '.join(WEIGHT_KEYS)}) each",
                "spare": "a mapping of PROFILE or MODEL/PROFILE to a whole number"}
        return f"{what[self.kind]} {lo}..{hi}".rstrip(".") if (lo or hi) else what[self.kind]

    def read(self, node: Node) -> bool | int | float | str | dict[str, float]:
        """The value of `node`, checked (InputError naming file, line and key)."""
        if self.kind == "bool":
            if not (node.is_scalar and isinstance(node.value(), bool)):
                node.fail(f"expected true or false, got {_shown(node)}",
                          hint=f"write {node.path.rsplit('.', 1)[-1]}: true or false, without quotes")
            return node.bool()
        if self.kind == "int":
            lo, hi = _int_bound(self.minimum), _int_bound(self.maximum)
            return node.int(minimum=lo, maximum=hi)
        if self.kind == "number":
            return node.number(minimum=self.minimum, maximum=self.maximum)
        if self.kind == "choice":
            v = node.str() if node.is_scalar and not isinstance(node.value(), bool) else None
            if v not in self.choices:
                node.fail(f"expected {self.describe()}, got {_shown(node)}")
            assert v is not None
            return v
        if self.kind == "spare":
            if node.is_null:
                return {}
            if not node.is_map:
                node.fail(f"expected a mapping of PROFILE or MODEL/PROFILE to a count, got {_shown(node)}",
                          hint="e.g. spare: {1g.10gb: 4}")
            return {k: n.int(minimum=_int_bound(self.minimum), maximum=_int_bound(self.maximum))
                    for k, n in node.items()}
        if self.kind == "weights":
            if node.is_null:
                return {}
            return {k: n.number(minimum=self.minimum, maximum=self.maximum)
                    for k, n in node.fields(set(WEIGHT_KEYS)).items()}
        raise AssertionError(f"unknown setting kind {self.kind!r}")

    def check(self, value: object, option: str) -> object:
        """A value given on the command line (or by a caller of `migplan.commands`), checked against the
        same kind and bounds as the config file's key; InputError naming `option` otherwise."""
        ok = True
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind in ("int", "number"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
                self.kind == "number" or float(value).is_integer())
            if ok:
                number = float(value)  # type: ignore[arg-type]  # an int or float: checked on the line above
                ok = (self.minimum is None or number >= self.minimum) and (
                    self.maximum is None or number <= self.maximum)
        elif self.kind == "choice":
            ok = value in self.choices
        if not ok:
            what = option.lstrip("-").replace("-", " ")
            if self.kind == "choice":
                raise InputError(f"{option}: unknown {what} {value!r}", hint=f"use {self.describe()}")
            raise InputError(f"{option}: expected {self.describe()}, got {value!r}")
        return value


def check_planner_overrides(values: dict[str, object]) -> None:
    """Every given (non-None) planner override checked against PLANNER_SETTINGS (`--time-limit` etc.)."""
    for key, value in values.items():
        if value is not None and key in PLANNER_SETTINGS:
            PLANNER_SETTINGS[key].check(value, "--" + key.replace("_", "-"))


def _number_text(v: float | None) -> str:
    if v is None:
        return ""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


def _int_bound(v: float | None) -> int | None:
    return None if v is None else int(v)


def _shown(node: Node) -> str:
    if not node.is_scalar:
        return "a list" if node.is_list else "a mapping"
    v = node.value()
    if isinstance(v, str):
        return f"the string {v!r}" if len(v) < 40 else "a string"
    return repr(node.text)


PLANNER_SETTINGS: dict[str, Setting] = {
    "solver": Setting("choice", "MILP solver.", choices=SOLVERS),
    "time_limit": Setting("number", "Solver time limit, seconds.", minimum=0.1, maximum=86400.0),
    "gap": Setting("number", "Relative MIP gap to stop at.", minimum=0.0, maximum=0.99),
    "allow_disrupt": Setting("bool", "Allow moving running workloads (each move is counted)."),
    "keep_free": Setting("int", "Keep N whole GPUs free.", minimum=0, maximum=1_000_000),
    "consolidate": Setting("bool", "Move running workloads to free whole GPUs (within max_moves)."),
    "max_moves": Setting("int", "Consolidation: at most N running workloads change instance.", minimum=0,
                         maximum=1_000_000),
    "memory_percentile": Setting("choice", "Memory percentile to size for.", choices=PERCENTILES),
    "compute_percentile": Setting("choice", "Compute percentile to size for.", choices=PERCENTILES),
    "headroom": Setting("number", "Memory headroom fraction (0.1 = 10%).", minimum=0.0, maximum=10.0),
    "headroom_min_mib": Setting("int", "Least memory headroom, MiB.", minimum=0, maximum=1_048_576),
    "headroom_spread": Setting("number", "Memory headroom as a multiple of the workload's spread, max - p50 "
                                         "(sizing: max+1spread sets it; docs/profiles.md).", minimum=0.0,
                               maximum=100.0),
    "headroom_max_mib": Setting("int", "Most memory headroom, MiB (default: no cap).", minimum=0, maximum=1_048_576),
    "anti_affinity_scope": Setting("choice", "Where anti-affinity members must differ.", choices=("gpu", "host")),
    "weights": Setting("weights", "Objective weights, non-negative (docs/model.md, 'Objective').",
                       minimum=0.0, maximum=MAX_WEIGHT),
    "reclaim_idle": Setting("bool", "Let idle instances go wherever the plan gains (default: keep them unless "
                                    "removing them frees a GPU or makes room for demand)."),
    "spare": Setting("spare", "Keep at least N free instances of a profile: {PROFILE or MODEL/PROFILE: N}.",
                     minimum=1, maximum=1_000_000),
}


# The `replan:` section (migplan.replan.policy.ReplanPolicy; `maintenance_windows` is a list of strings such
# as "Sat,Sun 02:00-06:00", parsed there).
REPLAN_SETTINGS: dict[str, Setting] = {
    "min_free_gpus": Setting("int", "Apply when the new plan frees at least N whole GPUs.", minimum=1,
                             maximum=1_000_000),
    "min_waste_cut": Setting("number", "... or cuts unneeded memory by at least this share.", minimum=0.0,
                             maximum=1.0),
    "cooldown_h": Setting("number", "Leave a GPU alone for this many hours after a change (unless urgent).",
                          minimum=0.0, maximum=24.0 * 365),
    "allow_disrupt": Setting("bool", "Let replan move running workloads (inside maintenance windows)."),
    "max_moves": Setting("int", "At most N running workloads moved per run.", minimum=0, maximum=1_000_000),
    "keep_runs": Setting("int", "Runs and plans kept in the state directory.", minimum=1, maximum=100_000),
    "time_limit_s": Setting("number", "Solver time limit of one run, seconds (planner.time_limit wins).",
                            minimum=0.1, maximum=86400.0),
}


# The `sizing:` section (docs/profiles.md, "Sizing rules" and "sizing: auto"): `sizing: RULE`, `sizing: auto`, or a
# mapping with `rule` and, for auto, what it calibrates from and how often.
SIZING_SETTINGS: dict[str, Setting] = {
    "cooldown_h": Setting("number", "sizing auto: recalibrate at most once per this many hours.", minimum=0.0,
                          maximum=24.0 * 365),
    "splits": Setting("int", "sizing auto: the backtest's split points (rolling origin).", minimum=1, maximum=50),
}
_LENGTH = re.compile(r"(?a)[0-9]+(?:\.[0-9]+)?\s*[smhdw]")  # as commands.history.parse_duration
_SIZING_TEXT = ("rule", "history", "train", "test", "target_oom")  # target_oom: 0.01 or 1% (planner/sizing.py)


def read_sizing(node: Node) -> dict[str, object]:
    """`sizing: RULE | auto` or a mapping {rule, target_oom, history, cooldown_h, train, test, splits}; the rule is
    checked with the one parser of sizing rules (planner/sizing.py, imported only when the key is there)."""
    if node.is_null:
        return {}
    if node.is_scalar:
        return {"rule": _sizing_rule(node)}
    if not node.is_map:
        node.fail(f"expected a sizing rule, 'auto' or a mapping, got {_shown(node)}",
                  hint="e.g. sizing: max+1spread, or sizing: {rule: auto, target_oom: 0.01}")
    out: dict[str, object] = {}
    for key, n in node.items():
        if key == "rule":
            out[key] = _sizing_rule(n)
        elif key == "history":
            v = n.str()
            out[key] = v if v.startswith(("http://", "https://")) else _path_text(n)
        elif key in ("train", "test"):
            v = n.str()
            if not _LENGTH.fullmatch(v.strip().lower()) or not float(re.sub("[smhdw ]", "", v.lower()) or 0) > 0:
                n.fail(f"{v!r} is not a length of time", hint="write a number and a unit: 90s, 30m, 12h, 7d, 2w")
            out[key] = v
        elif key == "target_oom":  # 0.01 or 1%
            from migplan.planner.sizing import parse_share

            try:
                out[key] = parse_share(n.value() if n.is_scalar else None, key="")
            except InputError as err:
                n.fail(err.message, hint=err.hint)
        elif key in SIZING_SETTINGS:
            out[key] = SIZING_SETTINGS[key].read(n)
        else:
            raise InputError(f"unknown sizing setting {key!r}", source=n.source, line=n.line, key=n.path,
                             hint="known: " + ", ".join(sorted([*SIZING_SETTINGS, *_SIZING_TEXT])))
    return out


def _sizing_rule(node: Node) -> str:
    from migplan.planner.sizing import is_auto, parse_rule

    text = node.str() if node.is_scalar and not isinstance(node.value(), bool) else ""
    if not text:
        node.fail(f"expected a sizing rule or 'auto', got {_shown(node)}", hint="e.g. max+10%, max+1spread, auto")
    if is_auto(text):
        return text.strip()
    try:
        parse_rule(text, key="")  # the node names the file, line and key
    except InputError as err:
        node.fail(err.message, hint=err.hint)
    return text.strip()


def read_replan(node: Node) -> dict[str, object]:
    """The `replan:` section, each key checked against REPLAN_SETTINGS (plus `maintenance_windows`,
    `state_dir` and `metrics_file`)."""
    if node.is_null:
        return {}
    if not node.is_map:
        node.fail(f"expected a mapping of replan settings, got {_shown(node)}")
    out: dict[str, object] = {}
    for key, n in node.items():
        if key == "maintenance_windows":
            items = n.list() if n.is_list else [n]
            if not items:  # "no window" would read as never, but ReplanPolicy (no windows) means any time
                n.fail("an empty list of maintenance windows is ambiguous (never, or at any time?)",
                       hint="list windows such as 'Sat,Sun 02:00-06:00'; to allow disruption at any time write "
                            "['always'] or leave the key out; to allow none, set allow_disrupt: false")
            out[key] = tuple(i.str() for i in items)
            continue
        if key in ("state_dir", "metrics_file"):
            out[key] = _path_text(n)
            continue
        setting = REPLAN_SETTINGS.get(key)
        if setting is None:
            raise InputError(f"unknown replan setting {key!r}", source=n.source, line=n.line, key=n.path,
                             hint="known: " + ", ".join(sorted([*REPLAN_SETTINGS, "maintenance_windows", "state_dir",
                                                                "metrics_file"])))
        out[key] = setting.read(n)
    return out


def read_planner(node: Node) -> dict[str, object]:
    """The `planner:` section, each key checked against PLANNER_SETTINGS."""
    if node.is_null:
        return {}
    if not node.is_map:
        node.fail(f"expected a mapping of planner settings, got {_shown(node)}",
                  hint=f"settings: {', '.join(PLANNER_SETTINGS)}")
    out: dict[str, object] = {}
    for key, n in node.items():
        setting = PLANNER_SETTINGS.get(key)
        if setting is None:
            raise InputError(f"unknown planner setting {key!r}", source=n.source, line=n.line, key=n.path,
                             hint=f"known: {', '.join(sorted(PLANNER_SETTINGS))}")
        out[key] = setting.read(n)
    return out


@dataclass(frozen=True)
class Config:
    """Settings a config file may hold; None means 'not set here'."""

    inventory: str | None = None
    profiles: str | None = None
    catalog: tuple[str, ...] = ()
    output: str | None = None
    snapshot: str | None = None
    planner: dict[str, object] = field(default_factory=dict)  # checked against PLANNER_SETTINGS
    source: str | None = None
    replan: dict[str, object] = field(default_factory=dict)  # checked against REPLAN_SETTINGS
    sizing: dict[str, object] = field(default_factory=dict)  # `sizing:` (read_sizing): rule, target_oom, ...


_KEYS = {"version", "inventory", "profiles", "catalog", "output", "snapshot", "planner", "replan", "sizing"}


def _path_text(node: Node) -> str:
    v = node.str()
    if not v.strip() or "\0" in v or "\n" in v:
        node.fail(f"{v!r} is not a file path")
    return os.path.expanduser(v)


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
        if key not in f or f[key].is_null:
            return None
        p = _path_text(f[key])
        return p if os.path.isabs(p) else str(rel / p)

    catalog: tuple[str, ...] = ()
    if "catalog" in f and not f["catalog"].is_null:
        items = f["catalog"].list() if f["catalog"].is_list else [f["catalog"]]
        catalog = tuple(str(rel / _path_text(n)) for n in items)
    output = None
    if "output" in f:
        output = f["output"].str()
        if output not in OUTPUT_FORMATS:
            f["output"].fail(f"unknown output format {output!r}", hint="one of: table, json, yaml")
    planner = read_planner(f["planner"]) if "planner" in f else {}
    replan = read_replan(f["replan"]) if "replan" in f else {}
    for key in ("state_dir", "metrics_file"):
        v = replan.get(key)
        if isinstance(v, str) and not os.path.isabs(v):
            replan[key] = str(rel / v)
    sizing = read_sizing(f["sizing"]) if "sizing" in f else {}
    history = sizing.get("history")
    if isinstance(history, str) and not history.startswith(("http://", "https://")) and not os.path.isabs(history):
        sizing["history"] = str(rel / history)
    return Config(inventory=_path("inventory"), profiles=_path("profiles"), catalog=catalog, output=output,
                  snapshot=_path("snapshot"), planner=planner, source=str(file), replan=replan, sizing=sizing)
