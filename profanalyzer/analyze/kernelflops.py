"""Fused attention kernels in the analysis: their work from the program (profanalyzer.read.hlo.kernels:
q/k/v shapes, the half, the block mask; paged decode kernels from the page table) as records, and their
FLOPs into the op rows the classification could not give FLOPs."""

from __future__ import annotations

from profanalyzer.model.analysis import AttentionKernel
from profanalyzer.read.hlo.kernels import (
    attention_kernel_flops,
    attention_kernel_work,
    kernel_bytes,
)
from profanalyzer.read.hlo.model import Module

__all__ = ["attention_kernels", "attention_kernel_rows", "kernel_byte_rows"]

def attention_kernels(kernel_ops, module: Module | None) -> tuple[AttentionKernel, ...] | None:
    """The fused attention kernels among the analysis' kernel ops, with their work from the program;
    None without a program or without such kernels."""
    ops = {op.name: op for op in kernel_ops if op.bucket == "attention"}
    if module is None or not ops:
        return None
    work = attention_kernel_work(module, set(ops))
    out = tuple(AttentionKernel(op=n, half=w["half"], heads=w["heads"], seq_q=w["seq_q"], seq_kv=w["seq_kv"],
                                head_dim=w["head_dim"], block_q=w["block_q"], block_kv=w["block_kv"],
                                dense_flops=w["dense_flops"], computed_fraction=w["computed_fraction"],
                                ps=float(ops[n].self_ps))
                for n, w in sorted(work.items()))
    return out or None


def attention_kernel_rows(work, module: Module | None) -> dict[str, dict[int, tuple]]:
    """plane label -> {metadata row: (bucket, kernel, precision, reason, attention part, FLOPs)} for the
    attention kernels whose FLOPs the classification could not tell (the re-bucketing step that
    `attribution.attribute_trace` applies: the bucket stays, the FLOPs come from the program)."""
    if module is None:
        return {}
    wanted: set[str] = set()
    for w in work:
        cols = w.classes.columns
        for i, short in enumerate(w.plane.meta.short_names):
            if cols["bucket"][i] == "attention" and cols["attention_part"][i] == "kernel" and not _known(
                    cols["shape_flops"][i]):
                wanted.add(short)
    found = attention_kernel_flops(module, wanted) if wanted else {}
    out: dict[str, dict[int, tuple]] = {}
    for w in work:
        cols = w.classes.columns
        rows = {}
        for i, short in enumerate(w.plane.meta.short_names):
            got = found.get(short)
            if got is not None and cols["bucket"][i] == "attention" and not _known(cols["shape_flops"][i]):
                rows[i] = ("attention", cols["kernel"][i], cols["precision"][i],
                           f"{cols['reason'][i]}; FLOPs from the program: {got[1]}", "kernel", got[0])
        if rows:
            out[w.plane.label] = rows
    return out


def _known(x) -> bool:
    return isinstance(x, (int, float)) and x == x and x > 0


def kernel_byte_rows(work, module: Module | None) -> dict[str, dict[int, float]]:
    """plane label -> {metadata row: bytes} of the matmul kernels (custom calls the classification names a
    grouped, custom or quantized matmul) whose bytes the capture does not state (XProf gives a custom call
    none): their operands read once and their outputs written once, from the program, so that the kernel has
    a roofline. An attention kernel's traffic depends on its blocks (K and V re-read per q block): it keeps
    no such bound; its FLOPs from the program meet the MXU peak in TK007."""
    if module is None:
        return {}
    where: dict[str, tuple] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.opcode == "custom-call":
                where.setdefault(ins.name, (ins, comp))
    if not where:
        return {}
    out: dict[str, dict[int, float]] = {}
    for w in work:
        cols, md = w.classes.columns, w.plane.meta
        kernel, bucket = cols.get("kernel", ()), cols.get("bucket", ())
        rows: dict[int, float] = {}
        for i, short in enumerate(md.short_names[:len(kernel)]):
            got = where.get(short)
            have = md.bytes_accessed[i]
            if got is None or not kernel[i] or not str(bucket[i]).startswith("matmul") or (have == have and have > 0):
                continue
            nbytes = kernel_bytes(*got)
            if nbytes > 0:
                rows[i] = float(nbytes)
        if rows:
            out[w.plane.label] = rows
    return out
