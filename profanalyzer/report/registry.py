"""The renderers, one family: each is a `Renderer` (a name, a file suffix,
`render(run, options) -> str`) in `RENDERERS`, which the CLI's outputs, the
notebook and the MCP server read. Adding an output format is one entry here.

A renderer reads a run's `analysis` and `findings` (any object that has
them: `profanalyzer.pipeline.run.Run`, the notebook's `LoadedAnalysis` through
`Rendered`) and the `RenderOptions` of the output; it never reaches into the
analysis, the rules or their registry (each finding carries its rule's doc).
The format modules are imported when a renderer runs (jinja2 only for HTML).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import result_document
from profanalyzer.model.findings import Findings

__all__ = ["RENDERERS", "RenderOptions", "Rendered", "Renderer", "renderer"]


class Rendered(Protocol):
    """What a renderer reads: an analysis and the findings of its rules."""

    @property
    def analysis(self) -> Analysis: ...

    @property
    def findings(self) -> Findings | None: ...


@dataclass(frozen=True)
class RenderOptions:
    """Per-output settings; each renderer reads the ones it uses."""

    command_line: str = "profanalyze"  # html: the report footer's command
    input_sha256: str = "not computed"  # html: the input's hash in the footer
    timestamp: str | None = None  # html: stamped when given (off: byte-identical reports)
    trace_markers: Mapping[str, str] | None = None  # html: where --trace-out put each rule's marker
    top: int = 10  # terminal: top ops shown
    by_scope: int | None = None  # terminal: name-scope table to this depth
    extra: Mapping[str, object] = field(default_factory=dict)  # json: keys added (what_if, calibration)
    extra_lines: tuple[str, ...] = ()  # markdown, terminal: what-if and calibration lines


class Renderer(Protocol):
    @property
    def name(self) -> str: ...  # the format's name (--write NAME=FILE, RENDERERS' key)

    @property
    def suffix(self) -> str: ...  # the file suffix of its output

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str: ...


@dataclass(frozen=True)
class _Json:
    name: str = "json"
    suffix: str = ".json"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        """The `analyze --json` document: sorted keys, indented."""
        a, f = run.analysis, run.findings
        doc = result_document(a, f) if f is not None else a.to_dict()
        return json.dumps({**doc, **options.extra}, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class _Markdown:
    name: str = "markdown"
    suffix: str = ".md"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.markdown import render_markdown

        md = render_markdown(run.analysis, run.findings)
        if options.extra_lines:
            md += "\n#### What-if and calibration\n\n```\n" + "\n".join(options.extra_lines) + "\n```\n"
        return md


@dataclass(frozen=True)
class _Html:
    name: str = "html"
    suffix: str = ".report.html"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        from profanalyzer.report.html import render_html

        return render_html(run.analysis, run.findings, command_line=options.command_line,
                           input_sha256=options.input_sha256, timestamp=options.timestamp,
                           trace_markers=options.trace_markers)


@dataclass(frozen=True)
class _Terminal:
    name: str = "terminal"
    suffix: str = ".txt"

    def render(self, run: Rendered, options: RenderOptions = RenderOptions()) -> str:
        """The terminal summary (control characters are the caller's to neutralise)."""
        from profanalyzer.report.terminal import format_summary

        text = format_summary(run.analysis, top=options.top, findings=run.findings, by_scope=options.by_scope)
        return "\n".join([text, *options.extra_lines]) + "\n"


#: Every output format by name.
RENDERERS: Mapping[str, Renderer] = {r.name: r for r in (_Json(), _Markdown(), _Html(), _Terminal())}


def renderer(name: str) -> Renderer:
    """The renderer called `name` (KeyError naming the known ones otherwise)."""
    try:
        return RENDERERS[name]
    except KeyError:
        raise KeyError(f"no renderer {name!r} (known: {', '.join(RENDERERS)})") from None
