"""README.md documents the command line: every command of the click group has
a `### \\`profanalyze NAME\\`` section, and every option of the command (each of
its spellings, e.g. `-o` and `--output`) appears in that section. The make
targets the README names exist, and the stale statements it once made do not
come back."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from profanalyzer.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """Command name -> the text of its `### `profanalyze NAME`` section."""
    out = {}
    heads = list(re.finditer(r"^### `profanalyze ([a-z-]+)`\s*$", text, flags=re.M))
    for m in heads:
        nxt = re.compile(r"^#{1,3} ", flags=re.M).search(text, m.end())
        out[m.group(1)] = text[m.end(): nxt.start() if nxt else len(text)]
    return out


SECTIONS = _sections(README)
COMMANDS = sorted(cli.commands)


def _mentions(text: str, opt: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


def test_the_group_has_the_commands_the_readme_documents():
    assert COMMANDS == sorted(SECTIONS), "README command sections and the click group differ"
    assert {"analyze", "info", "compare", "check", "fleet", "synth"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_is_documented(name):
    assert name in SECTIONS, f"README.md has no section ### `profanalyze {name}`"


@pytest.mark.parametrize(
    "name,opt",
    [(name, opt) for name in COMMANDS for p in cli.commands[name].params if isinstance(p, click.Option) for opt in p.opts + p.secondary_opts],
)
def test_option_is_documented(name, opt):
    assert _mentions(SECTIONS.get(name, ""), opt), f"{opt} of `profanalyze {name}` is not in its README section"


@pytest.mark.parametrize(
    "name,arg",
    [(name, (p.metavar or p.name or "").upper()) for name in COMMANDS for p in cli.commands[name].params if isinstance(p, click.Argument)],
)
def test_argument_is_documented(name, arg):
    assert arg in SECTIONS.get(name, ""), f"argument {arg} of `profanalyze {name}` is not in its README section"


def test_the_scan_finds_options():
    # The parametrisations above are not empty by accident.
    assert _mentions(SECTIONS["analyze"], "--select") and not _mentions("--selection", "--select")
    assert sum(1 for p in cli.commands["fleet"].params if isinstance(p, click.Option)) >= 10


def test_make_targets_in_the_readme_exist():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.M))
    named = set(re.findall(r"`make ([a-z][\w-]*)", README))
    assert named and named <= targets, f"README names missing make targets: {sorted(named - targets)}"
    assert "lint" in named


def test_no_stale_statements():
    errors_doc = (ROOT / "profanalyzer" / "errors.py").read_text(encoding="utf-8")
    assert "--fail-on" not in errors_doc and "--fail-on" not in README  # the budget key is fail_on
    assert "arrive with" not in (ROOT / "heuristics" / "README.md").read_text(encoding="utf-8")
    assert "templates_compiled" not in README
