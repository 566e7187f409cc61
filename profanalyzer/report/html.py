"""The self-contained HTML report.

    render_html(analysis, findings, command_line=..., input_sha256=...) -> str

One file, no external requests: CSS, SVG charts and a few lines of vanilla JS
are inline; no fonts, images or CDNs. jinja2 autoescape is on for every
template and the template only formats a typed `ReportContext`
(`profanalyzer.report.context`). Output is deterministic: the same inputs give
the same bytes (no timestamp unless one is passed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache

import jinja2

from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Findings, RuleDoc
from profanalyzer.report import templating
from profanalyzer.report.context import build_context
from profanalyzer.report.views import ReportContext

TEMPLATE = "report.html.j2"
TEMPLATE_DIR = templating.TEMPLATE_DIR


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The environment of every report template (HTML report, diff, fleet),
    with their code compiled at install time (`templating`)."""
    return templating.environment()


def render_context(ctx: ReportContext) -> str:
    return environment().get_template(TEMPLATE).render(r=ctx)


def render_html(
    analysis: Analysis,
    findings: Findings | None,
    *,
    command_line: str,
    input_sha256: str,
    timestamp: str | None = None,
    docs: Mapping[str, RuleDoc] | None = None,
    trace_markers: Mapping[str, str] | None = None,
) -> str:
    """The report as one HTML document (str).

    `findings` None: the recommendations section says they were not computed.
    `docs`: rule docs by code, overriding the doc each finding carries
    (Finding.doc, set by its rule). `trace_markers`: per rule code, where the trace
    export (`--trace-out`) put its marker (shown on its card).
    """
    ctx = build_context(analysis, findings, command_line=command_line, input_sha256=input_sha256, timestamp=timestamp, docs=docs)
    if trace_markers:
        cards = tuple(replace(c, trace_marker=trace_markers.get(c.code, "")) for c in ctx.recs.cards)
        ctx = replace(ctx, recs=replace(ctx.recs, cards=cards))
    return render_context(ctx)
