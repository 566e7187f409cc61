"""The renderers, one family: each is a `Renderer` (a name, a file suffix,
`render(run, options) -> str`) in `RENDERERS`, which the CLI's outputs, the
notebook and the MCP server read. Adding an output format is one entry here.

A renderer reads a run's `analysis` and `findings` (any object that has
them: `profanalyzer.pipeline.run.Run`, the notebook's `LoadedAnalysis` through
`Rendered`) and the `RenderOptions` of the output; it never reaches into the
analysis, the rules or their registry (each finding carries its rule's doc).
The format modules are imported when a renderer runs (jinja2 only for HTML).

The other subjects have their family each, with the same shape
(`SubjectRenderer`: a name, a suffix, `render(subject, options) -> str`):
`COMPARISON_RENDERERS` (`compare`: a Comparison), `CHECK_RENDERERS` (`check`:
a CheckReport), `FLEET_RENDERERS` (`fleet`: a FleetResult), `INFO_RENDERERS`
and `PROGRAM_INFO_RENDERERS` (`info`: a TraceInfo, a ProgramSummary) and
`EXPLANATION_RENDERERS` (`explain`: a RuleExplanation) and
`WINDOW_RENDERERS` (`analyze --trace-out`: a run's exported window and its
findings, `Windowed`). The notebook's HTML cards: `NOTEBOOK_RENDERERS` (an
analysis and its findings, a `Rendered`) and `FINDING_RENDERERS` (one Finding).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import result_document
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.model.window import TraceWindow

if TYPE_CHECKING:  # the subjects of the other families (built by compare/, fleet/, api/ and findings/)
    from profanalyzer.api.info import ProgramSummary, TraceInfo
    from profanalyzer.compare.budget import CheckReport
    from profanalyzer.compare.comparison import Comparison
    from profanalyzer.findings.explain import RuleExplanation
    from profanalyzer.fleet.records import FleetResult

__all__ = ["CHECK_RENDERERS", "COMPARISON_RENDERERS", "EXPLANATION_RENDERERS", "FINDING_RENDERERS", "FLEET_RENDERERS",
           "INFO_RENDERERS", "NOTEBOOK_RENDERERS", "PROGRAM_INFO_RENDERERS", "RENDERERS", "WINDOW_RENDERERS", "RenderOptions", "Rendered", "Renderer",
           "SubjectRenderer", "Windowed", "renderer", "window_markers"]


class Extra(Protocol):
    """A typed extra of a run beside its findings (the what-if re-timing, the calibration over a history):
    its JSON form (its lines: report/extras_text.py)."""

    def to_dict(self) -> dict: ...


class Rendered(Protocol):
    """What a renderer reads: an analysis, the findings of its rules and the run's extras (None: not asked)."""

    @property
    def analysis(self) -> Analysis: ...

    @property
    def findings(self) -> Findings | None: ...

    @property
    def what_if(self) -> Extra | None: ...  # --what-if: the levers re-timed together

    @property
    def calibration(self) -> Extra | None: ...  # --history: the rules' predictions over past runs


@dataclass(frozen=True)
class RenderOptions:
    """Per-output settings; each renderer reads the ones it uses."""

    command_line: str = "profanalyze"  # html: the report footer's command
    input_sha256: str = "not computed"  # html: the input's hash in the footer
    timestamp: str | None = None  # html: stamped when given (off: byte-identical reports)
    trace_markers: Mapping[str, str] | None = None  # html: where --trace-out put each rule's marker
    top: int = 10  # terminal: top ops shown
    by_scope: int | None = None  # terminal: name-scope table to this depth


class Renderer(Protocol):
    """What a renderer has. The renderers below are stateless classes (`__slots__ = ()`: nothing to set on
    them), not dataclasses, whose creation would cost the command ~8 ms of start-up for 17 of them."""

    @property
    def name(self) -> str: ...  # the format's name (--write NAME=FILE, RENDERERS' key)

    @property
    def suffix(self) -> str: ...  # the file suffix of its output

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str: ...


def _extras(run: Rendered) -> list[tuple[str, Extra]]:
    """The run's extras that were asked, by their JSON key, in output order (what-if, then calibration)."""
    return [(k, x) for k, x in (("what_if", run.what_if), ("calibration", run.calibration)) if x is not None]


def _extra_lines(run: Rendered) -> list[str]:
    from profanalyzer.report.extras_text import format_calibration, format_what_if

    lines: dict[str, Callable[[Any], list[str]]] = {"what_if": format_what_if, "calibration": format_calibration}
    return [line for k, x in _extras(run) for line in lines[k](x)]


class _Json:
    __slots__ = ()
    name = "json"
    suffix = ".json"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        """The `analyze --json` document: sorted keys, indented."""
        a, f = run.analysis, run.findings
        doc = result_document(a, f) if f is not None else a.to_dict()
        extras = {k: x.to_dict() for k, x in _extras(run)}
        return json.dumps({**doc, **extras}, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


class _Markdown:
    __slots__ = ()
    name = "markdown"
    suffix = ".md"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.markdown import render_markdown

        md = render_markdown(run.analysis, run.findings)
        if lines := _extra_lines(run):
            md += "\n#### What-if and calibration\n\n```\n" + "\n".join(lines) + "\n```\n"
        return md


class _Html:
    __slots__ = ()
    name = "html"
    suffix = ".report.html"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.html import render_html

        return render_html(run.analysis, run.findings, command_line=options.command_line,
                           input_sha256=options.input_sha256, timestamp=options.timestamp,
                           trace_markers=options.trace_markers)


class _Terminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        """The terminal summary (control characters are the caller's to neutralise)."""
        from profanalyzer.report.terminal import format_summary

        text = format_summary(run.analysis, top=options.top, findings=run.findings, by_scope=options.by_scope)
        return "\n".join([text, *_extra_lines(run)]) + "\n"


#: Every output format by name.
RENDERERS: Mapping[str, Renderer] = {r.name: r for r in (_Json(), _Markdown(), _Html(), _Terminal())}


def renderer(name: str) -> Renderer:
    """The renderer called `name` (KeyError naming the known ones otherwise)."""
    try:
        return RENDERERS[name]
    except KeyError:
        raise KeyError(f"no renderer {name!r} (known: {', '.join(RENDERERS)})") from None


# ---------------------------------------------------------------------------
# The other subjects: a comparison, a check, a fleet
# ---------------------------------------------------------------------------

S = TypeVar("S", contravariant=True)


class SubjectRenderer(Protocol[S]):
    """One output format of a subject other than a run."""

    @property
    def name(self) -> str: ...

    @property
    def suffix(self) -> str: ...

    def render(self, subject: S, options: RenderOptions = RenderOptions()) -> str: ...


def _json_text(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


class _RecordJson:
    """The subject's record as deterministic JSON (sorted keys, indented), as `--json` writes it."""

    __slots__ = ()
    name = "json"
    suffix = ".json"

    def render(self, subject: Comparison | CheckReport | FleetResult | TraceInfo | ProgramSummary | RuleExplanation,
               options: RenderOptions = RenderOptions()) -> str:
        return _json_text(subject.to_dict())


class _ComparisonMarkdown:
    __slots__ = ()
    name = "markdown"
    suffix = ".md"

    def render(self, c: Comparison, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.diff import render_diff_markdown

        return render_diff_markdown(c)


class _ComparisonHtml:
    __slots__ = ()
    name = "html"
    suffix = ".diff.html"

    def render(self, c: Comparison, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.diff_html import render_diff_html

        return render_diff_html(c)


class _ComparisonTerminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, c: Comparison, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.diff import format_text

        return format_text(c) + "\n"


class _CheckJunit:
    __slots__ = ()
    name = "junit"
    suffix = ".xml"

    def render(self, report: CheckReport, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.junit import junit_xml

        return junit_xml(report)


class _FleetHtml:
    __slots__ = ()
    name = "html"
    suffix = ".fleet.html"

    def render(self, result: FleetResult, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.fleet_html import render_fleet_html

        return render_fleet_html(result, command_line=options.command_line, timestamp=options.timestamp)


class _FleetTerminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, result: FleetResult, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.fleet_text import format_fleet_summary

        return format_fleet_summary(result) + "\n"


#: `profanalyze compare`'s outputs: --json, --markdown, -o (HTML), the terminal summary.
COMPARISON_RENDERERS: Mapping[str, SubjectRenderer[Comparison]] = {
    r.name: r for r in (_RecordJson(), _ComparisonMarkdown(), _ComparisonHtml(), _ComparisonTerminal())}
#: `profanalyze check`'s outputs: --json, --junit (its terminal lines are the gate's verdict, printed as it goes).
CHECK_RENDERERS: Mapping[str, SubjectRenderer[CheckReport]] = {r.name: r for r in (_RecordJson(), _CheckJunit())}
#: `profanalyze fleet`'s outputs: --json, -o (HTML), the terminal summary.
FLEET_RENDERERS: Mapping[str, SubjectRenderer[FleetResult]] = {
    r.name: r for r in (_RecordJson(), _FleetHtml(), _FleetTerminal())}


class _InfoTerminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, info: TraceInfo, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.info_text import format_info

        return format_info(info) + "\n"


class _ProgramInfoTerminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, info: ProgramSummary, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.info_text import format_program_info

        return format_program_info(info) + "\n"


class _ExplanationTerminal:
    __slots__ = ()
    name = "terminal"
    suffix = ".txt"

    def render(self, e: RuleExplanation, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.explain_text import format_explanation

        return format_explanation(e) + "\n"


#: `profanalyze info`'s outputs of a capture: --json, the terminal text.
INFO_RENDERERS: Mapping[str, SubjectRenderer[TraceInfo]] = {r.name: r for r in (_RecordJson(), _InfoTerminal())}
#: `profanalyze info`'s outputs of a compiled program: --json, the terminal text.
PROGRAM_INFO_RENDERERS: Mapping[str, SubjectRenderer[ProgramSummary]] = {
    r.name: r for r in (_RecordJson(), _ProgramInfoTerminal())}
#: `profanalyze explain`'s outputs: --json, the terminal text.
EXPLANATION_RENDERERS: Mapping[str, SubjectRenderer[RuleExplanation]] = {
    r.name: r for r in (_RecordJson(), _ExplanationTerminal())}


class Windowed(Protocol):
    """What the trace export renders: a run's exported window (Run.window) and the findings it marks."""

    @property
    def window(self) -> TraceWindow | None: ...

    @property
    def findings(self) -> Findings | None: ...


class _Perfetto:
    __slots__ = ()
    name = "perfetto"
    suffix = ".trace.json"  # the CLI gzips it when the file name ends in .gz

    def render(self, run: Windowed, options: RenderOptions = RenderOptions()) -> str:
        """The Chrome / Perfetto trace of the window, compact JSON (report/perfetto.py); ValueError for a
        run whose window was not exported (RunOptions.trace_steps)."""
        from profanalyzer.report.perfetto import trace_json

        if run.window is None:
            raise ValueError("no exported window: run with RunOptions(trace_steps=...) (--trace-out)")
        return trace_json(run.window, run.findings)


#: `profanalyze analyze --trace-out`'s output: the annotated Chrome / Perfetto trace of the exported window.
WINDOW_RENDERERS: Mapping[str, SubjectRenderer[Windowed]] = {r.name: r for r in (_Perfetto(),)}


def window_markers(run: Windowed, dest: str) -> dict[str, str]:
    """Per rule code, where WINDOW_RENDERERS["perfetto"] put its marker in the trace written to `dest`
    (RenderOptions.trace_markers: the HTML cards show it); {} for a run without an exported window."""
    from profanalyzer.report.perfetto import marker_notes

    return marker_notes(run.window, run.findings, dest) if run.window is not None else {}


class _AnalysisCard:
    __slots__ = ()
    name = "card"
    suffix = ".card.html"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        """The notebook's summary card of an analysis and its findings' titles (report/cards.py)."""
        from profanalyzer.report.cards import analysis_card

        return analysis_card(run.analysis, run.findings)


class _FindingCard:
    __slots__ = ()
    name = "card"
    suffix = ".card.html"

    def render(self, f: Finding, options: RenderOptions = RenderOptions()) -> str:
        """The notebook's card of one recommendation (report/cards.py)."""
        from profanalyzer.report.cards import finding_card

        return finding_card(f)


#: The notebook's card of an analysis (`profanalyzer.load(...)` shown in Jupyter).
NOTEBOOK_RENDERERS: Mapping[str, SubjectRenderer[Rendered]] = {r.name: r for r in (_AnalysisCard(),)}
#: The notebook's card of one finding (`a.findings.recommendations[0]` shown in Jupyter).
FINDING_RENDERERS: Mapping[str, SubjectRenderer[Finding]] = {r.name: r for r in (_FindingCard(),)}
