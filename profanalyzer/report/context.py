"""The typed context of the HTML report: every number, label, width and chart
is computed here, so the template only formats.

    build_context(analysis, findings, command_line=..., input_sha256=...) -> ReportContext

Strings here are plain text (the template escapes them); the charts are
`markupsafe.Markup` built by `svg.py`, which escapes trace text itself.
Numbers are formatted with profanalyzer.format's `ms()` / `pct()` so the
report, the terminal and the JSON agree digit for digit. Rule docs come in
with each finding (`Finding.doc`, set by its rule): this module does not reach
into the rule registry.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from profanalyzer.format import count, ms, pct
from profanalyzer.model import Analysis, Finding, Findings, RuleDoc, TopOp
from profanalyzer.report import svg
from profanalyzer.report.collectives_view import card_sources
from profanalyzer.report.sections import build_sections, mxu_text
from profanalyzer.report.views import (
    AttentionView,
    BreakdownView,
    BucketRow,
    Card,
    CommRow,
    CommView,
    CoreRow,
    CoresView,
    DocView,
    DroppedStep,
    ExposedRow,
    Fact,
    Kpi,
    LegendItem,
    NavItem,
    OpRow,
    RecsView,
    RematView,
    ReportContext,
    RooflineView,
    TimelineView,
    WindowRow,
    WorkloadView,
)
from profanalyzer.shell import finding_lines
from profanalyzer.stats import median_of
from profanalyzer.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COLLECTIVE_TYPE_LABELS,
    LEVER_LABELS,
    WHAT_IF_LEVERS,
)

#: Rows of the op tables.
TOP_OPS_ROWS = 30
SECTION_OPS_ROWS = 10
EXPOSED_WINDOW_ROWS = 15
#: Op names longer than this are cut in table cells (full name in a tooltip).
NAME_CUT = 90
#: Cores listed in the per-core table before it folds into <details>.
CORES_OPEN = 16

VERDICT_LABELS = {
    "on": ("offloaded", "good"),
    "partial": ("partly offloaded", "warn"),
    "off": ("not offloaded", "bad"),
    "not_visible": ("not visible in this capture", "warn"),
    "none": ("no collectives", "neutral"),
}
#: Collective type labels: vocab.COLLECTIVE_TYPE_LABELS.
COLLECTIVE_LABELS = COLLECTIVE_TYPE_LABELS


# ---------------------------------------------------------------------------
# Context types
# ---------------------------------------------------------------------------


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
        rows.append(BucketRow(b, bucket_label(b), svg.colour(b), ms(s.ps), pct(s.fraction), s.fraction, _w(s.fraction), kind, s.ps <= 0))
    return tuple(rows)


def remat_row(a: Analysis) -> BucketRow:
    return BucketRow("remat", "Recompute (remat, overlaps the buckets)", "#777777", ms(a.remat.ps), pct(a.remat.fraction), a.remat.fraction, _w(a.remat.fraction), "overlay")


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
    f = _first_saving(findings)
    if f is None:
        return "No recommendation has a measurable saving in this trace (see the cards below)."
    return f"Change first: {f.title} [{f.code}] — saves about {ms(f.estimated_saving_ps)} ms/step ({pct(f.estimated_saving_fraction)})."


def _first_saving(findings: Findings | None) -> Finding | None:
    """The best-ranked recommendation whose saving shows as at least 0.001 ms."""
    if findings is None:
        return None
    return next((f for f in findings.recommendations if f.estimated_saving_ps >= 0.5e6), None)


def _w(fraction: float | None) -> str:
    if fraction is None or fraction != fraction:
        return "0%"
    return f"{max(0.0, min(1.0, fraction)) * 100:.2f}%"


def _dash(text: str | None) -> str:
    """'' for placeholder values ('-', '—', None)."""
    t = (text or "").strip()
    return "" if t in ("-", "—", "–", "none", "n/a") else t


def median_of_kept(n: int) -> str:
    """What the step time is of: 'median of 12 kept steps'; 'the one kept step' (no median of one)."""
    return "the one kept step" if n == 1 else f"median of {n} kept steps"


def _lane_label(name: str) -> str:
    """`/device:TPU:0 SparseCore 1` -> `SparseCore 1`; `... TensorCore` -> `TensorCore`."""
    for key in ("SparseCore", "TensorCore"):
        i = name.find(key)
        if i >= 0:
            return name[i:]
    return name


def _core_short(core: str, plane: str, hosts: int) -> str:
    """`host:/device:TPU:5` -> `TPU:5` (with the host when there are several)."""
    m = re.search(r"TPU:\d+", plane)
    if not m:
        return core
    return f"{core.split(':', 1)[0]}:{m.group(0)}" if hosts > 1 else m.group(0)


def _cut(text: str, n: int = NAME_CUT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _trace_name(source: str) -> str:
    name = os.path.basename(source.rstrip("/\\")) or source
    return name


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


def _facts(a: Analysis, findings: Findings | None) -> tuple[Fact, ...]:
    st = a.steps
    t = st.step_time_ps
    chip = a.hardware.name
    hosts = ", ".join(a.hosts) if len(a.hosts) <= 3 else f"{', '.join(a.hosts[:3])}, … (+{len(a.hosts) - 3})"
    facts = [
        Fact("Trace", _trace_name(a.source), "fact-trace", a.source),
    ]
    if a.run:
        facts.append(Fact("Run", a.run, "fact-run"))
    facts += [
        Fact("Hosts", f"{len(a.hosts)} ({hosts})" if a.hosts else "0", "fact-hosts"),
        Fact("Chip", f"{chip}" + (" (assumed)" if a.chip_source.startswith("assumed") else ""), "fact-chip",
             a.chip_source if a.chip_source.startswith("assumed") else f"from {a.chip_source}"),
        Fact("Cores", f"{a.tensorcores} TensorCores · {a.sparsecores} SparseCores", "fact-cores"),
        Fact("Steps used", f"{st.kept} of {st.count} ({st.source})", "fact-steps"),
        Fact("Step time", f"{ms(t['median'])} ms median · {ms(t['min'])}–{ms(t['max'])} ms" if st.kept != 1
             else f"{ms(t['median'])} ms ({median_of_kept(1)})", "fact-step-time"),
    ]
    if a.run_kind is not None:
        facts.insert(2 if a.run else 1, Fact("Run kind", a.run_kind.kind, "fact-run-kind", "; ".join(a.run_kind.reasons)))
    u = a.utilisation
    low = f"; low confidence: FLOPs known for {pct(u.flops_coverage, 0)} of the compute" if u.low_confidence else ""
    facts.append(Fact("MFU", pct(u.mfu) + (f" ({u.mfu_flops_source}{low})" if u.mfu is not None else f" ({u.mfu_flops_source})"), "fact-mfu"))
    if u.mxu_matmul is not None:
        facts.append(Fact("Matmul MXU utilisation", mxu_text(u.mxu_matmul), "fact-mxu"))
    stragglers = [c.core for c in a.per_core if c.straggler]
    if stragglers:
        facts.append(Fact("Straggler cores", ", ".join(stragglers), "fact-stragglers"))
    ho = a.host_offload
    if ho is not None and ho.ps > 0:
        rate = f" · {ho.gbps:.1f} GB/s while waiting" if ho.gbps else ""
        facts.append(Fact("Host offload", f"{ho.bytes_per_step / 1e9:.2f} GB per step and core{rate}", "fact-host-offload",
                          f"{ho.from_host_bytes / 1e9:.2f} GB from host, {ho.to_host_bytes / 1e9:.2f} GB to host, "
                          f"{ho.transfers:.0f} transfers; the core waits {pct(ho.fraction)} of the step"))
    if findings is not None and findings.workload is not None:
        facts.append(Fact("Workload", findings.workload.row, "fact-workload", "; ".join(findings.workload.reasons)))
    if a.capture is not None:
        facts.append(Fact("Capture", a.capture.verdict + (f" ({len(a.capture.issues)} issue{'s' if len(a.capture.issues) != 1 else ''})" if a.capture.issues else ""),
                          "fact-capture", "; ".join(i.message for i in a.capture.issues)))
    for x in a.assumptions:
        facts.append(Fact("Assumed", x, "fact-assumed"))
    return tuple(facts)


def _kpis(a: Analysis, findings: Findings | None) -> tuple[Kpi, ...]:
    t = a.steps.step_time_ps
    u = a.utilisation
    exp_ps, exp_f = exposed_comm(a)
    idle = a.breakdown.get("idle")
    kpis = [
        Kpi("kpi-step-time", "Step time", f"{ms(t['median'])} ms", median_of_kept(a.steps.kept), "neutral"),
        Kpi(
            "kpi-mfu",
            "MFU",
            pct(u.mfu) + (" *" if u.low_confidence else ""),
            ("model FLOPs / BF16 peak" + (f" (* FLOPs known for {pct(u.flops_coverage, 0)} of the compute)" if u.low_confidence else ""))
            if u.mfu is not None else (u.mfu_flops_source[6:-1] if u.mfu_flops_source.startswith("none (") else "no FLOP counts in the trace"),
            "neutral" if u.mfu is None else ("good" if u.mfu >= 0.4 else ("warn" if u.mfu >= 0.25 else "bad")),
        ),
        Kpi("kpi-exposed", "Exposed communication", pct(exp_f), f"{ms(exp_ps)} ms per step", "good" if exp_f < 0.05 else ("warn" if exp_f < 0.15 else "bad")),
        Kpi(
            "kpi-idle",
            "Idle",
            pct(idle.fraction if idle else None),
            f"{ms(idle.ps if idle else None)} ms per step",
            "good" if idle is None or idle.fraction < 0.03 else ("warn" if idle.fraction < 0.1 else "bad"),
        ),
    ]
    f = _first_saving(findings)
    if f is not None:
        kpis.append(Kpi("kpi-top-saving", "Top recommendation", f"−{ms(f.estimated_saving_ps)} ms", f"{pct(f.estimated_saving_fraction)} of the step · {f.code}", "warn"))
    else:
        kpis.append(Kpi("kpi-remat", "Recompute", pct(a.remat.fraction), f"{ms(a.remat.ps)} ms per step", "neutral"))
    return tuple(kpis)


def _definitions(a: Analysis) -> tuple[tuple[Fact, ...], tuple[Fact, ...]]:
    d = a.definitions
    shown = (
        Fact("Step source", f"{a.steps.source} — {d.get('step_time', '')}".rstrip(" —"), "def-step"),
        Fact("Exposed communication", d.get("exposed_communication", ""), "def-exposed"),
    )
    rest = tuple(Fact(k.replace("_", " "), v, f"def-{k}") for k, v in sorted(d.items()))
    rest += (Fact("steady-state steps", a.steps.rule, "def-steady"),)
    return shown, rest


def _card(rank: int, f: Finding, a: Analysis, docs: Mapping[str, RuleDoc]) -> Card:
    doc = docs.get(f.code, f.doc)
    return Card(
        rank=rank,
        code=f.code,
        lever=f.lever,
        lever_label=LEVER_LABELS.get(f.lever, f.lever),
        title=f.title,
        severity=f.severity,
        saving_ms=ms(f.estimated_saving_ps),
        saving_pct=pct(f.estimated_saving_fraction),
        saving_bar=_w(f.estimated_saving_fraction),
        evidence=tuple(f.evidence),
        actions="\n".join(finding_lines(f)),
        assumptions=tuple(f.assumptions),
        guide_section=f.guide_section,
        doc=DocView(doc.detects, doc.why, doc.change) if doc is not None else None,
        merged_note=f.merged_note,
        sources=card_sources(f, a, TOP_OPS_ROWS),
    )


def _recs(a: Analysis, findings: Findings | None, docs: Mapping[str, RuleDoc]) -> RecsView:
    if findings is None:
        return RecsView("unavailable", "Recommendations were not computed for this report.", (), "-", "-", "")
    cards = tuple(_card(i, f, a, docs) for i, f in enumerate(findings.recommendations, 1))
    total = sum(f.estimated_saving_ps for f in findings.recommendations)
    step = a.steps.step_time_ps["mean"] or 1.0
    rules = ", ".join(findings.rules_run)
    if not cards:
        return RecsView("empty", "No tuning lever's estimated saving passed its threshold: no change recommended.", (), ms(0.0), pct(0.0), rules)
    return RecsView("ok", "", cards, ms(total), pct(total / step), rules, _together(a, findings, total, step))


def _together(a: Analysis, findings: Findings, total: float, step: float) -> str:
    """One number, one meaning: the findings' savings summed are a sum of
    claims; what the levers save pulled together is the what-if re-timing
    (profanalyzer.whatif, as `analyze --what-if`), shown when it models
    every finding's claims (`whatif.modelled`)."""
    claims = f"their estimates add up to {ms(total)} ms/step ({pct(total / step)}), a sum of claims"
    if findings.together is not None:  # computed by the findings stage (findings.together)
        levers, saving_ps = findings.together
        return (f"together about {ms(saving_ps)} ms/step ({pct(saving_ps / step)}) with the levers pulled together "
                f"(re-timed as analyze --what-if {','.join(levers)}); {claims}")
    return (f"{claims}, not what pulling them together saves (analyze --what-if re-times "
            f"{', '.join(WHAT_IF_LEVERS)} together)")


def _step_segments(buckets: Mapping[str, float], total: float) -> tuple[svg.Segment, ...]:
    tot = total or 1.0
    return tuple(svg.Segment(b, bucket_label(b), float(buckets.get(b, 0.0)), float(buckets.get(b, 0.0)) / tot) for b in BUCKETS)


def _breakdown(a: Analysis) -> BreakdownView:
    st = a.steps
    bars = [svg.StepBar(r.number, r.step_ps, r.kept, r.reason, _step_segments(r.buckets, r.step_ps)) for r in st.table]
    kept = [r for r in st.table if r.kept]
    desc = (
        f"{len(st.table)} steps, {st.kept} kept. "
        + " ".join(f"Step {r.number}: {ms(r.step_ps)} ms{'' if r.kept else ' (dropped: ' + r.reason + ')'}." for r in st.table[:60])
        + (" …" if len(st.table) > 60 else "")
        + " The bucket table below gives the mean over kept steps."
    )
    chart = svg.step_bars(bars, st.step_time_ps["median"] if kept else None, "Step time per step, stacked by bucket", desc)
    phases = tuple(
        BucketRow(p, p.capitalize(), "#777777", ms(s.ps), pct(s.fraction), s.fraction, _w(s.fraction), "overlay") for p, s in a.phases.items()
    )
    phases_note = ""
    kind = a.run_kind.kind if a.run_kind is not None else "unknown"
    if kind != "training" and not any(s.ps > 0 for s in a.phases.values()):
        # a table of zeros on an inference step reads as a measurement: say why there is none instead
        phases, phases_note = (), (f"No training phases: this is {'an' if kind[:1] in 'aeiou' else 'a'} {kind} run "
                                   "(no forward / backward / optimizer name scopes in the kept steps).")
    return BreakdownView(
        chart=chart,
        chart_desc=desc,
        rows=bucket_rows(a),
        remat=remat_row(a),
        phases=phases,
        total_ms=ms(st.step_time_ps["mean"]),
        dropped=tuple(DroppedStep(r.number, ms(r.step_ps), r.reason) for r in st.dropped),
        rule=st.rule,
        phases_note=phases_note,
    )


def _timeline(a: Analysis) -> TimelineView | None:
    tl = a.timeline
    if tl is None:
        return None
    lanes = []
    text = []
    for ln in tl.lanes:
        spans = []
        busy: dict[str, float] = {}
        for s in ln.spans:
            if ln.engine == "TensorCore":
                fill = svg.colour(s.bucket)
                tip = f"{s.label} — {bucket_label(s.bucket)}, {ms(s.end_ps - s.start_ps)} ms at {ms(s.start_ps)} ms"
            else:
                fill = svg.SPARSECORE_COLOUR
                tip = f"{s.label} — SparseCore busy, {ms(s.end_ps - s.start_ps)} ms at {ms(s.start_ps)} ms"
            spans.append(svg.TLSpan(s.start_ps, s.end_ps, fill, tip))
            busy[s.bucket] = busy.get(s.bucket, 0.0) + (s.end_ps - s.start_ps)
        lanes.append(svg.TLLane(_lane_label(ln.name), ln.name, tuple(spans), ln.engine == "TensorCore"))
        if ln.engine == "TensorCore":
            parts = ", ".join(f"{bucket_label(b)} {ms(v)} ms" for b, v in sorted(busy.items(), key=lambda kv: -kv[1]) if v > 0)
            text.append(f"{ln.name}: {len(ln.spans)} spans; {parts or 'no ops'}")
        else:
            text.append(f"{ln.name}: busy {ms(sum(busy.values()))} ms in {len(ln.spans)} spans" if ln.spans else f"{ln.name}: no activity in this step")
    windows = []
    rows = []
    counts = {"hidden": 0, "partial": 0, "exposed": 0}
    for w in tl.windows:
        tip = f"{w.name} ({COLLECTIVE_LABELS.get(w.type, w.type)}): {ms(w.end_ps - w.start_ps)} ms window, {pct(w.hidden_fraction)} hidden — {w.klass}"
        windows.append(svg.TLWindow(w.start_ps, w.end_ps, w.klass, tip))
        counts[w.klass] = counts.get(w.klass, 0) + 1
        rows.append(WindowRow(ms(w.start_ps), ms(w.end_ps - w.start_ps), COLLECTIVE_LABELS.get(w.type, w.type), _cut(w.name, 60), w.name, pct(w.hidden_fraction), w.klass))
    count_text = (
        f"{len(tl.windows)} collective windows: {counts.get('hidden', 0)} hidden, {counts.get('partial', 0)} partly hidden, {counts.get('exposed', 0)} exposed"
        if tl.windows
        else "No collective windows in this step"
    )
    title = f"Timeline of step {tl.step} on {tl.core}"
    desc = f"Step {tl.step} on {tl.core}, {ms(tl.step_ps)} ms. " + " ".join(t + "." for t in text) + f" {count_text}."
    chart = svg.timeline(tl.step_ps, lanes, windows, title, desc)
    present = sorted({s.bucket for ln in tl.lanes if ln.engine == "TensorCore" for s in ln.spans}, key=lambda b: BUCKETS.index(b) if b in BUCKETS else 99)
    legend = tuple(LegendItem(k, lbl, c) for k, lbl, c in svg.legend_items(present))
    if any(ln.engine == "SparseCore" for ln in tl.lanes):
        legend += (LegendItem("sparsecore", "SparseCore busy", svg.SPARSECORE_COLOUR),)
    legend += tuple(LegendItem(f"win-{k}", f"window {k}", c) for k, c in svg.WINDOW_COLOURS.items())
    note = "Adjacent spans were merged to keep the drawing small (totals unchanged)." if tl.coalesced else ""
    return TimelineView(
        chart=chart,
        caption=f"Representative step {tl.step} (closest to the median kept step) on {tl.core}: {ms(tl.step_ps)} ms.",
        legend=legend,
        window_counts=count_text,
        windows=tuple(rows),
        lanes_text=tuple(text),
        note=note,
    )


def _comm(a: Analysis) -> CommView:
    c = a.communication
    types = [t for t in a.collectives.values() if t.count > 0 or t.exposed_ps > 0 or t.window_ps > 0]
    types.sort(key=lambda t: (-(t.exposed_ps + t.hidden_ps), t.type))
    top = max([t.hidden_ps + t.exposed_ps for t in types] + [1.0])
    rows = tuple(
        CommRow(
            type=t.type,
            label=COLLECTIVE_LABELS.get(t.type, t.type),
            engine=t.engine,
            count=count(t.count),
            window_ms=ms(t.window_ps),
            hidden_ms=ms(t.hidden_ps),
            exposed_ms=ms(t.exposed_ps),
            hidden_pct=pct(t.hidden_fraction),
            step_pct=pct(t.fraction_of_step),
            hidden_bar=_w(t.hidden_ps / top),
            exposed_bar=_w(t.exposed_ps / top),
            scopes="; ".join(getattr(t, "tf_ops", ()) or ()),
        )
        for t in types
    )
    exposed_ps, exposed_f = exposed_comm(a)
    un = ", ".join(f"{n} {k} halves" for k, n in sorted(c.unmatched.items()) if n)
    sc = a.sparsecore_offload
    label, tone = VERDICT_LABELS.get(sc.verdict, (sc.verdict, "neutral"))
    reason = sc.reason
    unseen = [i for i in (a.capture.issues if a.capture is not None else ()) if "sparsecore_offload" in i.affects]
    if unseen and sc.verdict in ("off", "partial"):
        # no SparseCore planes: whether collectives were offloaded cannot be seen (the terminal's capture line says so)
        label, tone = "cannot be observed in this capture", "warn"
        reason = f"{unseen[0].message}. {sc.reason}."
    facts = [
        Fact("SparseCore planes", f"{sc.planes} ({sc.planes_with_activity} with activity)" if sc.detected or sc.planes else "none in this capture"),
    ]
    if sc.offloaded and not (unseen and sc.verdict in ("off", "partial")):  # no "All-reduce: no" under "cannot be observed"
        facts.append(Fact("Offloaded types", ", ".join(f"{COLLECTIVE_LABELS.get(k, k)}: {'yes' if v else 'no'}" for k, v in sorted(sc.offloaded.items()))))
    if sc.busy_fraction is not None:
        facts.append(Fact("SparseCore busy", pct(sc.busy_fraction) + " of the step"))
    if sc.concurrency is not None:
        facts.append(Fact("Concurrent with TensorCore compute", pct(sc.concurrency)))
    if sc.queueing_ps is not None:
        facts.append(Fact("Queueing behind a busy SparseCore", f"{ms(sc.queueing_ps)} ms per step"))
    top_exp = tuple(
        ExposedRow(
            core=w.core,
            step=w.step,
            type=COLLECTIVE_LABELS.get(w.type, w.type),
            name=_cut(w.name, 60),
            name_full=w.name,
            engine=w.engine,
            offset_pct=pct(w.offset_fraction),
            window_ms=ms(w.window_ps),
            exposed_ms=ms(w.exposed_ps),
            hidden_pct=pct(w.hidden_fraction),
            klass=w.klass,
        )
        for w in c.top_exposed[:EXPOSED_WINDOW_ROWS]
    )
    return CommView(
        rows=rows,
        exposed_ms=ms(exposed_ps),
        exposed_pct=pct(exposed_f),
        window_source=c.window_source,
        unmatched=f"Unpaired async halves (counted, not drawn): {un}." if un else "",
        a2a_share=pct(c.all_to_all_share),
        verdict=sc.verdict,
        verdict_label=label,
        verdict_tone=tone,
        verdict_reason=reason,
        sc_facts=tuple(facts),
        top_exposed=top_exp,
    )


def _tflops_text(op: TopOp, peaks: Mapping[str, tuple[str, float]]) -> str:
    """An op's TFLOP/s, with its caveat when above the physical peak of its
    bucket's precision (`peaks`: bucket -> (precision, TFLOP/s per TensorCore))."""
    text = _num(op.tflops_per_s, ".1f")
    peak = peaks.get(op.bucket)
    if op.tflops_per_s is not None and peak is not None and peak[1] > 0 and op.tflops_per_s > peak[1]:
        text += f" (above the {peak[0]} peak)"
    return text


def _peaks(a: Analysis) -> dict[str, tuple[str, float]]:
    chip = a.hardware
    planes = float(chip.planes_per_chip or 1)
    return {"matmul_bf16": ("BF16", float(chip.peak_bf16_tflops_per_chip or 0) / planes),
            "matmul_fp8": ("FP8", float(chip.peak_fp8_tflops_per_chip or 0) / planes)}


def _op_rows(ops: Sequence[TopOp], start: int = 1, peaks: Mapping[str, tuple[str, float]] | None = None) -> tuple[OpRow, ...]:
    rows = []
    for i, op in enumerate(ops, start):
        rows.append(
            OpRow(
                rank=i,
                name=_cut(op.name),
                name_full=op.name,
                bucket=op.bucket,
                bucket_label=bucket_label(op.bucket),
                colour=svg.colour(op.bucket),
                category=op.hlo_category,
                tags=", ".join(op.tags),
                ms=ms(op.self_ps),
                ps=float(op.self_ps),
                pct=pct(op.fraction),
                count=count(op.count),
                count_v=float(op.count),
                tflops=_tflops_text(op, peaks or {}),
                tflops_v=float(op.tflops_per_s) if op.tflops_per_s is not None else -1.0,
                gbps=_num(op.gbps, ",.0f"),
                gbps_v=float(op.gbps) if op.gbps is not None else -1.0,
                intensity=_num(op.intensity, ",.1f"),
                intensity_v=float(op.intensity) if op.intensity is not None else -1.0,
                bound=op.bound_by,
                roof=pct(op.roofline_fraction, 0),
                roof_v=float(op.roofline_fraction) if op.roofline_fraction is not None else -1.0,
                tf_op=op.tf_op,
                source=op.source,
            )
        )
    return tuple(rows)


def _remat(a: Analysis) -> RematView:
    ops = getattr(a, "remat_ops", None)
    if ops is None:
        ops = tuple(o for o in a.top_ops if "remat" in o.tags)
    phases = tuple(
        BucketRow(p, p.capitalize(), "#777777", ms(s.ps), pct(s.fraction), s.fraction, _w(s.fraction), "overlay") for p, s in a.phases.items()
    )
    note = "" if ops else "No recomputed ops (no `.remat` names or `rematted_computation` scopes) in the kept steps."
    return RematView(ms(a.remat.ps), pct(a.remat.fraction), phases, _op_rows(ops[:SECTION_OPS_ROWS]), note)


def _attention_kernel_label(ops: Sequence[TopOp]) -> str:
    """'In attention kernels (Pallas: <families>)': the kernel families of the
    attention ops shown (their `kernel:` tag, most time first), not a fixed
    list: a ragged-paged-attention kernel is not splash or flash."""
    families: list[str] = []
    for op in ops:  # most time first
        for t in op.tags:
            if t.startswith("kernel:") and t[7:] not in families:
                families.append(t[7:])
    names = [f.replace("_", " ") for f in families if f != "pallas"]
    return f"In attention kernels (Pallas: {' / '.join(names)})" if names else "In attention kernels (Pallas)"


def _attention(a: Analysis) -> AttentionView:
    s = a.breakdown.get("attention")
    seen: set[str] = set()
    ops = []
    for op in list(a.top_ops) + list(getattr(a, "kernel_ops", ())):
        if op.bucket == "attention" and op.name not in seen:
            seen.add(op.name)
            ops.append(op)
    ops.sort(key=lambda o: (-o.self_ps, o.name))
    facts = []
    bo = getattr(a, "bucket_ops", {}) or {}
    for key, label in (("attention_kernel", _attention_kernel_label(ops)), ("attention_unfused", "Unfused attention ops")):
        b = bo.get(key)
        if b is not None:
            facts.append(Fact(label, f"{ms(b.ps)} ms ({pct(b.fraction)}) · {b.ops} ops"))
    note = "" if ops else "No attention ops among the top ops."
    return AttentionView(ms(s.ps if s else None), pct(s.fraction if s else None), tuple(facts), _op_rows(ops[:SECTION_OPS_ROWS]), note)


def _roofline(a: Analysis) -> RooflineView:
    chip = a.hardware
    planes = float(chip.planes_per_chip or 1)
    bf16 = float(chip.peak_bf16_tflops_per_chip or 0) / planes
    fp8 = float(chip.peak_fp8_tflops_per_chip or 0) / planes
    hbm_tbps = float(chip.hbm_gbps_per_chip or 0) / planes / 1000.0
    pts = []
    missing = 0
    kc = {k.op: k for k in (a.kernel_counters or ())}
    counters = []
    for i, op in enumerate(a.top_ops, 1):
        if op.intensity is None or op.tflops_per_s is None or op.intensity <= 0 or op.tflops_per_s <= 0:
            missing += 1
            continue
        use = counter_use_text(kc.get(op.name))
        tip = (
            f"#{i} {op.name} — {bucket_label(op.bucket)}; {op.intensity:,.1f} FLOP/B, {op.tflops_per_s:,.1f} TFLOP/s, "
            f"{pct(op.roofline_fraction, 0)} of its roofline; {ms(op.self_ps)} ms/step ({pct(op.fraction)})"
            + (f"; counters: {use}" if use else "")
        )
        if use:
            counters.append(Fact(f"#{i} {_cut(op.name, 60)}", use))
        pts.append(svg.RoofPoint(i, op.intensity, op.tflops_per_s, op.fraction, svg.colour(op.bucket), tip))
    facts = (
        Fact("BF16 peak per TensorCore", f"{bf16:,.0f} TFLOP/s"),
        Fact("FP8 peak per TensorCore", f"{fp8:,.0f} TFLOP/s"),
        Fact("HBM per TensorCore", f"{hbm_tbps:,.2f} TB/s"),
        Fact("Ridge points", f"BF16 {bf16 / hbm_tbps:,.0f} · FP8 {fp8 / hbm_tbps:,.0f} FLOP/byte" if hbm_tbps else "-"),
    )
    unplotted = f"{missing} of the top {len(a.top_ops)} ops carry no FLOP/byte counts and are not plotted." if missing else ""
    if not pts or bf16 <= 0:
        return RooflineView(None, "No top op has both FLOP and byte counts: nothing to plot.", facts, unplotted)
    roofs = [svg.Roof("BF16", bf16, "bf16")]
    if fp8 > 0 and fp8 != bf16:
        roofs.append(svg.Roof("FP8", fp8, "fp8"))
    desc = (
        f"Log-log roofline of {len(pts)} top ops for {chip.name}: HBM roof {hbm_tbps:.2f} TB/s, "
        f"BF16 peak {bf16:,.0f} TFLOP/s, FP8 peak {fp8:,.0f} TFLOP/s per TensorCore. "
        + " ".join(
            f"#{p.rank} {_cut(a.top_ops[p.rank - 1].name, 40)}: {p.intensity:,.1f} FLOP/B, {p.tflops:,.1f} TFLOP/s." for p in pts[:10]
        )
    )
    chart = svg.roofline(pts, roofs, hbm_tbps, f"Roofline of the top ops on {chip.name}", desc)
    return RooflineView(chart, "Each dot is one top op (number = rank in the top-ops table; size = share of the step).", facts, unplotted,
                        tuple(counters))


def counter_use_text(k) -> str:
    """'MXU 72% · vector 30% · mxu_bound' of an op's hardware counters (KernelCounters; "" without)."""
    if k is None or not k.utilisation:
        return ""
    vec = max((v for u, v in k.utilisation.items() if u.startswith("Vector") and u not in ("Vector Fills", "Vector Spills")),
              default=None)
    parts = [f"MXU {k.utilisation.get('MXU', 0.0):.0%}"]
    if vec is not None:
        parts.append(f"vector {vec:.0%}")
    if k.ep_wait_fraction is not None:
        parts.append(f"ep_wait {k.ep_wait_fraction:.0%}")
    if k.verdict:
        parts.append(k.verdict)
    return " · ".join(parts)


def _cores(a: Analysis) -> CoresView:
    rows = []
    for c in a.per_core:
        comm = sum(v for b, v in c.buckets.items() if b in COLLECTIVE_BUCKETS)
        idle = c.buckets.get("idle", 0.0)
        rows.append(
            CoreRow(
                core=c.core,
                host=c.host,
                steps_kept=c.steps_kept,
                step_ms=ms(c.step_ps),
                busy_ms=ms(c.busy_ps),
                compute_ms=ms(c.compute_ps),
                comm_ms=ms(comm),
                idle_pct=pct(idle / c.step_ps if c.step_ps else None),
                z=f"{c.busy_z:+.2f}",
                straggler=c.straggler,
            )
        )
    stragglers = tuple(c.core for c in a.per_core if c.straggler)
    comp = [c.compute_ps for c in a.per_core]
    if comp:
        med = median_of(comp)
        spread = (
            f"Compute time per step across {len(comp)} TensorCores: min {ms(min(comp))} ms, median {ms(med)} ms, "
            f"max {ms(max(comp))} ms ({pct((max(comp) - med) / med if med else None)} above the median)."
        )
        dots = [
            svg.CoreDot(_core_short(c.core, c.plane, len(a.hosts)), c.compute_ps, c.straggler, f"{c.core}: compute {ms(c.compute_ps)} ms, z {c.busy_z:+.2f}{' — straggler' if c.straggler else ''}")
            for c in a.per_core
        ]
        desc = spread + (f" Straggler cores: {', '.join(stragglers)}." if stragglers else " No straggler cores.")
        chart = svg.core_strip(dots, med, "Compute time per TensorCore", desc)
    else:
        spread, desc, chart = "No per-core data.", "", None
    rule = "A core is a straggler when the modified z-score of its compute time (busy minus collectives and host-offload waits) exceeds 3.5 (needs >= 3 cores)."
    return CoresView(chart, desc, tuple(rows), len(rows) > CORES_OPEN, stragglers, spread, rule)


NAV = (
    NavItem("recommendations", "Recommendations"),
    NavItem("breakdown", "Step breakdown"),
    NavItem("idle", "Why idle"),
    NavItem("timeline", "Timeline"),
    NavItem("communication", "Communication"),
    NavItem("remat", "Remat"),
    NavItem("attention", "Attention"),
    NavItem("roofline", "Roofline"),
    NavItem("top-ops", "Top ops"),
    NavItem("scopes", "Name scopes"),
    NavItem("cores", "Cores"),
)


def build_context(
    analysis: Analysis,
    findings: Findings | None,
    *,
    command_line: str,
    input_sha256: str,
    timestamp: str | None = None,
    docs: Mapping[str, RuleDoc] | None = None,
) -> ReportContext:
    a = analysis
    docs = docs or {}
    shown, all_defs = _definitions(a)
    present = [b for b in BUCKETS if b in a.breakdown]
    segs = _step_segments({b: a.breakdown[b].ps for b in present}, sum(a.breakdown[b].ps for b in present))
    share_desc = "Mean step, by bucket: " + ", ".join(f"{bucket_label(b)} {pct(a.breakdown[b].fraction)}" for b in present if a.breakdown[b].fraction > 0) + "."
    share = svg.share_bar([svg.Segment(s.key, s.label, s.value, a.breakdown[s.key].fraction) for s in segs], "Where the step went", share_desc)
    wl = findings.workload if findings is not None else None
    name = _trace_name(a.source)
    # rows that would read 0.000 ms are not listed (they sort last, so the ranks the roofline uses stay the same)
    listed = [op for op in a.top_ops[:TOP_OPS_ROWS] if ms(op.self_ps) != ms(0)]
    unlisted = len(a.top_ops[:TOP_OPS_ROWS]) - len(listed)
    top_note = (f"Self time per kept step, averaged over TensorCores; the {len(listed)} ops with the most self time"
                + (f" ({unlisted} more under 0.001 ms per step not listed)." if unlisted else "."))
    predicted = a.input_kind == "compiled_program"  # issue #25: a replayed compiled program
    return ReportContext(
        title=f"profanalyze — {name}" + (" (PREDICTED)" if predicted else ""),
        trace_name=name + (" — PREDICTED from the compiled program" if predicted else ""),
        trace_path=a.source,
        headline=(PREDICTED_HEADLINE if predicted else "") + headline(a),
        first_action=first_action(findings),
        facts=_facts(a, findings),
        kpis=_kpis(a, findings),
        definitions=shown,
        all_definitions=all_defs,
        notes=tuple(a.notes),
        share_chart=share,
        legend=tuple(LegendItem(k, lbl, c) for k, lbl, c in svg.legend_items(b for b in present if a.breakdown[b].fraction > 0)),
        workload=WorkloadView(wl.row, _dash(wl.primary_sharding), _dash(wl.secondary_sharding), _dash(wl.main_bottleneck), tuple(wl.reasons)) if wl else None,
        recs=_recs(a, findings, docs),
        breakdown=_breakdown(a),
        timeline=_timeline(a),
        comm=_comm(a),
        remat=_remat(a),
        attention=_attention(a),
        roofline=_roofline(a),
        top_ops=_op_rows(listed, peaks=_peaks(a)),
        top_ops_note=top_note,
        cores=_cores(a),
        nav=NAV,
        tool_version=a.tool_version,
        command_line=command_line,
        input_sha256=input_sha256,
        timestamp=timestamp,
        sections=build_sections(a),
        predicted=predicted,
    )
