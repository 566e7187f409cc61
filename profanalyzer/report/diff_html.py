"""The HTML page of a Comparison (profanalyzer.compare.comparison): `build_diff_context` makes the typed
`DiffContext` the template `diff.html.j2` formats, `render_diff_html` the one self-contained file (the
report's CSS, jinja2 environment, bucket colours and labels). Text and Markdown, and the helpers shared
with them, are in profanalyzer.report.diff. Trace-derived text is escaped by jinja2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from profanalyzer.core.format import gib, ms, pct, pts
from profanalyzer.core.vocab import IDLE_CAUSE_COLOURS, IDLE_CAUSE_LABELS
from profanalyzer.report import svg
from profanalyzer.report.diff import (
    NAME_CUT,
    TF_OP_CUT,
    bucket_label,
    buckets_shown,
    coll_label,
    cut,
    cut_mid,
    engine_change,
    exposed_shown,
    noise_text,
    pools_text,
    ratio_text,
    short_label,
    shortfall_line,
    sms,
    spct,
    tone,
)
from profanalyzer.report.views import Kpi

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.compare.comparison and profanalyzer.findings.verify)
    from profanalyzer.compare.comparison import Comparison, ShareChange
    from profanalyzer.compare.opmatch import OpChange
    from profanalyzer.findings.verify import RuleCheck

TEMPLATE = "diff.html.j2"

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
                name=cut(o.match_name, NAME_CUT),
                name_full=o.match_name,
                tf_op=cut_mid(o.tf_op, TF_OP_CUT),
                tf_op_full=o.tf_op,
                bucket=bucket_label(o.bucket) if o.bucket else "-",
                base_ms=ms(o.base_ps),
                new_ms=ms(o.new_ps),
                delta_ms=sms(o.delta_ps),
                delta_pct=spct(o.delta_fraction),
                names=cut(names, NAME_CUT),
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

    shown = buckets_shown(c)
    ex = exposed_shown(c)
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
        title=f"profanalyze compare: {short_label(c.base.label)} → {short_label(c.new.label)}"
              + (" (PREDICTED)" if c.basis == "predicted" else ""),
        base_name=short_label(c.base.label),
        new_name=short_label(c.new.label),
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
    deltas = [abs(s.delta_ps) for _, s in buckets_shown(c)] + [abs(c.remat.delta_ps)]
    deltas += [abs(e.exposed.delta_ps) for _, e in exposed_shown(c)]
    deltas += [abs(s.delta_ps) for s in c.idle_causes.values()]
    return max(deltas + [0.0])


def _idle_rows(c: Comparison, top: float) -> tuple[DeltaRow, ...]:
    items = list(c.idle_causes.items())
    return tuple(_row(k, IDLE_CAUSE_LABELS.get(k, k), IDLE_CAUSE_COLOURS.get(k, "#BBBBBB"), s, top, noise=False) for k, s in items)


def _tool_version() -> str:
    from profanalyzer.core.version import __version__

    return __version__


def render_diff_html(c: Comparison) -> str:
    from profanalyzer.report.html import environment

    return environment().get_template(TEMPLATE).render(r=build_diff_context(c))
