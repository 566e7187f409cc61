"""Typed errors. The CLI maps each to one line on stderr and an exit code.

Exit codes (stable; scripts and CI rely on them):
  0  success
  1  a gate failed: a budget, regression or fail_on check of `check`
  2  usage error, unreadable / unsupported input, or an unwritable output path
  3  internal invariant violated (a bug: the report would not reconcile)
  4  unexpected internal error (a bug; PROFANALYZE_DEBUG=1 shows the traceback)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_INPUT = 2
EXIT_INVARIANT = 3
EXIT_INTERNAL = 4


#: Characters that end a line (str.splitlines); messages quote trace-derived
#: names (files, planes, lines), which may contain any of them.
_LINE_BREAKS = str.maketrans({c: "\\" + n for c, n in (("\n", "n"), ("\r", "r"))} | {c: " " for c in "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


class ProfanalyzerError(Exception):
    """Base class: carries a one-line, user-facing message (line breaks in
    it are escaped, so the CLI's error is always exactly one line)."""

    exit_code = EXIT_INPUT

    def __str__(self) -> str:
        return super().__str__().translate(_LINE_BREAKS)


class InputError(ProfanalyzerError):
    """The input cannot be read as an XProf profile (missing, truncated, wrong type)."""


class NoTpuPlanesError(InputError):
    """The profile holds no TPU device planes (CPU-only or GPU capture)."""


class OutputError(ProfanalyzerError):
    """An output path cannot be written (missing folder, permissions, disk
    full) or would overwrite an input file."""


class InvariantError(ProfanalyzerError):
    """An internal consistency check failed (e.g. buckets do not sum to step time)."""

    exit_code = EXIT_INVARIANT
