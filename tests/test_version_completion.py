"""`migplan --version` (migplan, the solver and nvidia-ml-py it finds) and shell completion for bash and zsh,
each through a real process: the installed `migplan` entry point, real bash, real zsh."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import migplan

MIGPLAN = shutil.which("migplan")
BASH = shutil.which("bash")
ZSH = shutil.which("zsh")
needs_entry_point = pytest.mark.skipif(MIGPLAN is None, reason="the migplan entry point is not installed "
                                       "(pip install -e . installs it)")


def _env(tmp: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(tmp), "XDG_CONFIG_HOME": str(tmp / "xdg"), "LANG": "C.UTF-8"}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_version_names_migplan_cbc_pulp_and_nvidia_ml_py() -> None:
    import pulp  # the oracle: PuLP's own idea of where its CBC is and what version it is

    done = _python("import sys\nfrom migplan.cli.app import main\nsys.argv = ['migplan', '--version']\n"
                   "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
                   "print('PULP-IMPORTED' if 'pulp' in sys.modules else 'pulp-not-imported', code)")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"migplan {migplan.__version__}"
    cbc = os.path.realpath(pulp.PULP_CBC_CMD().path)
    solver = next(ln for ln in lines if ln.startswith("solver: "))
    m = re.fullmatch(r"solver: CBC (\d+\.\d+\.\d+) \((.+), via PuLP (.+)\)", solver)
    assert m, solver
    assert os.path.realpath(m.group(2)) == cbc and m.group(3) == pulp.__version__
    real = subprocess.run([cbc, "-quit"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL).stdout
    assert f"Version: {m.group(1)}" in real
    assert f"nvidia-ml-py: {importlib.metadata.version('nvidia-ml-py')}" in lines
    assert lines[-1] == "pulp-not-imported 0"  # the version is read without importing PuLP


@pytest.mark.parametrize("args", [["--help"], ["catalog", "list"], ["report", "--help"]])
def test_other_commands_do_not_import_pulp_at_startup(args: list[str]) -> None:
    done = _python(f"import sys\nfrom migplan.cli.app import main\nsys.argv = ['migplan', *{args!r}]\n"
                   "try:\n    main()\nexcept SystemExit:\n    pass\n"
                   "print('PULP-IMPORTED' if 'pulp' in sys.modules else 'pulp-not-imported')")
    assert done.stdout.splitlines()[-1] == "pulp-not-imported", done.stdout + done.stderr


@pytest.mark.slow
@needs_entry_point
@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_completion_script_completes_commands_and_subcommands(tmp_path: Path) -> None:
    script = subprocess.run([BASH, "-c", "migplan --show-completion; true"], capture_output=True, text=True,
                            timeout=60, env=_env(tmp_path)).stdout  # type: ignore[list-item]
    assert "complete -o default -F _migplan_completion migplan" in script
    (tmp_path / "migplan.bash").write_text(script)
    probe = ('source "$1"; COMP_WORDS=(migplan "$2" "$3"); COMP_CWORD=$4; _migplan_completion migplan; '
             'printf "%s\\n" "${COMPREPLY[@]}"')

    def complete(*words: str) -> list[str]:
        w = [*words, "", ""][:2]
        done = subprocess.run([BASH, "-c", probe, "probe", str(tmp_path / "migplan.bash"), *w, str(len(words))],
                              capture_output=True, text=True, timeout=60, env=_env(tmp_path))  # type: ignore[list-item]
        return done.stdout.split()

    assert "propose" in complete("pro") and "profiles" in complete("pro")
    assert "report" in complete("rep")
    assert sorted(complete("catalog", "l")) == ["layouts", "learn", "list"]


@pytest.mark.slow
@needs_entry_point
@pytest.mark.skipif(ZSH is None, reason="zsh is not installed (apt-get install zsh)")
def test_zsh_completion_script_completes_commands(tmp_path: Path) -> None:
    script = subprocess.run([ZSH, "-f", "-c", "migplan --show-completion; true"], capture_output=True, text=True,
                            timeout=60, env=_env(tmp_path)).stdout  # type: ignore[list-item]
    assert script.startswith("#compdef migplan") and "compdef _migplan_completion migplan" in script
    (tmp_path / "_migplan").write_text(script)
    # compdef needs the completion system; _arguments is stubbed to print the specs it is given
    probe = ('autoload -Uz compinit && compinit -u -d "$HOME/.zcompdump"; source "$1"; '
             '_arguments() { print -rl -- "$@" }; words=(migplan "$2"); CURRENT=2; _migplan_completion')
    done = subprocess.run([ZSH, "-f", "-c", probe, "probe", str(tmp_path / "_migplan"), "rep"],
                          capture_output=True, text=True, timeout=60, env=_env(tmp_path))  # type: ignore[list-item]
    assert '"report":' in done.stdout, done.stdout + done.stderr
    assert '"propose":' not in done.stdout
