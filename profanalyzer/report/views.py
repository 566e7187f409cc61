"""The view records of the HTML report: what `context.build_context` fills
and the templates read (plain text and numbers already formatted; charts as
`markupsafe.Markup`)."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from profanalyzer.report.sections import Sections


@dataclass(frozen=True)
class Fact:
    label: str
    value: str
    id: str = ""
    tip: str = ""


@dataclass(frozen=True)
class Kpi:
    id: str
    label: str
    value: str
    sub: str
    tone: str  # neutral | good | warn | bad


@dataclass(frozen=True)
class LegendItem:
    key: str
    label: str
    colour: str


@dataclass(frozen=True)
class BucketRow:
    key: str
    label: str
    colour: str
    ms: str
    pct: str
    fraction: float  # raw, for data attributes
    bar: str  # css width, e.g. "59.7%"
    kind: str  # compute | communication | idle | overlay
    zero: bool = False  # nothing in this bucket (row dimmed)


@dataclass(frozen=True)
class DocView:
    detects: str
    why: str
    change: str


@dataclass(frozen=True)
class Card:
    rank: int
    code: str
    lever: str
    lever_label: str
    title: str
    severity: str
    saving_ms: str
    saving_pct: str
    saving_bar: str  # css width relative to the step
    evidence: tuple[str, ...]
    actions: str  # the exact lines, one code block
    assumptions: tuple[str, ...]
    guide_section: str
    doc: DocView | None
    merged_note: str
    trace_marker: str = ""  # where `--trace-out` put this finding's marker ('' without an export)
    sources: tuple[tuple[str, str], ...] = ()  # (op: file:line, anchor of its top-ops row or '')


@dataclass(frozen=True)
class WorkloadView:
    row: str
    primary_sharding: str
    secondary_sharding: str
    main_bottleneck: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class RecsView:
    status: str  # ok | empty | unavailable
    message: str
    cards: tuple[Card, ...]
    total_ms: str  # the findings' savings summed (a sum of claims)
    total_pct: str
    rules_run: str
    together: str = ""  # what the savings mean together: the re-timed combination, or that the total is a sum of claims


@dataclass(frozen=True)
class DroppedStep:
    number: int
    ms: str
    reason: str


@dataclass(frozen=True)
class BreakdownView:
    chart: Markup
    chart_desc: str
    rows: tuple[BucketRow, ...]
    remat: BucketRow
    phases: tuple[BucketRow, ...]
    total_ms: str
    dropped: tuple[DroppedStep, ...]
    rule: str
    phases_note: str = ""  # why there is no phase table (not a training run)


@dataclass(frozen=True)
class WindowRow:
    start_ms: str
    window_ms: str
    type: str
    name: str
    name_full: str
    hidden_pct: str
    klass: str


@dataclass(frozen=True)
class TimelineView:
    chart: Markup
    caption: str
    legend: tuple[LegendItem, ...]
    window_counts: str
    windows: tuple[WindowRow, ...]
    lanes_text: tuple[str, ...]  # text alternative: one line per lane
    note: str


@dataclass(frozen=True)
class CommRow:
    type: str
    label: str
    engine: str
    count: str
    window_ms: str
    hidden_ms: str
    exposed_ms: str
    hidden_pct: str
    step_pct: str
    hidden_bar: str  # css widths relative to the largest hidden+exposed
    exposed_bar: str
    scopes: str = ""  # framework scopes of its most exposed windows (tooltip)


@dataclass(frozen=True)
class ExposedRow:
    core: str
    step: int
    type: str
    name: str
    name_full: str
    engine: str
    offset_pct: str
    window_ms: str
    exposed_ms: str
    hidden_pct: str
    klass: str


@dataclass(frozen=True)
class CommView:
    rows: tuple[CommRow, ...]
    exposed_ms: str
    exposed_pct: str
    window_source: str
    unmatched: str
    a2a_share: str
    verdict: str
    verdict_label: str
    verdict_tone: str
    verdict_reason: str
    sc_facts: tuple[Fact, ...]
    top_exposed: tuple[ExposedRow, ...]


@dataclass(frozen=True)
class OpRow:
    rank: int
    name: str  # cut to NAME_CUT
    name_full: str
    bucket: str
    bucket_label: str
    colour: str
    category: str
    tags: str
    ms: str
    ps: float
    pct: str
    count: str
    count_v: float
    tflops: str
    tflops_v: float
    gbps: str
    gbps_v: float
    intensity: str
    intensity_v: float
    bound: str
    roof: str
    roof_v: float
    tf_op: str
    source: str = ""  # Python file:line (function) of its HLO


@dataclass(frozen=True)
class RematView:
    ms: str
    pct: str
    phases: tuple[BucketRow, ...]
    ops: tuple[OpRow, ...]
    note: str


@dataclass(frozen=True)
class AttentionView:
    ms: str
    pct: str
    facts: tuple[Fact, ...]
    ops: tuple[OpRow, ...]
    note: str


@dataclass(frozen=True)
class RooflineView:
    chart: Markup | None
    caption: str
    facts: tuple[Fact, ...]
    unplotted: str
    counters: tuple[Fact, ...] = ()  # per plotted op with hardware counters: '#rank op' -> MXU / vector use, verdict


@dataclass(frozen=True)
class CoreRow:
    core: str
    host: str
    steps_kept: int
    step_ms: str
    busy_ms: str
    compute_ms: str
    comm_ms: str
    idle_pct: str
    z: str
    straggler: bool


@dataclass(frozen=True)
class CoresView:
    chart: Markup | None
    chart_desc: str
    rows: tuple[CoreRow, ...]
    folded: bool
    stragglers: tuple[str, ...]
    spread: str
    rule: str


@dataclass(frozen=True)
class NavItem:
    id: str
    label: str


@dataclass(frozen=True)
class ReportContext:
    title: str
    trace_name: str
    trace_path: str
    headline: str
    first_action: str
    facts: tuple[Fact, ...]
    kpis: tuple[Kpi, ...]
    definitions: tuple[Fact, ...]  # the two shown in the header
    all_definitions: tuple[Fact, ...]
    notes: tuple[str, ...]
    share_chart: Markup
    legend: tuple[LegendItem, ...]
    workload: WorkloadView | None
    recs: RecsView
    breakdown: BreakdownView
    timeline: TimelineView | None
    comm: CommView
    remat: RematView
    attention: AttentionView
    roofline: RooflineView
    top_ops: tuple[OpRow, ...]
    top_ops_note: str
    cores: CoresView | None  # None for a replayed program (identical replicas)
    nav: tuple[NavItem, ...]
    tool_version: str
    command_line: str
    input_sha256: str
    timestamp: str | None
    sections: Sections | None = None  # name scopes, idle causes, memory (report.sections)
    predicted: bool = False  # issue #25: a replayed compiled program; every time shown is predicted


# ---------------------------------------------------------------------------
# Helpers shared with the Markdown renderer
# ---------------------------------------------------------------------------
