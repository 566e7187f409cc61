"""HBM of a compiled program from its buffer assignment, beside the
compiler's own `memory_analysis()` (CompiledMemoryStats).

* `parse_buffer_assignment(text)`: the dump's
  `*.after_optimizations-buffer-assignment.txt` (`allocation N: size S,
  [color C,] page P, <kinds>:` lines) -> `Allocation`s;
* `assignment_stats(allocs)`: argument / output / alias / temp bytes of memory
  space 0 (HBM), the way CompiledMemoryStats counts them: arguments are the
  entry-parameter allocations, outputs the maybe-live-out (and output
  tuple) allocations, aliased the ones that are both, temp the
  preallocated-temp allocations; peak = argument + output - alias + temp;
* `compiler_stats(text)`: the `Memory analysis: CompiledMemoryStats(...)`
  line (MaxText's `compile.log`) or a JSON/dict of those fields;
* `temp_candidates(allocs, generated_code)`: every way of reading a temp
  figure off the dumped assignment (see below), so a test can check each one
  against the compiler's.

Why the temp differs from the compiler's. Arguments, outputs and aliasing
equal `memory_analysis()` exactly; the temp does not, and no formula over
the dumped artifacts gives it. Measured on the corpus
(sample_traces/compiled) and the MaxText dump:
- the color-0 preallocated-temp allocation is the heap (the memory-usage
  report's color-0 total is exactly the sum of the color-0 allocations);
  adding thread-local and constant allocations, the other colors' temp
  allocations, or the generated code misses by more than 1% on most
  programs, in both directions (remat_full: -12% with the heap, +198% with
  every color's temp);
- the compiler's temp is not a superset of the heap: serving_decode, and a
  one-device train step compiled to probe it, report temp 0 beside a heap
  of small values only (131136 / 49184 bytes);
- nor a monotone function of it: a one-device scan over 4 layers of
  bf16[1024,1024] has a 50528256-byte heap and temp 67500704, over 8 layers
  a 117686784-byte heap and temp 117963328 (heap +67 MB, temp +50 MB);
- the after_codegen module is the after_optimizations one instruction for
  instruction (backend configs added; 8631 lines each in the MaxText dump)
  and carries no buffer assignment;
- the figure occurs in no dumped file: not as a number in the HLO text, not
  as a varint in either HloProto, not in the MaxText dump's
  buffer-assignment / memory-usage / live-range files, nor in libtpu's LLO
  dump (`--xla_jf_dump_to`) of the probe programs.
The final temp is made after the stages the dump writes and only
`memory_analysis()` reports it; the assignment's figure is stated beside
the compiler's, never stretched to meet it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Allocation", "MemoryStats", "parse_buffer_assignment", "assignment_stats", "compiler_stats",
           "memory_report_total", "proto_allocations", "temp_candidates"]

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


def temp_candidates(allocs: tuple[Allocation, ...], generated_code: int = 0, color: int = HBM) -> dict[str, int]:
    """The temp figures the dumped assignment supports, by formula: the heap
    (color-`color` preallocated temp), plus thread-local and constant
    allocations, plus every color's temp allocation, plus the generated
    code."""
    mine = [a for a in allocs if a.color == color]
    heap = sum(a.size for a in mine if a.temp)
    small = sum(a.size for a in mine if (a.thread_local or a.constant) and a.parameter is None and not a.live_out)
    others = sum(a.size for a in allocs if a.temp and a.color != color)
    return {"heap": heap, "heap + thread-local + constants": heap + small,
            "heap + every color's temp": heap + others, "heap + generated code": heap + generated_code}


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
