"""`run(source, options) -> Run`: the one pipeline every entry point calls.

    open (read.source.open_source: the input's one open; a saved document,
          a compiled program or a capture, told from the bytes read)
    -> read (read.trace.read_trace: a capture's planes, or a program
          replayed into its predicted step, in memory; the Trace keeps the
          Source as its `reads`, asked later for programs, counter lines,
          host lines and allocator activity)
    -> attribute once (analysis.attribute -> Attributed, holding the run's
          one classify cache, classify.Memo)
    -> analyse (analysis.analyze_attributed)
    -> rules (findings.run_rules)
    -> what a firing rule needs (Rule.needs: "memory" reads the HBM use,
          from the same bytes, then the rules run again)
    -> extras (what the options ask beside the findings: the what-if
          re-timing of levers, the calibration over a history of runs, the
          exported window of --trace-out; typed fields of the Run) -> Run

The phases are named (PHASES); `RunOptions.on_phase(name, seconds)` is
called as each ends (`analyze --timings` prints them, with the render the
command adds). `run_analysis` runs the phases up to the analysis alone (no rules). A saved
`analyze --json` document is an input too: it is read back (typed and
self-checked), its rules run again only when a selection is given. The CLI
(`analyze`, `check`, `compare`), the notebook API, the MCP server, the fleet's
per-file task and `compare.load_document` all call `run`; the trace export is
built from the attributed trace in the extras phase (`Run.window`), the
notebook's per-core steps read `Run.attributed` instead of attributing again,
and the report's input hash is
`Run.source.sha256()`. No other module calls the analysis stages, and no stage
after the read imports a reader (tests/test_architecture.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from profanalyzer.core.errors import InputError
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import result_document
from profanalyzer.model.findings import Findings
from profanalyzer.read.source import Source, open_source

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed
    from profanalyzer.findings.verify import Calibration
    from profanalyzer.findings.whatif import WhatIf
    from profanalyzer.model.trace import Trace
    from profanalyzer.model.window import TraceWindow

__all__ = ["PHASES", "Run", "RunOptions", "run", "run_analysis"]

#: The phases of a run, in order; a run passes through those its input takes. A saved document: open,
#: read (the document read back and self-checked), rules (only with a selection), extras. A trace or a
#: program: open, read, attribute, analyze, rules, needs (only when a firing rule needs more read),
#: extras.
PHASES = ("open", "read", "attribute", "analyze", "rules", "needs", "extras")


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
    #: `--what-if`: the levers (comma-separated) to re-time the step with, applied together -> Run.what_if
    what_if: str | None = None
    #: `--history`: a folder of saved runs to calibrate the rules' predictions over, with this one -> Run.calibration
    history: str | None = None
    #: `--trace-out` (`--steps`): the steps to export as a trace, () for the representative one -> Run.window;
    #: None: no export
    trace_steps: tuple[int, ...] | None = None
    #: Called as each phase of PHASES ends, with its name and its wall-clock seconds (`--timings`)
    on_phase: Callable[[str, float], None] | None = None


@dataclass(frozen=True, eq=False)
class Run:
    """One analysed input: its Analysis, the Findings of its rules and,
    when it was a trace or a program (not a saved document), the attributed
    trace the analysis was computed from."""

    analysis: Analysis
    findings: Findings
    attributed: Attributed | None = None
    #: the input, opened once (its label, kind, bytes and hash); None: a Run assembled from records
    source: Source | None = None
    #: the levers of RunOptions.what_if re-timed together (findings.whatif); None: not asked
    what_if: WhatIf | None = None
    #: the rules' predictions over RunOptions.history and this run (findings.verify); None: not asked
    calibration: Calibration | None = None
    #: the steps of RunOptions.trace_steps as tracks and events (analyze.window), rendered by
    #: report.registry.WINDOW_RENDERERS; None: not asked, or a saved document (no trace to export)
    window: TraceWindow | None = None

    def document(self) -> dict:
        """The `profanalyze analyze --json` document."""
        return result_document(self.analysis, self.findings)


def run(source: str | os.PathLike | Source, options: RunOptions = RunOptions()) -> Run:
    """Open, read, attribute, analyse and run the rules over `source` (see the
    module doc). Raises a ProfanalyzerError (InputError for bad input)."""
    from profanalyzer.findings.engine import load_analysis, run_rules

    phase = _Phases(options.on_phase)
    with phase("open"):
        src = source if isinstance(source, Source) else open_source(source)
    if src.kind == "document":
        if options.trace_steps is not None:
            raise InputError(f"{src.label}: --trace-out needs the trace itself, not a saved analysis")
        with phase("read"):
            a, f = load_analysis(src.path, src.document)
        if options.select or options.ignore:
            with phase("rules"):
                f = run_rules(a, options.select, options.ignore)
        with phase("extras"):
            return _with_extras(Run(a, f, None, src), options)
    att, a = _analysed(src, options, phase)
    with phase("rules"):
        f = run_rules(a, options.select, options.ignore)
    if a.memory is None and "memory" in _needs(f):
        from profanalyzer.analyze.memory import trace_memory

        with phase("needs"):
            mem = trace_memory(att.trace)
            if mem.peak_bytes is not None:  # the cards state the headroom in bytes
                a = replace(a, memory=mem)
                f = run_rules(a, options.select, options.ignore)
    with phase("extras"):
        return _with_extras(Run(a, f, att, src), options)


class _Phases:
    """Times each phase of a run and hands its name and seconds to RunOptions.on_phase as it ends."""

    def __init__(self, hook: Callable[[str, float], None] | None) -> None:
        self.hook = hook

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        assert name in PHASES, name
        start = time.perf_counter()
        try:
            yield
        finally:  # a phase that fails is reported too, up to where it failed
            if self.hook is not None:
                self.hook(name, time.perf_counter() - start)


def _with_extras(r: Run, options: RunOptions) -> Run:
    """The extras phase: what the options ask beside the findings, as typed fields of the Run."""
    if options.what_if is None and options.history is None and options.trace_steps is None:
        return r
    from pathlib import Path

    from profanalyzer.analyze.window import exported_window
    from profanalyzer.findings.verify import calibration
    from profanalyzer.findings.whatif import parse_levers, what_if

    w = what_if(r.analysis, r.findings, parse_levers(options.what_if)) if options.what_if is not None else None
    label = Path(options.label or (r.source.label if r.source is not None else r.analysis.source)).name
    c = calibration(options.history, label, r.analysis, r.findings) if options.history is not None else None
    win = (exported_window(r.attributed, r.analysis, options.trace_steps)
           if options.trace_steps is not None and r.attributed is not None else None)
    return replace(r, what_if=w, calibration=c, window=win)


def run_analysis(source: str | os.PathLike | Source, options: RunOptions = RunOptions()) -> Analysis:
    """The phases of `run` up to the analysis (open, read, attribute, analyse): no rules, so nothing read for
    them (the library's and the tests' entry for the analysis alone)."""
    phase = _Phases(options.on_phase)
    with phase("open"):
        src = source if isinstance(source, Source) else open_source(source)
    if src.kind == "document":
        from profanalyzer.findings.engine import load_analysis

        with phase("read"):
            return load_analysis(src.path, src.document)[0]
    return _analysed(src, options, phase)[1]


def _analysed(src: Source, options: RunOptions, phase: _Phases) -> tuple[Attributed, Analysis]:
    from profanalyzer.analyze.analysis import (
        AnalysisOptions,
        analyze_attributed,
        attribute,
    )
    from profanalyzer.classify import Memo
    from profanalyzer.read.trace import read_trace

    aopts = AnalysisOptions(chip=options.chip, top_ops=options.top_ops, jobs=options.jobs, progress=options.progress,
                            memory=options.memory, host_activity=options.host_activity)
    # `progress` is typed object in RunOptions; its contract is load_trace's callable
    progress = cast("Callable[[int, int, str], None] | None", options.progress)
    with phase("read"):
        trace = read_trace(src, chip=options.chip, jobs=options.jobs, progress=progress)
    if options.on_read is not None:
        options.on_read(trace)
    with phase("attribute"):
        att = attribute(trace, Memo())  # the run's one classify cache, kept by the Attributed it builds
    with phase("analyze"):
        a = analyze_attributed(att, aopts)
        if options.label is not None and options.label != src.label:
            a = replace(a, source=options.label)
    return att, a


def _needs(findings: Findings) -> set[str]:
    """What the rules whose findings fired need read (Rule.needs)."""
    from profanalyzer.findings.engine import all_rules

    fired = {r.code for r in findings.recommendations}
    return {n for r in all_rules() if r.code in fired for n in r.needs}
