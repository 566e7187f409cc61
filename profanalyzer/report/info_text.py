"""`profanalyze info` as plain text: what a profile holds (api.info.TraceInfo) or what a compiled
program holds (api.info.ProgramSummary), deterministic."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.api.info)
    from profanalyzer.api.info import ProgramSummary, TraceInfo


def _ms(ps: int | None) -> str:
    return "-" if ps is None else f"{ps / 1e9:.3f} ms"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_info(info: TraceInfo) -> str:
    out = [f"trace: {info.source} ({info.input_kind}{', run ' + info.run if info.run else ''})"]
    if info.note:
        out.append(f"note: {info.note}")
    out.append(f"chip: {info.chip} (from {info.chip_source})")
    out.append(
        f"hosts: {len(info.hosts)}; TensorCore planes: {info.tensorcores}; "
        f"SparseCore planes: {info.sparsecores}; device events: {info.device_events:,}"
    )
    for h in info.hosts:
        kinds = ", ".join(f"{k} {n}" for k, n in h.plane_kinds)
        size = _size(h.file_bytes) if h.file_bytes is not None else "size on disk unknown"
        if h.file_bytes != h.size_bytes:
            size += f", {_size(h.size_bytes)} uncompressed"
        out.append(f"  host {h.name}: {h.file} ({size}); planes: {kinds}")
        for e in h.errors:
            out.append(f"    capture error: {e}")
        for w in h.warnings:
            out.append(f"    capture warning: {w}")
    out.append("planes:")
    for p in info.planes:
        lines = ", ".join(f"{n} {c:,}" for n, c in p.lines) or "no lines"
        out.append(f"  {p.host} {p.name} [{p.kind}] {lines}; op metadata {p.op_metadata:,}")
    nums = info.step_numbers
    span = f"{nums[0]}..{nums[-1]}" if nums else "-"
    out.append(
        f"steps: {info.steps_count} (source: {'; '.join(info.steps_source)}), numbers {span}, "
        f"median step {_ms(info.step_ps_median)} "
        f"({'the one kept step' if info.steps_kept == 1 else f'of the {info.steps_kept} kept steps'}, median over TensorCores, as analyze)"
    )
    if info.programs:
        out.append("programs (first TensorCore, XLA Modules):")
        for pr in info.programs[:10]:
            out.append(f"  {pr.name}: {pr.runs} run{'' if pr.runs == 1 else 's'}, {_ms(pr.total_ps)} total")
        if len(info.programs) > 10:
            out.append(f"  ... {len(info.programs) - 10} more")
    out.append(f"time span (device events): {_ms(info.span_ps)}")
    return "\n".join(out)


def format_program_info(info: ProgramSummary) -> str:
    out = [f"program: {info.source} ({info.input_kind}: compiled, not run; no capture to describe)",
           f"chip: {info.chip} (from {info.chip_source})",
           f"modules: {len(info.modules)}; main: "
           + (info.why_main if info.why_main.startswith(info.main) else f"{info.main} ({info.why_main})")]
    for m in info.modules:
        out.append(f"  {m.name} [{m.stage or 'text'}]: {m.instructions:,} instructions in {m.computations:,} "
                   f"computations, {m.estimated_cycles:,} estimated cycles, {m.partitions} "
                   f"partition{'' if m.partitions == 1 else 's'}")
    out.append(f"next: {info.next_step}")
    return "\n".join(out)
