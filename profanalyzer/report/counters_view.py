"""The kernel counters table of the reports (HTML partial `_counters.html.j2`,
Markdown lines), from `Analysis.kernel_counters` (profanalyzer.analyze.counters).
Plain text; the template escapes (op names come from the trace)."""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.format import ms, pct
from profanalyzer.core.vocab import LEVER_BY_ID
from profanalyzer.model.analysis import Analysis

__all__ = ["CounterRowView", "CountersView", "counters_view", "counters_markdown"]


@dataclass(frozen=True)
class CounterRowView:
    op: str
    ms: str
    mxu: str
    vector: str  # the busiest vector unit
    wait: str
    verdict: str
    lever: str
    reason: str


@dataclass(frozen=True)
class CountersView:
    rows: tuple[CounterRowView, ...]
    note: str


def _vector(util) -> str:
    vec = [(u, v) for u, v in util.items() if u.startswith("Vector") and u not in ("Vector Fills", "Vector Spills")]
    if not vec:
        return "—"
    u, v = max(vec, key=lambda x: (x[1], x[0]))
    return f"{pct(v, 0)} ({u})"


def counters_view(a: Analysis) -> CountersView | None:
    kc = a.kernel_counters
    if not kc:
        return None
    rows = tuple(CounterRowView(k.op, ms(k.ps), pct(k.utilisation.get("MXU"), 0), _vector(k.utilisation),
                                pct(k.ep_wait_fraction, 0), k.verdict.replace("_", " ") or "—",
                                LEVER_BY_ID[k.lever].section if k.lever in LEVER_BY_ID else "—", k.reason)
                 for k in kc)
    note = ("From the capture's _counters_ line (% util samples, each weighted by its overlap with the op's runs) and "
            "the emit_pipeline phases on XLA TraceMe (wait: the ep_wait_* share of the op's time).")
    return CountersView(rows, note)


def counters_markdown(a: Analysis, esc) -> list[str]:
    v = counters_view(a)
    if v is None:
        return []
    out = ["#### Kernel counters", "", "| Op | ms/step | MXU | Vector | DMA wait | Verdict | Lever |", "|---|--:|--:|--:|--:|---|---|"]
    for r in v.rows:
        out.append(f"| {esc(r.op)} | {r.ms} | {r.mxu} | {esc(r.vector)} | {r.wait} | {esc(r.verdict)} | {r.lever} |")
    out += ["", esc(v.note), ""]
    return out
