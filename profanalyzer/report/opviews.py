"""The op views of the HTML report: the op table rows (`op_rows`), the
roofline chart (`roofline_view`), and the attention and remat sections, from
the analysis's top ops; `counter_use_text` says what an op's hardware
counters show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from profanalyzer.core.format import count, ms, pct
from profanalyzer.model.analysis import Analysis, TopOp
from profanalyzer.report import svg
from profanalyzer.report.summary import bar_width, bucket_label, cut_name
from profanalyzer.report.views import (
    AttentionView,
    BucketRow,
    Fact,
    OpRow,
    RematView,
    RooflineView,
)

#: Rows of the op tables of the remat and attention sections.
SECTION_OPS_ROWS = 10


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _tflops_text(op: TopOp, peaks: Mapping[str, tuple[str, float]]) -> str:
    """An op's TFLOP/s, with its caveat when above the physical peak of its
    bucket's precision (`peaks`: bucket -> (precision, TFLOP/s per TensorCore))."""
    text = _num(op.tflops_per_s, ".1f")
    peak = peaks.get(op.bucket)
    if op.tflops_per_s is not None and peak is not None and peak[1] > 0 and op.tflops_per_s > peak[1]:
        text += f" (above the {peak[0]} peak)"
    return text


def peaks(a: Analysis) -> dict[str, tuple[str, float]]:
    chip = a.hardware
    planes = float(chip.planes_per_chip or 1)
    return {"matmul_bf16": ("BF16", float(chip.peak_bf16_tflops_per_chip or 0) / planes),
            "matmul_fp8": ("FP8", float(chip.peak_fp8_tflops_per_chip or 0) / planes)}


def op_rows(ops: Sequence[TopOp], start: int = 1, peaks: Mapping[str, tuple[str, float]] | None = None) -> tuple[OpRow, ...]:
    rows = []
    for i, op in enumerate(ops, start):
        rows.append(
            OpRow(
                rank=i,
                name=cut_name(op.name),
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


def remat_view(a: Analysis) -> RematView:
    ops = getattr(a, "remat_ops", None)
    if ops is None:
        ops = tuple(o for o in a.top_ops if "remat" in o.tags)
    phases = tuple(
        BucketRow(p, p.capitalize(), "#777777", ms(s.ps), pct(s.fraction), s.fraction, bar_width(s.fraction), "overlay") for p, s in a.phases.items()
    )
    note = "" if ops else "No recomputed ops (no `.remat` names or `rematted_computation` scopes) in the kept steps."
    return RematView(ms(a.remat.ps), pct(a.remat.fraction), phases, op_rows(ops[:SECTION_OPS_ROWS]), note)


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


def attention_view(a: Analysis) -> AttentionView:
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
    return AttentionView(ms(s.ps if s else None), pct(s.fraction if s else None), tuple(facts), op_rows(ops[:SECTION_OPS_ROWS]), note)


def roofline_view(a: Analysis) -> RooflineView:
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
            counters.append(Fact(f"#{i} {cut_name(op.name, 60)}", use))
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
            f"#{p.rank} {cut_name(a.top_ops[p.rank - 1].name, 40)}: {p.intensity:,.1f} FLOP/B, {p.tflops:,.1f} TFLOP/s." for p in pts[:10]
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
