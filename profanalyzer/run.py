"""`run(source, options) -> Run`: the one pipeline every entry point calls.

    source -> read (a trace, a run folder, a log dir, or a compiled program:
              analysis.read_trace) -> attribute once (analysis.attribute ->
              Attributed, holding the run's one classify cache,
              classify.Memo) -> analyse (analysis.analyze_attributed) -> rules
              (findings.run_rules) -> what a firing rule needs (Rule.needs:
              "memory" reads the HBM use, then the rules run again) -> Run

A saved `analyze --json` document is an input too: it is read back (typed and
self-checked), its rules run again only when a selection is given. The CLI
(`analyze`, `check`, `compare`), the notebook API, the MCP server, the fleet's
per-file task and `compare.load_document` all call `run`; consumers of the
attributed trace (the trace export, the notebook's per-core steps) read
`Run.attributed` instead of attributing again. No other module calls the
analysis stages (tests/test_architecture.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from profanalyzer.documents import is_analysis_document, result_document
from profanalyzer.model import Analysis, Findings

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed
    from profanalyzer.trace import Trace

__all__ = ["Run", "RunOptions", "run"]


@dataclass(frozen=True)
class RunOptions:
    chip: str | None = None  # chip generation; overrides the trace's device_type_string
    jobs: int | None = None  # host files decoded in parallel (default: one per core)
    progress: object = None  # callable(done, total, label) after each host file
    memory: bool = False  # read HBM use whether or not a rule needs it (--memory)
    host_activity: bool = False  # read the host planes' dispatch/input lines (--host-activity)
    top_ops: int = 30
    select: tuple[str, ...] = ()  # rule code prefixes to run (all when empty)
    ignore: tuple[str, ...] = ()  # rule code prefixes to skip
    #: The name the analysis gives its input, when it is not the path read
    #: (a URL read through a temporary local copy); None: the path.
    label: str | None = None
    #: Called with the trace once it is read, before the analysis (the CLI's
    #: status line and its input hash start then). Not called for a saved document.
    on_read: Callable[[Trace], None] | None = None


@dataclass(frozen=True, eq=False)
class Run:
    """One analysed input: its Analysis, the Findings of its rules and,
    when it was a trace or a program (not a saved document), the attributed
    trace the analysis was computed from."""

    analysis: Analysis
    findings: Findings
    attributed: Attributed | None = None

    def document(self) -> dict:
        """The `profanalyze analyze --json` document."""
        return result_document(self.analysis, self.findings)


def run(source: str | os.PathLike, options: RunOptions = RunOptions()) -> Run:
    """Read, attribute, analyse and run the rules over `source` (see the
    module doc). Raises a ProfanalyzerError (InputError for bad input)."""
    from profanalyzer.findings import load_analysis, run_rules

    path = Path(source)
    if is_analysis_document(path):
        a, f = load_analysis(path)
        if options.select or options.ignore:
            f = run_rules(a, options.select, options.ignore)
        return Run(a, f, None)

    from profanalyzer.analyze.analysis import (
        AnalysisOptions,
        analyze_attributed,
        attribute,
        read_trace,
    )
    from profanalyzer.classify import Memo

    aopts = AnalysisOptions(chip=options.chip, top_ops=options.top_ops, jobs=options.jobs, progress=options.progress,
                            memory=options.memory, host_activity=options.host_activity)
    trace = read_trace(path, aopts)
    if options.on_read is not None:
        options.on_read(trace)
    att = attribute(trace, Memo())  # the run's one classify cache, kept by the Attributed it builds
    a = analyze_attributed(att, aopts)
    if options.label is not None and options.label != os.fspath(source):
        a = replace(a, source=options.label)
    f = run_rules(a, options.select, options.ignore)
    if a.memory is None and "memory" in _needs(f):
        from profanalyzer.analyze.memory import trace_memory

        mem = trace_memory(trace)
        if mem.peak_bytes is not None:  # the cards state the headroom in bytes
            a = replace(a, memory=mem)
            f = run_rules(a, options.select, options.ignore)
    return Run(a, f, att)


def _needs(findings: Findings) -> set[str]:
    """What the rules whose findings fired need read (Rule.needs)."""
    from profanalyzer.findings import all_rules

    fired = {r.code for r in findings.recommendations}
    return {n for r in all_rules() if r.code in fired for n in r.needs}
