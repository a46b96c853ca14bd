"""Every command's `--help` reads as an operator's CLI (issue 25): each default shown, no text eaten by markup,
metavars that say what to give (FILE, DIR, N, SECONDS, table|json|yaml), arguments in capitals, no Python type
names, and the shell-completion options on `migplan --help` only.

The help of every command and sub-command is rendered, as `migplan ... --help` prints it, at a fixed terminal
width (click's plain help at the runner's 80 columns; COLUMNS fixes rich's, which typer draws with markup on);
the tree is walked as click resolves it, so the lazily loaded commands (app.COMMANDS) are all in it.
Each check collects every offending command and option before failing, so one run names them all."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from migplan.cli.app import COMMANDS, app

WIDTH = 100
COMPLETION = ("--install-completion", "--show-completion")
# Python's or click's type names where a metavar belongs: <str>, <list[str]>, <float range>, TEXT, INTEGER ...
TYPE_NAMES = re.compile(
    r"<(?:str|int|float|bool|path|text|integer|boolean|uuid|datetime|choice|file|tuple|dict)\b[^>\n]*>"
    r"|<[a-z]+ range>|\b(?:list|dict|tuple|set)\[|\bOptional\b|\bNoneType\b"
    r"|\b(?:TEXT|INTEGER|FLOAT|BOOLEAN)\b|\b(?:INTEGER|FLOAT) RANGE\b")  # PATH: an operator's metavar too
# An argument in braces or in lower case on the usage line, as typer >= 0.28 prints one: {plan}, {model}
BRACED = re.compile(r"\{[A-Za-z_][\w.@-]*\}")
# What eaten markup leaves: "ConfigMap name ." (a [default: ...] removed), "a, , b" (a [x] in a list removed)
GAPS = re.compile(r",\s*,|\s\.(?=\s|$)|\(\s*\)|\[\s*\]")
BOX = re.compile(r"[│╭╮╰╯─┃━┏┓┗┛]")


@dataclass(frozen=True)
class Help:
    words: tuple[str, ...]  # ("catalog", "learn"); () for `migplan` itself
    command: Any  # the click command
    ctx: Any  # a click context of it (for get_params)
    text: str  # `migplan WORDS --help` as printed

    @property
    def name(self) -> str:
        return " ".join(("migplan", *self.words))


def _walk() -> list[tuple[tuple[str, ...], Any, Any]]:
    top = typer.main.get_command(app)
    out: list[tuple[tuple[str, ...], Any, Any]] = []

    def walk(cmd: Any, words: tuple[str, ...], parent: Any) -> None:
        ctx = cmd.make_context(" ".join(("migplan", *words)), [], parent=parent, resilient_parsing=True)
        out.append((words, cmd, ctx))
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                _, sub, _ = cmd.resolve_command(ctx, [name])  # imports a lazily registered command
                walk(sub, (*words, name), ctx)

    walk(top, (), None)
    return out


@pytest.fixture(scope="module")
def helps() -> list[Help]:
    runner = CliRunner()
    env = {"COLUMNS": str(WIDTH), "LINES": "50", "TERM": "dumb", "NO_COLOR": "1"}
    out = []
    for words, cmd, ctx in _walk():
        r = runner.invoke(app, [*words, "--help"], env=env)
        assert r.exit_code == 0, (words, r.output)
        out.append(Help(words, cmd, ctx, BOX.sub(" ", r.stdout)))
    return out


def _options(h: Help) -> list[Any]:
    return [p for p in h.command.get_params(h.ctx) if p.param_type_name == "option" and not p.hidden]


def _arguments(h: Help) -> list[Any]:
    return [p for p in h.command.get_params(h.ctx) if p.param_type_name == "argument" and not p.hidden]


def _takes_value(p: Any) -> bool:
    return not (getattr(p, "is_flag", False) or getattr(p, "count", False))


def _block(h: Help, p: Any) -> str | None:
    """The lines of the help that describe option `p`, whitespace collapsed: from the line that starts with one
    of its names to the next line that starts another entry or a section."""
    lines = h.text.splitlines()
    names = set(p.opts) | set(p.secondary_opts)

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    for i, line in enumerate(lines):
        tokens = line.split()
        if not tokens or indent(line) > 6 or tokens[0].rstrip(",") not in names:
            continue
        block = [line]
        for nxt in lines[i + 1:]:
            if not nxt.strip() or indent(nxt) <= 6:  # a blank line, the next entry or section
                break
            block.append(nxt)
        return " ".join(" ".join(block).split())
    return None


def test_the_walk_reaches_every_registered_command(helps: list[Help]) -> None:
    seen = {h.words for h in helps}
    want = {tuple(name.split()) for name in COMMANDS}
    assert want <= seen, sorted(want - seen)
    assert ("catalog", "list") in seen and ("schedule", "install") in seen and len(seen) > 25


def test_every_option_with_a_default_shows_it(helps: list[Help]) -> None:
    """An option with a default (click's, other than None and False) or whose help text states one (a default
    computed at run time: "[default: the --existing one's, else gpu-operator]") shows `default:` in the help."""
    lost = []
    for h in helps:
        for p in _options(h):
            default = p.default
            has = default is not None and default is not False and (_takes_value(p) or p.secondary_opts)
            if not has and "default:" not in (p.help or ""):
                continue
            block = _block(h, p)
            if block is None or "default:" not in block:
                lost.append(f"{h.name} {p.opts[0]} (default {default!r}): {block!r}")
    assert not lost, "options whose default the help does not show:\n" + "\n".join(lost)


def test_no_python_type_names_or_braced_arguments(helps: list[Help]) -> None:
    bad = []
    for h in helps:
        for m in TYPE_NAMES.finditer(h.text):
            bad.append(f"{h.name}: {m.group(0)!r}")
        usage = next((ln for ln in h.text.splitlines() if "Usage:" in ln), "")
        for m in BRACED.finditer(usage):
            bad.append(f"{h.name}: usage {m.group(0)!r}")
    assert not bad, "type names or braces where an operator's metavar belongs:\n" + "\n".join(bad)


def test_no_gaps_left_by_eaten_markup(helps: list[Help]) -> None:
    bad = []
    for h in helps:
        flat = " ".join(h.text.split())
        for m in GAPS.finditer(flat):
            bad.append(f"{h.name}: ...{flat[max(0, m.start() - 40):m.end() + 10]}...")
    assert not bad, "gaps where text was eaten:\n" + "\n".join(bad)


def test_completion_options_only_on_the_top_level(helps: list[Help]) -> None:
    bad = []
    for h in helps:
        opts = {o for p in h.command.get_params(h.ctx) for o in p.opts}
        shown = [c for c in COMPLETION if c in h.text]
        has = [c for c in COMPLETION if c in opts]
        if h.words == ():
            if shown != list(COMPLETION) or has != list(COMPLETION):
                bad.append(f"{h.name}: completion options missing (shown {shown}, params {has})")
        elif shown or has:
            bad.append(f"{h.name}: {shown or has}")
    assert not bad, "completion options below the top level:\n" + "\n".join(bad)


def test_every_value_has_a_metavar_and_arguments_are_capitals(helps: list[Help]) -> None:
    bad = []
    for h in helps:
        usage = next((ln for ln in h.text.splitlines() if "Usage:" in ln), "")
        for p in _options(h):
            if not _takes_value(p):
                continue
            block = _block(h, p)
            if not p.metavar:
                bad.append(f"{h.name} {p.opts[0]}: no metavar")
            elif block is None or f" {p.metavar} " not in f" {block} ":
                bad.append(f"{h.name} {p.opts[0]}: metavar {p.metavar!r} not shown: {block!r}")
        for p in _arguments(h):
            shown = p.metavar or (p.name or "").upper()
            if shown != shown.upper() or not p.metavar:
                bad.append(f"{h.name} argument {p.name}: no metavar in capitals ({p.metavar!r})")
            elif shown not in usage:
                bad.append(f"{h.name} argument {p.name}: {shown!r} not on the usage line {usage!r}")
    assert not bad, "values without an operator's metavar:\n" + "\n".join(bad)


def test_the_help_quoted_in_the_docs_is_what_migplan_prints(helps: list[Help]) -> None:
    """docs/README.md quotes `migplan export mig-parted -h` (up to its "...", as a terminal of 80 columns or more
    prints it): the words quoted are the words printed (the runner wraps at 80 columns, a terminal at 78)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "README.md").read_text()
    quoted = " ".join(page.split("$ migplan export mig-parted -h\n", 1)[1].split("\n...\n", 1)[0].split())
    printed = " ".join(next(h for h in helps if h.words == ("export", "mig-parted")).text.split())
    assert len(quoted) > 300 and printed.startswith(quoted), f"{quoted}\n!=\n{printed}"
