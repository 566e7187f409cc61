"""HBM use and headroom: the dominant program's buffer assignment and the
runtime's allocator activity (read only when asked: `--memory`).

Two sources, whichever the capture has (`MemorySummary.source` says which):

* `buffer_assignment`: the dominant program's `HloProto` (stat `Hlo Proto` on
  its event metadata in the `/host:metadata` plane). Field 3 is the buffer
  assignment: allocations (size, memory space `color`, entry parameter /
  maybe-live-out / constant / thread-local flags, the logical buffers assigned)
  and per temp allocation a heap-simulator trace (ALLOC/FREE/SHARE_WITH of
  logical buffers, each at an instruction). The program's HBM is the sum of
  its memory-space-0 allocations (the address ranges it holds for a run);
  host memory (`S(5)`, color 5) is reported as host-offload bytes. Replaying
  the largest HBM heap trace gives the instruction where the temp heap peaks
  and the buffers live then.
* `allocator`: the runtime's `MemoryAllocation` / `MemoryDeallocation`
  TraceMe events on the host planes (what XProf's memory_profile reads): per
  device (`index_on_host`) the bytes in use (stack reservation `bytes_reserved`
  + heap `bytes_allocated`) and the capacity (+ `bytes_available`). The peak
  is the largest stack + heap over the events and devices.

`peak_bytes` is the allocator's peak when recorded (what the device really
held), else the program's HBM allocations; `hbm_bytes` the allocator's
capacity when recorded, else the chip's HBM per TensorCore plane.

The HloProto's buffer assignment is decoded once, by profanalyzer.read.hlo.memory
(`read_assignment`, the protobuf runtime with the project's `hlo_min.proto`),
and its heap peak follows that module's one rule (`trace_peak`). A capture's
sources are asked of its input (`Trace.reads.memory_sources`:
profanalyzer.read.allocator decodes the metadata and host planes from the
bytes the run read once). The default analysis never calls this module
(benchmarks/README.md: the cost is zero when not asked for).

Imports: model, hardware, trace, hlo (memory, model); no reader.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from profanalyzer.core.hardware import Chip
from profanalyzer.model.parts import MemoryBuffer, MemorySummary
from profanalyzer.model.trace import LINE_MODULES, MemorySources, Trace
from profanalyzer.read.hlo.memory import (
    Allocation,
    BufferAssignment,
    LogicalBuffer,
    read_assignment,
    trace_peak,
)
from profanalyzer.read.hlo.model import Shape

__all__ = [
    "assignment_memory", "summarize", "dominant_program", "trace_memory", "AssignmentMemory",
    "HOST_COLOR", "HBM_COLOR", "TOP_BUFFERS", "shape_text",
]

#: Memory spaces (buffer `color`): 0 is HBM; 5 is host memory, `S(5)` in layouts.
HBM_COLOR = 0
HOST_COLOR = 5
#: Buffers listed at the peak.
TOP_BUFFERS = 10

def _plain_text(shape: Shape | None) -> str:
    """A shape as the memory table prints it: `f32[8,128]`, a tuple `(...)`, no layout."""
    if shape is None or shape.dtype == "unknown":
        return ""
    if shape.is_tuple:
        return "(" + ", ".join(_plain_text(p) for p in shape.parts) + ")"
    return f"{shape.dtype}[{','.join(str(d) for d in shape.dims)}]"


def shape_text(shape: Shape | None, index: tuple[int, ...] = ()) -> str:
    """HLO text of a shape, or of its element at a tuple shape index ("" when the index leaves it)."""
    for i in index:
        if shape is None or not shape.is_tuple or not 0 <= i < len(shape.parts):
            return ""
        shape = shape.parts[i]
    return _plain_text(shape)


@dataclass(frozen=True)
class AssignmentMemory:
    hbm_bytes: int  # sum of the HBM allocations
    host_bytes: int  # sum of the host-memory (S(5)) allocations
    peak_instruction: str
    top: tuple[MemoryBuffer, ...]


def _space(color: int) -> str:
    return "hbm" if color == HBM_COLOR else ("host" if color == HOST_COLOR else "other")


def _kind(al: Allocation) -> str:
    if al.parameter is not None:
        return "parameter"
    if al.live_out:
        return "output"
    if al.constant:
        return "constant"
    return "temp"


def _buffer_name(ba: BufferAssignment, lb: LogicalBuffer) -> tuple[str, str]:
    name, _op, shape = ba.instructions.get(lb.instruction_id, (f"instruction {lb.instruction_id}", "", None))
    text = shape_text(shape, lb.shape_index)
    if lb.shape_index:
        name = f"{name} {{{','.join(str(i) for i in lb.shape_index)}}}"
    return name, text


def assignment_memory(ba: BufferAssignment, top_n: int = TOP_BUFFERS) -> AssignmentMemory:
    """HBM and host bytes of the program's allocations; the peak of its largest
    HBM heap trace (profanalyzer.read.hlo.memory.trace_peak: its instruction and the
    buffers live then) plus the HBM allocations that are live for the whole
    run (parameters, outputs, constants)."""
    hbm = sum(al.size for al in ba.allocations if al.color == HBM_COLOR and not al.thread_local)
    host = sum(al.size for al in ba.allocations if al.color == HOST_COLOR)
    by_index = {al.index: al for al in ba.allocations}
    sizes = {i: lb.size for i, lb in ba.buffers.items()}
    best: tuple[int, str, tuple[int, ...]] | None = None  # (peak live bytes, instruction, live buffers)
    for alloc, events in ba.heap_traces:
        al = by_index.get(alloc)
        if al is None or al.color != HBM_COLOR or not events:
            continue
        got = trace_peak(sizes, events)
        at = events[got.at].instruction if got.at >= 0 else ""
        if best is None or got.bytes > best[0]:
            best = (got.bytes, at, got.live)
    rows: list[MemoryBuffer] = []
    if best is not None:
        for bid in best[2]:
            lb = ba.buffers[bid]
            name, shape = _buffer_name(ba, lb)
            rows.append(MemoryBuffer(name, lb.size, shape, "temp", _space(lb.color)))
    for al in ba.allocations:
        if al.color != HBM_COLOR or al.thread_local or _kind(al) == "temp" or al.size <= 0:
            continue
        lbs = [ba.buffers[i] for i, _size in al.assigned if i in ba.buffers]
        largest = max(lbs, key=lambda x: x.size) if lbs else None
        name, shape = _buffer_name(ba, largest) if largest is not None else (f"allocation {al.index}", "")
        rows.append(MemoryBuffer(name, al.size, shape, _kind(al), _space(al.color)))
    rows.sort(key=lambda r: (-r.size_bytes, r.name))
    return AssignmentMemory(hbm, host, best[1] if best else "", tuple(rows[:top_n]))


def summarize(src: MemorySources, chip: Chip, top_n: int = TOP_BUFFERS) -> MemorySummary:
    """The memory section from whatever sources were found."""
    pm = assignment_memory(src.assignment, top_n) if src.assignment is not None else None
    al = src.allocator
    parts = [n for n, ok in (("allocator", al is not None), ("buffer_assignment", pm is not None)) if ok]
    source = "+".join(parts) or "none"
    chip_bytes = int(chip.hbm_gib * 2**30 / max(chip.planes_per_chip, 1))
    hbm = al.capacity if al is not None and al.capacity > 0 else chip_bytes
    cap_src = (f"allocator (device {al.device})" if al is not None and al.capacity > 0
               else f"{chip.name}: {chip.hbm_gib:g} GiB per chip / {chip.planes_per_chip} TensorCore plane(s)")
    peak = al.in_use if al is not None else (pm.hbm_bytes if pm is not None else None)
    notes = list(src.notes)
    if al is not None and al.devices > 1:
        notes.append(f"allocator activity of {al.devices} devices: the peak is device {al.device}'s")
    return MemorySummary(
        source=source,
        program=src.program if pm is not None else "",
        peak_bytes=peak,
        peak_instruction=pm.peak_instruction if pm is not None else "",
        hbm_bytes=hbm,
        headroom_bytes=(hbm - peak) if peak is not None else None,
        top_buffers=pm.top if pm is not None else (),
        host_offload_bytes=pm.host_bytes if pm is not None else 0,
        program_hbm_bytes=pm.hbm_bytes if pm is not None else None,
        allocator_peak_bytes=al.in_use if al is not None else None,
        allocator_stack_bytes=al.stack if al is not None else None,
        allocator_heap_bytes=al.heap if al is not None else None,
        capacity_source=cap_src,
        notes=tuple(notes),
    )


def dominant_program(trace: Trace) -> str:
    """The program (XLA Modules metadata name) with the most time on the first
    TensorCore that has an XLA Modules line ('' when none)."""
    for plane in trace.tensorcores:
        ln = plane.line(LINE_MODULES)
        if ln is None or not len(ln.events):
            continue
        rows = ln.events.meta
        ok = rows >= 0
        if not ok.any():
            continue
        tot = np.bincount(rows[ok].astype(np.int64), weights=ln.events.dur_ps[ok].astype(np.float64))
        return plane.meta.name[int(np.argmax(tot))]
    return ""


def trace_memory(trace: Trace) -> MemorySummary:
    """The memory section of a trace: its first host file, its dominant program;
    of a replayed compiled program, the buffer assignment its proto carries
    (a program has no allocator: it never ran)."""
    program = trace.program
    if program is not None:
        main = program.main if program.modules else None
        name = main.name if main is not None else ""
        notes = ["a compiled program: no allocator activity (it never ran)"]
        try:
            ba = read_assignment(main.proto) if main is not None and main.proto else None
        except ValueError as e:
            ba, notes = None, [f"the HLO proto of {name} is not readable ({e})", *notes]
        if ba is None:
            notes.insert(0, f"{name or 'the program'}: no buffer assignment in its HLO (a text form, or a proto "
                            "without one)")
        s = summarize(MemorySources(name, ba, None, notes), trace.chip)
        pm = trace.program_memory
        if pm is None:
            return s
        # the program's peak as the compiler counts it (the JSON's program_memory), not the allocations' sum
        return replace(s, source=s.source if ba is not None else "program",
                       peak_bytes=pm.peak_bytes, headroom_bytes=s.hbm_bytes - pm.peak_bytes,
                       notes=(*s.notes, f"peak: argument + output - alias + temp ({pm.source})"))
    if not trace.hosts or trace.reads is None:
        return summarize(MemorySources(notes=["no host files"]), trace.chip)
    return summarize(trace.reads.memory_sources(trace.hosts[0].file, dominant_program(trace)), trace.chip)
