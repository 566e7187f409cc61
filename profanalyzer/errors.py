"""Typed errors. The CLI maps each to one line on stderr and an exit code.

Exit codes (stable; scripts and CI rely on them):
  0  success
  1  a gate or budget failed (`check`, `--fail-on`)
  2  usage error or unreadable / unsupported input
  3  internal invariant violated (a bug: the report would not reconcile)
  4  unexpected internal error (a bug; PROFANALYZE_DEBUG=1 shows the traceback)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_INPUT = 2
EXIT_INVARIANT = 3
EXIT_INTERNAL = 4


class ProfanalyzerError(Exception):
    """Base class: carries a one-line, user-facing message."""

    exit_code = EXIT_INPUT


class InputError(ProfanalyzerError):
    """The input cannot be read as an XProf profile (missing, truncated, wrong type)."""


class NoTpuPlanesError(InputError):
    """The profile holds no TPU device planes (CPU-only or GPU capture)."""


class InvariantError(ProfanalyzerError):
    """An internal consistency check failed (e.g. buckets do not sum to step time)."""

    exit_code = EXIT_INVARIANT
