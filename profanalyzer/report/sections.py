"""The report sections added for issue #16 (where in the model the time went,
why the core was idle, HBM headroom): their view records and builders, kept
out of context.py so that module only hooks them in.

Plain text and formatted numbers, as the other views; the template escapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from profanalyzer.core.format import binary_size, gib, ms, pct
from profanalyzer.core.vocab import BUCKETS, IDLE_CAUSE_LABELS, IDLE_CAUSES
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.parts import DEFAULT_DEPTH, collapse
from profanalyzer.report import svg
from profanalyzer.report.antipatterns_view import (
    AntiPatternsView,
    antipatterns_markdown,
    antipatterns_view,
)
from profanalyzer.report.collectives_view import (
    CollectivesView,
    collectives_markdown,
    collectives_view,
)
from profanalyzer.report.counters_view import (
    CountersView,
    counters_markdown,
    counters_view,
)
from profanalyzer.report.expected_view import (
    ExpectedView,
    expected_view,
    markdown_expected,
)

__all__ = ["mxu_text", "ScopeRowView", "ScopesView", "IdleRowView", "IdleView", "Sections", "scopes_view", "idle_view", "build_sections", "markdown_sections", "MARKDOWN_SCOPE_ROWS", "MemoryView", "BufferRowView", "memory_view", "step_class_text", "host_activity_lines", "SCOPE_ROWS"]

#: Rows of the HTML/Markdown scope table.
SCOPE_ROWS = 40


@dataclass(frozen=True)
class ScopeRowView:
    scope: str
    ps: float
    ms: str
    pct: str
    main_bucket: str
    comm_ps: float
    comm_ms: str
    remat_ps: float
    remat_ms: str
    ops: int
    count: int
    source: str = ""  # Python file:line (function) of its ops


@dataclass(frozen=True)
class ScopesView:
    depth: int
    rows: tuple[ScopeRowView, ...]
    more: int  # rows left out
    note: str


def mxu_text(mxu: float) -> str:
    """Matmul MXU utilisation as shown, with its caveat when it is above the
    physical peak (which no measurement can be: the assumed peak or the FLOP
    count is off)."""
    if mxu > 1.0:
        return f"{pct(mxu)} (above the peak: the peak or the FLOP count is off; see the assumptions)"
    return pct(mxu)


def sort_key(x: float) -> int:
    """A table's sort key (data-v): whole picoseconds."""
    return int(round(x))


def _main_bucket(buckets) -> str:
    order = {b: i for i, b in enumerate(BUCKETS)}
    best = sorted(buckets.items(), key=lambda kv: (-kv[1], order.get(kv[0], 99)))
    return best[0][0] if best else ""


def scopes_view(a: Analysis, depth: int = DEFAULT_DEPTH, limit: int = SCOPE_ROWS) -> ScopesView | None:
    """The scope table at `depth` (None when the analysis has no scope rollup)."""
    if not a.scopes:
        return None
    rows = collapse(a.scopes, depth)
    out = tuple(
        ScopeRowView(r.scope, sort_key(r.ps), ms(r.ps), pct(r.fraction), _main_bucket(r.buckets), sort_key(r.exposed_comm_ps),
                     ms(r.exposed_comm_ps), sort_key(r.remat_ps), ms(r.remat_ps), r.ops, r.count, r.source)
        for r in rows[:limit]
    )
    note = (f"Self time per kept step, averaged over TensorCores, by JAX name scope (tf_op) to depth {depth}: "
            "jit/jvp/transpose/vmap wrappers, while/body and checkpoint plumbing dropped, layer indices folded "
            "(count: layers folded, or runs per step of the scope's most run op, e.g. a scanned loop's trip count). "
            "Rows sum to the busy time (the step minus idle).")
    return ScopesView(depth, out, max(0, len(rows) - limit), note)


@dataclass(frozen=True)
class IdleRowView:
    key: str
    label: str
    colour: str
    ms: str
    step_pct: str
    idle_pct: str


@dataclass(frozen=True)
class IdleView:
    chart: Markup | None
    rows: tuple[IdleRowView, ...]
    total: str  # the idle bucket
    note: str
    activity: tuple[str, ...] = ()  # host TraceMe names during host-caused idle (--host-activity)


def host_activity_lines(a: Analysis) -> tuple[str, ...]:
    return tuple(f"{h.name}: {ms(h.ps)} ms per step ({pct(h.fraction)} of the host-caused idle)" for h in a.idle_host_activity)


def idle_view(a: Analysis) -> IdleView | None:
    """The idle bucket by cause (None when the analysis has no idle causes)."""
    if not a.idle_causes:
        return None
    idle = a.breakdown.get("idle")
    total = sum(c.ps for c in a.idle_causes.values())
    rows = tuple(
        IdleRowView(k, IDLE_CAUSE_LABELS[k], svg.colour(k), ms(a.idle_causes[k].ps), pct(a.idle_causes[k].fraction),
                    pct(a.idle_causes[k].ps / total if total > 0 else None))
        for k in IDLE_CAUSES if k in a.idle_causes
    )
    chart = None
    if total > 0:
        segs = [svg.Segment(k, IDLE_CAUSE_LABELS[k], a.idle_causes[k].ps, a.idle_causes[k].ps / total) for k in IDLE_CAUSES if k in a.idle_causes]
        desc = "Idle time by cause: " + ", ".join(f"{s.label} {s.fraction * 100:.1f}%" for s in segs if s.fraction > 0) + "."
        chart = svg.share_bar(segs, "Why the TensorCore was idle", desc)
    note = ("The idle bucket split per core and kept step into causes that sum to it: idle outside every program run "
            "(XLA Modules) is host dispatch; inside a run, the time before an op talking to the host (infeed/outfeed, "
            "host callbacks, host transfers) is waiting on the host, before a collective or barrier waiting on a peer; "
            "the rest is unexplained.")
    return IdleView(chart, rows, f"{ms(idle.ps)} ms ({pct(idle.fraction)} of the step)" if idle else "-", note,
                    host_activity_lines(a))


@dataclass(frozen=True)
class BufferRowView:
    name: str
    shape: str
    kind: str
    space: str
    size: str
    of_capacity: str
    bar: str  # CSS width


@dataclass(frozen=True)
class MemoryView:
    source: str
    summary: str
    peak_bar: str  # CSS width of the peak against capacity
    peak_pct: str
    rows: tuple[BufferRowView, ...]
    notes: tuple[str, ...]


def memory_view(a: Analysis) -> MemoryView | None:
    """The memory section (None unless the analysis read memory: `--memory`)."""
    m = a.memory
    if m is None:
        return None
    cap = m.hbm_bytes or 0
    if m.source == "none":
        return MemoryView(m.source, "Memory is not in this capture.", "0%", "-", (), m.notes)
    frac = (m.peak_bytes / cap) if m.peak_bytes is not None and cap > 0 else None
    summary = (f"Peak {gib(m.peak_bytes)} in use of {gib(cap)} HBM per TensorCore ({m.capacity_source}); headroom {gib(m.headroom_bytes)}."
               + (f" {m.program} peaks at {m.peak_instruction}." if m.peak_instruction else "")
               + (f" Its buffers in host memory (S(5)): {gib(m.host_offload_bytes)}." if m.host_offload_bytes else ""))
    rows = tuple(
        BufferRowView(b.name, b.shape, b.kind, b.memory_space, binary_size(b.size_bytes), pct(b.size_bytes / cap if cap else None),
                      f"{min(1.0, b.size_bytes / cap) * 100:.1f}%" if cap else "0%")
        for b in m.top_buffers
    )
    return MemoryView(m.source, summary, f"{min(1.0, frac) * 100:.1f}%" if frac is not None else "0%", pct(frac), rows, m.notes)


def step_class_text(c) -> str:
    """One line on a periodic class of heavy steps."""
    steps = ", ".join(str(n) for n in c.steps[:12]) + (", ..." if len(c.steps) > 12 else "")
    return (f"Periodic heavy steps every {c.period} steps from step {c.first} ({steps}): {ms(c.step_ps)} ms, "
            f"+{ms(c.extra_ps)} ms over the median kept step, mostly {c.main_bucket} (+{ms(c.main_bucket_extra_ps)} ms); "
            f"amortised over the period it costs {pct(c.amortized_fraction)} of the average step "
            "(dropped from the steady state, reported as a class).")


@dataclass(frozen=True)
class Sections:
    scopes: ScopesView | None
    idle: IdleView | None = None
    memory: MemoryView | None = None
    step_classes: tuple[str, ...] = ()
    collectives: CollectivesView | None = None  # issue #26: per collective type (report.collectives_view)
    antipatterns: AntiPatternsView | None = None  # issue #26: HLO anti-patterns (report.antipatterns_view)
    counters: CountersView | None = None  # issue #26: kernel counters (report.counters_view)
    expected: ExpectedView | None = None  # issue #25 (report.expected_view)


def build_sections(a: Analysis) -> Sections:
    return Sections(scopes=scopes_view(a), idle=idle_view(a), memory=memory_view(a),
                    step_classes=tuple(step_class_text(c) for c in a.steps.classes), collectives=collectives_view(a),
                    antipatterns=antipatterns_view(a), counters=counters_view(a),
                    expected=expected_view(a))


#: Rows of the Markdown scope table.
MARKDOWN_SCOPE_ROWS = 8


def markdown_sections(a: Analysis, esc) -> list[str]:
    """The Markdown lines of these sections (`esc`: the Markdown escaper)."""
    out: list[str] = []
    for c in a.steps.classes:
        out.append(esc(step_class_text(c)))
        out.append("")
    mv = memory_view(a)
    if mv is not None:
        out.append(f"Memory ({esc(mv.source)}): {esc(mv.summary)}")
        out.append("")
    out.extend(markdown_expected(a, esc))
    iv = idle_view(a)
    idle = a.breakdown.get("idle")
    if iv is not None and idle is not None and idle.ps > 0:
        parts = [f"{esc(r.label)} {r.ms} ms ({r.idle_pct})" for r in iv.rows if a.idle_causes[r.key].ps > 0]
        out.append("Idle by cause: " + "; ".join(parts) + ".")
        out.append("")
        if iv.activity:
            out.append("Host activity during host-caused idle: " + "; ".join(esc(x) for x in iv.activity) + ".")
            out.append("")
    out += collectives_markdown(a, esc)
    out += antipatterns_markdown(a, esc)
    out += counters_markdown(a, esc)
    sv = scopes_view(a, limit=MARKDOWN_SCOPE_ROWS)
    if sv is not None:
        out.append(f"#### Name scopes (depth {sv.depth}, self time per kept step)")
        out.append("")
        out.append("| Scope | ms/step | Share | Exposed comm ms | Remat ms | Count |")
        out.append("|---|--:|--:|--:|--:|--:|")
        for r in sv.rows:
            out.append(f"| {esc(r.scope)} | {r.ms} | {r.pct} | {r.comm_ms} | {r.remat_ms} | {r.count} |")
        if sv.more:
            out.append("")
            out.append(f"_{sv.more} more scopes in the HTML report and the JSON._")
        out.append("")
    return out
