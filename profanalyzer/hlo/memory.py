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

import re
from dataclasses import dataclass

__all__ = ["HBM_PROGRAM_ALIGNMENT", "Allocation", "Heap", "MemoryStats", "assignment_stats", "compiler_stats",
           "final_stats", "final_temp", "memory_report_total", "parse_buffer_assignment", "proto_allocations",
           "proto_heap", "text_heap"]

_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(?:, color (\d+))?, (.*?):?\s*$")
_STAT = re.compile(r"(\w+_size_in_bytes)=(\d+)")
HBM = 0


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    color: int
    parameter: int | None  # entry parameter number
    live_out: bool
    output: bool  # the output tuple's own allocation
    temp: bool  # preallocated temp (the heap)
    thread_local: bool
    constant: bool


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


def proto_allocations(proto: bytes) -> tuple[Allocation, ...]:
    """The allocations of a serialized HloProto's buffer assignment (field 3;
    BufferAllocationProto: 1 index, 2 size, 3 is_thread_local, 5
    is_entry_computation_parameter, 6 parameter_number, 7 maybe_live_out,
    8 color, 12 is_constant); () when it has none. A temp allocation is what
    is none of parameter, live-out, thread-local, constant (the
    preallocated-temp rule of the text form)."""
    from profanalyzer.xspace.wire import iter_fields

    out = []
    try:
        for f, w, _v, a, b, _ in iter_fields(proto, 0, len(proto)):
            if f != 3 or w != 2:
                continue
            for f2, w2, _v2, a2, b2, _ in iter_fields(proto, a, b):
                if f2 != 3 or w2 != 2:
                    continue
                d = {k: 0 for k in (1, 2, 3, 5, 6, 7, 8, 12)}
                for f3, w3, v3, *_ in iter_fields(proto, a2, b2):
                    if w3 == 0 and f3 in d and v3 is not None:
                        d[f3] = v3
                param, live, tl, const = bool(d[5]), bool(d[7]), bool(d[3]), bool(d[12])
                out.append(Allocation(d[1], d[2], d[8], d[6] if param else None, live, False,
                                      not (param or live or tl or const), tl, const))
    except ValueError:
        return ()
    return tuple(out)


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
_TUPLE, _TOKEN = 13, 17  # xla PrimitiveType


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


def _fields(buf: bytes, a: int, b: int) -> dict[int, list]:
    from profanalyzer.xspace.wire import iter_fields

    d: dict[int, list] = {}
    for f, w, v, pa, pb, _ in iter_fields(buf, a, b):
        d.setdefault(f, []).append(v if w == 0 else (pa, pb))
    return d


def _first(d: dict[int, list], f: int, default=0):
    return d[f][0] if f in d else default


def _packed(buf: bytes, d: dict[int, list], f: int) -> list[int]:
    from profanalyzer.xspace.wire import varint

    out = []
    for x in d.get(f, []):
        if isinstance(x, int):
            out.append(x)
            continue
        pos, end = x
        while pos < end:
            v, pos = varint(buf, pos, end)
            out.append(v)
    return out


def _instruction_shapes(buf: bytes, a: int, b: int) -> dict[int, tuple[str, tuple]]:
    """HloModuleProto -> instruction id -> (opcode, shape tree), a shape tree
    being (element_type, rank, (sub-shape trees))."""
    def shape(x: int, y: int) -> tuple:
        d = _fields(buf, x, y)
        return (_first(d, 2), len(_packed(buf, d, 3)), tuple(shape(*t) for t in d.get(4, [])))

    out = {}
    for ca, cb in _fields(buf, a, b).get(3, []):  # computations
        for ia, ib in _fields(buf, ca, cb).get(2, []):  # instructions
            d = _fields(buf, ia, ib)
            op = bytes(buf[slice(*d[2][0])]).decode() if 2 in d else ""
            out[_signed(_first(d, 35))] = (op, shape(*d[3][0]) if 3 in d else (0, 0, ()))
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _held_in_hbm(opcode: str, shape: tuple, index: list[int]) -> bool:
    for i in index:
        if i >= len(shape[2]):
            return False
        shape = shape[2][i]
    element_type, rank, _ = shape
    if element_type in (_TUPLE, _TOKEN):
        return False  # tuple tables and tokens: no HBM in the final program
    return rank > 0 or opcode == "fusion"  # scalars of non-fusion ops live on the scalar unit


def _trace_peak(sizes: dict[int, int], events: list[tuple[int, int, int]]) -> int:
    """XLA's peak live size of a heap-simulator trace: ALLOC adds the value's
    size; SHARE_WITH adds it only when it is the first live instance of its
    canonical buffer; FREE takes back what that value's event added."""
    outstanding: dict[int, int] = {}
    canonical: dict[int, int] = {}
    added: dict[int, int] = {}
    live = peak = 0
    for kind, bid, share in events:
        if bid not in sizes:
            continue
        if kind == 0:  # ALLOC
            outstanding[bid] = 1
            delta = sizes[bid]
        elif kind == 2:  # SHARE_WITH
            canonical[bid] = share
            outstanding[share] = outstanding.get(share, 0) + 1
            delta = sizes[bid] if outstanding[share] == 1 else 0
        else:  # FREE
            c = canonical.get(bid, bid)
            outstanding[c] = outstanding.get(c, 0) - 1
            delta = -added.get(bid, 0)
        if kind != 1:
            added[bid] = delta
        live += delta
        peak = max(peak, live)
    return peak


def proto_heap(proto: bytes, allocs: tuple[Allocation, ...] | None = None) -> Heap | None:
    """The color-0 heap of a serialized HloProto's buffer assignment (field 1
    the HloModuleProto, field 3 the BufferAssignmentProto: 1 logical buffers
    {1 id, 3 defined_at {3 shape index, 4 instruction id}}, 3 allocations
    {9 assigned {1 logical buffer, 2 offset, 3 size}}, 4 heap-simulator traces
    {1 events {1 kind, 2 buffer, 5 canonical}, 3 allocation}, 5 peak buffers
    {1 allocation, 2 logical buffers}); None without one. `allocs`: its
    `proto_allocations`, when the caller has them already."""
    try:
        top = _fields(proto, 0, len(proto))
        if 3 not in top:
            return None
        ba = _fields(proto, *top[3][0])
        if allocs is None:
            allocs = proto_allocations(proto)
        heap = next((a for a in allocs if a.color == HBM and a.temp), None)
        if heap is None:
            return None
        assigned: dict[int, int] = {}
        for x, y in ba.get(3, []):
            d = _fields(proto, x, y)
            if _first(d, 1) == heap.index:
                for p, q in d.get(9, []):
                    dd = _fields(proto, p, q)
                    assigned[_first(dd, 1)] = _first(dd, 3)
                break
        shapes = _instruction_shapes(proto, *top[1][0]) if 1 in top else {}
        held = False
        for x, y in ba.get(1, []):
            d = _fields(proto, x, y)
            if _first(d, 1) not in assigned or 3 not in d:
                continue
            loc = _fields(proto, *d[3][0])
            op, shape = shapes.get(_signed(_first(loc, 4, -1)), ("", (0, 0, ())))
            if assigned[_first(d, 1)] and _held_in_hbm(op, shape, _packed(proto, loc, 3)):
                held = True
                break
        for x, y in ba.get(5, []):
            d = _fields(proto, x, y)
            if _first(d, 1) == heap.index:
                peak = sum(assigned.get(i, 0) for i in _packed(proto, d, 2))
                return Heap(heap.size, peak, held, "peak buffers of the assignment")
        # the heap's trace: the one whose events are on its values (its allocation index field is not
        # always the heap's: moe_ep's heap 143 has trace 145)
        best: list[tuple[int, int, int]] = []
        for x, y in ba.get(4, []):
            events = []
            for p, q in _fields(proto, x, y).get(1, []):
                e = _fields(proto, p, q)
                if _first(e, 2) in assigned:
                    events.append((_first(e, 1), _first(e, 2), _first(e, 5)))
            if len(events) > len(best):
                best = events
        if best:
            return Heap(heap.size, _trace_peak(assigned, best), held, "heap-simulator trace")
        return Heap(heap.size, 0, held, "none (no peak buffers, no trace)")
    except (ValueError, IndexError, TypeError, KeyError):  # malformed bytes: no heap, never a traceback
        return None


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


def final_stats(proto: bytes, allocs: tuple[Allocation, ...] | None = None) -> MemoryStats | None:
    """argument / output / alias of the assignment and the final executable's
    temp (`final_temp` of its heap); None without a buffer assignment.
    `allocs`: the proto's `proto_allocations`, when the caller has them."""
    if allocs is None:
        allocs = proto_allocations(proto)
    heap = proto_heap(proto, allocs) if allocs else None
    if heap is None:
        return None
    ba = assignment_stats(allocs)
    return MemoryStats(ba.argument, ba.output, ba.alias, final_temp(heap),
                       f"buffer assignment, final-executable temp (peak from the {heap.peak_source})")


def proto_module_name(proto: bytes) -> str:
    """The module name of a serialized HloProto (field 1 the HloModuleProto,
    its field 1 the name); "" when it has none or does not decode."""
    try:
        top = _fields(proto, 0, len(proto))
        if 1 not in top:
            return ""
        mod = _fields(proto, *top[1][0])
        if 1 not in mod:
            return ""
        a, b = mod[1][0]
        return proto[a:b].decode("utf-8", "replace")
    except (ValueError, IndexError, TypeError, KeyError):
        return ""


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
