"""The one shell form of a finding's change: its LIBTPU_INIT_ARGS flags (a
list, as the JSON document holds them) and its other change lines.

Every renderer (terminal, Markdown, HTML, `explain`, notebooks) prints flags
through this module, so what a user pastes into bash is the same everywhere:

    export LIBTPU_INIT_ARGS="${LIBTPU_INIT_ARGS:+$LIBTPU_INIT_ARGS }\\
    --flag_a=1 \\
    --flag_b=2"

(`flags_block`: one flag a line; inside double quotes a backslash-newline
is removed, so the continuation lines carry no indentation) or, where lines
are indented for display (the terminal), the same assignment on one line
(`flags_line`). Either appends to the flags already set, if any, and sets
exactly `" ".join(flags)` when none are.

Comment lines (`# ...`) are the only lines a renderer may wrap
(`wrap_comment`): at word boundaries, each piece a comment again, nothing
dropped. Imports the standard library only.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence

__all__ = ["ENV", "check_flag", "check_action", "flags_block", "flags_line", "change_lines", "finding_lines", "wrap_comment"]

#: The environment variable libtpu reads its flags from.
ENV = "LIBTPU_INIT_ARGS"
#: What the existing value contributes: itself and one space, or nothing.
_PREFIX = f"${{{ENV}:+${ENV} }}"
_FLAG = re.compile(r"--[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:/+-]*)?")


def check_flag(flag: str) -> str:
    """A flag as one shell word that needs no quoting inside double quotes
    (`--name` or `--name=value`); ValueError otherwise."""
    if not _FLAG.fullmatch(flag):
        raise ValueError(f"not a LIBTPU_INIT_ARGS flag (--name[=value], no spaces or shell characters): {flag!r}")
    return flag


def check_action(line: str) -> str:
    """A change line other than flags: one line (a renderer wraps it, never
    the rule), and no LIBTPU_INIT_ARGS text (flags go in the flag list)."""
    if "\n" in line or "\r" in line:
        raise ValueError(f"a change line spans lines (write one item per line, renderers wrap): {line!r}")
    if ENV in line:
        raise ValueError(f"{ENV} in a change line: pass the flags as a list instead: {line!r}")
    return line


def flags_block(flags: Sequence[str]) -> list[str]:
    """The multi-line assignment, one flag a line (Markdown, HTML, explain)."""
    if not flags:
        return []
    body = [f"{f} \\" for f in flags[:-1]] + [f'{flags[-1]}"']
    return [f'export {ENV}="{_PREFIX}\\', *body]


def flags_line(flags: Sequence[str]) -> str:
    """The same assignment on one line (where lines carry a display margin)."""
    return f'export {ENV}="{_PREFIX}{" ".join(flags)}"' if flags else ""


def change_lines(flags: Sequence[str], actions: Iterable[str], one_line: bool = False) -> list[str]:
    """A finding's change as lines: the flag assignment first, then the other
    change lines in the rule's order."""
    head = ([flags_line(flags)] if one_line else flags_block(flags)) if flags else []
    return [*head, *actions]


def wrap_comment(line: str, width: int) -> list[str]:
    """A `# ...` comment longer than `width` as several comment lines, split
    at spaces (words are never cut: a word longer than the width stays
    whole); any other line unchanged (code is never wrapped)."""
    s = line.lstrip()
    if not s.startswith("#") or len(line) <= width:
        return [line]
    indent = line[: len(line) - len(s)]
    m = re.match(r"#+\s*", s)
    lead = m.group(0) if m else "# "
    text = s[len(lead):]
    pieces = textwrap.wrap(text, width=max(20, width - len(indent) - len(lead) - 2), break_long_words=False,
                           break_on_hyphens=False)
    if not pieces:
        return [line]
    return [indent + lead + pieces[0], *(indent + lead + "  " + p for p in pieces[1:])]


def finding_lines(finding, one_line: bool = False) -> list[str]:
    """`change_lines` of a Finding (its `flags` and `actions`); an action of
    an older saved document that spans lines gives one line each."""
    actions = [s for a in finding.actions for s in (str(a).splitlines() or [""])]
    return change_lines(tuple(getattr(finding, "flags", ()) or ()), actions, one_line)
