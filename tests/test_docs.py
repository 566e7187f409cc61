"""The documentation: `docs/` builds with `mkdocs build --strict`; its
generated pages (the CLI reference from the commands' `--help`, the rules
from the registry: tools/make_docs.py) are current; the CLI reference has a
`## \\`profanalyze NAME\\`` section per command of the click group, with every
spelling of every option; the make targets the README and the docs name
exist; the README stays a front door (at most 200 lines) and the stale
statements it once made do not come back."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from profanalyzer.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"
CLI_PAGE = (DOCS / "cli.md").read_text(encoding="utf-8")
ALL_DOCS = README + "".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md")))


def _sections(text: str) -> dict[str, str]:
    """Command name -> the text of its `### `profanalyze NAME`` section."""
    out = {}
    heads = list(re.finditer(r"^## `profanalyze ([a-z-]+)`\s*$", text, flags=re.M))
    for m in heads:
        nxt = re.compile(r"^#{1,3} ", flags=re.M).search(text, m.end())
        out[m.group(1)] = text[m.end(): nxt.start() if nxt else len(text)]
    return out


SECTIONS = _sections(CLI_PAGE)
COMMANDS = sorted(cli.commands)


def _mentions(text: str, opt: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


def test_the_group_has_the_commands_the_readme_documents():
    assert COMMANDS == sorted(SECTIONS), "docs/cli.md command sections and the click group differ"
    assert {"analyze", "info", "compare", "check", "fleet", "synth"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_command_is_documented(name):
    assert name in SECTIONS, f"docs/cli.md has no section ## `profanalyze {name}`"


@pytest.mark.parametrize(
    "name,opt",
    [(name, opt) for name in COMMANDS for p in cli.commands[name].params if isinstance(p, click.Option) for opt in p.opts + p.secondary_opts],
)
def test_option_is_documented(name, opt):
    assert _mentions(SECTIONS.get(name, ""), opt), f"{opt} of `profanalyze {name}` is not in its docs/cli.md section"


@pytest.mark.parametrize(
    "name,arg",
    [(name, (p.metavar or p.name or "").upper()) for name in COMMANDS for p in cli.commands[name].params if isinstance(p, click.Argument)],
)
def test_argument_is_documented(name, arg):
    assert arg in SECTIONS.get(name, ""), f"argument {arg} of `profanalyze {name}` is not in its docs/cli.md section"


def test_the_scan_finds_options():
    # The parametrisations above are not empty by accident.
    assert _mentions(SECTIONS["analyze"], "--select") and not _mentions("--selection", "--select")
    assert sum(1 for p in cli.commands["fleet"].params if isinstance(p, click.Option)) >= 10


def test_make_targets_in_the_readme_exist():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.M))
    named = set(re.findall(r"`make ([a-z][\w-]*)", ALL_DOCS))
    assert named and named <= targets, f"the docs name missing make targets: {sorted(named - targets)}"
    assert {"lint", "docs"} <= named


def test_no_stale_statements():
    errors_doc = (ROOT / "profanalyzer" / "core" / "errors.py").read_text(encoding="utf-8")
    assert "--fail-on" not in errors_doc and "--fail-on" not in ALL_DOCS  # the budget key is fail_on
    assert "arrive with" not in (ROOT / "heuristics" / "README.md").read_text(encoding="utf-8")
    assert "templates_compiled" not in ALL_DOCS


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= 200
    for page in re.findall(r"\]\((docs/[\w.-]+\.md)\)", README):
        assert (ROOT / page).exists(), page


def test_generated_pages_are_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_docs", ROOT / "tools" / "make_docs.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    want = mod.pages()
    stale = [name for name, make in want.items() if not (DOCS / name).exists() or (DOCS / name).read_text(encoding="utf-8") != make()]
    stale += [f"rules/{p.name} (no such rule)" for p in (DOCS / "rules").glob("*.md") if f"rules/{p.name}" not in want]
    assert not stale, f"docs/ is stale, run `make docs` (python tools/make_docs.py): {stale}"


def test_the_site_builds_strictly(tmp_path):
    import subprocess
    import sys

    pytest.importorskip("mkdocs", reason="mkdocs is a test extra (pyproject.toml); not installed here")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "site" / "rules" / "index.html").exists()
