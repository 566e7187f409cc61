"""Plain-text summary of an Analysis for the terminal (deterministic)."""

from __future__ import annotations

from profanalyzer.core.format import binary_size, gib, ms, pct
from profanalyzer.core.shell import finding_lines, wrap_comment
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.parts import collapse
from profanalyzer.report.summary import cores_text

BAR_WIDTH = 24
#: The terminal lists idle causes when idle is at least this share of the step.
IDLE_CAUSES_SHOWN = 0.01
#: Change lines: their display margin, and the width comments wrap at.
CHANGE_MARGIN = "     "
CHANGE_WIDTH = 110


def _bar(frac: float) -> str:
    n = max(0, min(BAR_WIDTH, round(frac * BAR_WIDTH)))
    return "#" * n


def format_recommendations(findings, n: int = 3) -> list[str]:
    out = []
    recs = [f for f in findings.recommendations][:n] if findings else []
    if findings and findings.workload:
        w = findings.workload
        out.append(f"workload: {w.row}" + (f" -> {w.primary_sharding}" if w.primary_sharding not in ("—", "") else "")
                   + (f" + {w.secondary_sharding}" if w.secondary_sharding not in ("—", "") else ""))
    if not recs:
        out.append("recommendations: none above their thresholds")
        return out
    out.append(f"top recommendations ({len(findings.recommendations)} in all):")
    for i, f in enumerate(recs, 1):
        out.append(f"{i:>3}. [{f.code} {f.lever}] {f.title}")
        out.append(f"     saves ~{ms(f.estimated_saving_ps)} ms/step ({pct(f.estimated_saving_fraction)}); {f.guide_section}")
        out.extend(change_block(f))
    return out


def change_block(f) -> list[str]:
    """Every change line of a finding under the margin: flags as the one-line
    LIBTPU_INIT_ARGS assignment (a margin inside a multi-line quoted value
    would paste into the value), commands after `$ `, comments wrapped at
    word boundaries, none left out."""
    out: list[str] = []
    for line in finding_lines(f, one_line=True):
        if line.lstrip().startswith("#"):
            out.extend(CHANGE_MARGIN + piece for piece in wrap_comment(line, CHANGE_WIDTH - len(CHANGE_MARGIN)))
        else:
            out.append(f"{CHANGE_MARGIN}$ {line}")
    return out


def format_scopes(a: Analysis, depth: int, limit: int = 25) -> list[str]:
    """The name-scope rollup collapsed to `depth` components (`--by-scope DEPTH`)."""
    if not a.scopes:
        return ["name scopes: none (the ops carry no tf_op stat)"]
    rows = collapse(a.scopes, depth)
    width = min(70, max(len(r.scope) for r in rows[:limit]))
    out = [f"name scopes to depth {depth} (self time per step, per TensorCore; count: layers folded or loop trip count):",
           f"{'scope':<{width}} {'ms/step':>9} {'share':>7} {'comm ms':>8} {'remat ms':>9} {'count':>6}"]
    for r in rows[:limit]:
        name = r.scope if len(r.scope) <= width else r.scope[: width - 1] + "…"
        out.append(f"{name:<{width}} {ms(r.ps):>9} {pct(r.fraction):>7} {ms(r.exposed_comm_ps):>8} {ms(r.remat_ps):>9} {r.count:>6}")
    if len(rows) > limit:
        out.append(f"({len(rows) - limit} smaller scopes not shown)")
    return out


def format_memory(a: Analysis) -> list[str]:
    """The memory section (`--memory`)."""
    m = a.memory
    if m is None:
        return []
    if m.source == "none":
        return ["memory: not in this capture (" + "; ".join(m.notes) + ")"]
    out = [f"memory ({m.source}): peak {gib(m.peak_bytes)} of {gib(m.hbm_bytes)} HBM per TensorCore, headroom {gib(m.headroom_bytes)}"
           + (f"; {m.program} peaks at {m.peak_instruction}" if m.peak_instruction else "")]
    if m.host_offload_bytes:
        out.append(f"  host memory (S(5)) buffers of the program: {gib(m.host_offload_bytes)}")
    for b in m.top_buffers[:5]:
        out.append(f"  {binary_size(b.size_bytes):>10}  {b.kind:<9} {b.memory_space:<5} {b.name[:50]}  {b.shape[:60]}")
    return out


def format_summary(a: Analysis, top: int = 10, findings=None, by_scope: int | None = None) -> str:
    chip = a.hardware.name
    out = [
        f"profanalyze: {a.source}",
        f"chip: {chip} ({a.chip_source if a.chip_source.startswith('assumed') else 'from ' + a.chip_source}); hosts: {len(a.hosts)}; "
        f"cores: {cores_text(a, '; ')}",
    ]
    predicted = a.time_basis == "predicted"
    if predicted:
        out.append("PREDICTED: a compiled program, no TPU ran it; every time below is the compiler's estimate "
                   "replayed (assumptions in the notes)")
    st = a.steps
    dropped = ", ".join(f"step {r.number} ({r.reason})" for r in st.dropped) or "none"
    if a.run_kind is not None:
        out.append(f"run kind: {a.run_kind.kind} ({'; '.join(a.run_kind.reasons[:2])})")
    out.append(f"steps: {st.kept} kept of {st.count} (source: {st.source}); dropped: {dropped}")
    if st.classes:
        from profanalyzer.report.sections import step_class_text

        out.extend(step_class_text(c) for c in st.classes)
    t = st.step_time_ps
    u = a.utilisation
    util = []
    if u.mfu is not None:
        low = f", low confidence: FLOPs known for {pct(u.flops_coverage, 0)} of the compute" if u.low_confidence else ""
        util.append(f"MFU {pct(u.mfu)} ({u.mfu_flops_source}, recompute excluded{low})")
        if u.hfu is not None and abs(u.hfu - u.mfu) >= 5e-4:
            util.append(f"HFU {pct(u.hfu)} (every executed FLOP)")
    if u.mxu_matmul is not None:
        from profanalyzer.report.sections import mxu_text

        util.append(f"matmul MXU utilisation {mxu_text(u.mxu_matmul)}")
    out.append(
        ("predicted " if predicted else "")
        + (f"step time: median {ms(t['median'])} ms (min {ms(t['min'])}, max {ms(t['max'])})" if st.kept != 1
           else f"step time: {ms(t['median'])} ms (the one kept step)")
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
    idle = a.breakdown.get("idle")
    if a.idle_causes and idle is not None and idle.fraction >= IDLE_CAUSES_SHOWN:
        out.append("idle by cause: " + ", ".join(f"{k} {ms(c.ps)} ms" for k, c in a.idle_causes.items() if c.ps > 0))
    if a.idle_host_activity:
        out.append("host activity during host-caused idle: " + "; ".join(f"{h.name} {ms(h.ps)} ms" for h in a.idle_host_activity))
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
    shown_ops = [op for op in a.top_ops if ms(op.self_ps) != ms(0)]  # no row that reads 0.000 ms
    if shown_ops:
        out.append("")
        out.append("top ops (self time per step, per TensorCore):")
        for i, op in enumerate(shown_ops[:top], 1):
            roof = f", {pct(op.roofline_fraction, 0)} of roofline" if op.roofline_fraction is not None else ""
            tags = f" [{', '.join(op.tags)}]" if op.tags else ""
            out.append(
                f"{i:>3}. {op.name[:60]:<60} {op.bucket:<15} {ms(op.self_ps):>8} ms {pct(op.fraction):>6}"
                f"  {op.bound_by}-bound{roof}{tags}"
            )
    if a.memory is not None:
        out.append("")
        out.extend(format_memory(a))
    if by_scope is not None:
        out.append("")
        out.extend(format_scopes(a, by_scope))
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
