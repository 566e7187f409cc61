"""Inline SVG charts for the HTML report, generated in Python.

Every function returns a `markupsafe.Markup` string holding one `<svg>`
element. All text that comes from the trace (op names, core names) goes
through `esc()`, so it is safe inside element content *and* attribute values
(`<title>`, `aria-label`). Charts carry `role="img"`, a `<title>` and a
`<desc>` (the text alternative), and use CSS classes (`ax`, `grid`, `lbl`,
...) that the template styles for light, dark and print. Colours of buckets
are fixed fills so that they mean the same thing in every chart.

Coordinates are rounded to 0.1 unit to keep the file small and the output
deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from profanalyzer.core.format import ms
from profanalyzer.core.vocab import BUCKET_COLOURS, BUCKET_LABELS, IDLE_CAUSE_COLOURS

#: Bucket colours and labels: profanalyzer.core.vocab's bucket table (fixed fills,
#: Paul Tol's colour-blind-safe "muted" scheme).
SPARSECORE_COLOUR = "#EE8866"
#: Collective window classes (hidden fraction >= 0.9 / between / <= 0.1).
WINDOW_COLOURS = {"hidden": "#44AA99", "partial": "#DDAA33", "exposed": "#BB5566"}
DEFAULT_COLOUR = "#8A8F98"


def colour(bucket: str) -> str:
    """Fill of a bucket (or of an idle cause)."""
    return BUCKET_COLOURS.get(bucket) or IDLE_CAUSE_COLOURS.get(bucket, DEFAULT_COLOUR)


def esc(text: object) -> str:
    """Escape for SVG/HTML text and double- or single-quoted attributes."""
    return str(escape(str(text)))


def coord(x: float) -> str:
    """A coordinate: 0.1 precision, no trailing zeros (deterministic)."""
    v = round(float(x), 1)
    if v == 0:
        v = 0.0
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def fmt_ms(ps: float) -> str:
    return ms(ps, unit=True)


def svg_open(width: float, height: float, title: str, desc: str, cls: str) -> list[str]:
    return [
        f'<svg class="chart {cls}" viewBox="0 0 {coord(width)} {coord(height)}" role="img" '
        f'aria-label="{esc(title)}" preserveAspectRatio="xMinYMin meet">',
        f"<title>{esc(title)}</title>",
        f"<desc>{esc(desc)}</desc>",
    ]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (linear axis)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3f}".rstrip("0").rstrip(".")


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of one axis's ticks, distinct at the precision shown: the
    fewest decimals (tick_label's when they suffice) at which every tick
    reads as its own value (61.125, 61.15, 61.175, not 61.1, 61.1, 61.2)."""
    plain = [tick_label(t) for t in ticks]
    if len(set(plain)) == len(plain):
        return plain
    for d in range(1, 10):
        labels = [f"{t:.{d}f}" for t in ticks]
        if len(set(labels)) == len(labels):
            return labels
    return [repr(t) for t in ticks]


# ---------------------------------------------------------------------------
# One 100% bar: where the step went
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    key: str  # bucket
    label: str
    value: float  # ps
    fraction: float  # of the total


def share_bar(segments: Sequence[Segment], title: str, desc: str, width: float = 1000, height: float = 34) -> Markup:
    """A single horizontal 100% stacked bar; labels inside segments wide enough."""
    out = svg_open(width, height, title, desc, "share-bar")
    x = 0.0
    for s in segments:
        if s.fraction <= 0:
            continue
        w = s.fraction * width
        out.append(
            f'<rect x="{coord(x)}" y="0" width="{coord(max(w, 0.5))}" height="{coord(height)}" fill="{colour(s.key)}">'
            f"<title>{esc(s.label)}: {esc(fmt_ms(s.value))} ({s.fraction * 100:.1f}%)</title></rect>"
        )
        full = f"{s.label} {s.fraction * 100:.1f}%"
        short = f"{s.fraction * 100:.1f}%"
        text = full if w >= len(full) * 7.4 + 12 else (short if w >= len(short) * 7.4 + 10 else "")
        if text:
            out.append(
                f'<text x="{coord(x + 6)}" y="{coord(height / 2 + 4.5)}" class="seg" fill="{_text_on(colour(s.key))}">{esc(text)}</text>'
            )
        x += w
    out.append("</svg>")
    return Markup("".join(out))


def _text_on(fill: str) -> str:
    """Black or white text for a fill colour (WCAG relative luminance)."""
    r, g, b = (int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "#000" if lum > 0.22 else "#fff"


# ---------------------------------------------------------------------------
# Stacked bar per step
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StepBar:
    number: int
    step_ps: float
    kept: bool
    reason: str
    segments: tuple[Segment, ...]  # bottom to top


def step_bars(bars: Sequence[StepBar], median_ps: float | None, title: str, desc: str) -> Markup:
    width, height = 1000.0, 260.0
    left, right, top, bottom = 58.0, 12.0, 14.0, 40.0
    pw, ph = width - left - right, height - top - bottom
    ymax = max([b.step_ps for b in bars] + [sum(s.value for s in b.segments) for b in bars] + [1.0])
    ticks = nice_ticks(0, ymax / 1e9, 4)
    ymax = max(ymax, ticks[-1] * 1e9)
    n = max(1, len(bars))
    slot = pw / n
    bw = max(1.0, min(48.0, slot * 0.72))
    out = svg_open(width, height, title, desc, "step-bars")
    out.append(
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="none"/><line x1="0" y1="0" x2="0" y2="6" class="hatch"/></pattern></defs>'
    )

    def y(ps: float) -> float:
        return top + ph - ps / ymax * ph

    for t, label in zip(ticks, tick_labels(ticks), strict=True):
        yy = y(t * 1e9)
        out.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(yy)}" y2="{coord(yy)}" class="grid"/>')
        out.append(f'<text x="{coord(left - 6)}" y="{coord(yy + 4)}" class="lbl" text-anchor="end">{label}</text>')
    out.append(
        f'<text x="12" y="{coord(top + ph / 2)}" class="lbl" text-anchor="middle" '
        f'transform="rotate(-90 12 {coord(top + ph / 2)})">ms per step</text>'
    )
    label_every = max(1, math.ceil(n / 40))
    for i, b in enumerate(bars):
        x = left + slot * i + (slot - bw) / 2
        status = "kept" if b.kept else f"dropped: {b.reason}"
        out.append(
            f'<g class="{"kept" if b.kept else "dropped"}"><title>step {b.number}: {esc(fmt_ms(b.step_ps))} '
            f"({esc(status)})</title>"
        )
        acc = 0.0
        for s in b.segments:
            if s.value <= 0:
                continue
            y0, y1 = y(acc + s.value), y(acc)
            out.append(
                f'<rect x="{coord(x)}" y="{coord(y0)}" width="{coord(bw)}" height="{coord(max(0.3, y1 - y0))}" fill="{colour(s.key)}">'
                f"<title>step {b.number} · {esc(s.label)}: {esc(fmt_ms(s.value))} ({s.fraction * 100:.1f}%)</title></rect>"
            )
            acc += s.value
        if not b.kept:
            out.append(
                f'<rect x="{coord(x)}" y="{coord(y(acc))}" width="{coord(bw)}" height="{coord(y(0) - y(acc))}" fill="url(#hatch)" class="drop-mask"/>'
            )
            out.append(f'<text x="{coord(x + bw / 2)}" y="{coord(y(acc) - 4)}" class="lbl warn" text-anchor="middle">dropped</text>')
        out.append("</g>")
        if i % label_every == 0:
            out.append(f'<text x="{coord(x + bw / 2)}" y="{coord(top + ph + 16)}" class="lbl" text-anchor="middle">{b.number}</text>')
    if median_ps:
        ym = y(median_ps)
        out.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(ym)}" y2="{coord(ym)}" class="median"/>')
        # the label sits in the top margin, above every bar (bars reach at most the plot's top), not on the line over the bars
        out.append(f'<text x="{coord(width - right)}" y="{coord(top - 3)}" class="lbl median-lbl" text-anchor="end">'
                   f'dashed line: median of kept steps ({esc(fmt_ms(median_ps))})</text>')
    out.append(f'<text x="{coord(left + pw / 2)}" y="{coord(height - 6)}" class="lbl" text-anchor="middle">step number</text>')
    out.append(f'<line x1="{coord(left)}" x2="{coord(width - right)}" y1="{coord(top + ph)}" y2="{coord(top + ph)}" class="ax"/>')
    out.append("</svg>")
    return Markup("".join(out))


# ---------------------------------------------------------------------------
# Timeline of one step
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TLSpan:
    start: float  # ps from step start
    end: float
    fill: str
    tip: str


@dataclass(frozen=True)
class TLLane:
    label: str  # short, drawn
    title: str  # full, tooltip
    spans: tuple[TLSpan, ...]
    tall: bool  # the TensorCore lane is drawn taller


@dataclass(frozen=True)
class TLWindow:
    start: float
    end: float
    klass: str
    tip: str


def timeline(step_ps: float, lanes: Sequence[TLLane], windows: Sequence[TLWindow], title: str, desc: str) -> Markup:
    width = 1000.0
    left, right, top = 130.0, 12.0, 8.0
    pw = width - left - right
    gap = 6.0
    # Collective windows: greedy rows so overlapping windows do not hide each other.
    rows_end: list[float] = []
    win_rows: list[int] = []
    for w in sorted(windows, key=lambda w: (w.start, w.end)):
        for r, e in enumerate(rows_end):
            if w.start >= e:
                rows_end[r] = w.end
                win_rows.append(r)
                break
        else:
            if len(rows_end) < 4:
                rows_end.append(w.end)
                win_rows.append(len(rows_end) - 1)
            else:
                r = min(range(len(rows_end)), key=lambda k: rows_end[k])
                rows_end[r] = max(rows_end[r], w.end)
                win_rows.append(r)
    n_win_rows = len(rows_end)
    lane_h = [30.0 if ln.tall else 16.0 for ln in lanes]
    win_h = 12.0
    body = sum(lane_h) + gap * len(lanes) + (n_win_rows * (win_h + 2) + gap if n_win_rows else 0)
    axis_y = top + body + 2
    height = axis_y + 34
    scale = pw / step_ps if step_ps > 0 else 0.0

    def x(ps: float) -> float:
        return left + max(0.0, min(step_ps, ps)) * scale

    out = svg_open(width, height, title, desc, "timeline")
    # Shading of collective windows across all lanes (behind).
    for w in sorted(windows, key=lambda w: (w.start, w.end)):
        out.append(
            f'<rect x="{coord(x(w.start))}" y="{coord(top)}" width="{coord(max(0.5, x(w.end) - x(w.start)))}" '
            f'height="{coord(body)}" fill="{WINDOW_COLOURS.get(w.klass, DEFAULT_COLOUR)}" class="shade"/>'
        )
    y = top
    for ln, h in zip(lanes, lane_h, strict=True):
        out.append(f'<text x="{coord(left - 8)}" y="{coord(y + h / 2 + 4)}" class="lbl" text-anchor="end">{esc(short_label(ln.label, 22))}<title>{esc(ln.title)}</title></text>')
        out.append(f'<rect x="{coord(left)}" y="{coord(y)}" width="{coord(pw)}" height="{coord(h)}" class="lane"/>')
        for s in ln.spans:
            sw = x(s.end) - x(s.start)
            out.append(
                f'<rect x="{coord(x(s.start))}" y="{coord(y)}" width="{coord(max(0.3, sw))}" height="{coord(h)}" fill="{s.fill}">'
                f"<title>{esc(s.tip)}</title></rect>"
            )
        y += h + gap
    if n_win_rows:
        out.append(f'<text x="{coord(left - 8)}" y="{coord(y + (n_win_rows * (win_h + 2)) / 2 + 4)}" class="lbl" text-anchor="end">collective windows</text>')
        for w, r in zip(sorted(windows, key=lambda w: (w.start, w.end)), win_rows, strict=True):
            yy = y + r * (win_h + 2)
            out.append(
                f'<rect x="{coord(x(w.start))}" y="{coord(yy)}" width="{coord(max(0.8, x(w.end) - x(w.start)))}" height="{coord(win_h)}" '
                f'fill="{WINDOW_COLOURS.get(w.klass, DEFAULT_COLOUR)}" class="win {esc(w.klass)}"><title>{esc(w.tip)}</title></rect>'
            )
    # Time axis.
    out.append(f'<line x1="{coord(left)}" x2="{coord(left + pw)}" y1="{coord(axis_y)}" y2="{coord(axis_y)}" class="ax"/>')
    for t in nice_ticks(0, step_ps / 1e9, 8):
        xx = x(t * 1e9)
        out.append(f'<line x1="{coord(xx)}" x2="{coord(xx)}" y1="{coord(axis_y)}" y2="{coord(axis_y + 4)}" class="ax"/>')
        out.append(f'<text x="{coord(xx)}" y="{coord(axis_y + 16)}" class="lbl" text-anchor="middle">{tick_label(t)}</text>')
    out.append(f'<text x="{coord(left + pw)}" y="{coord(axis_y + 30)}" class="lbl" text-anchor="end">ms from step start</text>')
    out.append("</svg>")
    return Markup("".join(out))


def short_label(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


# ---------------------------------------------------------------------------
# Roofline (log-log)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoofPoint:
    rank: int
    intensity: float  # FLOP/byte
    tflops: float  # achieved TFLOP/s
    fraction: float  # of step (point size)
    fill: str
    tip: str


@dataclass(frozen=True)
class Roof:
    label: str
    peak_tflops: float  # flat roof
    cls: str  # css class of the line


def roofline(points: Sequence[RoofPoint], roofs: Sequence[Roof], hbm_tbps: float, title: str, desc: str, label_top: int = 10) -> Markup:
    """Log-log: x = FLOP/byte, y = TFLOP/s. HBM roof y = x * bandwidth up to
    each flat compute roof; ridge points marked with a dashed vertical line."""
    width, height = 1000.0, 440.0
    left, right, top, bottom = 70.0, 20.0, 16.0, 46.0
    pw, ph = width - left - right, height - top - bottom
    peaks = [r.peak_tflops for r in roofs if r.peak_tflops > 0] or [1.0]
    ridges = [p / hbm_tbps for p in peaks] if hbm_tbps > 0 else [1.0]
    xs = [p.intensity for p in points if p.intensity > 0] + ridges
    ys = [p.tflops for p in points if p.tflops > 0] + peaks
    x_lo = 10 ** math.floor(math.log10(min(xs) / 2))
    x_hi = 10 ** math.ceil(math.log10(max(xs) * 3))
    y_lo = 10 ** math.floor(math.log10(max(min(ys) / 2, max(peaks) * 1e-6)))
    y_hi = 10 ** math.ceil(math.log10(max(ys) * 1.5))
    lx_lo, lx_hi, ly_lo, ly_hi = map(math.log10, (x_lo, x_hi, y_lo, y_hi))

    def X(v: float) -> float:
        return left + (math.log10(v) - lx_lo) / (lx_hi - lx_lo) * pw

    def Y(v: float) -> float:
        return top + ph - (math.log10(v) - ly_lo) / (ly_hi - ly_lo) * ph

    out = svg_open(width, height, title, desc, "roofline")
    out.append(f'<clipPath id="roof-clip"><rect x="{coord(left)}" y="{coord(top)}" width="{coord(pw)}" height="{coord(ph)}"/></clipPath>')
    for e in range(int(lx_lo), int(lx_hi) + 1):
        xx = X(10.0**e)
        out.append(f'<line x1="{coord(xx)}" x2="{coord(xx)}" y1="{coord(top)}" y2="{coord(top + ph)}" class="grid"/>')
        out.append(f'<text x="{coord(xx)}" y="{coord(top + ph + 16)}" class="lbl" text-anchor="middle">{_pow10(e)}</text>')
    for e in range(int(ly_lo), int(ly_hi) + 1):
        yy = Y(10.0**e)
        out.append(f'<line x1="{coord(left)}" x2="{coord(left + pw)}" y1="{coord(yy)}" y2="{coord(yy)}" class="grid"/>')
        out.append(f'<text x="{coord(left - 6)}" y="{coord(yy + 4)}" class="lbl" text-anchor="end">{_pow10(e)}</text>')
    out.append(f'<rect x="{coord(left)}" y="{coord(top)}" width="{coord(pw)}" height="{coord(ph)}" class="frame"/>')
    out.append(f'<text x="{coord(left + pw / 2)}" y="{coord(height - 8)}" class="lbl" text-anchor="middle">arithmetic intensity (FLOP/byte, log)</text>')
    out.append(
        f'<text x="16" y="{coord(top + ph / 2)}" class="lbl" text-anchor="middle" transform="rotate(-90 16 {coord(top + ph / 2)})">'
        "achieved TFLOP/s per TensorCore (log)</text>"
    )
    out.append('<g clip-path="url(#roof-clip)">')
    if hbm_tbps > 0:
        xe = max(peaks) / hbm_tbps
        out.append(f'<line x1="{coord(X(x_lo))}" y1="{coord(Y(x_lo * hbm_tbps))}" x2="{coord(X(xe))}" y2="{coord(Y(xe * hbm_tbps))}" class="roof hbm"/>')
        # label the HBM roof near its lower-left part
        lx = x_lo * 10 ** ((math.log10(xe) - lx_lo) * 0.25)
        ang = -math.degrees(math.atan2(Y(x_lo * hbm_tbps) - Y(xe * hbm_tbps), X(xe) - X(x_lo)))
        out.append(
            f'<text x="{coord(X(lx))}" y="{coord(Y(lx * hbm_tbps) - 6)}" class="lbl roof-lbl" transform="rotate({coord(ang)} {coord(X(lx))} {coord(Y(lx * hbm_tbps) - 6)})">'
            f"HBM {hbm_tbps:.2f} TB/s</text>"
        )
    labels = []
    for r in roofs:
        ridge = r.peak_tflops / hbm_tbps if hbm_tbps > 0 else x_lo
        out.append(f'<line x1="{coord(X(ridge))}" y1="{coord(Y(r.peak_tflops))}" x2="{coord(X(x_hi))}" y2="{coord(Y(r.peak_tflops))}" class="roof {esc(r.cls)}"/>')
        out.append(f'<line x1="{coord(X(ridge))}" y1="{coord(Y(r.peak_tflops))}" x2="{coord(X(ridge))}" y2="{coord(top + ph)}" class="ridge"/>')
        text = f"{r.label} peak {r.peak_tflops:,.0f} TFLOP/s · ridge {ridge:,.0f} FLOP/B"
        # Left of the knee at the roof's height (above the HBM slope, clear of
        # the ops); right of the knee above the roof when there is no room.
        if X(ridge) - 8 - len(text) * 6.4 >= left + 4:
            labels.append(f'<text x="{coord(X(ridge) - 8)}" y="{coord(Y(r.peak_tflops) + 4)}" class="lbl roof-lbl" text-anchor="end">{esc(text)}</text>')
        else:
            labels.append(f'<text x="{coord(X(ridge) + 8)}" y="{coord(Y(r.peak_tflops) - 6)}" class="lbl roof-lbl">{esc(text)}</text>')
    fmax = max([p.fraction for p in points] + [1e-12])
    for p in sorted(points, key=lambda p: -p.fraction):  # big first, small on top
        if p.intensity <= 0 or p.tflops <= 0:
            continue
        rad = 3.5 + 9.0 * math.sqrt(p.fraction / fmax)
        out.append(
            f'<circle cx="{coord(X(p.intensity))}" cy="{coord(Y(p.tflops))}" r="{coord(rad)}" fill="{p.fill}" class="pt">'
            f"<title>{esc(p.tip)}</title></circle>"
        )
    placed: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda p: p.rank):
        if p.rank > label_top or p.intensity <= 0 or p.tflops <= 0:
            continue
        lx, ly = X(p.intensity) + 9, Y(p.tflops) + 16
        if any(abs(lx - a) < 26 and abs(ly - b) < 13 for a, b in placed):
            continue  # would overlap a better-ranked label; the tooltip still names it
        placed.append((lx, ly))
        out.append(f'<text x="{coord(lx)}" y="{coord(ly)}" class="lbl pt-lbl">#{p.rank}</text>')
    out.append("</g>")
    out.extend(labels)
    out.append("</svg>")
    return Markup("".join(out))


def _pow10(e: int) -> str:
    table = {-3: "0.001", -2: "0.01", -1: "0.1", 0: "1", 1: "10", 2: "100", 3: "1k", 4: "10k", 5: "100k", 6: "1M"}
    return table.get(e, f"1e{e}")


# ---------------------------------------------------------------------------
# Per-core strip
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreDot:
    label: str
    value_ps: float
    straggler: bool
    tip: str


def core_strip(dots: Sequence[CoreDot], median_ps: float, title: str, desc: str) -> Markup:
    """Compute time per core on one axis; stragglers drawn as red diamonds."""
    width, height = 1000.0, 80.0
    left, right = 20.0, 20.0
    pw = width - left - right
    vals = [d.value_ps for d in dots] or [0.0]
    lo, hi = min(vals), max(vals)
    pad = max((hi - lo) * 0.15, hi * 0.001, 1.0)
    lo, hi = max(0.0, lo - pad), hi + pad

    def X(v: float) -> float:
        return left + (v - lo) / (hi - lo) * pw

    out = svg_open(width, height, title, desc, "core-strip")
    out.append(f'<line x1="{coord(left)}" x2="{coord(left + pw)}" y1="40" y2="40" class="ax"/>')
    ticks = [t for t in nice_ticks(lo / 1e9, hi / 1e9, 6) if left <= X(t * 1e9) <= left + pw]
    for t, label in zip(ticks, tick_labels(ticks), strict=True):
        xx = X(t * 1e9)
        out.append(f'<line x1="{coord(xx)}" x2="{coord(xx)}" y1="40" y2="44" class="ax"/>')
        out.append(f'<text x="{coord(xx)}" y="58" class="lbl" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{coord(left + pw)}" y="74" class="lbl" text-anchor="end">compute ms per step (busy minus collectives and host-offload waits)</text>')
    if median_ps:
        out.append(f'<line x1="{coord(X(median_ps))}" x2="{coord(X(median_ps))}" y1="12" y2="40" class="median"/>')
    for d in dots:
        xx = X(d.value_ps)
        if d.straggler:
            out.append(
                f'<path d="M{coord(xx)} 18l7 8-7 8-7-8z" class="straggler"><title>{esc(d.tip)}</title></path>'
                f'<text x="{coord(xx)}" y="12" class="lbl warn" text-anchor="{"end" if xx > left + pw * 0.8 else "middle"}">{esc(short_label(d.label, 28))}</text>'
            )
        else:
            out.append(f'<circle cx="{coord(xx)}" cy="28" r="5" class="core-dot"><title>{esc(d.tip)}</title></circle>')
    out.append("</svg>")
    return Markup("".join(out))


def legend_items(keys: Iterable[str]) -> list[tuple[str, str, str]]:
    """(key, label, colour) for the HTML legend."""
    return [(k, BUCKET_LABELS.get(k, k), colour(k)) for k in keys]
