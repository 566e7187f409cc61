"""HBM of a compiled program from its buffer assignment, beside the
compiler's own `memory_analysis()` (CompiledMemoryStats).

* `parse_buffer_assignment(text)`: the dump's
  `*.after_optimizations-buffer-assignment.txt` (`allocation N: size S,
  [color C,] page P, <kinds>:` lines) -> `Allocation`s;
* `proto_allocations(proto)`: the same from an HloProto's
  BufferAssignmentProto;
* `assignment_stats(allocs)`: argument / output / alias / heap bytes of
  memory space 0 (HBM), the way CompiledMemoryStats counts them: arguments
  are the entry-parameter allocations, outputs the maybe-live-out (and output
  tuple) allocations, aliased the ones that are both, the heap the
  preallocated-temp allocation; peak = argument + output - alias + temp;
* `proto_heap(proto)` / `text_heap(ba_text, live_range_text)`: what the final
  executable makes of that heap (`Heap`), and `final_temp(heap)` its temp;
  `final_stats(proto)`: `assignment_stats` with that temp;
* `compiler_stats(text)`: the `Memory analysis: CompiledMemoryStats(...)`
  line (MaxText's `compile.log`) or a JSON/dict of those fields.

The temp of the final executable. libtpu's program memory allocator
(platforms/xla/service/jellyfish/program_memory_allocator.cc, read with
`TPU_VMODULE=program_memory_allocator=3`) takes the assignment's color-0 heap
as one HLO buffer: `AllocateHloBuffer hbm offset: 0 size: <heap rounded up to
16 KiB> (original size: <heap>) sum_buffer_sizes: <S>`, where S is the sum of
the heap's peak buffers (the values live at the heap's first point of maximal
live size, which the assignment records per allocation). Its own report
(`Program hbm requirement`, INFO log of deepsea_compiler_backend.cc) prints
that buffer as `HLO temp X (... Unpadded (S) Padded (S), F fragmentation)`
with F = X - S, and `memory_analysis().temp_size_in_bytes` is X + F:

    temp = padded + (padded - peak buffers),  padded = heap rounded up to 16 KiB

(16 KiB: libtpu's `--xla_jf_program_hbm_alignment_in_kib`, 16 on every chip of
the corpus). The heap is left out (temp 0) when none of its values is held in
HBM by the final program: the allocator then logs `Skipping buffer
allocation ... with no LloAllocations`. Tuple tables (the 32..96-byte tuple
values the assignment places at 16 KiB slots) and scalars of non-fusion ops
(compare / select / add on the scalar unit) get no HBM; serving_decode's heap
holds nothing else, so its temp is 0 beside a 131136-byte heap.

Checked: with the peak buffers the proto carries (BufferAssignmentProto field
5: allocation index, logical-buffer ids) the formula gives the compiler's
temp to the byte on all 15 corpus programs (tests/test_hlo_corpus_truth.py),
including serving_decode (0) and the collective-matmul program (5246987616).
Without that field the peak is replayed from the heap-simulator trace the
assignment keeps (XLA's peak-buffer rule: an ALLOC adds its size, a
SHARE_WITH adds it only as the first live instance of its canonical buffer, a
FREE takes back what its event added): within 6 KiB of the recorded peak on
the corpus. A text dump has neither; `text_heap` takes the peak of the heap
values' live ranges (`*-live-range.txt`, BufferLiveRange) instead: on the
MaxText dump that is 15136 bytes below the compiler's S, so the temp comes
out 15136 bytes (0.0002%) above the compiler's (tests/test_hlo_truth.py);
but the live ranges are not the heap simulator's order, and on text dumps of
the corpus programs the same reading misses by up to 8% (bf16_mlp: live-range
peak 135273216 beside recorded peak buffers 113780064): the proto is the
exact source.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from profanalyzer.read.hlo.model import Shape

__all__ = ["HBM_PROGRAM_ALIGNMENT", "Allocation", "BufferAssignment", "Heap", "HeapEvent", "LogicalBuffer",
           "MemoryStats", "TracePeak", "ALLOC", "FREE", "SHARE_WITH", "assignment_stats", "compiler_stats",
           "final_stats", "final_temp", "memory_report_total", "parse_buffer_assignment", "proto_allocations",
           "proto_heap", "read_assignment", "text_heap", "trace_peak", "assignment_heap", "assignment_final_stats"]

_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(?:, color (\d+))?, (.*?):?\s*$")
_STAT = re.compile(r"(\w+_size_in_bytes)=(\d+)")
HBM = 0


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    color: int  # memory space: 0 HBM, 5 host memory (S(5))
    parameter: int | None  # entry parameter number
    live_out: bool
    output: bool  # the output tuple's own allocation
    temp: bool  # preallocated temp (the heap)
    thread_local: bool
    constant: bool
    tuple: bool = False  # a tuple table
    assigned: builtins.tuple[builtins.tuple[int, int], ...] = ()  # (logical buffer id, size) (a proto's; text: ())


@dataclass(frozen=True)
class LogicalBuffer:
    id: int
    size: int
    instruction_id: int  # the instruction defining it (-1: unknown)
    shape_index: tuple[int, ...]
    color: int


@dataclass(frozen=True)
class HeapEvent:
    kind: int  # ALLOC, FREE, SHARE_WITH
    buffer_id: int
    instruction: str
    share_with: int = 0  # SHARE_WITH: the canonical buffer


@dataclass(frozen=True)
class BufferAssignment:
    """An HloProto's buffer assignment (`read_assignment`)."""

    module: str
    instructions: Mapping[int, tuple[str, str, Shape]]  # id -> (name, opcode, shape)
    buffers: Mapping[int, LogicalBuffer]
    allocations: tuple[Allocation, ...]
    heap_traces: tuple[tuple[int, tuple[HeapEvent, ...]], ...]  # (its allocation index field, events)
    peak_buffers: Mapping[int, tuple[int, ...]]  # allocation index -> the logical buffers live at its peak


@dataclass(frozen=True)
class MemoryStats:
    argument: int
    output: int
    alias: int
    temp: int
    source: str

    @property
    def peak(self) -> int:
        """argument + output - alias + temp: what the program holds in HBM."""
        return self.argument + self.output - self.alias + self.temp


def parse_buffer_assignment(text: str) -> tuple[Allocation, ...]:
    out = []
    for ln in text.splitlines():
        if not ln.startswith("allocation "):
            continue
        m = _ALLOC.match(ln)
        if not m:
            continue
        desc = m.group(4)
        pm = re.search(r"\bparameter (\d+)", desc)
        out.append(Allocation(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0),
                              int(pm.group(1)) if pm else None, "maybe-live-out" in desc,
                              "output shape is" in desc, "preallocated-temp" in desc, "thread-local" in desc,
                              desc.rstrip(":").endswith("constant")))
    return tuple(out)


def read_assignment(proto: bytes) -> BufferAssignment | None:
    """The buffer assignment of a serialized xla.HloProto (field 3), decoded by
    the protobuf runtime from the project's `hlo_min.proto`, with the ids,
    names, opcodes and shapes of its module's instructions; None when it has
    none. Raises ValueError on bytes that are no HloProto."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from profanalyzer.read.hlo import hlo_min_pb2 as pb
    from profanalyzer.read.hlo.proto import proto_shape

    try:
        top = pb.HloProtoAssignment.FromString(proto)  # type: ignore[attr-defined]
    except DecodeError:
        raise ValueError("the bytes do not parse as an HloProto") from None
    if not top.HasField("buffer_assignment"):
        return None
    ba = top.buffer_assignment
    instructions = {i.id: (i.name, i.opcode, proto_shape(i.shape))
                    for c in top.hlo_module.computations for i in c.instructions}
    buffers = {lb.id: LogicalBuffer(lb.id, lb.size, lb.defined_at.instruction_id if lb.HasField("defined_at") else -1,
                                    tuple(lb.defined_at.shape_index), lb.color) for lb in ba.logical_buffers}
    allocations = []
    for al in ba.buffer_allocations:
        param, live, tl, const = al.is_entry_computation_parameter, al.maybe_live_out, al.is_thread_local, al.is_constant
        # a temp allocation is none of parameter, live-out, thread-local, constant (the text form's preallocated-temp)
        allocations.append(Allocation(al.index, al.size, al.color, al.parameter_number if param else None, live, False,
                                      not (param or live or tl or const), tl, const, al.is_tuple,
                                      tuple((x.logical_buffer_id, x.size) for x in al.assigned)))
    traces = tuple((t.buffer_allocation_index, tuple(HeapEvent(e.kind, e.buffer_id, e.instruction_name,
                                                               e.share_with_canonical_id) for e in t.events))
                   for t in ba.heap_simulator_traces)
    peaks = {p.allocation_index: tuple(p.logical_buffer_ids) for p in ba.peak_buffers}
    return BufferAssignment(top.hlo_module.name, instructions, buffers, tuple(allocations), traces, peaks)


def proto_allocations(proto: bytes) -> tuple[Allocation, ...]:
    """The allocations of a serialized HloProto's buffer assignment; () when it has none or the bytes do not decode."""
    try:
        got = read_assignment(proto)
    except ValueError:
        return ()
    return got.allocations if got is not None else ()


def assignment_stats(allocs: tuple[Allocation, ...], color: int = HBM) -> MemoryStats:
    mine = [a for a in allocs if a.color == color]
    arg = sum(a.size for a in mine if a.parameter is not None)
    out = sum(a.size for a in mine if a.live_out or a.output)
    alias = sum(a.size for a in mine if a.parameter is not None and a.live_out)
    temp = sum(a.size for a in mine if a.temp)
    return MemoryStats(arg, out, alias, temp, "buffer assignment")


#: libtpu rounds the HLO temp heap up to its program HBM alignment
#: (`--xla_jf_program_hbm_alignment_in_kib`, 16 on TPU7x, v6e and v5p).
HBM_PROGRAM_ALIGNMENT = 16 * 1024
#: HeapSimulatorTrace.Event kinds.
ALLOC, FREE, SHARE_WITH = 0, 1, 2


@dataclass(frozen=True)
class Heap:
    """The color-0 heap of a buffer assignment, as the final executable holds it."""

    size: int  # the preallocated-temp allocation's size in the assignment
    peak_buffers: int  # bytes of the heap's peak buffers (the values live at its first maximal live size)
    held: bool  # some value of the heap is held in HBM by the final program (else it is left out)
    peak_source: str  # where peak_buffers came from

    @property
    def padded(self) -> int:
        return -(-self.size // HBM_PROGRAM_ALIGNMENT) * HBM_PROGRAM_ALIGNMENT if self.held else 0

    @property
    def fragmentation(self) -> int:
        """The padded heap not covered by its peak buffers (libtpu's `fragmentation`)."""
        return self.padded - self.peak_buffers if self.held else 0


def final_temp(heap: Heap) -> int:
    """The final executable's temp bytes: the padded heap plus its
    fragmentation (what `memory_analysis().temp_size_in_bytes` reports)."""
    return heap.padded + heap.fragmentation


def _held_in_hbm(opcode: str, shape: Shape, index: tuple[int, ...]) -> bool:
    for i in index:
        if not shape.is_tuple or i >= len(shape.parts):
            return False
        shape = shape.parts[i]
    if shape.dtype in ("tuple", "token"):
        return False  # tuple tables and tokens: no HBM in the final program
    return len(shape.dims) > 0 or opcode == "fusion"  # scalars of non-fusion ops live on the scalar unit


@dataclass(frozen=True)
class TracePeak:
    """The peak of a heap-simulator trace: its live bytes, the event where it is first reached, the buffers live then."""

    bytes: int
    at: int  # index of the event (-1: the trace never holds a byte)
    live: tuple[int, ...]  # logical buffer ids live at the peak, in the order they became live


def trace_peak(sizes: Mapping[int, int], events: Sequence[HeapEvent]) -> TracePeak:
    """The one peak rule, XLA's peak live size of a heap-simulator trace: ALLOC
    adds the value's size; SHARE_WITH adds it only when it is the first live
    instance of its canonical buffer; FREE takes back what that value's event
    added. Events on buffers not in `sizes` are skipped."""
    outstanding: dict[int, int] = {}
    canonical: dict[int, int] = {}
    added: dict[int, int] = {}
    live_set: dict[int, None] = {}
    live = peak = 0
    at = -1
    at_live: tuple[int, ...] = ()
    for k, e in enumerate(events):
        bid = e.buffer_id
        if bid not in sizes:
            continue
        if e.kind == ALLOC:
            outstanding[bid] = 1
            delta = sizes[bid]
        elif e.kind == SHARE_WITH:
            canonical[bid] = e.share_with
            outstanding[e.share_with] = outstanding.get(e.share_with, 0) + 1
            delta = sizes[bid] if outstanding[e.share_with] == 1 else 0
        else:  # FREE
            c = canonical.get(bid, bid)
            outstanding[c] = outstanding.get(c, 0) - 1
            delta = -added.get(bid, 0)
        if e.kind != FREE:
            added[bid] = delta
            if delta:
                live_set[bid] = None
        else:
            live_set.pop(bid, None)
        live += delta
        if live > peak:
            peak, at, at_live = live, k, tuple(live_set)
    return TracePeak(peak, at, at_live)


def proto_heap(proto: bytes) -> Heap | None:
    """The color-0 heap of a serialized HloProto's buffer assignment (`assignment_heap`); None without one
    (or on bytes that do not decode)."""
    try:
        ba = read_assignment(proto)
    except ValueError:
        return None
    return assignment_heap(ba) if ba is not None else None


def assignment_heap(ba: BufferAssignment) -> Heap | None:
    """The color-0 heap of a buffer assignment; None without one. Its peak buffers are the
    assignment's own record (BufferAssignmentProto field 5) when it keeps one, else the peak of its
    heap-simulator trace (`trace_peak`)."""
    heap = next((a for a in ba.allocations if a.color == HBM and a.temp), None)
    if heap is None:
        return None
    assigned = dict(heap.assigned)
    held = False
    for bid, size in heap.assigned:
        lb = ba.buffers.get(bid)
        if lb is None or not size:
            continue
        _name, op, shape = ba.instructions.get(lb.instruction_id, ("", "", Shape("unknown")))
        if _held_in_hbm(op, shape, lb.shape_index):
            held = True
            break
    if heap.index in ba.peak_buffers:
        peak = sum(assigned.get(i, 0) for i in ba.peak_buffers[heap.index])
        return Heap(heap.size, peak, held, "peak buffers of the assignment")
    # the heap's trace: the one whose events are on its values (its allocation index field is not
    # always the heap's: moe_ep's heap 143 has trace 145)
    best: tuple[HeapEvent, ...] = ()
    for _alloc, events in ba.heap_traces:
        mine = tuple(e for e in events if e.buffer_id in assigned)
        if len(mine) > len(best):
            best = mine
    if best:
        return Heap(heap.size, trace_peak(assigned, best).bytes, held, "heap-simulator trace")
    return Heap(heap.size, 0, held, "none (no peak buffers, no trace)")


_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+>(?: \(phi\))? \(size=(\d+),offset=\d+\): (.*)$")
_LIVE = re.compile(r"^\s+(\S+):(\d+)-(\d+)$")


def text_heap(ba_text: str, live_range_text: str) -> Heap | None:
    """The color-0 heap of a text dump: the buffer-assignment text's
    preallocated-temp allocation and its values, the peak of their live
    ranges (`*-live-range.txt`, BufferLiveRange, inclusive). Held when one of
    them is an array of rank >= 1 (the text gives no opcode: scalars count as
    not held)."""
    values: list[tuple[str, int, str]] = []
    size, inside = None, False
    for ln in ba_text.splitlines():
        if ln.startswith("allocation "):
            m = _ALLOC.match(ln)
            inside = bool(m and int(m.group(3) or 0) == HBM and "preallocated-temp" in m.group(4))
            if inside and m:
                size = int(m.group(2))
            elif size is not None:
                break
        elif inside:
            v = _VALUE.match(ln)
            if v:
                values.append((v.group(1) if "{" in v.group(1) else v.group(1) + "{}", int(v.group(2)), v.group(3)))
    if size is None:
        return None
    ranges = {}
    section = live_range_text.split("BufferLiveRange:", 1)[-1]
    for ln in section.splitlines():
        m = _LIVE.match(ln)
        if m:
            ranges[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        elif ranges and not ln.startswith("    "):
            break
    events = []
    for name, n, _ in values:
        if name in ranges:
            start, end = ranges[name]
            events += [(start, 0, n), (end, 1, -n)]
    live = peak = 0
    for _, _, delta in sorted(events):
        live += delta
        peak = max(peak, live)
    held = any(n and not shape.startswith("(") and not shape.startswith("token") and
               re.match(r"^\w+\[\d", shape) is not None for _, n, shape in values)
    return Heap(size, peak, held, "live ranges of the heap's values")


def final_stats(proto: bytes) -> MemoryStats | None:
    """`assignment_final_stats` of a serialized HloProto; None without a buffer assignment (or on bytes that
    do not decode)."""
    try:
        ba = read_assignment(proto)
    except ValueError:
        return None
    return assignment_final_stats(ba) if ba is not None else None


def assignment_final_stats(ba: BufferAssignment) -> MemoryStats | None:
    """argument / output / alias of the assignment and the final executable's
    temp (`final_temp` of its heap); None without a color-0 heap."""
    heap = assignment_heap(ba) if ba.allocations else None
    if heap is None:
        return None
    st = assignment_stats(ba.allocations)
    return MemoryStats(st.argument, st.output, st.alias, final_temp(heap),
                       f"buffer assignment, final-executable temp (peak from the {heap.peak_source})")


def compiler_stats(text: str) -> MemoryStats | None:
    """The compiler's CompiledMemoryStats from a log line, or from JSON (its
    fields, or a document whose `memory_analysis` holds them)."""
    if text.lstrip().startswith("{"):
        import json

        try:
            doc = json.loads(text)
        except ValueError:
            return None
        mem = doc.get("memory_analysis", doc) if isinstance(doc, dict) else None
        if not isinstance(mem, dict) or not isinstance(mem.get("argument_size_in_bytes"), int):
            return None
        a, o, al, t = (int(mem.get(f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "alias", "temp"))
        return MemoryStats(a, o, al, t, "compiler memory_analysis")
    i = text.find("CompiledMemoryStats(")
    seg = text[i:text.find(")", i) + 1] if i >= 0 else text
    f = {k: int(v) for k, v in _STAT.findall(seg)}
    if "argument_size_in_bytes" not in f:
        return None
    return MemoryStats(f.get("argument_size_in_bytes", 0), f.get("output_size_in_bytes", 0),
                       f.get("alias_size_in_bytes", 0), f.get("temp_size_in_bytes", 0), "compiler memory_analysis")


def memory_report_total(text: str) -> int | None:
    """`Total bytes:` of memory space 0 in the memory-usage report."""
    m = re.search(r"Memory Space: default \(color=0\)\s*\nTotal bytes: (\d+)", text)
    return int(m.group(1)) if m else None
