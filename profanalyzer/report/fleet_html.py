"""The fleet HTML report: many runs, many hosts, one self-contained page.

    render_fleet_html(result, command_line=...) -> str

Same look as the single-trace report (its CSS, script and SVG helpers; bucket
colours mean the same thing): a summary, the trend across runs (inline SVG
chart + table, regressions marked), one pod view per run (per-host stacked bar
chart and table, stragglers highlighted, the slowest host's critical bucket)
and the list of failed files. jinja2 autoescape is on and every SVG text goes
through ``svg.esc``: host names, paths and error messages come from the
inputs and are escaped. Deterministic: same result, same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markupsafe import Markup

from profanalyzer.core.format import EM_DASH, ms
from profanalyzer.report import svg
from profanalyzer.report.svg import (
    colour,
    coord,
    esc,
    fmt_ms,
    nice_ticks,
    short_label,
    svg_open,
    tick_label,
)
from profanalyzer.report.views import Fact, Kpi, LegendItem, NavItem

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.fleet)
    from profanalyzer.fleet.records import FleetResult, HostResult, RunResult

TEMPLATE = "fleet.html.j2"
#: Per-run host tables open by default when the run has at most this many hosts,
#: a straggler or a failure.
HOSTS_OPEN = 16


# ---------------------------------------------------------------------------
# Context types
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    text: str
    value: str  # data-v (sort key)
    flag: bool = False  # regressed / straggler value
    tip: str = ""


@dataclass(frozen=True)
class TrendRowView:
    run: str
    anchor: str
    time: str
    hosts: str
    cells: tuple[Cell, ...]
    regressed: bool


@dataclass(frozen=True)
class RegressionView:
    metric: str
    run: str
    anchor: str
    text: str


@dataclass(frozen=True)
class TrendView:
    chart: Markup | None
    columns: tuple[str, ...]  # labels of the value columns
    rows: tuple[TrendRowView, ...]
    first: tuple[RegressionView, ...]
    rule: str


@dataclass(frozen=True)
class HostRowView:
    host: str
    path: str
    ok: bool
    straggler: bool
    steps: str
    step_ms: str
    step_v: str
    step_z: str
    wait_ms: str
    wait_z: str
    cells: tuple[Cell, ...]
    mfu: str
    note: str  # straggler reasons, error, straggler cores
    top: str  # top recommendation: code and saving
    top_tip: str  # its title


@dataclass(frozen=True)
class RunView:
    id: str
    name: str
    path: str
    time: str
    facts: tuple[Fact, ...]
    critical: str
    stragglers: tuple[str, ...]
    check: str
    chart: Markup | None
    columns: tuple[str, ...]
    rows: tuple[HostRowView, ...]
    open: bool
    failed: int


@dataclass(frozen=True)
class FailureView:
    path: str
    run: str
    host: str
    error: str
    error_type: str


@dataclass(frozen=True)
class FleetContext:
    title: str
    headline: str
    kpis: tuple[Kpi, ...]
    facts: tuple[Fact, ...]
    definitions: tuple[Fact, ...]
    legend: tuple[LegendItem, ...]
    trend: TrendView
    runs: tuple[RunView, ...]
    failures: tuple[FailureView, ...]
    nav: tuple[NavItem, ...]
    tool_version: str
    command_line: str
    timestamp: str | None


# ---------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------


def host_bars(hosts: Sequence[HostResult], buckets: Sequence[str], median_ps: float | None, title: str, desc: str) -> Markup:
    """One horizontal stacked bar per host (buckets, ms per step); stragglers in red, failed hosts marked."""
    width = 1000.0
    left, right, top = 230.0, 16.0, 8.0
    row, gap = 16.0, 5.0
    pw = width - left - right
    n = max(1, len(hosts))
    body = n * (row + gap)
    axis_y = top + body + 2
    height = axis_y + 34
    xmax = max([h.step_ps or 0.0 for h in hosts] + [1.0])
    ticks = nice_ticks(0, xmax / 1e9, 6)
    xmax = max(xmax, ticks[-1] * 1e9)

    def X(ps: float) -> float:
        return left + ps / xmax * pw

    out = svg_open(width, height, title, desc, "host-bars")
    for t in ticks:
        xx = X(t * 1e9)
        out.append(f'<line x1="{coord(xx)}" x2="{coord(xx)}" y1="{coord(top)}" y2="{coord(axis_y)}" class="grid"/>')
        out.append(f'<text x="{coord(xx)}" y="{coord(axis_y + 16)}" class="lbl" text-anchor="middle">{tick_label(t)}</text>')
    y = top
    for h in hosts:
        cls = "lbl warn" if h.straggler else "lbl"
        out.append(
            f'<text x="{coord(left - 8)}" y="{coord(y + row / 2 + 4)}" class="{cls}" text-anchor="end">'
            f"{esc(short_label(h.host, 34))}<title>{esc(h.path)}</title></text>"
        )
        if not h.ok:
            out.append(
                f'<text x="{coord(left + 4)}" y="{coord(y + row / 2 + 4)}" class="lbl warn">failed (error in the table below)'
                f"<title>{esc(h.error or '')}</title></text>"
            )
            y += row + gap
            continue
        x = left
        status = "straggler: " + "; ".join(h.straggler_reasons) if h.straggler else "step"
        out.append(f'<g class="{"straggler-bar" if h.straggler else "host-bar"}"><title>{esc(h.host)}: {esc(fmt_ms(h.step_ps or 0))} ({esc(status)})</title>')
        for b in buckets:
            v = h.buckets.get(b, 0.0)
            if v <= 0:
                continue
            w = v / xmax * pw
            frac = v / h.step_ps if h.step_ps else 0.0
            out.append(
                f'<rect x="{coord(x)}" y="{coord(y)}" width="{coord(max(0.3, w))}" height="{coord(row)}" fill="{colour(b)}">'
                f"<title>{esc(h.host)} · {esc(svg.BUCKET_LABELS.get(b, b))}: {esc(fmt_ms(v))} ({frac * 100:.1f}%)</title></rect>"
            )
            x += w
        if h.straggler:
            out.append(f'<rect x="{coord(left)}" y="{coord(y - 1.5)}" width="{coord(x - left)}" height="{coord(row + 3)}" class="strag-frame"/>')
            out.append(f'<path d="M{coord(x + 9)} {coord(y + 1)}l6 7-6 7-6-7z" class="straggler"/>')
        out.append("</g>")
        y += row + gap
    if median_ps:
        xm = X(median_ps)
        out.append(f'<line x1="{coord(xm)}" x2="{coord(xm)}" y1="{coord(top - 4)}" y2="{coord(axis_y)}" class="median"/>')
    out.append(f'<line x1="{coord(left)}" x2="{coord(left + pw)}" y1="{coord(axis_y)}" y2="{coord(axis_y)}" class="ax"/>')
    out.append(
        f'<text x="{coord(left + pw)}" y="{coord(axis_y + 30)}" class="lbl" text-anchor="end">ms per step (dashed: pod median step)</text>'
    )
    out.append("</svg>")
    return Markup("".join(out))


def trend_chart(result: FleetResult, buckets: Sequence[str], title: str, desc: str) -> Markup:
    """Stacked bars per run (sorted by time) of the buckets, ms per step; runs
    where anything regressed carry a red marker; the step time is a line."""
    rows = result.trend.rows
    width, height = 1000.0, 300.0
    left, right, top, bottom = 58.0, 12.0, 22.0, 74.0
    pw, ph = width - left - right, height - top - bottom
    vals = [r.values.get("step_time") or 0.0 for r in rows]
    ymax = max(vals + [1.0])
    ticks = nice_ticks(0, ymax / 1e9, 4)
    ymax = max(ymax, ticks[-1] * 1e9)
    n = max(1, len(rows))
    slot = pw / n
    bw = max(1.0, min(48.0, slot * 0.66))

    def Y(ps: float) -> float:
        return top + ph - ps / ymax * ph

    out = svg_open(width, height, title, desc, "trend")
    for t in ticks:
        yy = Y(t * 1e9)
        out.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(yy)}" y2="{coord(yy)}" class="grid"/>')
        out.append(f'<text x="{coord(left - 6)}" y="{coord(yy + 4)}" class="lbl" text-anchor="end">{tick_label(t)}</text>')
    out.append(
        f'<text x="12" y="{coord(top + ph / 2)}" class="lbl" text-anchor="middle" '
        f'transform="rotate(-90 12 {coord(top + ph / 2)})">ms per step</text>'
    )
    label_every = max(1, math.ceil(n / 24))
    points = []
    for i, r in enumerate(rows):
        cx = left + slot * i + slot / 2
        x = cx - bw / 2
        step = r.values.get("step_time")
        if step is None:
            out.append(f'<text x="{coord(cx)}" y="{coord(top + ph - 4)}" class="lbl warn" text-anchor="middle">×<title>{esc(r.run)}: no host analysed</title></text>')
        else:
            out.append(f'<g class="run-bar"><title>{esc(r.run)}: {esc(fmt_ms(step))} per step, {r.hosts_ok} hosts</title>')
            acc = 0.0
            for b in buckets:
                v = r.values.get(b) or 0.0
                if v <= 0:
                    continue
                y0, y1 = Y(acc + v), Y(acc)
                out.append(
                    f'<rect x="{coord(x)}" y="{coord(y0)}" width="{coord(bw)}" height="{coord(max(0.3, y1 - y0))}" fill="{colour(b)}">'
                    f"<title>{esc(r.run)} · {esc(svg.BUCKET_LABELS.get(b, b))}: {esc(fmt_ms(v))}</title></rect>"
                )
                acc += v
            out.append("</g>")
            points.append((cx, Y(step)))
            if r.regressed:
                yy = Y(step) - 6
                out.append(
                    f'<path d="M{coord(cx)} {coord(yy)}l-6 -9h12z" class="regressed"><title>{esc(r.run)} regressed: '
                    f"{esc(', '.join(r.regressed))}</title></path>"
                )
        if i % label_every == 0:
            ly = top + ph + 12
            out.append(
                f'<text x="{coord(cx)}" y="{coord(ly)}" class="lbl" text-anchor="end" transform="rotate(-35 {coord(cx)} {coord(ly)})">'
                f"{esc(short_label(r.run, 22))}</text>"
            )
    if len(points) > 1:
        out.append('<polyline class="step-line" points="' + " ".join(f"{coord(x)},{coord(y)}" for x, y in points) + '"/>')
    out.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(top + ph)}" y2="{coord(top + ph)}" class="ax"/>')
    out.append(f'<text x="{coord(width - right)}" y="{coord(top - 6)}" class="lbl" text-anchor="end">runs, oldest to newest</text>')
    out.append("</svg>")
    return Markup("".join(out))


# ---------------------------------------------------------------------------
# Context
# ---------------------------------------------------------------------------


def _ms(ps: float | None) -> str:
    return ms(ps, missing=EM_DASH)


def _z(z: float | None) -> str:
    return "—" if z is None else f"{z:+.1f}"


def _v(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _top_short(text: str | None) -> str:
    """'FP001 BF16 matmuls ... (~29.0% of the step)' -> 'FP001 ~29.0%'."""
    if not text:
        return ""
    code = text.split(" ", 1)[0]
    i = text.rfind("(~")
    return f"{code} {text[i + 1:].split('%', 1)[0]}%" if i >= 0 else code


def _label(metric: str) -> str:
    return "Step time" if metric == "step_time" else svg.BUCKET_LABELS.get(metric, metric)


def _used_buckets(result: FleetResult, buckets: Sequence[str]) -> tuple[str, ...]:
    used = set()
    for r in result.runs:
        for h in r.hosts:
            for b, v in h.buckets.items():
                if v and v > 0:
                    used.add(b)
    return tuple(b for b in buckets if b in used)


def _run_view(i: int, r: RunResult, buckets: Sequence[str]) -> RunView:
    used = tuple(b for b in buckets if any((h.buckets.get(b) or 0) > 0 for h in r.hosts))
    rows = []
    for h in r.hosts:
        if h.ok:
            cells = tuple(
                Cell(_ms(h.buckets.get(b)), _v(h.buckets.get(b)), flag=bool(r.critical and h.host == r.critical.host and b == r.critical.bucket))
                for b in used
            )
            notes = list(h.straggler_reasons)
            if h.straggler_cores:
                notes.append("straggler cores: " + ", ".join(h.straggler_cores))
            rows.append(
                HostRowView(
                    h.host, h.path, True, h.straggler, str(h.steps_kept), _ms(h.step_ps), _v(h.step_ps), _z(h.step_z),
                    _ms(h.wait_ps), _z(h.wait_z), cells, "—" if h.mfu is None else f"{h.mfu * 100:.1f}%",
                    "; ".join(notes), _top_short(h.top_recommendation), h.top_recommendation or "",
                )
            )
        else:
            rows.append(
                HostRowView(h.host, h.path, False, False, "—", "—", "", "—", "—", "—", tuple(Cell("—", "") for _ in used), "—", h.error or "failed", "", "")
            )
    facts = [
        Fact("Run folder", r.path),
        Fact("Run time", f"{r.time or 'unknown'} ({r.time_source})"),
        Fact("Hosts", f"{r.hosts_ok} analysed" + (f", {r.hosts_failed} failed" if r.hosts_failed else "")),
    ]
    if r.step_ps is not None:
        facts += [
            Fact("Step time", f"{_ms(r.step_ps)} ms mean over hosts; median {_ms(r.step_median_ps)} ms; slowest {_ms(r.step_max_ps)} ms"),
            Fact("Slowest host", r.slowest_host or "—"),
            Fact("Idle + exposed comm", f"{_ms(r.wait_ps)} ms per step (mean over hosts)"),
        ]
    if r.workload:
        facts.append(Fact("Workload", r.workload))
    if r.chip:
        facts.append(Fact("Chip", r.chip))
    chart = None
    if r.hosts_ok:
        chart = host_bars(
            r.hosts,
            buckets,
            r.step_median_ps,
            f"Per-host step time of run {r.run}",
            f"Stacked bar per host: exclusive ms per step of each bucket; {len(r.stragglers)} straggler host(s)"
            + (f": {', '.join(r.stragglers)}" if r.stragglers else "")
            + ".",
        )
    return RunView(
        id=f"run-{i + 1}",
        name=r.run,
        path=r.path,
        time=r.time or "unknown",
        facts=tuple(facts),
        critical=r.critical.reason if r.critical else "",
        stragglers=r.stragglers,
        check=r.straggler_check,
        chart=chart,
        columns=tuple(_label(b) for b in used),
        rows=tuple(rows),
        open=len(r.hosts) <= HOSTS_OPEN or bool(r.stragglers) or r.hosts_failed > 0,
        failed=r.hosts_failed,
    )


def _trend_view(result: FleetResult, used: Sequence[str], anchors: dict[str, str]) -> TrendView:
    metrics = ("step_time", *used)
    regs = {(g.run, g.metric): g for g in result.trend.regressions}
    rows = []
    for tr in result.trend.rows:
        cells = []
        for m in metrics:
            v = tr.values.get(m)
            g = regs.get((tr.run, m))
            tip = (
                f"+{_ms(g.delta_ps)} ms over the baseline {_ms(g.baseline_ps)} ms (median of {g.baseline_runs} previous runs; threshold {_ms(g.threshold_ps)} ms)"
                if g
                else ""
            )
            cells.append(Cell(_ms(v), _v(v), flag=g is not None, tip=tip))
        rows.append(TrendRowView(tr.run, anchors.get(tr.run, ""), tr.time or "unknown", str(tr.hosts_ok), tuple(cells), bool(tr.regressed)))
    first = tuple(
        RegressionView(
            _label(m),
            g.run,
            anchors.get(g.run, ""),
            f"{_ms(g.value_ps)} ms per step, +{_ms(g.delta_ps)} ms over the median {_ms(g.baseline_ps)} ms of the "
            f"{g.baseline_runs} previous run{'s' if g.baseline_runs != 1 else ''} (threshold {_ms(g.threshold_ps)} ms)",
        )
        for m, g in sorted(result.trend.first_regression.items(), key=lambda kv: (metrics.index(kv[0]) if kv[0] in metrics else 99, kv[0]))
    )
    chart = None
    if any(r.values.get("step_time") is not None for r in result.trend.rows):
        n_reg = sum(1 for r in result.trend.rows if r.regressed)
        chart = trend_chart(
            result,
            used,
            "Step time per run",
            f"Stacked bar per run, oldest to newest: mean over the run's hosts of each bucket, ms per step; {n_reg} run(s) with a regression.",
        )
    return TrendView(chart, tuple(_label(m) for m in metrics), tuple(rows), first, result.trend.rule)


def build_fleet_context(result: FleetResult, *, command_line: str, timestamp: str | None = None) -> FleetContext:
    from profanalyzer.core.vocab import BUCKETS

    buckets = tuple(BUCKETS)
    used = _used_buckets(result, buckets)
    runs = tuple(_run_view(i, r, used) for i, r in enumerate(result.runs))
    anchors = {v.name: v.id for v in runs}
    trend = _trend_view(result, used, anchors)
    n_strag = sum(len(r.stragglers) for r in result.runs)
    n_reg_runs = sum(1 for r in result.trend.rows if r.regressed)
    hosts = sum(r.hosts_total for r in result.runs)
    kpis = (
        Kpi("kpi-runs", "Runs", str(len(result.runs)), f"{hosts} host files", "neutral"),
        Kpi(
            "kpi-files",
            "Host files analysed",
            f"{result.files_ok}/{result.files}",
            f"{len(result.failures)} failure{'s' if len(result.failures) != 1 else ''}",
            "bad" if result.failures else "good",
        ),
        Kpi("kpi-stragglers", "Straggler hosts", str(n_strag), "modified z-score, >= 3 hosts", "bad" if n_strag else "good"),
        Kpi(
            "kpi-regressions",
            "Runs with a regression",
            str(n_reg_runs),
            f"{len(result.trend.first_regression)} metric{'s' if len(result.trend.first_regression) != 1 else ''} regressed",
            "warn" if n_reg_runs else "good",
        ),
        Kpi(
            "kpi-cache",
            "Cache",
            f"{result.cache.get('hits', 0)} hits" if result.cache.get("enabled") else "off",
            f"{result.cache.get('analysed', 0)} files analysed",
            "neutral",
        ),
    )
    latest = next((r for r in reversed(result.runs) if r.step_ps is not None), None)
    if latest is None:
        headline = "No host file could be analysed."
    else:
        headline = f"Latest run {latest.run}: {_ms(latest.step_ps)} ms per step over {latest.hosts_ok} hosts"
        headline += f"; stragglers: {', '.join(latest.stragglers)}." if latest.stragglers else "; no straggler host."
        if result.trend.first_regression:
            g = result.trend.first_regression.get("step_time")
            if g is not None:
                headline += f" Step time first regressed at {g.run} (+{_ms(g.delta_ps)} ms)."
    facts = (
        Fact("Inputs", ", ".join(result.inputs) or "—"),
        Fact("Options", ", ".join(f"{k}={'auto' if v is None else v}" for k, v in sorted(result.options.items())) or "—"),
        Fact("Files", f"{result.files} host files, {result.files_ok} analysed, {result.files_failed} failed"),
    )
    definitions = tuple(Fact(k.replace("_", " "), v) for k, v in result.definitions.items())
    failures = tuple(FailureView(f.path, f.run or "—", f.host or "—", f.error, f.error_type) for f in result.failures)
    nav = [NavItem("summary", "Summary"), NavItem("trend", "Trend")]
    nav += [NavItem("runs", f"Runs ({len(runs)})")]
    nav += [NavItem("failures", f"Failures ({len(failures)})")]
    return FleetContext(
        title=f"profanalyze fleet — {len(result.runs)} run{'s' if len(result.runs) != 1 else ''}, {hosts} host files",
        headline=headline,
        kpis=kpis,
        facts=facts,
        definitions=definitions,
        legend=tuple(LegendItem(k, label, c) for k, label, c in svg.legend_items(used)),
        trend=trend,
        runs=runs,
        failures=failures,
        nav=tuple(nav),
        tool_version=result.tool_version,
        command_line=command_line,
        timestamp=timestamp,
    )


def render_fleet_html(result: FleetResult, *, command_line: str = "profanalyze fleet", timestamp: str | None = None) -> str:
    from profanalyzer.report.html import environment

    ctx = build_fleet_context(result, command_line=command_line, timestamp=timestamp)
    return environment().get_template(TEMPLATE).render(r=ctx)
