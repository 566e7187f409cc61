"""The typed context of the HTML report: every number, label, width and chart
is computed here, so the template only formats.

    build_context(analysis, findings, command_line=..., input_sha256=...) -> ReportContext

Strings here are plain text (the template escapes them); the charts are
`markupsafe.Markup` built by `svg.py`, which escapes trace text itself.
Numbers are formatted with profanalyzer.core.format's `ms()` / `pct()` so the
report, the terminal and the JSON agree digit for digit. Rule docs come in
with each finding (`Finding.doc`, set by its rule): this module does not reach
into the rule registry.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from profanalyzer.core.format import count, gib, ms, pct
from profanalyzer.core.shell import finding_lines
from profanalyzer.core.stats import median_of
from profanalyzer.core.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COLLECTIVE_TYPE_LABELS,
    LEVER_LABELS,
    WHAT_IF_LEVERS,
)
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Finding, Findings, RuleDoc
from profanalyzer.report import svg
from profanalyzer.report.collectives_view import card_sources
from profanalyzer.report.opviews import (
    attention_view,
    op_rows,
    peaks,
    remat_view,
    roofline_view,
)
from profanalyzer.report.sections import build_sections, mxu_text
from profanalyzer.report.summary import (
    PREDICTED_HEADLINE,
    bar_width,
    bucket_label,
    bucket_rows,
    cores_text,
    cut_name,
    exposed_comm,
    first_action,
    first_saving,
    headline,
    median_of_kept,
    remat_row,
)
from profanalyzer.report.views import (
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
    RecsView,
    ReportContext,
    TimelineView,
    WindowRow,
    WorkloadView,
)

#: Rows of the op tables.
TOP_OPS_ROWS = 30
EXPOSED_WINDOW_ROWS = 15
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


def _dash(text: str | None) -> str:
    """'' for placeholder values ('-', '—', None)."""
    t = (text or "").strip()
    return "" if t in ("-", "—", "–", "none", "n/a") else t


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
    predicted = a.time_basis == "predicted"
    pm = a.program_memory
    facts += [
        # a replayed program has no hosts: its HBM is the fact to read before a run
        Fact("Program HBM", f"{gib(pm.peak_bytes)} of {gib(pm.capacity_bytes)} per TensorCore ({pct(pm.fraction)}): "
             + ("fits" if pm.fits else "does not fit"), "fact-program-hbm",
             f"argument {pm.argument_bytes:,} + output {pm.output_bytes:,} - alias {pm.alias_bytes:,} + temp "
             f"{pm.temp_bytes:,} bytes ({pm.source})") if predicted and pm is not None else
        Fact("Hosts", f"{len(a.hosts)} ({hosts})" if a.hosts else "0", "fact-hosts"),
        Fact("Chip", f"{chip}" + (" (assumed)" if a.chip_source.startswith("assumed") else ""), "fact-chip",
             a.chip_source if a.chip_source.startswith("assumed") else f"from {a.chip_source}"),
        Fact("Cores", cores_text(a), "fact-cores"),
        Fact("Steps used", f"{st.kept} of {st.count} ({st.source})", "fact-steps"),
        Fact("Step time", f"{ms(t['median'])} ms median · {ms(t['min'])}–{ms(t['max'])} ms" if st.kept != 1
             else f"{ms(t['median'])} ms ({median_of_kept(1)})", "fact-step-time"),
    ]
    if a.run_kind is not None:
        facts.insert(2 if a.run else 1, Fact("Run kind", a.run_kind.kind, "fact-run-kind", "; ".join(a.run_kind.reasons)))
    u = a.utilisation
    low = f"; low confidence: FLOPs known for {pct(u.flops_coverage, 0)} of the compute" if u.low_confidence else ""
    facts.append(Fact("MFU", pct(u.mfu) + (f" ({u.mfu_flops_source}, recompute excluded{low})" if u.mfu is not None else f" ({u.mfu_flops_source})"), "fact-mfu"))
    if u.mfu is not None and u.hfu is not None and abs(u.hfu - u.mfu) >= 5e-4:
        facts.append(Fact("HFU", pct(u.hfu) + " (every executed FLOP, recompute included)", "fact-hfu"))
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
    if a.capture is not None and predicted:
        facts.append(Fact("Input", "compiled program, replayed (no capture)" + (
            f" · {len(a.capture.issues)} issue{'s' if len(a.capture.issues) != 1 else ''}" if a.capture.issues else ""),
                          "fact-capture", "; ".join(i.message for i in a.capture.issues)))
    elif a.capture is not None:
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
    f = first_saving(findings)
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
        saving_bar=bar_width(f.estimated_saving_fraction),
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
    (profanalyzer.findings.whatif, as `analyze --what-if`), shown when it models
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
        BucketRow(p, p.capitalize(), "#777777", ms(s.ps), pct(s.fraction), s.fraction, bar_width(s.fraction), "overlay") for p, s in a.phases.items()
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
        rows.append(WindowRow(ms(w.start_ps), ms(w.end_ps - w.start_ps), COLLECTIVE_LABELS.get(w.type, w.type), cut_name(w.name, 60), w.name, pct(w.hidden_fraction), w.klass))
    total = sum(w.count for w in tl.windows)
    drawn = f", drawn as {len(tl.windows)} (neighbours of one type merged)" if total != len(tl.windows) else ""
    what = "groups" if drawn else "windows"
    count_text = (
        f"{total} collective windows{drawn}: {counts.get('hidden', 0)} {what} hidden, {counts.get('partial', 0)} partly "
        f"hidden, {counts.get('exposed', 0)} exposed"
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
    note = " ".join(x for x in (
        ("Too many spans to draw one by one: the step is drawn in short bins, each bucket's time in a bin as one "
         "span in the order it ran there (every op's time is drawn; a span's place is right to within a bin)."
         if tl.coalesced else ""),
        ("Too many collective windows to draw one by one: neighbouring windows of one type are drawn as one, named "
         "with how many it holds." if drawn else "")) if x)
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
            hidden_bar=bar_width(t.hidden_ps / top),
            exposed_bar=bar_width(t.exposed_ps / top),
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
            name=cut_name(w.name, 60),
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
        remat=remat_view(a),
        attention=attention_view(a),
        roofline=roofline_view(a),
        top_ops=op_rows(listed, peaks=peaks(a)),
        top_ops_note=top_note,
        cores=None if predicted else _cores(a),  # the replicas of one program: no spread to show
        nav=tuple(n for n in NAV if not (predicted and n.id == "cores") and not (n.id == "idle" and not a.idle_causes)),
        tool_version=a.tool_version,
        command_line=command_line,
        input_sha256=input_sha256,
        timestamp=timestamp,
        sections=build_sections(a),
        predicted=predicted,
    )
