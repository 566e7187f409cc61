"""`read_trace(source) -> Trace`: the read stage as `run()` calls it.

A capture's Source is decoded into a Trace (profanalyzer.read.xspace.build: only
the lines the analysis uses, ANALYSIS_LINES); a compiled program (HLO text or
proto, an XLA dump) is replayed into its predicted step first, built in memory
(profanalyzer.read.compiled). Either way the Trace keeps the Source as its
`reads`, so every later read of the input comes from the bytes read here.

Imports: read.source, read.xspace.build, read.compiled, trace, errors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

from profanalyzer.core.errors import InputError
from profanalyzer.model.trace import ANALYSIS_LINES, Trace
from profanalyzer.read.source import Source, open_source

__all__ = ["read_trace"]


def read_trace(source: Source | str | os.PathLike, *, chip: str | None = None, jobs: int | None = None,
               progress: Callable[[int, int, str], None] | None = None,
               lines: Collection[str] | None = ANALYSIS_LINES) -> Trace:
    """The Trace of a capture or a compiled program (see the module doc); a
    path is opened first. InputError (one line) for a saved document or bad input."""
    src = source if isinstance(source, Source) else open_source(source)
    if src.kind == "document":
        raise InputError(f"{src.label}: a saved analysis document, not a trace")
    if src.kind == "program":
        from profanalyzer.read.compiled import load_program_trace

        return load_program_trace(src, chip=chip, lines=lines)
    from profanalyzer.read.xspace.build import load_trace

    return load_trace(src, chip=chip, jobs=jobs, progress=progress, lines=lines)
