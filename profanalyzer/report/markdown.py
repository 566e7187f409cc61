"""GitHub-flavoured Markdown summary for tickets.

    render_markdown(analysis, findings, max_recommendations=5) -> str

The same headline as the HTML report, the top recommendations (lever, code,
saving, the exact change: LIBTPU_INIT_ARGS flags as the multi-line shell
assignment of profanalyzer.core.shell, line for line as bash reads it) and the
bucket table; small enough to paste into an
issue. Deterministic. Trace-derived text (op names in evidence, the trace
name) is escaped so that no character of it acts as Markdown or HTML.
"""

from __future__ import annotations

import re

from profanalyzer.core.format import ms, pct
from profanalyzer.core.shell import finding_lines
from profanalyzer.core.vocab import LEVER_LABELS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Findings
from profanalyzer.report.sections import markdown_sections as _sections_md
from profanalyzer.report.summary import (
    bucket_rows,
    cores_text,
    exposed_comm,
    headline,
    remat_row,
)

#: Evidence lines shown per recommendation.
MAX_EVIDENCE = 3

_SPECIAL = re.compile(r"([\\`*_\[\]<>#!|~&$])")
_LINE_START = re.compile(r"^(\s*)(\d+)?([-+=.)])")


def md_escape(text: object, line_start: bool = False) -> str:
    """Escape untrusted text for inline Markdown (also safe in table cells):
    every Markdown/HTML-significant ASCII punctuation character gets a
    backslash and newlines become spaces; with `line_start` (the text begins
    a line or a list item) a leading list marker is neutralised too."""
    s = " ".join(str(text).split())
    s = _SPECIAL.sub(r"\\\1", s)
    m = _LINE_START.match(s) if line_start else None
    if m and (m.group(2) is None) == (m.group(3) in "-+="):
        s = f"{m.group(1)}{m.group(2) or ''}\\{m.group(3)}{s[m.end():]}"
    return s


def code_span(text: str) -> str:
    """Inline code that survives backticks and pipes in the text (pipes are
    escaped even in code spans inside GFM tables)."""
    s = " ".join(str(text).split()).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _fence(lines: list[str], lang: str = "") -> list[str]:
    body = "\n".join(lines)
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    f = "`" * max(3, longest + 1)
    return [f + lang, *lines, f]


def render_markdown(analysis: Analysis, findings: Findings | None, *, max_recommendations: int = 5) -> str:
    a = analysis
    t = a.steps.step_time_ps
    u = a.utilisation
    chip = a.hardware.name
    name = a.source.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or a.source
    exp_ps, exp_f = exposed_comm(a)
    idle = a.breakdown.get("idle")
    out: list[str] = []
    out.append(f"### profanalyze: {code_span(name)}")
    out.append("")
    if a.input_kind == "compiled_program":  # issue #25: a replayed compiled program
        out.append("**PREDICTED**: a compiled program, no TPU ran it; every time below is the compiler's estimate "
                   "at an assumed clock (see the notes).")
        out.append("")
    out.append(
        f"{md_escape(chip)} · {len(a.hosts)} host{'s' if len(a.hosts) != 1 else ''} · {md_escape(cores_text(a))} · "
        f"{a.steps.kept} of {a.steps.count} steps used ({md_escape(a.steps.source)})"
    )
    out.append("")
    spread = ("the one kept step" if a.steps.kept == 1 else f"{a.steps.kept} kept steps alike"
              if ms(t["min"]) == ms(t["max"]) else f"median; {ms(t['min'])}–{ms(t['max'])}")
    kpis = [f"**Step time {ms(t['median'])} ms** ({spread})"]
    kpis.append((f"MFU {pct(u.mfu)}" + (f", HFU {pct(u.hfu)}" if u.hfu is not None and abs(u.hfu - u.mfu) >= 5e-4 else "") + (f" (low confidence: FLOPs known for {pct(u.flops_coverage, 0)} of the compute)"
                                      if u.low_confidence else "")) if u.mfu is not None else "MFU unknown")
    kpis.append(f"exposed communication {pct(exp_f)} ({ms(exp_ps)} ms)")
    if idle is not None:
        kpis.append(f"idle {pct(idle.fraction)}")
    out.append(" · ".join(kpis))
    out.append("")
    if a.run_kind is not None:
        out.append(f"Run kind: **{md_escape(a.run_kind.kind)}** ({md_escape('; '.join(a.run_kind.reasons[:2]))})")
        out.append("")
    ho = a.host_offload
    if ho is not None and ho.ps > 0:
        out.append(f"Host offload: the core waits {pct(ho.fraction)} of the step for {ho.bytes_per_step / 1e9:.2f} GB "
                   f"per step" + (f" ({ho.gbps:.1f} GB/s)" if ho.gbps else ""))
        out.append("")
    for x in a.assumptions:
        out.append(f"_Assumed: {md_escape(x)}_")
        out.append("")
    if a.capture is not None and a.capture.issues:
        out.append(f"_Capture {md_escape(a.capture.verdict)}: {md_escape('; '.join(i.message for i in a.capture.issues))}_")
        out.append("")
    out.append(md_escape(headline(a), line_start=True))
    out.append("")

    out.append("#### Top recommendations")
    out.append("")
    if findings is None:
        out.append("_Recommendations were not computed._")
    elif not findings.recommendations:
        out.append("_No tuning lever's estimated saving passed its threshold: no change recommended._")
    else:
        recs = findings.recommendations[: max(0, max_recommendations)]
        out.append("| # | Lever | Code | Recommendation | Saving ms/step | Saving |")
        out.append("|--:|---|---|---|--:|--:|")
        for i, f in enumerate(recs, 1):
            out.append(
                f"| {i} | {md_escape(LEVER_LABELS.get(f.lever, f.lever))} | {md_escape(f.code)} | {md_escape(f.title)} | "
                f"{ms(f.estimated_saving_ps)} | {pct(f.estimated_saving_fraction)} |"
            )
        for i, f in enumerate(recs, 1):
            out.append("")
            out.append(
                f"**{i}. {md_escape(f.title)}** ({md_escape(f.code)}; {md_escape(f.guide_section)}) — "
                f"about {ms(f.estimated_saving_ps)} ms/step ({pct(f.estimated_saving_fraction)})"
            )
            out.append("")
            for e in f.evidence[:MAX_EVIDENCE]:
                out.append(f"- {md_escape(e, line_start=True)}")
            if len(f.evidence) > MAX_EVIDENCE:
                out.append(f"- _… {len(f.evidence) - MAX_EVIDENCE} more in the HTML report_")
            for src in f.sources:
                out.append(f"- source: {md_escape(src, line_start=True)}")
            change = finding_lines(f)
            if change:
                out.append("")
                # flags and comments only: the block is a shell script
                shell = bool(f.flags) and all(x.lstrip().startswith("#") for x in f.actions)
                out.extend(_fence(change, "bash" if shell else ""))
        more = len(findings.recommendations) - len(recs)
        if more > 0:
            out.append("")
            out.append(f"_{more} more recommendation{'s' if more != 1 else ''} in the HTML report._")
    out.append("")

    out.append("#### Step breakdown (mean per kept step)")
    out.append("")
    out.append("| Bucket | ms/step | Share |")
    out.append("|---|--:|--:|")
    for r in bucket_rows(a):
        if r.fraction <= 0 and r.key != "idle":
            continue
        out.append(f"| {md_escape(r.label)} | {r.ms} | {r.pct} |")
    out.append(f"| **Step (mean)** | **{ms(t['mean'])}** | **100.0%** |")
    rr = remat_row(a)
    out.append(f"| _Recompute (overlaps the buckets)_ | {rr.ms} | {rr.pct} |")
    out.append("")
    out.extend(_sections_md(a, md_escape))
    dropped = a.steps.dropped
    if dropped:
        out.append("Dropped steps: " + "; ".join(f"step {d.number} ({md_escape(d.reason)})" for d in dropped) + ".")
        out.append("")
    out.append(f"<sub>profanalyze {md_escape(a.tool_version)}; buckets are exclusive self time, mean per kept step over TensorCores.</sub>")
    return "\n".join(out) + "\n"
