"""The CLI conventions on the foundation commands: formats, exit codes, stdout vs stderr, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import isolate_cli
from typer.testing import CliRunner

from migplan.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    isolate_cli(monkeypatch, tmp_path)
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        return runner.invoke(app, list(args), env=env)

    return invoke


def test_layouts_json(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "layouts", "A100-SXM4-40GB", "--maximal", "-o", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data) == 78
    assert {"instances", "compute_slices", "picture"} <= set(data[0])
    r = run("catalog", "layouts", "A30", "--maximal", "-o", "json")
    assert len(json.loads(r.stdout)) == 5


def test_layouts_restricted_profiles(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "layouts", "A100-40GB", "--maximal", "--profiles", "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb",
            "-o", "yaml")
    assert r.exit_code == 0 and len(yaml.safe_load(r.stdout)) == 19


def test_list_and_show(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "list", "-o", "json")
    ids = [m["id"] for m in json.loads(r.stdout)]
    assert "A100-SXM4-40GB" in ids and "H100-SXM5-80GB" in ids and "A30" in ids
    r = run("catalog", "show", "h100-80gb")
    assert r.exit_code == 0 and "1g.20gb" in r.stdout and "{0,2,4,6}" in r.stdout
    r = run("catalog", "show", "B200")
    assert "unverified" in r.stdout


def test_unknown_model_is_exit_2_on_stderr(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "show", "V100")
    assert r.exit_code == 2
    assert r.stdout == ""
    assert "unknown GPU model 'V100'" in r.stderr and "--catalog" in r.stderr
    assert "Traceback" not in r.output


def test_unknown_profile_in_layouts(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "layouts", "A30", "--profiles", "9g.9gb")
    assert r.exit_code == 2 and "has no MIG profile '9g.9gb'" in r.stderr


def test_usage_error_is_exit_2(run) -> None:  # type: ignore[no-untyped-def]
    assert run("catalog", "list", "-o", "xml").exit_code == 2
    assert run("catalog", "nope").exit_code == 2


def test_inventory_check(run) -> None:  # type: ignore[no-untyped-def]
    r = run("inventory", "check", "--inventory", INV)
    assert r.exit_code == 0
    assert "|3g.20gb    |2g.10|1g|  |" in r.stdout and "24 GPUs" in r.stdout
    data = json.loads(run("inventory", "check", "-i", INV, "-o", "json").stdout)
    assert len(data["hosts"]) == 4 and data["hosts"][0]["gpus"][0]["layout"] == ["3g.20gb@0", "2g.10gb@4",
                                                                                  "1g.5gb@6"]


def test_inventory_missing(run) -> None:  # type: ignore[no-untyped-def]
    r = run("inventory", "check")
    assert r.exit_code == 2 and "no inventory given" in r.stderr
    r = run("inventory", "check", "-i", "/nonexistent/inv.yaml")
    assert r.exit_code == 2 and "/nonexistent/inv.yaml: file not found" in r.stderr


def test_profiles_show(run) -> None:  # type: ignore[no-untyped-def]
    r = run("profiles", "show", "--profiles", PROF)
    assert r.exit_code == 0 and "40 workloads from 5 file(s)" in r.stdout
    data = yaml.safe_load(run("profiles", "show", "-p", PROF, "-o", "yaml").stdout)
    assert len(data) == 40 and {"name", "memory_mib", "compute", "observed"} <= set(data[0])


# Each bad-input case the foundation issue names, through the CLI: exit 2, file + key + line.
BAD_CASES = [
    ("inventory", "version: 1\nhosts:\n  h1:\n    gpus: [{index: 0, model: A100-SXM4-40GB}\n", ":4:", None),
    ("inventory", "version: 1\nhosts:\n  h1:\n    colour: red\n    discover: true\n", ":4:", "hosts.h1.colour"),
    ("inventory", "version: 1\nhosts:\n  h1:\n    port: ssh\n    discover: true\n", ":4:", "hosts.h1.port"),
    ("inventory", "version: 1\nhosts:\n  h1:\n    gpus: [{index: 0, model: Z100}]\n", ":4:",
     "hosts.h1.gpus[0].model"),
    ("inventory", "version: 1\nhosts:\n  h1: {discover: true}\n  h1: {discover: true}\n", ":4:", "hosts.h1"),
    ("inventory", "version: 1\nhosts:\n  h1:\n    gpus:\n    - {index: 0, model: A30}\n    - {index: 0, model: A30}\n",
     ":6:", "hosts.h1.gpus[1]"),
    ("profiles", "version: 1\nworkloads:\n- name: a\n  memory_mib: {p50: -1, p95: 1, p99: 1, max: 1}\n"
     "  compute: {p50: 0, p95: 0, max: 0}\n", ":4:", "workloads[0].memory_mib.p50"),
    ("profiles", "version: 1\nworkloads:\n- name: a\n  memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}\n"
     "  compute: {p50: 0, p95: 0, max: 0}\n- name: a\n  memory_mib: {p50: 1, p95: 1, p99: 1, max: 1}\n"
     "  compute: {p50: 0, p95: 0, max: 0}\n", ":6:", "workloads"),
]


@pytest.mark.parametrize(("kind", "text", "line", "key"), BAD_CASES)
def test_bad_input_through_cli(run, tmp_path: Path, kind: str, text: str, line: str, key: str | None) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    args = ("inventory", "check", "-i", str(f)) if kind == "inventory" else ("profiles", "show", "-p", str(f))
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert f"{f}{line}" in r.stderr
    if key:
        assert f": {key}:" in r.stderr
    assert "Traceback" not in r.stderr


def test_config_file_and_env_precedence(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"version: 1\ninventory: {INV}\noutput: json\n")
    r = run("inventory", "check", "--config", str(cfg))
    assert r.exit_code == 0 and json.loads(r.stdout)["hosts"]
    r = run("inventory", "check", "--config", str(cfg), "-o", "yaml")  # flag beats config
    assert yaml.safe_load(r.stdout)["hosts"]
    r = run("inventory", "check", env={"MIGPLAN_CONFIG": str(cfg), "MIGPLAN_OUTPUT": "table"})  # env beats config
    assert r.exit_code == 0 and "24 GPUs" in r.stdout
    default = tmp_path / "xdg" / "migplan" / "config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text(f"version: 1\nprofiles: {PROF}\n")
    assert run("profiles", "show").exit_code == 0
    cfg.write_text("version: 1\noutput: xml\n")
    r = run("inventory", "check", "--config", str(cfg))
    assert r.exit_code == 2 and "unknown output format 'xml'" in r.stderr


def test_catalog_override_from_cli(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    extra = tmp_path / "cat.yaml"
    extra.write_text("version: 1\nmodels:\n- id: TOY\n  architecture: hopper\n  memory_slices: 2\n"
                     "  compute_slices: 2\n  profiles:\n  - {name: 1g.1gb, id: 1, compute_slices: 1, memory_slices: 1,"
                     " memory_mib: 1024, max_count: 2, starts: [0, 1]}\n"
                     "  - {name: 2g.2gb, id: 0, compute_slices: 2, memory_slices: 2, memory_mib: 2048, max_count: 1,"
                     " starts: [0]}\n")
    r = run("catalog", "layouts", "TOY", "--maximal", "--catalog", str(extra), "-o", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 2


def test_version(run) -> None:  # type: ignore[no-untyped-def]
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.startswith("migplan ")


def test_catalog_check(run) -> None:  # type: ignore[no-untyped-def]
    r = run("catalog", "check", "A100-SXM4-40GB", "3g.20gb@0", "2g.10gb@4", "-o", "json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert data["valid"] and set(data["free"]) == {"1g.5gb@6", "1g.5gb+me@6", "1g.10gb@6"}
    r = run("catalog", "check", "A100-SXM4-40GB", "3g.20gb@1", "4g.20gb@0")
    assert r.exit_code == 1
    assert "[bad-start] 3g.20gb@1" in r.stdout and "[overlap] 4g.20gb@0 and 3g.20gb@1" in r.stdout
    r = run("catalog", "check", "A30", "3g.20gb")
    assert r.exit_code == 2 and "PROFILE@START" in r.stderr


@pytest.mark.slow
def test_verbose_keeps_stdout_data_only() -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "migplan.cli.app", "-v", "propose", "-i", "inventory/example.yaml", "-p",
           "profiles/example", "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert '"kind": "migplan/plan"' in proc.stdout and "debug:" not in proc.stdout


def test_verbose_sends_migplan_debug_log_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from migplan.cli.app import root

    logger = logging.getLogger("migplan")
    before = (list(logger.handlers), logger.level)
    try:
        root(version=False, verbose=True)
        logging.getLogger("migplan.adapters.ssh").debug("h1: running %s", "nvidia-smi -L\x1b[2J")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("migplan.adapters.pool").debug("h1: unexpected error", exc_info=True)
        err = capsys.readouterr().err
        assert "debug: migplan.adapters.ssh: h1: running nvidia-smi -L" in err and "\x1b" not in err
        assert "RuntimeError: boom" in err
    finally:
        logger.handlers[:] = before[0]
        logger.setLevel(before[1])


def test_cli_fleet_defaults_agree_with_the_commands_layer() -> None:
    from migplan.cli.options import DEFAULT_PARALLEL, FleetOptions
    from migplan.commands.fleet import FleetRequest

    assert FleetRequest().parallel == DEFAULT_PARALLEL
    assert FleetOptions().request(None).timeout == FleetRequest().timeout


# --- lazy command registration (migplan/cli/app.py COMMANDS) -------------------------------------------

def _modules_after(*args: str) -> set[str]:
    """The modules a fresh `migplan ARGS` process has imported when it exits."""
    import subprocess
    import sys

    code = ("import sys\nfrom migplan.cli.app import main\nsys.argv = ['migplan', *sys.argv[1:]]\ntry:\n    main()\n"
            "except SystemExit:\n    pass\n"
            "sys.__stderr__.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False,
                          cwd=ROOT, env={**__import__("os").environ, "MIGPLAN_CACHE_DIR": "none"})
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")]
    assert line, proc.stderr
    return set(line[-1].split()[1:])


def test_help_imports_no_command_module() -> None:
    mods = _modules_after("--help")
    heavy = {"paramiko", "pulp", "tabulate", "yaml", "migplan.planner", "migplan.cli.propose", "migplan.cli.fleet",
             "migplan.cli.apply_cmd", "migplan.cli.catalog_cmd", "migplan.commands", "migplan.catalog"}
    assert not heavy & mods, sorted(heavy & mods)


@pytest.mark.slow
def test_a_command_imports_only_what_it_needs() -> None:
    mods = _modules_after("catalog", "list", "-o", "json")
    assert "migplan.cli.catalog_cmd" in mods
    assert not {"paramiko", "pulp", "migplan.cli.fleet", "migplan.cli.propose", "migplan.cli.apply_cmd"} & mods
    assert "pulp" in _modules_after("propose", "-i", INV, "-p", PROF, "-o", "json")


def test_registered_help_matches_each_command_own_help() -> None:
    """`migplan --help` lists a command from its COMMANDS text without importing it: that text must be the first
    paragraph of the command's own help (its docstring or the group's help=), so the two never drift apart."""
    import inspect

    import typer

    from migplan.cli.app import COMMANDS, load

    for name, (target, text) in COMMANDS.items():
        obj = load(target)
        own = obj.info.help if isinstance(obj, typer.Typer) else inspect.getdoc(obj)
        first = " ".join((own or "").split("\n\n")[0].split())
        assert first == text, f"{name}: COMMANDS says {text!r}, the command says {first!r}"


def test_lazy_commands_run_list_and_suggest(run) -> None:  # type: ignore[no-untyped-def]
    r = run("--help")
    assert r.exit_code == 0
    for name in ("propose", "apply", "discover", "status", "catalog", "inventory", "profiles"):
        assert name in r.stdout
    r = run("catalog", "--help")  # a group's lazy sub-command (catalog learn) is listed with the group's own
    assert r.exit_code == 0 and "learn" in r.stdout and "layouts" in r.stdout
    r = run("catalog", "learn", "--help")
    assert r.exit_code == 0 and "--host" in r.stdout
    r = run("propse")
    assert r.exit_code == 2 and "Did you mean 'propose'" in r.output


# --- usage errors: one `error:` line, exit 2, on every command (issue 21) ---------------------------------------

def _every_command() -> list[list[str]]:
    """Each command's words (`["catalog", "learn"]`), walking the registered groups as click resolves them."""
    import typer.main

    top = typer.main.get_command(app)
    out: list[list[str]] = []

    def walk(group, words: list[str]) -> None:  # type: ignore[no-untyped-def]
        ctx = group.make_context(" ".join(["migplan", *words]), [], resilient_parsing=True)
        for name in group.list_commands(ctx):
            group.resolve_command(ctx, [name])
            cmd = group.get_command(ctx, name)
            if hasattr(cmd, "list_commands"):
                walk(cmd, [*words, name])
            else:
                out.append([*words, name])

    walk(top, [])
    return out


def _one_error_line(r, want: str) -> None:  # type: ignore[no-untyped-def]
    lines = r.stderr.splitlines()
    assert r.exit_code == 2, r.output
    assert [ln for ln in lines if ln.startswith("error: ")] == [lines[0]] and want in lines[0], r.stderr
    assert len(lines) <= 2 and all(ln.startswith("Try '") for ln in lines[1:]), r.stderr
    assert "╭" not in r.output and "Usage:" not in r.output and "Traceback" not in r.output


def test_an_unknown_option_is_one_error_line_on_every_command(run) -> None:  # type: ignore[no-untyped-def]
    commands = _every_command()
    assert ["apply"] in commands and ["catalog", "learn"] in commands and len(commands) > 20
    for words in commands:
        r = run(*words, "--no-such-option")
        _one_error_line(r, "error: No such option: --no-such-option")
        assert f"Try 'migplan {' '.join(words)} -h' for help." in r.stderr, (words, r.stderr)


@pytest.mark.parametrize(("argv", "want"), [
    (["apply", "--timeout", "inf", "plan.yaml"], "error: Invalid value for '--timeout'"),
    (["propose", "-o", "xml"], "error: Invalid value for '-o' / '--output'"),
    (["report"], "error: Missing argument 'PLAN'"),  # the argument as its usage line names it (issue 25)
    (["apply", "plan.yaml", "--timeout"], "error: Option '--timeout' requires an argument"),
    (["propse"], "error: No such command 'propse'. Did you mean 'propose'?"),
    (["catalog", "nope"], "error: No such command 'nope'"),
    (["--no-such-root-option"], "error: No such option: --no-such-root-option"),
])
def test_usage_errors_are_one_error_line(run, argv: list[str], want: str) -> None:  # type: ignore[no-untyped-def]
    _one_error_line(run(*argv), want)


def test_a_usage_error_of_the_console_script_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "from migplan.cli.app import main; main()", "apply", "--nope"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                                           "HOME": str(tmp_path)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[0] == "error: No such option: --nope", proc.stderr
    assert "╭" not in proc.stderr
