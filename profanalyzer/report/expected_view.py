"""The report's "Expected vs measured" section (issue #25): for a capture
whose /host:metadata carries its programs' HLO, the compiler's expected time
(estimated_cycles at the assumed clock) beside the measured one, per op and
op family; the ops far slower than expected, with evidence; the ops the
compiler gave no estimate. View records and builders only, so context.py and
markdown.py just hook it in. Plain text; the template escapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.format import ms
from profanalyzer.model.analysis import Analysis, ExpectedOp

__all__ = ["ExpectedRowView", "ExpectedView", "expected_view", "markdown_expected", "EXPECTED_ROWS"]

#: Rows of each table (HTML and Markdown).
EXPECTED_ROWS = 20
#: An op whose measured and expected runs both print as 0.000 ms is not listed (it is counted in a note).
SHOWN_MIN_PS = 500_000


@dataclass(frozen=True)
class ExpectedRowView:
    name: str
    family: str
    opcode: str
    runs: str
    expected_ms: str  # per run
    measured_ms: str  # mean per run
    measured_range: str  # min-max per run
    ratio: str


@dataclass(frozen=True)
class FamilyRowView:
    family: str
    ops: str
    expected_ms: str  # per step
    measured_ms: str  # per step
    ratio: str


@dataclass(frozen=True)
class ExpectedView:
    summary: str
    rows: tuple[ExpectedRowView, ...]
    families: tuple[FamilyRowView, ...]
    slower: tuple[str, ...]
    without: tuple[ExpectedRowView, ...]
    without_note: str
    notes: tuple[str, ...]


def _ratio(r: float | None) -> str:
    return f"{r:.2f}x" if r is not None else "no estimate"


def _row(o: ExpectedOp) -> ExpectedRowView:
    lo, hi = ms(o.measured_min_ps), ms(o.measured_max_ps)
    return ExpectedRowView(o.name, o.family, o.opcode, str(o.occurrences),
                           ms(o.expected_ps) if o.expected_ps is not None else "-", ms(o.measured_mean_ps),
                           lo if lo == hi else f"{lo}-{hi}", _ratio(o.ratio))


def _shown(o: ExpectedOp) -> bool:
    return o.measured_mean_ps >= SHOWN_MIN_PS or (o.expected_ps or 0) >= SHOWN_MIN_PS


def expected_view(a: Analysis) -> ExpectedView | None:
    e = a.expected
    if e is None:
        return None
    n = max(1, e.steps) * max(1, e.cores)  # the families' sums pool every TensorCore's runs: per step per TensorCore
    ratio = e.step_measured_estimated_ps / e.step_expected_ps if e.step_expected_ps else None
    summary = (f"Per step, the ops the compiler estimated: expected {ms(e.step_expected_ps)} ms, measured "
               f"{ms(e.step_measured_estimated_ps)} ms ({_ratio(ratio)}); ops without an estimate measured "
               f"{ms(e.step_measured_unestimated_ps)} ms the compiler did not count as compute "
               f"(clock {e.clock_ghz:g} GHz assumed; {e.steps} step(s)"
               + (f", per TensorCore, the runs of {e.cores} TensorCores pooled" if e.cores > 1 else "") + ").")
    fams = tuple(FamilyRowView(f.family, str(f.ops), ms(f.expected_ps / n) if f.expected_ps is not None else "-",
                               ms(f.measured_ps / n), _ratio(f.ratio)) for f in e.families
                 if f.measured_ps / n >= SHOWN_MIN_PS or (f.expected_ps or 0) / n >= SHOWN_MIN_PS)[:EXPECTED_ROWS]
    slower = tuple(f"{s.name}: {s.evidence}" + (f" -- lever: {s.lever}" if s.lever else "") for s in e.slower)
    with_est = [o for o in e.ops if o.expected_ps is not None and _shown(o)]
    without = [o for o in e.without_estimate if _shown(o)]
    hidden = sum(1 for o in (*e.ops, *e.without_estimate) if not _shown(o))
    without_note = " ".join(x for x in (
        ("The ops without an estimate are listed last: waits at async dones, custom calls, synchronous "
         "collectives." if without else "" if e.without_estimate else
         "Every measured op carries a compiler estimate."),
        (f"{hidden} op(s) whose runs measure and are expected under 0.001 ms are not listed." if hidden else "")) if x)
    return ExpectedView(summary, tuple(_row(o) for o in with_est[:EXPECTED_ROWS]), fams, slower,
                        tuple(_row(o) for o in without[:EXPECTED_ROWS]), without_note, e.notes)


def markdown_expected(a: Analysis, esc) -> list[str]:
    """Markdown lines of the section (`esc`: the Markdown escaper); [] without HLO."""
    v = expected_view(a)
    if v is None:
        return []
    out = ["### Expected vs measured (the compiler's estimates)", "", esc(v.summary), "",
           "| op | family | runs (kept steps, every TensorCore) | expected ms per run | measured ms per run (mean) | "
           "min-max ms | measured / expected |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in v.rows + v.without:
        out.append(f"| {esc(r.name)} | {esc(r.family)} | {r.runs} | {r.expected_ms} | {r.measured_ms} | "
                   f"{r.measured_range} | {r.ratio} |")
    out.append("")
    out.append("| op family | ops | expected ms/step | measured ms/step | measured / expected |")
    out.append("| --- | ---: | ---: | ---: | ---: |")
    for f in v.families:
        out.append(f"| {esc(f.family)} | {f.ops} | {f.expected_ms} | {f.measured_ms} | {f.ratio} |")
    out.append("")
    for s in v.slower:
        out.append(f"- Slower than expected: {esc(s)}")
    if v.without_note:
        out.append(esc(v.without_note))
    out.append("")
    return out
