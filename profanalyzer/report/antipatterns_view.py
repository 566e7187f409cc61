"""The HLO anti-patterns table of the reports (HTML partial
`_antipatterns.html.j2`, Markdown lines), from `Analysis.antipatterns`
(profanalyzer.analyze.antipatterns). Plain text; the template escapes (op names and
shapes come from the program)."""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.format import ms, pct
from profanalyzer.core.vocab import LEVER_BY_ID
from profanalyzer.model.analysis import Analysis

__all__ = ["AntiPatternRowView", "AntiPatternsView", "antipatterns_view", "antipatterns_markdown", "ANTIPATTERN_ROWS"]

#: Rows shown (the JSON has all).
ANTIPATTERN_ROWS = 25


@dataclass(frozen=True)
class AntiPatternRowView:
    kind: str
    op: str
    detail: str
    ms: str
    pct: str
    lever: str
    fix: str


@dataclass(frozen=True)
class AntiPatternsView:
    rows: tuple[AntiPatternRowView, ...]
    total: str  # ms per step of all of them
    more: int
    note: str


def antipatterns_view(a: Analysis) -> AntiPatternsView | None:
    ap = a.antipatterns
    if not ap:
        return None
    rows = tuple(AntiPatternRowView(x.kind, x.op, x.detail, ms(x.ps), pct(x.fraction),
                                    LEVER_BY_ID[x.lever].section if x.lever in LEVER_BY_ID else x.lever, x.fix)
                 for x in ap[:ANTIPATTERN_ROWS])
    total = ms(sum(x.ps for x in ap))
    note = ("From the program's HLO (the capture's HloProtos or the compiled program): ops outside any fusion "
            "that only change layout, widen bf16 to f32 for a reduction, compute FP8 scales at run time, reshape "
            "or update in place. Time: the op's self time per kept step per TensorCore on this trace.")
    return AntiPatternsView(rows, total, max(0, len(ap) - ANTIPATTERN_ROWS), note)


def antipatterns_markdown(a: Analysis, esc) -> list[str]:
    v = antipatterns_view(a)
    if v is None:
        return []
    out = [f"#### HLO anti-patterns ({v.total} ms/step)", "", "| Kind | Op | ms/step | Share | Lever | What |",
           "|---|---|--:|--:|---|---|"]
    for r in v.rows:
        out.append(f"| {esc(r.kind)} | {esc(r.op)} | {r.ms} | {r.pct} | {esc(r.lever)} | {esc(r.detail)} |")
    if v.more:
        out += ["", f"_{v.more} more in the HTML report and the JSON._"]
    fixes = dict.fromkeys((r.kind, r.fix) for r in v.rows)
    out.append("")
    out += [f"- {esc(k)}: {esc(fx)}" for k, fx in fixes]
    out.append("")
    return out
