"""`sizing: auto` (config) and `--sizing auto` (propose, replan): the sizing rule `backtest --sweep` recommends for this
fleet, recalibrated from its history at most once per cool-down (docs/profiles.md, "sizing: auto").

Each run:

1. reads the calibration kept in the state directory (`sizing.json`, history/sweep.py `record`): the last sweep's
   mean and worst figures per rule, when, from which history, with which windows, grid and floor;
2. when there is none, or it is older than the cool-down (`sizing.cooldown_h`, default 24 h), or was made with other
   windows, grid, floor or history, and a history is at hand (`--sizing-history`, `sizing.history`, else replan's
   own `--history-store`/`--collect`), sweeps it (`commands.history.run_sweep`: the default grid, 7d training, 3
   splits of 1d) and keeps the result; a history too short for the windows is no calibration;
3. chooses the cheapest rule whose mean share of workloads out of memory is at most the target (`--target-oom`,
   `sizing.target_oom`, default 1%), from the kept figures: a new target needs no new sweep.

The plan is sized by that rule and records it (`Plan.sizing`: the rule, the target, the rule's backtest figures,
when and from what it was calibrated); the summary line says so. With no calibration (no history, or too little),
or when no rule meets the target, the plan is sized by the default rule (the `planner:` memory settings, `max+10%`
unless changed) and the line says which and why: auto never picks a rule its own backtest shows above the target.

A history is a history store (a host's `history.sqlite` or a directory of them), a CSV file (a name ending in
`.csv`) or a Prometheus URL (`http://`, `https://`; read with `collect --prometheus`'s defaults: for credentials,
calibrate with `backtest --sweep --prometheus URL ... --state-dir DIR`, which keeps the same record).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migplan.adapters.state_dir import DEFAULT_STATE_DIR, StateDir, state_dir_option
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.commands.propose import MEMORY_KEYS, ProposeRequest, planner_policy
from migplan.errors import InputError
from migplan.planner.plan import SizingChoice
from migplan.planner.sizing import is_auto, parse_share, rule_text

if TYPE_CHECKING:
    from migplan.commands.collect_prometheus import PromRequest
    from migplan.history.sweep import Calibration, Sweep

# commands.history and history.sweep are imported by the functions that calibrate or read a calibration, not by
# every propose: a plan without `sizing: auto` never needs them (start-up time at 7,000 GPUs, bench/README.md)

DEFAULT_COOLDOWN_H = 24.0
DEFAULT_TRAIN = "7d"
DEFAULT_TEST = "1d"


@dataclass(frozen=True)
class AutoRequest:
    """What the command was given (None: the config's `sizing:` section, else the default)."""

    sizing: str | None = None  # --sizing (auto, a rule, or None: the config's)
    target_oom: str | None = None  # --target-oom
    history: str | None = None  # --sizing-history
    state_dir: str | None = None  # --state-dir
    default_history: str | None = None  # replan: the history it plans from (--history-store, --collect)


def wanted(ctx: Context, sizing: str | None) -> bool:
    """Is the rule to be chosen automatically: `--sizing auto`, or no `--sizing` and the config's `sizing: auto`."""
    return is_auto(sizing) if sizing is not None else is_auto(ctx.config.sizing.get("rule"))


def check_options(ctx: Context, req: AutoRequest, given: dict[str, Any]) -> None:
    """--target-oom and --sizing-history go with auto; --sizing auto leaves the memory options out."""
    if wanted(ctx, req.sizing):
        clash = [k for k in MEMORY_KEYS if given.get(k) is not None]
        if clash:
            raise InputError(f"sizing auto chooses the whole memory rule: leave out --{clash[0].replace('_', '-')}",
                             key="--sizing", hint="or give a rule: --sizing max+10%+1024MiB")
        return
    for option, value in (("--target-oom", req.target_oom), ("--sizing-history", req.history)):
        if value is not None:
            raise InputError("goes with --sizing auto (or sizing: auto in the config)", key=option)


def _source(spec: str) -> tuple[str | None, str | None, PromRequest | None]:
    """(store, csv, prometheus) of a history given as one string."""
    if spec.startswith(("http://", "https://")):
        from migplan.commands.collect_prometheus import PromRequest

        return None, None, PromRequest(url=spec)
    if spec.lower().endswith(".csv"):
        return None, spec, None
    return spec, None, None


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Settings:
    target: float
    cooldown_s: float
    train: str
    test: str
    splits: int
    source: str | None
    floor: int


def _settings(ctx: Context, req: AutoRequest) -> _Settings:
    from migplan.commands.history import parse_duration
    from migplan.history.sweep import DEFAULT_SPLITS, DEFAULT_TARGET
    cfg = ctx.config.sizing
    target = parse_share(req.target_oom if req.target_oom is not None else cfg.get("target_oom", DEFAULT_TARGET),
                         key="--target-oom" if req.target_oom is not None else "sizing.target_oom")
    train, test = str(cfg.get("train", DEFAULT_TRAIN)), str(cfg.get("test", DEFAULT_TEST))
    for key, value in (("sizing.train", train), ("sizing.test", test)):
        if parse_duration(value, key) is None:
            raise InputError("expected a length such as 7d, not 'all'", key=key)
    source = req.history or cfg.get("history") or req.default_history
    floor = planner_policy(ctx, {}).headroom_min_mib
    return _Settings(target, float(cfg.get("cooldown_h", DEFAULT_COOLDOWN_H)) * 3600, train, test,  # type: ignore[arg-type]  # checked as a number when read
                     int(cfg.get("splits", DEFAULT_SPLITS)), str(source) if source else None, floor)  # type: ignore[call-overload]  # checked as an int when read


def state_dir(ctx: Context, option: str | None) -> StateDir:
    configured = ctx.config.replan.get("state_dir")
    return StateDir(option or str(configured or DEFAULT_STATE_DIR), state_dir_option(option, configured))


def _kept(sd: StateDir, report: Report) -> tuple[Calibration | None, dict[str, Any]]:
    """The calibration in the state directory (None when there is none or it is not one: a note says so)."""
    from migplan.history.sweep import read_record
    try:
        doc = sd.sizing_record()
    except InputError as err:
        report(f"warning: event=sizing-record-unreadable {err.message}: recalibrating")
        return None, {}
    if doc is None:
        return None, {}
    try:
        return read_record(doc), doc
    except InputError as err:
        report(f"warning: event=sizing-record-ignored {sd.path / 'sizing.json'}: {err.message}: recalibrating")
        return None, {}


def _same(doc: dict[str, Any], cal: Calibration, s: _Settings) -> bool:
    """The kept calibration was made as this one would be: windows, grid, floor (and history, when one is given)."""
    from migplan.commands.history import parse_duration
    from migplan.history.sweep import DEFAULT_FAMILIES
    train, test = parse_duration(s.train, "sizing.train"), parse_duration(s.test, "sizing.test")
    return (cal.train_s, cal.test_s, cal.splits, cal.families, doc.get("floor")) == (
        train, test, s.splits, DEFAULT_FAMILIES, s.floor) and (s.source is None or cal.source == s.source)


def calibrate(ctx: Context, source: str, s: _Settings, now: float, report: Report) -> Sweep:
    from migplan.commands.history import SweepRequest, run_sweep
    history, csv, prom = _source(source)
    path = history or csv
    if path is not None and not os.path.exists(path):
        raise InputError("no such file or directory", source=path, key="--sizing-history / sizing.history",
                         hint="a history store (or a directory of them), a FILE.csv or a Prometheus URL")
    req = SweepRequest(history=history, csv=csv, prometheus=prom, train=s.train, test=s.test, splits=s.splits,
                       target_oom=s.target)
    return run_sweep(ctx, req, report=report, now=lambda: now)


def keep(sd: StateDir, sw: Sweep, *, now: float, source: str, floor: int,
         families: tuple[str, ...] | None = None) -> Calibration:
    """Write a sweep as the calibration `sizing: auto` reads (`backtest --sweep --state-dir` too)."""
    from migplan.history.sweep import DEFAULT_FAMILIES, read_record, record

    doc = {**record(sw, calibrated_at=now, source=source, families=list(families or DEFAULT_FAMILIES)),
           "floor": floor}
    sd.set_sizing_record(doc)
    return read_record(doc)


def resolve(ctx: Context, req: AutoRequest, *, now: float, report: Report = quiet) -> tuple[str, SizingChoice]:
    """(the rule to plan with, what the plan records of the choice): module notes."""
    from migplan.history.sweep import TooShort, choose

    s = _settings(ctx, req)
    sd = state_dir(ctx, req.state_dir)
    cal, doc = _kept(sd, report)
    fresh = cal is not None and now - cal.calibrated_at < s.cooldown_s and _same(doc, cal, s)
    if not fresh and s.source is not None:
        try:
            sw = calibrate(ctx, s.source, s, now, report)
        except TooShort as err:
            return _default(ctx, s, f"too little history to calibrate from ({err.message.split(': ', 1)[-1]})",
                            report)
        cal = keep(sd, sw, now=now, source=s.source, floor=s.floor)
        report(f"info: event=sizing-calibrated source={s.source} rules={len(cal.figures)} splits={cal.splits}")
    elif cal is not None and not fresh:
        report(f"note: sizing auto: the calibration of {_iso(cal.calibrated_at)} is older than the cool-down or made "
               "otherwise, and there is no history to calibrate from (--sizing-history, sizing.history): using it")
    if cal is None:
        return _default(ctx, s, "no calibration yet and no history to calibrate from (give --sizing-history or "
                                "sizing.history, or run 'backtest --sweep --state-dir DIR')", report)
    pick, reason = choose(list(cal.figures), s.target)
    meta = {"calibrated_at": _iso(cal.calibrated_at), "source": cal.source, "splits": cal.splits,
            "train_s": cal.train_s, "test_s": cal.test_s}
    if pick is None:
        return _default(ctx, s, reason, report, meta)
    if pick.rule in cal.correlated:
        report(f"warning: sizing auto: the backtest of {pick.rule} shows workloads out of memory together (correlated "
               "bursts): its figures are the bursts of that history (docs/profiles.md)")
    choice = SizingChoice(rule=pick.rule, recommended=True, target_oom=s.target, reason=reason,
                          oom_rate_mean=pick.oom_mean, oom_rate_worst=pick.oom_worst,
                          whole_gpu_ratio_mean=pick.ratio_mean, **meta)  # type: ignore[arg-type]  # typed above
    report(f"info: event=sizing rule={pick.rule} auto=yes {reason}")
    return pick.rule, choice


def _default(ctx: Context, s: _Settings, why: str, report: Report, meta: dict[str, Any] | None = None) -> tuple[
        str, SizingChoice]:
    p = planner_policy(ctx, {})
    rule = rule_text(p.memory_percentile, p.headroom, p.headroom_spread, p.headroom_min_mib, p.headroom_max_mib,
                     default_floor=p.headroom_min_mib)
    report(f"warning: sizing auto: sized by the default rule {rule}: {why}")
    return rule, SizingChoice(rule=rule, recommended=False, target_oom=s.target, reason=why, **(meta or {}))


def keep_sweep(ctx: Context, sw: Sweep, state: str, *, source: str, families: tuple[str, ...], now: float,
               report: Report = quiet) -> None:
    """`backtest --sweep --state-dir DIR`: keep the sweep as `sizing: auto`'s calibration in DIR."""
    keep(state_dir(ctx, state), sw, now=now, source=source, floor=planner_policy(ctx, {}).headroom_min_mib,
         families=families or None)
    report(f"calibration for sizing auto kept in {state}/sizing.json")


def prepare_propose(ctx: Context, req: ProposeRequest, auto: AutoRequest, *, now: float,
                    report: Report = quiet) -> ProposeRequest:
    """`propose`'s request with `sizing: auto` resolved into its rule and choice (unchanged when not auto)."""
    check_options(ctx, auto, dict(req.policy))
    if not wanted(ctx, auto.sizing):
        return req
    rule, choice = resolve(ctx, auto, now=now, report=report)
    return dataclasses.replace(req, sizing=rule, sizing_choice=choice)
