"""`migplan collect --local` without typer (migplan/cli/entry.py): it takes only what it fully understands,
and where it runs, it prints and exits exactly as the typer command does (the typer path is the oracle)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from migplan.cli import entry
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

ROOT = Path(__file__).resolve().parents[1]
UUID = "GPU-11111111-2222-3333-4444-555555555555"
ENV = ("MIGPLAN_HISTORY", "MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_CATALOG", "MIGPLAN_INVENTORY",
       "MIGPLAN_KNOWN_HOSTS", "MIGPLAN_SSH_CONFIG")


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no config file unless a test writes one


# --- what the fast path takes ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["collect", "--local"],
    ["collect", "--local", "-q", "--history", "/x"],
    ["collect", "-q", "--local", "--history=/x", "-o", "json", "--host-name", "h", "--retention-days", "7.5",
     "--max-mb", "64", "--workload-rules", "r.yaml", "--config", "c.yaml", "--catalog", "a.yaml", "--catalog",
     "b.yaml"],
    ["collect", "--local", "-ojson"],
])
def test_fast_path_takes_collect_local(argv: list[str]) -> None:
    assert entry.parse(argv, env={}) is not None


@pytest.mark.parametrize("argv", [
    [], ["collect"], ["--help"], ["-v", "collect", "--local"], ["--version"], ["propose"],
    ["collect", "--local", "--help"], ["collect", "--local", "-h"],
    ["collect", "--inventory", "i.yaml"], ["collect", "--local", "--inventory", "i.yaml"],
    ["collect", "--local", "--prometheus", "http://p:9090"], ["collect", "install", "--local"],
    ["collect", "--local", "--parallel", "4"], ["collect", "--local", "--no-such-option"],
    ["collect", "--local", "extra"], ["collect", "--local", "--loc"], ["collect", "--local", "--history"],
    ["collect", "--local", "--retention-days", "1e3"], ["collect", "--local", "--retention-days", "0.001"],
    ["collect", "--local", "--retention-days", "inf"], ["collect", "--local", "--retention-days", " 5"],
    ["collect", "--local", "--max-mb", "0"], ["collect", "--local", "--max-mb", "-5"],
    ["collect", "--local", "--max-mb", "1.5"], ["collect", "--local", "--max-mb", "1_000"],
    ["collect", "--local", "-o", "JSON"], ["collect", "--local", "-o", "xml"], ["collect", "--local", "--local=1"],
    ["collect", "--local", "--", "x"],
])
def test_everything_else_goes_to_typer(argv: list[str]) -> None:
    assert entry.parse(argv, env={}) is None


def test_environment_is_read_as_typer_reads_it() -> None:
    opts = entry.parse(["collect", "--local"], env={"MIGPLAN_HISTORY": "/h", "MIGPLAN_OUTPUT": "yaml",
                                                   "MIGPLAN_CONFIG": "/c.yaml"})
    assert opts is not None and (opts["history"], opts["output"], opts["config"]) == ("/h", "yaml", "/c.yaml")
    opts = entry.parse(["collect", "--local", "--history", "/cli", "-o", "json"], env={"MIGPLAN_HISTORY": "/h",
                                                                                      "MIGPLAN_OUTPUT": "yaml"})
    assert opts is not None and (opts["history"], opts["output"]) == ("/cli", "json")  # the flag wins
    opts = entry.parse(["collect", "--local"], env={"MIGPLAN_HISTORY": "", "MIGPLAN_OUTPUT": ""})  # empty: unset
    assert opts is not None and (opts["history"], opts["output"]) == (entry.DEFAULT_DIR, None)
    for env in ({"MIGPLAN_INVENTORY": "i.yaml"}, {"MIGPLAN_CATALOG": "a.yaml b.yaml"}, {"MIGPLAN_OUTPUT": "xml"}):
        assert entry.parse(["collect", "--local"], env=env) is None, env


def test_fast_path_knows_the_typer_commands_options_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drift guard: the defaults, choices and environment variables repeated in entry.py are collect_cmd's."""
    import typer.main

    from migplan import config
    from migplan.adapters import history_store as hs
    from migplan.cli import collect_cmd
    from migplan.cli.options import OutputFormat

    assert (hs.DEFAULT_DIR, hs.DEFAULT_RETENTION_DAYS, hs.DEFAULT_MAX_MB) == (
        entry.DEFAULT_DIR, entry.DEFAULT_RETENTION_DAYS, entry.DEFAULT_MAX_MB)
    assert tuple(f.value for f in OutputFormat) == entry.OUTPUT_FORMATS
    assert entry.default_config_file() == str(config.default_config_path())
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert entry.default_config_file() == str(config.default_config_path())
    params = {p.name: p for p in typer.main.get_command(collect_cmd.app).params}
    options = {o for p in params.values() for o in p.opts}
    fast = {o for a in entry._parser()._actions for o in a.option_strings}
    assert fast <= options, fast - options
    assert (params["history"].default, params["retention_days"].default, params["max_mb"].default) == (
        entry.DEFAULT_DIR, entry.DEFAULT_RETENTION_DAYS, entry.DEFAULT_MAX_MB)
    envvars = {e for p in params.values() for e in ([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])}
    handled = {"MIGPLAN_HISTORY", "MIGPLAN_OUTPUT", "MIGPLAN_CONFIG"}
    assert envvars == handled | set(entry.TYPER_ENV) | set(entry.IGNORED_ENV)


# --- the same output as typer --------------------------------------------------------------------------------

def _fake(kind: str) -> FakeNvml:
    pid = os.getpid()
    if kind == "missing":
        return FakeNvml([], library_missing=True)
    if kind == "mig":
        gpu = FakeGpu(uuid=UUID, mig=True, migs=[FakeMig(1, 9, "3g.20gb", 0, 3)],
                      processes=[FakeProcess(pid, 6000, 0.0, mig=0)])
    elif kind == "unknown-model":
        gpu = FakeGpu(name="NVIDIA \x1b[31mNo Such GPU", uuid=UUID, memory_mib=1234, pci_device_id=0x1234,
                      processes=[FakeProcess(pid, 100, 10.0)])
    else:
        gpu = FakeGpu(uuid=UUID, accounting=True, processes=[FakeProcess(pid, 5000, 40.0)])
    return FakeNvml([gpu])


def _normal(text: str, history: Path) -> Any:
    """Output with the run's own store path and CPU time taken out (they differ between two runs)."""
    text = text.replace(str(history), "<HISTORY>")
    for load in (json.loads, yaml.safe_load):
        try:
            doc = load(text)
        except (ValueError, yaml.YAMLError):
            continue
        if isinstance(doc, dict) and "cpu_s" in doc:
            doc["cpu_s"] = "<cpu>"
            return doc
    return text


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
          kind: str = "ok") -> tuple[tuple[int, Any, Any], tuple[int, Any, Any]]:
    from migplan.cli.app import app

    out = []
    for way in ("typer", "fast"):
        history = tmp_path / way / "history"
        argv = ["collect", "--local", "--history", str(history), *args]
        monkeypatch.setitem(sys.modules, "pynvml", _fake(kind))
        if way == "typer":
            r = CliRunner().invoke(app, argv)
            code, stdout, stderr = r.exit_code, r.stdout, r.stderr
        else:
            capsys.readouterr()
            fast = entry.fast_path(argv)
            assert fast is not None, argv  # the fast path runs this command line
            captured = capsys.readouterr()
            code, stdout, stderr = fast, captured.out, captured.err
        out.append((code, _normal(stdout, history), _normal(stderr, history)))
    return out[0], out[1]


@pytest.mark.parametrize(("args", "kind"), [
    ([], "ok"), (["-o", "json"], "ok"), (["--output=yaml"], "ok"), (["-q"], "ok"),
    (["--host-name", "node-7", "--retention-days", "7", "--max-mb", "64", "-o", "json"], "ok"),
    ([], "mig"), (["-o", "json"], "unknown-model"), ([], "missing"), (["-q"], "missing"),
    (["--workload-rules", "/nonexistent/rules.yaml"], "ok"), (["--config", "/nonexistent/config.yaml"], "ok"),
    (["--catalog", "/nonexistent/catalog.yaml"], "ok"),
])
def test_fast_path_prints_and_exits_as_typer_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], args: list[str],
                                                  kind: str) -> None:
    typer_run, fast_run = _both(tmp_path, monkeypatch, capsys, args, kind)
    assert fast_run == typer_run
    code, stdout, stderr = fast_run
    if kind == "missing":
        assert code == 1 and "error: NVML is not available on this host" in stderr
    elif args and args[0] in ("--workload-rules", "--config", "--catalog"):
        assert code == 2 and stderr.startswith("error: ")
    else:
        assert code == 0, stderr
        if "-q" not in args:
            assert stdout, "a run prints its summary"


def test_fast_path_reads_a_config_file_as_typer_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "xdg" / "migplan" / "config.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("version: 1\noutput: json\n")
    typer_run, fast_run = _both(tmp_path, monkeypatch, capsys, [])
    assert fast_run == typer_run and isinstance(fast_run[1], dict)  # JSON, from the config file
    conf.write_text("version: 1\noutput: xml\n")
    typer_run, fast_run = _both(tmp_path, monkeypatch, capsys, [])
    assert fast_run == typer_run and fast_run[0] == 2 and "unknown output format" in fast_run[2]


def test_rules_file_names_workloads_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\nrules:\n  - match: '(pytest)'\n    workload: 'by-rule-\\1'\n")
    typer_run, fast_run = _both(tmp_path, monkeypatch, capsys, ["--workload-rules", str(rules), "-o", "json"])
    assert fast_run == typer_run and fast_run[1]["workloads"] == ["by-rule-pytest"]


# --- the console script ---------------------------------------------------------------------------------------

SHIM = """
import os, sys
from tests.fake_nvml import FakeGpu, FakeNvml, FakeProcess
sys.modules[__name__] = FakeNvml([FakeGpu(uuid="GPU-11111111-2222-3333-4444-555555555555",
                                          processes=[FakeProcess(os.getpid(), 5000, 40.0)])])
"""
REPORT = ("import atexit, sys\natexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + ' '.join(sorted("
          "sys.modules)) + '\\n'))\nfrom migplan.cli.entry import main\nsys.argv[0] = 'migplan'\nmain()\n")


def _script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "pynvml.py").write_text(SHIM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGPLAN_")}
    env.update(PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    done = subprocess.run([sys.executable, "-c", REPORT, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")]
    return done, set(line[-1].split()[1:]) if line else set()


def test_console_script_is_the_entry_module() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'migplan = "migplan.cli.entry:main"' in text


def test_console_script_runs_collect_local_without_typer(tmp_path: Path) -> None:
    done, modules = _script(tmp_path, "collect", "--local", "--history", str(tmp_path / "h"), "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["samples"] == 1
    heavy = {"typer", "click", "rich", "pydantic", "migplan.cli.app", "migplan.config", "migplan.planner",
             "migplan.commands.context", "migplan.cli.collect_cmd", "migplan.cli.prometheus_cmd", "tabulate",
             "migplan.commands.collect_prometheus", "migplan.adapters.pool", "migplan.adapters.ssh"}
    assert not heavy & modules, sorted(heavy & modules)


@pytest.mark.slow
def test_console_script_sends_help_and_other_commands_to_typer(tmp_path: Path) -> None:
    done, modules = _script(tmp_path, "collect", "--local", "--help")
    assert done.returncode == 0 and "--inventory" in done.stdout and "typer" in modules
    done, _ = _script(tmp_path, "collect", "--local", "--max-mb", "0")
    assert done.returncode == 2 and "--max-mb" in done.stderr  # typer's own usage error
    done, _ = _script(tmp_path, "collect", "--local", "--inventory", "x.yaml")
    assert done.returncode == 2 and "not --local and --inventory" in done.stderr
