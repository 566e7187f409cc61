"""The report's summary texts and bucket rows, shared by the HTML context
(`context.build_context`) and the Markdown: the headline, the first action,
the bucket table rows, the exposed communication, and the small text helpers
(bar widths, cut names).
"""

from __future__ import annotations

from profanalyzer.core.format import ms, pct
from profanalyzer.core.vocab import BUCKETS, COLLECTIVE_BUCKETS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.report import svg
from profanalyzer.report.views import BucketRow

#: Op names longer than this are cut in table cells (full name in a tooltip).
NAME_CUT = 90


def bucket_label(key: str) -> str:
    return svg.BUCKET_LABELS.get(key, key)


def bucket_rows(a: Analysis) -> tuple[BucketRow, ...]:
    """The bucket table: every bucket in BUCKETS order (zero rows included,
    so the table always sums to the step)."""
    rows = []
    for b in BUCKETS:
        s = a.breakdown.get(b)
        if s is None:
            continue
        kind = "idle" if b == "idle" else ("communication" if b in COLLECTIVE_BUCKETS else "compute")
        rows.append(BucketRow(b, bucket_label(b), svg.colour(b), ms(s.ps), pct(s.fraction), s.fraction, bar_width(s.fraction), kind, s.ps <= 0))
    return tuple(rows)


def remat_row(a: Analysis) -> BucketRow:
    return BucketRow("remat", "Recompute (remat, overlaps the buckets)", "#777777", ms(a.remat.ps), pct(a.remat.fraction), a.remat.fraction, bar_width(a.remat.fraction), "overlay")


def exposed_comm(a: Analysis) -> tuple[float, float]:
    """Exposed collective time per step (ps) and its fraction of the step, as
    the overlap summary states it (the sum of the collective buckets)."""
    c = a.communication
    return float(c.exposed_total_ps), float(c.exposed_total_fraction)


#: Prefix of the headline of a report on a compiled program (no TPU ran it).
PREDICTED_HEADLINE = "PREDICTED (a compiled program, no TPU ran it: every time is the compiler's estimate at an assumed clock): "


def headline(a: Analysis) -> str:
    """One sentence: the step time and where it went (largest groups)."""
    t = a.steps.step_time_ps
    groups: dict[str, float] = {}
    for b in BUCKETS:
        s = a.breakdown.get(b)
        if s is None:
            continue
        g = "matmul" if b.startswith("matmul") else ("exposed communication" if b in COLLECTIVE_BUCKETS else bucket_label(b).lower())
        groups[g] = groups.get(g, 0.0) + s.fraction
    parts = [f"{g} {pct(f)}" for g, f in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])) if f >= 0.005]
    return f"Step time {ms(t['median'])} ms ({median_of_kept(a.steps.kept)}): " + ", ".join(parts) + "."


def first_action(findings: Findings | None) -> str:
    if findings is None:
        return ""
    recs = findings.recommendations
    if not recs:
        return "No tuning lever passed its threshold: nothing to change first."
    f = first_saving(findings)
    if f is None:
        return "No recommendation has a measurable saving in this trace (see the cards below)."
    return f"Change first: {f.title} [{f.code}] — saves about {ms(f.estimated_saving_ps)} ms/step ({pct(f.estimated_saving_fraction)})."


def first_saving(findings: Findings | None) -> Finding | None:
    """The best-ranked recommendation whose saving shows as at least 0.001 ms."""
    if findings is None:
        return None
    return next((f for f in findings.recommendations if f.estimated_saving_ps >= 0.5e6), None)


def cores_text(a: Analysis, sep: str = " · ") -> str:
    """The cores a run used; for a replayed program, the chip's own counts (its table) and how the replay maps
    onto them (one SparseCore plane per TensorCore), not the made planes read as a capture's."""
    if a.time_basis == "predicted":
        hw = a.hardware
        return (f"one chip: {hw.tensorcores_per_chip} TensorCores{sep}{hw.sparsecores_per_chip} SparseCores (chip table; "
                f"the replay puts the program's SparseCore work on one SparseCore per TensorCore)")
    return f"{a.tensorcores} TensorCores{sep}{a.sparsecores} SparseCores"


def bar_width(fraction: float | None) -> str:
    if fraction is None or fraction != fraction:
        return "0%"
    return f"{max(0.0, min(1.0, fraction)) * 100:.2f}%"


def median_of_kept(n: int) -> str:
    """What the step time is of: 'median of 12 kept steps'; 'the one kept step' (no median of one)."""
    return "the one kept step" if n == 1 else f"median of {n} kept steps"


def cut_name(text: str, n: int = NAME_CUT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
