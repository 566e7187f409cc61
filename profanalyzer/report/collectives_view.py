"""The per-collective diagnosis table of the reports (HTML partial
`_collectives.html.j2`, Markdown lines): one row per collective type from
`Analysis.collective_diagnosis` (profanalyzer.analyze.collectives), and the line
naming the core the others wait for.

Plain text and formatted numbers; the template escapes (core names come
from the trace)."""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.format import ms, pct
from profanalyzer.core.vocab import COLLECTIVE_TYPE_LABELS, PREDICTED_INPUT_KINDS
from profanalyzer.model.analysis import Analysis

__all__ = ["CollectiveRowView", "CollectivesView", "collectives_view", "collectives_markdown", "card_sources"]


@dataclass(frozen=True)
class CollectiveRowView:
    type: str  # the JSON key (data-type)
    label: str  # as shown (vocab.COLLECTIVE_TYPE_LABELS)
    instances: int
    per_step: str
    bytes: str  # buffer per instance
    group: str  # devices per group
    moved: str  # bytes moved per device per instance
    achieved: str  # bus GB/s, or the flag when above the link
    of_link: str
    exposed_ms: str
    exposed_pct: str  # of the step
    spread_ms: str
    last_core: str
    last_share: str
    p50_ms: str
    p90_ms: str
    cv: str


@dataclass(frozen=True)
class CollectivesView:
    rows: tuple[CollectiveRowView, ...]
    late: str  # the core the others wait for, or that none is
    note: str  # how it is measured


def _bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _achieved(x) -> str:
    """Bus GB/s; above the link it is not a rate the link carried, and says so."""
    if x.achieved_gbps is None:
        return "—"
    if x.above_link:
        return f"above link ({x.achieved_gbps:.0f}?)"
    return f"{x.achieved_gbps:.1f}"


def collectives_view(a: Analysis) -> CollectivesView | None:
    d = a.collective_diagnosis
    if d is None or not d.types:
        return None
    one = d.cores < 2  # one TensorCore: no arrivals to compare
    rows = tuple(
        CollectiveRowView(
            type=x.type, label=COLLECTIVE_TYPE_LABELS.get(x.type, x.type), instances=x.instances, per_step=f"{x.per_step:.1f}", bytes=_bytes(x.bytes_per_instance),
            group="?" if x.group is None else str(x.group), moved=_bytes(x.moved_per_instance),
            achieved=_achieved(x), of_link="—" if x.above_link else pct(x.link_fraction),
            exposed_ms=ms(x.exposed_ps), exposed_pct=pct(x.exposed_fraction), spread_ms="—" if one else ms(x.arrival_spread_ps),
            last_core=x.last_core or "—", last_share=pct(x.last_core_share, missing="—"), p50_ms=ms(x.window_p50_ps),
            p90_ms=ms(x.window_p90_ps), cv="—" if x.window_cv is None else f"{x.window_cv:.2f}",
        )
        for x in d.types.values()
    )
    if one and a.input_kind in PREDICTED_INPUT_KINDS:
        late = (f"{d.instances} instances in the predicted step: every TensorCore replays the same schedule, so there are "
                f"no arrivals to compare and no core the others wait for.")
    elif one:
        late = f"One TensorCore ran these {d.instances} instances: no arrivals to compare, no core the others wait for."
    elif d.last_core is None:
        late = f"No core arrives last by more than {ms(d.tolerance_ps)} ms at any of the {d.instances} instances."
    else:
        late = (f"{d.last_core} arrives last most often: {d.last_counts.get(d.last_core, 0)} of the {d.distinct_last} "
                f"instances with a distinct last arrival ({pct(d.last_core_share)}), by a median {ms(d.last_core_lateness_ps)} ms.")
    link = next(iter(d.types.values())).link_gbps
    algos = "; ".join(f"{COLLECTIVE_TYPE_LABELS.get(x.type, x.type)}: {x.algorithm}" for x in d.types.values() if x.algorithm)
    above = [COLLECTIVE_TYPE_LABELS.get(x.type, x.type) for x in d.types.values() if x.above_link]
    flag = (f" Above the link ({', '.join(above)}): the window is shorter than the transfer could take over ICI -- "
            f"the group may sit on one chip, or the window misses part of the transfer; not shown as a rate." if above else "")
    note = (f"{d.instances} instances over {d.cores} TensorCore{'s' if d.cores != 1 else ''} (kept steps). Buffer: the data "
            f"the collective is about, from its HLO shapes; group: devices per group (replica_groups, else the shapes; "
            f"? = unknown, the large-group bound taken); moved: bytes per device over the links ({algos}). GB/s: the bus "
            f"bandwidth, moved bytes over the window, against the chip's ICI per TensorCore ({link:.0f} GB/s, hardware "
            f"table).{flag} Spread: latest minus earliest "
            f"arrival (window start); last core: the latest arrival when later than the others' median by more than "
            f"{ms(d.tolerance_ps)} ms. CV: std/mean of window durations.")
    return CollectivesView(rows, late, note)


def collectives_markdown(a: Analysis, esc) -> list[str]:
    """The Markdown lines of the table (`esc`: the Markdown escaper)."""
    v = collectives_view(a)
    if v is None:
        return []
    out = ["#### Per collective type", "", esc(v.late), "",
           "| Type | Instances | Buffer | Group | Moved | Bus GB/s | Of link | Exposed ms | Spread ms | Last core | Last share | CV |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|"]
    for r in v.rows:
        out.append(f"| {esc(r.label)} | {r.instances} | {r.bytes} | {r.group} | {r.moved} | {r.achieved} | {r.of_link} | {r.exposed_ms} | "
                   f"{r.spread_ms} | {esc(r.last_core)} | {r.last_share} | {r.cv} |")
    out += ["", esc(v.note), ""]
    return out


def card_sources(f, a: Analysis, rows: int) -> tuple[tuple[str, str], ...]:
    """A finding's source lines (Finding.sources, "op: file:line"), each with
    the anchor of its op's row in the top-ops table (the first `rows` top
    ops), or '' when the op is not listed there."""
    rank = {op.name: i for i, op in enumerate(a.top_ops[:rows], 1)}
    return tuple((s, f"top-op-{rank[s.split(': ', 1)[0]]}" if s.split(": ", 1)[0] in rank else "") for s in f.sources)
