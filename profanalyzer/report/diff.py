"""Renderers of a Comparison (profanalyzer.compare): terminal text, Markdown, HTML.

    format_text(c) -> str
    render_diff_markdown(c) -> str
    render_diff_html(c) -> str          # one self-contained file, like the report

All deterministic. The HTML reuses the report's CSS (`_styles.html.j2`), its
jinja2 environment (autoescape on, StrictUndefined) and its bucket colours and
labels; the template only formats a typed `DiffContext` built here.
Trace-derived text (paths, op names, tf_ops) is escaped by jinja2 in HTML and
by `md_escape` / `code_span` in Markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from profanalyzer.format import gib, ms, noise, pct, pts, signed_ms, signed_pct
from profanalyzer.report import context as _context
from profanalyzer.report import svg
from profanalyzer.report.views import Kpi
from profanalyzer.stats import MIN_EFFECT, NOISE_K, SHORTFALL_RATIO
from profanalyzer.vocab import IDLE_CAUSE_COLOURS, IDLE_CAUSE_LABELS

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.compare and profanalyzer.verify)
    from profanalyzer.compare import Comparison, ExposedChange, ShareChange
    from profanalyzer.opmatch import OpChange
    from profanalyzer.verify import RuleCheck

TEMPLATE = "diff.html.j2"
#: Rows of each op table in Markdown / terminal.
OPS_SHORT = 5
NAME_CUT = 70
TF_OP_CUT = 90

COLLECTIVE_LABELS = {**_context.COLLECTIVE_LABELS, "unknown": "Unknown collective", "total": "All collectives"}


# ---------------------------------------------------------------------------
# Number formatting
# ---------------------------------------------------------------------------


# profanalyzer.format's, under the names this module's callers use.
sms = signed_ms
spct = signed_pct
noise_text = noise


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


_OP_PARAMS = re.compile(r"\[[^/]*\]:?$")


def _cut_mid(text: str, n: int) -> str:
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


def _buckets_shown(c: Comparison) -> list[tuple[str, ShareChange]]:
    """Buckets present on either side (all 11 when every one is non-zero)."""
    return [(b, s) for b, s in c.buckets.items() if s.base_ps or s.new_ps or b == "idle"]


def _exposed_shown(c: Comparison) -> list[tuple[str, ExposedChange]]:
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
    for b, s in _buckets_shown(c):
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
    for t, e in _exposed_shown(c):
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
            out.append(f"  {_op_delta(o):>10} ms  {_cut(o.bucket, 16):<16}  {_cut(o.match_name, 32):<32}  {_cut_mid(o.tf_op, 80)}")
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
    out = [f"### profanalyze compare: {code_span(_name(c.base.label))} → {code_span(_name(c.new.label))}", ""]
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
    for b, s in _buckets_shown(c):
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
    for t, e in _exposed_shown(c):
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
                f"| {code_span(_cut(o.match_name, NAME_CUT))} | {md_escape(bucket_label(o.bucket))} | {md_escape(_cut_mid(o.tf_op, TF_OP_CUT))} | "
                f"{ms(o.base_ps)} | {ms(o.new_ps)} | {sms(o.delta_ps)} |"
            )
    out.append("")
    out.append(
        f"<sub>noise = one sigma of the step-time delta from the per-step spread (standard error of the mean of each side); "
        f"significant when above max({NOISE_K:g} sigma, {MIN_EFFECT:.1%} of the base step). Ops matched by tf_op, instruction name without numbers and bucket.</sub>"
    )
    return "\n".join(out) + "\n"


def _name(label: str) -> str:
    s = str(label).rstrip("/\\").replace("\\", "/")
    return s.rsplit("/", 1)[-1] or s


# ---------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    label: str
    base: str
    new: str


@dataclass(frozen=True)
class DeltaRow:
    key: str
    label: str
    colour: str
    base_ms: str
    new_ms: str
    delta_ms: str
    base_pct: str
    new_pct: str
    delta_pts: str
    noise: str
    verdict: str
    tone: str
    neg_w: str  # diverging bar widths (of half the cell)
    pos_w: str
    extra: str  # engine change (communication)
    zero: bool


@dataclass(frozen=True)
class FindingRow:
    code: str
    lever: str
    title: str
    status: str
    base: str
    new: str
    tone: str


@dataclass(frozen=True)
class CheckRow:
    code: str
    lever: str
    status: str
    predicted: str
    step_delta: str
    credited: str
    ratio: str
    beyond_noise: str
    pools: str
    verdict: str
    tone: str
    shortfall: str  # the call-out sentence ('' when none)


@dataclass(frozen=True)
class OpRow:
    name: str
    name_full: str
    tf_op: str
    tf_op_full: str
    bucket: str
    base_ms: str
    new_ms: str
    delta_ms: str
    delta_pct: str
    names: str


@dataclass(frozen=True)
class OpTable:
    id: str
    title: str
    note: str
    rows: tuple[OpRow, ...]


@dataclass(frozen=True)
class DiffContext:
    tool_version: str
    title: str
    base_name: str
    new_name: str
    base_label: str
    new_label: str
    headline: str
    verdict: str
    kpis: tuple[Kpi, ...]
    facts: tuple[Fact, ...]
    buckets: tuple[DeltaRow, ...]
    remat: DeltaRow
    comm: tuple[DeltaRow, ...]
    findings: tuple[FindingRow, ...]
    op_tables: tuple[OpTable, ...]
    op_key: str
    method: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    checks: tuple[CheckRow, ...] = ()
    checks_skipped: str = ""
    idle: tuple[DeltaRow, ...] = ()  # the idle bucket by cause
    memory: tuple[Fact, ...] = ()  # memory deltas (label, base, new) when both sides read memory


def _w(x: float, top: float) -> str:
    if top <= 0:
        return "0%"
    return f"{min(1.0, abs(x) / top) * 100:.1f}%"


def _row(key: str, label: str, colour: str, s: ShareChange, top: float, extra: str = "", noise: bool = True) -> DeltaRow:
    return DeltaRow(
        key=key,
        label=label,
        colour=colour,
        base_ms=ms(s.base_ps),
        new_ms=ms(s.new_ps),
        delta_ms=sms(s.delta_ps),
        base_pct=pct(s.base_fraction),
        new_pct=pct(s.new_fraction),
        delta_pts=pts(s.delta_points),
        noise=noise_text(s.noise_ps) if noise else "-",
        verdict=s.verdict,
        tone=tone(s.verdict),
        neg_w=_w(s.delta_ps, top) if s.delta_ps < 0 else "0%",
        pos_w=_w(s.delta_ps, top) if s.delta_ps > 0 else "0%",
        extra=extra,
        zero=not s.base_ps and not s.new_ps,
    )


def _op_rows(rows: tuple[OpChange, ...]) -> tuple[OpRow, ...]:
    out = []
    for o in rows:
        names = ", ".join(o.base_names) + " → " + ", ".join(o.new_names) if o.base_names and o.new_names else ", ".join(o.base_names or o.new_names)
        out.append(
            OpRow(
                name=_cut(o.match_name, NAME_CUT),
                name_full=o.match_name,
                tf_op=_cut_mid(o.tf_op, TF_OP_CUT),
                tf_op_full=o.tf_op,
                bucket=bucket_label(o.bucket) if o.bucket else "-",
                base_ms=ms(o.base_ps),
                new_ms=ms(o.new_ps),
                delta_ms=sms(o.delta_ps),
                delta_pct=spct(o.delta_fraction),
                names=_cut(names, NAME_CUT),
            )
        )
    return tuple(out)


def build_diff_context(c: Comparison) -> DiffContext:
    st = c.step_time
    tot = c.exposed.get("total")
    u = c.utilisation.get("mfu")
    idle = c.buckets.get("idle")
    kpis = [
        Kpi("kpi-step", "Step time", spct(st.relative), f"{ms(st.base_ps)} → {ms(st.new_ps)} ms · noise {noise_text(st.noise_ps)} ms · {st.verdict}", tone(st.verdict)),
    ]
    if tot is not None:
        s = tot.exposed
        kpis.append(Kpi("kpi-exposed", "Exposed communication", pts(s.delta_points), f"{pct(s.base_fraction)} → {pct(s.new_fraction)} · {s.verdict}", tone(s.verdict)))
    kpis.append(Kpi("kpi-remat", "Remat", pts(c.remat.delta_points), f"{pct(c.remat.base_fraction)} → {pct(c.remat.new_fraction)} · {c.remat.verdict}", tone(c.remat.verdict)))
    if u is not None:
        t = "neutral" if u.delta is None or abs(u.delta) < 0.005 else ("good" if u.delta > 0 else "bad")
        kpis.append(Kpi("kpi-mfu", "MFU", pts(u.delta), f"{pct(u.base)} → {pct(u.new)}", t))
    if idle is not None:
        kpis.append(Kpi("kpi-idle", "Idle", pts(idle.delta_points), f"{pct(idle.base_fraction)} → {pct(idle.new_fraction)} · {idle.verdict}", tone(idle.verdict)))

    facts = (
        Fact("Source", c.base.source, c.new.source),
        Fact("Chip", c.base.chip, c.new.chip),
        Fact("Hosts / TensorCores", f"{c.base.hosts} / {c.base.tensorcores}", f"{c.new.hosts} / {c.new.tensorcores}"),
        Fact("Steps kept", f"{c.base.steps_kept} of {c.base.steps_count}", f"{c.new.steps_kept} of {c.new.steps_count}"),
        Fact("Step time median", f"{ms(st.base_median_ps)} ms", f"{ms(st.new_median_ps)} ms"),
        Fact("Step time SEM", f"{noise_text(st.base_sem_ps)} ms", f"{noise_text(st.new_sem_ps)} ms"),
        Fact("SparseCore offload", c.base.offload or "-", c.new.offload or "-"),
        Fact("profanalyze", c.base.tool_version, c.new.tool_version),
    )

    shown = _buckets_shown(c)
    ex = _exposed_shown(c)
    top = bar_scale(c)
    buckets = tuple(_row(b, bucket_label(b), svg.colour(b), s, top) for b, s in shown)
    remat = _row("remat", "Recompute (remat, overlaps the buckets)", "#777777", c.remat, top, noise=False)
    ctop = top
    comm = tuple(
        _row(
            t,
            coll_label(t),
            svg.colour(t) if t != "total" else "#BB5566",
            e.exposed,
            ctop,
            extra=engine_change(e, "→"),
        )
        for t, e in ex
    )
    frows = tuple(
        FindingRow(
            f.code,
            f.lever,
            f.title,
            {"new": "new", "vanished": "resolved", "persisting": "still there"}[f.status],
            f"{ms(f.base_saving_ps)} ms ({pct(f.base_saving_fraction)})" if f.base_saving_ps is not None else "-",
            f"{ms(f.new_saving_ps)} ms ({pct(f.new_saving_fraction)})" if f.new_saving_ps is not None else "-",
            {"new": "bad", "vanished": "good"}.get(f.status, "neutral"),
        )
        for f in c.findings
    )
    floor = f"changes under {c.ops.min_delta_fraction:.1%} of the base step are not listed"
    tables = (
        OpTable("ops-slower", "Slower ops", floor, _op_rows(c.ops.slower)),
        OpTable("ops-faster", "Faster ops", floor, _op_rows(c.ops.faster)),
        OpTable("ops-entered", "Entered the top lists (NEW only)", "in NEW's top/remat/kernel op lists only: below BASE's smallest listed op there, or new", _op_rows(c.ops.entered)),
        OpTable("ops-left", "Left the top lists (BASE only)", "in BASE's op lists only: below NEW's smallest listed op there, or gone", _op_rows(c.ops.left)),
    )
    return DiffContext(
        tool_version=_tool_version(),
        title=f"profanalyze compare: {_name(c.base.label)} → {_name(c.new.label)}"
              + (" (PREDICTED)" if c.basis == "predicted" else ""),
        base_name=_name(c.base.label),
        new_name=_name(c.new.label),
        base_label=c.base.label,
        new_label=c.new.label,
        headline=c.headline,
        verdict=st.verdict,
        kpis=tuple(kpis),
        facts=facts,
        buckets=buckets,
        remat=remat,
        comm=comm,
        findings=frows,
        op_tables=tables,
        op_key=c.ops.key,
        method=tuple(sorted(c.method.items())),
        notes=c.notes,
        idle=_idle_rows(c, top),
        memory=tuple(Fact(f"Memory {k}", gib(v.base), f"{gib(v.new)} ({gib(v.delta, signed=True)})") for k, v in c.memory.items()),
        checks=tuple(_check_row(v) for v in c.verification),
        checks_skipped=c.verification_skipped,
    )


def _check_row(v: RuleCheck) -> CheckRow:
    tone_of = {"delivered": "good", "shortfall": "bad", "overshoot": "neutral"}
    return CheckRow(
        code=v.code,
        lever=v.lever,
        status=v.status + (f" (with {', '.join(v.shared_with)})" if v.shared_with else ""),
        predicted=f"{ms(v.predicted_ps)} ms",
        step_delta=f"{sms(-v.observed_ps)} ms",
        credited=f"{ms(v.attributed_ps)} ms",
        ratio=ratio_text(v.ratio),
        beyond_noise="no" if v.within_noise else "yes",
        pools=pools_text(v),
        verdict=v.verdict,
        tone=tone_of.get(v.verdict, "neutral"),
        shortfall=shortfall_line(v) if v.shortfall else "",
    )


def bar_scale(c: Comparison) -> float:
    """The change a full-width bar stands for, the same in every table of the
    page (buckets, recompute, exposed communication, idle causes): the
    largest change shown. A table of small changes draws small bars; a
    -0.001 ms change is not drawn as wide as the step's largest one."""
    deltas = [abs(s.delta_ps) for _, s in _buckets_shown(c)] + [abs(c.remat.delta_ps)]
    deltas += [abs(e.exposed.delta_ps) for _, e in _exposed_shown(c)]
    deltas += [abs(s.delta_ps) for s in c.idle_causes.values()]
    return max(deltas + [0.0])


def _idle_rows(c: Comparison, top: float) -> tuple[DeltaRow, ...]:
    items = list(c.idle_causes.items())
    return tuple(_row(k, IDLE_CAUSE_LABELS.get(k, k), IDLE_CAUSE_COLOURS.get(k, "#BBBBBB"), s, top, noise=False) for k, s in items)


def _tool_version() -> str:
    from profanalyzer.version import __version__

    return __version__


def render_diff_html(c: Comparison) -> str:
    from profanalyzer.report.html import environment

    return environment().get_template(TEMPLATE).render(r=build_diff_context(c))
