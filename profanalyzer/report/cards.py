"""The notebook's HTML cards (Jupyter shows them: report/registry.py's
NOTEBOOK_RENDERERS for an analysis and its findings, FINDING_RENDERERS for one
finding; `profanalyzer` registers them with IPython's display). Everything
from the trace is escaped.
"""

from __future__ import annotations

from html import escape

from profanalyzer.core.format import ms, pct
from profanalyzer.core.shell import finding_lines
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.report.summary import headline

__all__ = ["analysis_card", "finding_card"]


_STYLE = ("font-family:system-ui,sans-serif;border:1px solid #ccc;border-radius:6px;padding:8px 12px;"
          "max-width:56em;line-height:1.35")


def finding_card(f: Finding, rank: int | None = None) -> str:
    """One recommendation as the report's card shows it: code, title,
    severity, saving, evidence, actions, guide section."""
    head = f"{'#' + str(rank) + ' ' if rank else ''}{f.code} — {f.title}"
    parts = [
        f'<div class="profanalyze-finding" style="{_STYLE}">',
        f"<div><b>{escape(head)}</b> <span>[{escape(f.severity)}]</span></div>",
        f"<div>saves about {escape(ms(f.estimated_saving_ps))} ms/step ({escape(pct(f.estimated_saving_fraction))})"
        f" · lever {escape(f.lever)} · guide {escape(f.guide_section)}</div>",
    ]
    if f.evidence:
        parts.append("<div>Evidence:<ul>" + "".join(f"<li>{escape(e)}</li>" for e in f.evidence) + "</ul></div>")
    change = finding_lines(f)
    if change:
        parts.append('<div>What to change:<pre style="white-space:pre-wrap;overflow-wrap:anywhere"><code>'
                     + escape("\n".join(change)) + "</code></pre></div>")
    if f.merged_note:
        parts.append(f"<div><i>{escape(f.merged_note)}</i></div>")
    parts.append("</div>")
    return "".join(parts)


def analysis_card(a: Analysis, findings: Findings | None = None, top: int = 8) -> str:
    """The summary card: source, chip, steps, the headline (step time and where it went), MFU, the
    largest buckets, exposed communication; the findings' titles when given."""
    mfu = a.utilisation.mfu
    rows = sorted(a.breakdown.items(), key=lambda kv: -kv[1].fraction)[:top]
    parts = [
        f'<div class="profanalyze-analysis" style="{_STYLE}">',
        f"<div><b>profanalyze</b> · {escape(a.source)}</div>",
        f"<div>{escape(a.hardware.name)} · {len(a.hosts)} host(s) · {a.tensorcores} TensorCores · "
        f"{a.steps.kept} of {a.steps.count} steps kept</div>",
    ]
    parts.append(f"<div><b>{escape(headline(a))}</b></div>")
    parts.append(f"<div>MFU {escape(pct(mfu))} · exposed communication {escape(ms(a.communication.exposed_total_ps))} ms "
                 f"({escape(pct(a.communication.exposed_total_fraction))}) · recompute {escape(pct(a.remat.fraction))}</div>")
    parts.append('<table style="border-collapse:collapse;margin-top:4px"><tr><th align="left">bucket</th>'
                 '<th align="right">ms/step</th><th align="right">share</th></tr>')
    for b, s in rows:
        parts.append(f'<tr><td>{escape(b)}</td><td align="right">{escape(ms(s.ps))}</td><td align="right">{escape(pct(s.fraction))}</td></tr>')
    parts.append("</table>")
    if findings is not None:
        recs = findings.recommendations
        if recs:
            parts.append("<div style=\"margin-top:4px\">Recommendations:<ol>" + "".join(
                f"<li>{escape(f.code)} — {escape(f.title)}: {escape(ms(f.estimated_saving_ps))} ms/step "
                f"({escape(pct(f.estimated_saving_fraction))})</li>" for f in recs) + "</ol></div>")
        else:
            parts.append("<div>No tuning lever passed its threshold.</div>")
    parts.append("</div>")
    return "".join(parts)
