"""Plain-text summary of an Analysis for the terminal (deterministic)."""

from __future__ import annotations

from profanalyzer.analysis import Analysis
from profanalyzer.format import ms, pct
from profanalyzer.vocab import BUCKETS

BAR_WIDTH = 24


def _bar(frac: float) -> str:
    n = max(0, min(BAR_WIDTH, round(frac * BAR_WIDTH)))
    return "#" * n


def format_recommendations(findings, n: int = 3) -> list[str]:
    out = []
    recs = [f for f in findings.recommendations][:n] if findings else []
    if findings and findings.workload:
        w = findings.workload
        out.append(f"workload: {w.row} -> {w.primary_sharding}" + (f" + {w.secondary_sharding}" if w.secondary_sharding not in ("—", "") else ""))
    if not recs:
        out.append("recommendations: none above their thresholds")
        return out
    out.append(f"top recommendations ({len(findings.recommendations)} in all):")
    for i, f in enumerate(recs, 1):
        out.append(f"{i:>3}. [{f.code} {f.lever}] {f.title}")
        out.append(f"     saves ~{ms(f.estimated_saving_ps)} ms/step ({pct(f.estimated_saving_fraction)}); {f.guide_section}")
        for act in f.actions[:2]:
            out.append(f"     $ {act}")
    return out


def format_summary(a: Analysis, top: int = 10, findings=None) -> str:
    chip = a.hardware.name
    out = [
        f"profanalyze: {a.source}",
        f"chip: {chip} ({a.chip_source if a.chip_source.startswith('assumed') else 'from ' + a.chip_source}); hosts: {len(a.hosts)}; "
        f"TensorCores: {a.tensorcores}; SparseCores: {a.sparsecores}",
    ]
    st = a.steps
    dropped = ", ".join(f"step {r.number} ({r.reason})" for r in st.dropped) or "none"
    if a.run_kind is not None:
        out.append(f"run kind: {a.run_kind.kind} ({'; '.join(a.run_kind.reasons[:2])})")
    out.append(f"steps: {st.kept} kept of {st.count} (source: {st.source}); dropped: {dropped}")
    t = st.step_time_ps
    u = a.utilisation
    util = []
    if u.mfu is not None:
        low = f", low confidence: FLOPs known for {pct(u.flops_coverage, 0)} of the compute" if u.low_confidence else ""
        util.append(f"MFU {pct(u.mfu)} ({u.mfu_flops_source}{low})")
    if u.mxu_matmul is not None:
        util.append(f"matmul MXU utilisation {pct(u.mxu_matmul)}")
    out.append(
        f"step time: median {ms(t['median'])} ms (min {ms(t['min'])}, max {ms(t['max'])})"
        + (f"; {'; '.join(util)}" if util else "")
    )
    out.append("")
    out.append(f"{'bucket':<18}{'ms/step':>10}{'share':>9}  ")
    for b in BUCKETS:
        s = a.breakdown[b]
        out.append(f"{b:<18}{ms(s.ps):>10}{pct(s.fraction):>9}  {_bar(s.fraction)}")
    out.append(f"{'remat (overlaps)':<18}{ms(a.remat.ps):>10}{pct(a.remat.fraction):>9}  {_bar(a.remat.fraction)}")
    ho = a.host_offload
    if ho is not None and ho.ps > 0:
        rate = f", {ho.gbps:.1f} GB/s while waiting" if ho.gbps else ""
        out.append(f"host offload: {ho.bytes_per_step / 1e9:.2f} GB per step and TensorCore "
                   f"({ho.from_host_bytes / 1e9:.2f} GB from host, {ho.to_host_bytes / 1e9:.2f} GB to host){rate}")
    if len(a.per_host) > 1:
        slow = [h.host for h in a.per_host if h.straggler]
        steps = ", ".join(f"{h.host} {ms(h.step_ps)}" for h in a.per_host[:8])
        more = f" (+{len(a.per_host) - 8} more)" if len(a.per_host) > 8 else ""
        out.append(f"per-host step time (ms): {steps}{more}")
        if slow:
            out.append(f"straggler hosts (modified z > 3.5 on step time or < -3.5 on waiting time): {', '.join(slow)}")
    stragglers = [c.core for c in a.per_core if c.straggler]
    if stragglers:
        out.append(f"straggler cores (busy-time modified z > 3.5): {', '.join(stragglers)}")
    if a.top_ops:
        out.append("")
        out.append("top ops (self time per step, per TensorCore):")
        for i, op in enumerate(a.top_ops[:top], 1):
            roof = f", {pct(op.roofline_fraction, 0)} of roofline" if op.roofline_fraction is not None else ""
            tags = f" [{', '.join(op.tags)}]" if op.tags else ""
            out.append(
                f"{i:>3}. {op.name[:60]:<60} {op.bucket:<15} {ms(op.self_ps):>8} ms {pct(op.fraction):>6}"
                f"  {op.bound_by}-bound{roof}{tags}"
            )
    if findings is not None:
        out.append("")
        out.extend(format_recommendations(findings))
    for n in a.notes:
        out.append(f"note: {n}")
    for x in a.assumptions:
        out.append(f"assumed: {x}")
    if a.capture is not None and a.capture.issues:
        out.append(f"capture: {a.capture.verdict} ({'; '.join(i.message for i in a.capture.issues)})")
    return "\n".join(out)
