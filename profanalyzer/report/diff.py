"""Renderers of a Comparison (profanalyzer.compare.comparison): terminal text and Markdown, and the
labels, cuts and row choices the HTML page (profanalyzer.report.diff_html) shares with them.

    format_text(c) -> str
    render_diff_markdown(c) -> str
    render_diff_html(c) -> str          # report/diff_html.py: one self-contained file, like the report

All deterministic. The HTML reuses the report's CSS (`_styles.html.j2`), its
jinja2 environment (autoescape on, StrictUndefined) and its bucket colours and
labels; the template only formats a typed `DiffContext` built here.
Trace-derived text (paths, op names, tf_ops) is escaped by jinja2 in HTML and
by `md_escape` / `code_span` in Markdown.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from profanalyzer.core.format import gib, ms, noise, pct, pts, signed_ms, signed_pct
from profanalyzer.core.stats import MIN_EFFECT, NOISE_K, SHORTFALL_RATIO
from profanalyzer.core.vocab import IDLE_CAUSE_LABELS
from profanalyzer.report import context as _context
from profanalyzer.report import svg

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.compare.comparison and profanalyzer.findings.verify)
    from profanalyzer.compare.comparison import Comparison, ExposedChange, ShareChange
    from profanalyzer.compare.opmatch import OpChange
    from profanalyzer.findings.verify import RuleCheck

#: Rows of each op table in Markdown / terminal.
OPS_SHORT = 5
#: Widths op names and tf_ops are cut to in the op tables (Markdown and HTML).
NAME_CUT = 70
TF_OP_CUT = 90

COLLECTIVE_LABELS = {**_context.COLLECTIVE_LABELS, "unknown": "Unknown collective", "total": "All collectives"}


# ---------------------------------------------------------------------------
# Number formatting
# ---------------------------------------------------------------------------


# profanalyzer.core.format's, under the names this module's callers use.
sms = signed_ms
spct = signed_pct
noise_text = noise


def cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


_OP_PARAMS = re.compile(r"\[[^/]*\]:?$")


def cut_mid(text: str, n: int) -> str:
    """Long tf_ops differ at their end: drop the last op's parameters
    (`dot_general[dimension_numbers=...]:` -> `dot_general`), then keep the
    head and the tail."""
    text = " ".join(str(text).split())
    text = _OP_PARAMS.sub("", text).rstrip(":") or text
    if len(text) <= n:
        return text
    head = n // 4
    return text[:head] + "…" + text[len(text) - (n - head - 1):]


def tone(verdict: str) -> str:
    return {"regression": "bad", "improvement": "good"}.get(verdict, "neutral")


def bucket_label(b: str) -> str:
    return svg.BUCKET_LABELS.get(b, b)


def coll_label(t: str) -> str:
    return COLLECTIVE_LABELS.get(t, t)


def engine_change(e: ExposedChange, arrow: str = "->") -> str:
    if e.type == "total":
        return ""
    if e.base_engine == e.new_engine:
        return e.base_engine or "-"
    return f"{e.base_engine or '-'} {arrow} {e.new_engine or '-'}"


def buckets_shown(c: Comparison) -> list[tuple[str, ShareChange]]:
    """Buckets present on either side (all 11 when every one is non-zero)."""
    return [(b, s) for b, s in c.buckets.items() if s.base_ps or s.new_ps or b == "idle"]


def exposed_shown(c: Comparison) -> list[tuple[str, ExposedChange]]:
    rows = [(t, e) for t, e in c.exposed.items() if t != "total"]
    if "total" in c.exposed:
        rows.append(("total", c.exposed["total"]))
    return rows


def ratio_text(r: float | None) -> str:
    return f"{r:.2f}x" if r is not None else "-"


def pools_text(c: RuleCheck) -> str:
    """`matmul_bf16 claimed 21.8 ms, fell 20.1 ms; ...` (the pools a rule claimed)."""
    parts = []
    for key, p in c.buckets.items():
        name = key.split(":", 1)[-1]
        moved = f"fell {ms(p.observed_ps)} ms" if p.observed_ps >= 0 else f"grew {ms(-p.observed_ps)} ms"
        parts.append(f"{name} claimed {ms(p.claimed_ps)} ms, {moved}")
    return "; ".join(parts)


def verification_lines(c: Comparison) -> list[str]:
    """One line per checked rule (terminal and Markdown share the wording)."""
    out = []
    for v in c.verification:
        shared = f", pulled with {', '.join(v.shared_with)}" if v.shared_with else ""
        out.append(
            f"{v.code} ({v.lever}, {v.status}{shared}): predicted {ms(v.predicted_ps)} ms, step {sms(-v.observed_ps)} ms"
            f" (credited {ms(v.attributed_ps)} ms), ratio {ratio_text(v.ratio)}: {v.verdict}"
        )
    return out


def shortfall_line(v: RuleCheck) -> str:
    return (f"{v.code} saved {ratio_text(v.ratio)} of its prediction ({ms(v.attributed_ps)} of {ms(v.predicted_ps)} ms, "
            f"under {SHORTFALL_RATIO:g}x): check the lever was applied as the finding's actions say")


# ---------------------------------------------------------------------------
# Terminal
# ---------------------------------------------------------------------------


def format_text(c: Comparison, ops: int = OPS_SHORT) -> str:
    st = c.step_time
    out = [f"base: {c.base.label}", f"new:  {c.new.label}", "", c.headline, ""]
    out.append(
        f"step time (mean of kept steps): {ms(st.base_ps)} -> {ms(st.new_ps)} ms, {sms(st.delta_ps)} ms ({spct(st.relative)}); "
        f"noise {noise_text(st.noise_ps)} ms (1 sigma), threshold {ms(st.threshold_ps)} ms: {st.verdict}"
    )
    out.append(f"step time (median): {ms(st.base_median_ps)} -> {ms(st.new_median_ps)} ms ({sms(st.median_delta_ps)} ms)")
    out.append("")
    out.append(f"{'bucket':<18}{'base ms':>10}{'new ms':>10}{'delta ms':>10}{'base':>8}{'new':>8}{'delta':>11}{'noise':>9}  verdict")
    for b, s in buckets_shown(c):
        out.append(
            f"{b:<18}{ms(s.base_ps):>10}{ms(s.new_ps):>10}{sms(s.delta_ps):>10}{pct(s.base_fraction):>8}{pct(s.new_fraction):>8}"
            f"{pts(s.delta_points):>11}{noise_text(s.noise_ps):>9}  {s.verdict}"
        )
    r = c.remat
    out.append(f"{'remat (overlaps)':<18}{ms(r.base_ps):>10}{ms(r.new_ps):>10}{sms(r.delta_ps):>10}{pct(r.base_fraction):>8}{pct(r.new_fraction):>8}{pts(r.delta_points):>11}{'-':>9}  {r.verdict}")
    for k, s in c.idle_causes.items():
        out.append(f"{'idle.' + k:<18}{ms(s.base_ps):>10}{ms(s.new_ps):>10}{sms(s.delta_ps):>10}{pct(s.base_fraction):>8}{pct(s.new_fraction):>8}{pts(s.delta_points):>11}{'-':>9}  {s.verdict}")
    out.append("")
    out.append(f"{'exposed comm':<18}{'base ms':>10}{'new ms':>10}{'delta ms':>10}{'base':>8}{'new':>8}{'delta':>11}  engine")
    for t, e in exposed_shown(c):
        s = e.exposed
        eng = engine_change(e)
        out.append(
            f"{t:<18}{ms(s.base_ps):>10}{ms(s.new_ps):>10}{sms(s.delta_ps):>10}{pct(s.base_fraction):>8}{pct(s.new_fraction):>8}{pts(s.delta_points):>11}  {eng}".rstrip()
        )
    u = c.utilisation.get("mfu")
    if u is not None and (u.base is not None or u.new is not None):
        out.append("")
        out.append(f"MFU: {pct(u.base)} -> {pct(u.new)} ({pts(u.delta)})")
    for k, v in c.memory.items():
        out.append(f"memory {k}: {gib(v.base)} -> {gib(v.new)} ({gib(v.delta, signed=True)})")
    if c.base.offload != c.new.offload:
        out.append(f"SparseCore offload: {c.base.offload or '-'} -> {c.new.offload or '-'}")
    out.append("")
    nf, vf = c.new_findings, c.vanished_findings
    out.append("findings: no change" if not nf and not vf else "findings:")
    for f in nf:
        out.append(f"  new       {f.code} {f.title} (~{ms(f.new_saving_ps)} ms/step)")
    for f in vf:
        out.append(f"  resolved  {f.code} {f.title}")
    if c.verification:
        out.append("")
        out.append("predicted vs observed (rules of BASE pulled in NEW):")
        out += [f"  {line}" for line in verification_lines(c)]
        out += [f"  SHORTFALL {shortfall_line(v)}" for v in c.verification if v.shortfall]
    elif c.verification_skipped:
        out.append(f"predicted vs observed: not checked ({c.verification_skipped})")
    for title, rows in (("slower ops", c.ops.slower), ("faster ops", c.ops.faster), ("ops entering the top lists", c.ops.entered), ("ops leaving the top lists", c.ops.left)):
        if not rows:
            continue
        out.append("")
        out.append(f"{title} (matched by tf_op + name without instruction numbers + bucket):")
        for o in rows[:ops]:
            out.append(f"  {_op_delta(o):>10} ms  {cut(o.bucket, 16):<16}  {cut(o.match_name, 32):<32}  {cut_mid(o.tf_op, 80)}")
    for n in c.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def _op_delta(o: OpChange) -> str:
    if o.delta_ps is not None:
        return sms(o.delta_ps)
    return ms(o.new_ps) if o.status == "entered" else ms(o.base_ps)


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def render_diff_markdown(c: Comparison, ops: int = OPS_SHORT) -> str:
    from profanalyzer.report.markdown import code_span, md_escape

    st = c.step_time
    out = [f"### profanalyze compare: {code_span(short_label(c.base.label))} → {code_span(short_label(c.new.label))}", ""]
    out.append(md_escape(c.headline, line_start=True))
    out.append("")
    out.append("| Metric | Base | New | Change | Verdict |")
    out.append("|---|--:|--:|--:|---|")
    out.append(
        f"| Step time (mean, ms) | {ms(st.base_ps)} | {ms(st.new_ps)} | {sms(st.delta_ps)} ({spct(st.relative)}; noise {noise_text(st.noise_ps)}) | **{st.verdict}** |"
    )
    out.append(f"| Step time (median, ms) | {ms(st.base_median_ps)} | {ms(st.new_median_ps)} | {sms(st.median_delta_ps)} | |")
    tot = c.exposed.get("total")
    if tot is not None:
        s = tot.exposed
        out.append(f"| Exposed communication | {pct(s.base_fraction)} | {pct(s.new_fraction)} | {pts(s.delta_points)} ({sms(s.delta_ps)} ms) | {s.verdict} |")
    r = c.remat
    out.append(f"| Remat | {pct(r.base_fraction)} | {pct(r.new_fraction)} | {pts(r.delta_points)} ({sms(r.delta_ps)} ms) | {r.verdict} |")
    u = c.utilisation.get("mfu")
    if u is not None:
        out.append(f"| MFU | {pct(u.base)} | {pct(u.new)} | {pts(u.delta)} | |")
    for k, mem in c.memory.items():
        out.append(f"| Memory {k} | {gib(mem.base)} | {gib(mem.new)} | {gib(mem.delta, signed=True)} | |")
    if c.base.offload != c.new.offload:
        out.append(f"| SparseCore offload | {md_escape(c.base.offload or '-')} | {md_escape(c.new.offload or '-')} | | |")
    out.append("")
    out.append("#### Buckets (ms per step)")
    out.append("")
    out.append("| Bucket | Base ms | New ms | Δ ms | Base | New | Δ | Verdict |")
    out.append("|---|--:|--:|--:|--:|--:|--:|---|")
    for b, s in buckets_shown(c):
        out.append(
            f"| {md_escape(bucket_label(b))} | {ms(s.base_ps)} | {ms(s.new_ps)} | {sms(s.delta_ps)} | {pct(s.base_fraction)} | {pct(s.new_fraction)} | {pts(s.delta_points)} | {s.verdict} |"
        )
    if c.idle_causes:
        out.append("")
        out.append("#### Idle by cause (ms per step)")
        out.append("")
        out.append("| Cause | Base ms | New ms | Δ ms | Base | New | Δ | Verdict |")
        out.append("|---|--:|--:|--:|--:|--:|--:|---|")
        for k, s in c.idle_causes.items():
            out.append(
                f"| {md_escape(IDLE_CAUSE_LABELS.get(k, k))} | {ms(s.base_ps)} | {ms(s.new_ps)} | {sms(s.delta_ps)} | {pct(s.base_fraction)} | {pct(s.new_fraction)} | {pts(s.delta_points)} | {s.verdict} |"
            )
    out.append("")
    out.append("#### Exposed communication per collective type")
    out.append("")
    out.append("| Type | Engine | Base ms | New ms | Δ ms | Δ | Verdict |")
    out.append("|---|---|--:|--:|--:|--:|---|")
    for t, e in exposed_shown(c):
        s = e.exposed
        eng = md_escape(engine_change(e, "→"))
        out.append(f"| {md_escape(coll_label(t))} | {eng} | {ms(s.base_ps)} | {ms(s.new_ps)} | {sms(s.delta_ps)} | {pts(s.delta_points)} | {s.verdict} |")
    out.append("")
    out.append("#### Findings")
    out.append("")
    nf, vf = c.new_findings, c.vanished_findings
    if not nf and not vf:
        out.append("_No finding appeared or vanished._")
    for f in nf:
        out.append(f"- **new** {md_escape(f.code)}: {md_escape(f.title)} (about {ms(f.new_saving_ps)} ms/step)")
    for f in vf:
        out.append(f"- **resolved** {md_escape(f.code)}: {md_escape(f.title)}")
    out.append("")
    out.append("#### Predicted vs observed")
    out.append("")
    if c.verification:
        out.append("| Rule | Lever | Status | Predicted ms | Step Δ ms | Credited ms | Ratio | Beyond noise | Claimed pools | Verdict |")
        out.append("|---|---|---|--:|--:|--:|--:|---|---|---|")
        for v in c.verification:
            shared = f" (with {md_escape(', '.join(v.shared_with))})" if v.shared_with else ""
            out.append(
                f"| {md_escape(v.code)} | {md_escape(v.lever)} | {v.status}{shared} | {ms(v.predicted_ps)} | {sms(-v.observed_ps)} | "
                f"{ms(v.attributed_ps)} | {ratio_text(v.ratio)} | {'no' if v.within_noise else 'yes'} | {md_escape(pools_text(v))} | {v.verdict} |"
            )
        for v in c.verification:
            if v.shortfall:
                out.append("")
                out.append(f"> **Shortfall:** {md_escape(shortfall_line(v))}")
    else:
        out.append(f"_No rule of BASE was pulled in NEW{' (' + md_escape(c.verification_skipped) + ')' if c.verification_skipped else ''}._")
    for title, rows in (
        ("Slower ops", c.ops.slower),
        ("Faster ops", c.ops.faster),
        ("Ops entering the top lists (NEW only)", c.ops.entered),
        ("Ops leaving the top lists (BASE only)", c.ops.left),
    ):
        if not rows:
            continue
        out.append("")
        out.append(f"#### {title}")
        out.append("")
        out.append("| Op | Bucket | tf_op | Base ms | New ms | Δ ms |")
        out.append("|---|---|---|--:|--:|--:|")
        for o in rows[:ops]:
            out.append(
                f"| {code_span(cut(o.match_name, NAME_CUT))} | {md_escape(bucket_label(o.bucket))} | {md_escape(cut_mid(o.tf_op, TF_OP_CUT))} | "
                f"{ms(o.base_ps)} | {ms(o.new_ps)} | {sms(o.delta_ps)} |"
            )
    out.append("")
    out.append(
        f"<sub>noise = one sigma of the step-time delta from the per-step spread (standard error of the mean of each side); "
        f"significant when above max({NOISE_K:g} sigma, {MIN_EFFECT:.1%} of the base step). Ops matched by tf_op, instruction name without numbers and bucket.</sub>"
    )
    return "\n".join(out) + "\n"


def short_label(label: str) -> str:
    s = str(label).rstrip("/\\").replace("\\", "/")
    return s.rsplit("/", 1)[-1] or s
