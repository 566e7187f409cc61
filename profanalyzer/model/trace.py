"""The columnar trace model: per-core op tables, steps, modules, async windows.

A `Trace` holds, for each TPU device plane (TensorCore and SparseCore)

  * an op-metadata table (one row per XEventMetadata: HLO text, display name,
    category, tf_op, program id, flops, bytes, ...), and
  * per line, an event table in numpy columns (start, end, duration, self time,
    metadata row, step group, nesting depth, plus the line's per-event extras).

`profanalyzer.read.xspace.build.load_trace(path)` decodes and builds it; this module
holds the model, the nesting / self-time / overlap helpers and the step
derivation, and imports nothing that decodes.

Times are int64 picoseconds relative to the trace origin (`Trace.origin_ns`,
the earliest line timestamp of any decoded plane), so epoch-based and zero
line timestamps both work and nothing overflows. When an event carries
`device_offset_ps` and `device_duration_ps`, those give its device timespan.

Steps come from the `Steps` line when a core has one, else from the runs of
the dominant program on `XLA Modules` (the program with the most total time);
`Steps.source` says which.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from profanalyzer.core.hardware import Chip
from profanalyzer.model.parts import ProgramMemory

if TYPE_CHECKING:  # the input stage's type, named for the checker only (records import no reader)
    from profanalyzer.read.hlo.memory import BufferAssignment
    from profanalyzer.read.hlo.model import Program

# Line names (exact, as the TPU runtime writes them).
LINE_STEPS = "Steps"
LINE_MODULES = "XLA Modules"
LINE_OPS = "XLA Ops"
LINE_ASYNC = "Async XLA Ops"
LINE_TRACEME = "XLA TraceMe"
LINE_SC_STEPS = "Sparse Core Steps"
LINE_SC_MODULES = "Sparse Core Modules"
LINE_SC_OPS = "Sparse Core Ops"
LINE_SC_SYNCS = "Sparse Core Syncs"
#: The lines the analysis reads (load_trace(lines=...)); others are skipped
#: unread (their headers still count for the plane's time origin).
ANALYSIS_LINES = frozenset({LINE_STEPS, LINE_MODULES, LINE_OPS, LINE_ASYNC, LINE_SC_MODULES, LINE_SC_OPS})



# ---------------------------------------------------------------------------
# Frozen model types
# ---------------------------------------------------------------------------


def instruction_name(hlo_text: str) -> str:
    """Instruction name from HLO text: `%fusion.1 = ...` -> `fusion.1`."""
    return hlo_text.split("=", 1)[0].strip().lstrip("%").strip()


@dataclass(frozen=True, eq=False)
class OpMetadata:
    """One row per event-metadata entry of a plane (columnar)."""

    ids: np.ndarray  # int64 metadata ids
    name: tuple[str, ...]  # HLO text (XLA Ops) or event name
    display_name: tuple[str, ...]
    category: tuple[str, ...]
    tf_op: tuple[str, ...]
    deduplicated_name: tuple[str, ...]
    source: tuple[str, ...]
    shape_with_layout: tuple[str, ...]
    program_id: np.ndarray  # int64, -1 if missing, -2 if present but beyond int64
    symbol_id: np.ndarray  # int64, -1 if missing, -2 if present but beyond int64
    flops: np.ndarray  # float64, nan if missing
    model_flops: np.ndarray
    bytes_accessed: np.ndarray
    raw_bytes_accessed: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def short_name(self, row: int) -> str:
        """The op's instruction name: display name, else the name before `=`
        in the HLO text (`%fusion.1 = ...` -> `fusion.1`)."""
        return self.display_name[row] or instruction_name(self.name[row])

    @functools.cached_property
    def short_names(self) -> tuple[str, ...]:
        """`short_name` of every row (made once per table)."""
        return tuple(d or instruction_name(t) for d, t in zip(self.display_name, self.name, strict=True))


@dataclass(frozen=True, eq=False)
class Events:
    """Columnar events of one line, sorted by (start, -end)."""

    start_ps: np.ndarray  # int64
    end_ps: np.ndarray  # int64
    dur_ps: np.ndarray  # int64
    self_ps: np.ndarray  # int64: duration minus directly nested children
    depth: np.ndarray  # int16: nesting depth on the line (0 = top)
    parent: np.ndarray  # int64: index of the directly enclosing event, -1 at top level
    meta: np.ndarray  # int32 row into the plane's OpMetadata
    ints: Mapping[str, np.ndarray]  # EVENT_INT_STATS present on the line (-1 = missing)
    strs: Mapping[str, tuple[str, ...]]  # EVENT_STR_STATS present on the line

    def __len__(self) -> int:
        return len(self.start_ps)

    def encloses(self) -> np.ndarray:
        """bool per event: it encloses another event of the line (a while loop's run around its body's ops)."""
        out = np.zeros(len(self), dtype=bool)
        out[self.parent[self.parent >= 0]] = True
        return out

    def int_stat(self, name: str) -> np.ndarray:
        col = self.ints.get(name)
        if col is None:
            return np.full(len(self), -1, dtype=np.int64)
        return col


@dataclass(frozen=True, eq=False)
class Line:
    id: int
    name: str
    events: Events


@dataclass(frozen=True, eq=False)
class Plane:
    host: str
    name: str
    id: int
    kind: str  # 'tensorcore' | 'sparsecore'
    device_id: int
    sc_index: int | None
    stats: Mapping[str, object]  # plane stats (core_details decoded to a dict)
    meta: OpMetadata
    lines: tuple[Line, ...]

    def line(self, name: str) -> Line | None:
        for ln in self.lines:
            if ln.name == name:
                return ln
        return None

    @property
    def label(self) -> str:
        """Unique core label across hosts."""
        return f"{self.host}:{self.name}"

    @property
    def n_events(self) -> int:
        return sum(len(ln.events) for ln in self.lines)


@dataclass(frozen=True, eq=False)
class Steps:
    """Step windows of one TensorCore."""

    source: str  # 'Steps line' | 'XLA Modules: <program>' | 'whole capture'
    number: np.ndarray  # int64 step numbers
    start_ps: np.ndarray
    end_ps: np.ndarray

    def __len__(self) -> int:
        return len(self.number)

    @property
    def dur_ps(self) -> np.ndarray:
        return self.end_ps - self.start_ps


@dataclass(frozen=True)
class HostInfo:
    name: str
    file: str
    size_bytes: int
    planes_total: int
    plane_kinds: Mapping[str, int]  # kind -> count over all planes of the file
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


# ---------------------------------------------------------------------------
# What a capture's memory reads hold (profanalyzer.read.allocator reads them)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorPeak:
    device: int  # index_on_host
    in_use: int  # stack + heap at the peak
    stack: int
    heap: int
    capacity: int  # stack + heap + available at the peak
    devices: int  # devices seen


@dataclass(frozen=True)
class MemorySources:
    program: str = ""
    assignment: BufferAssignment | None = None  # profanalyzer.read.hlo.memory's record
    allocator: AllocatorPeak | None = None
    notes: list[str] = field(default_factory=list)


class CaptureReads(Protocol):
    """What a stage reads from a trace's input beyond the planes the Trace
    holds, asked of the input itself (profanalyzer.read.source.Source: each
    file read once per run), so that no stage imports a reader. `file` is a
    host's `HostInfo.file`."""

    def programs(self, file: str | None, ran: Collection[str] | None = None) -> tuple[Any, str]:
        """The HLO programs the file carries (those in `ran` when given): (Program or None, why none)."""
        ...

    def counter_lines(self, file: str) -> dict:
        """(plane name -> record) of the counter and pipeline-phase lines of the file's TensorCore planes."""
        ...

    def host_events(self, file: str, origin_ns: int) -> tuple:
        """(event names, name index, start ps, end ps, lines read) of the file's dispatch and input lines."""
        ...

    def memory_sources(self, file: str, program: str) -> Any:
        """The file's buffer assignment of `program` and its allocator activity."""
        ...

    def sha256(self) -> str:
        """The input's SHA-256 (of the bytes read)."""
        ...


@dataclass(frozen=True, eq=False)
class Trace:
    source: str  # what the user passed
    input_kind: str  # 'file' | 'run' | 'logdir'
    run: str | None
    note: str | None
    hosts: tuple[HostInfo, ...]
    chip: Chip
    chip_source: str  # 'device_type_string "..."' | '--chip flag' | 'assumed TPU7x (...)'
    device_type: str | None
    origin_ns: int
    planes: tuple[Plane, ...]  # TensorCore then SparseCore, host order
    steps: Mapping[str, Steps]  # TensorCore plane label -> steps
    program_memory: ProgramMemory | None = None  # a compiled program's HBM (profanalyzer.read.compiled); None: a capture
    #: a compiled program's own profanalyzer.read.hlo.model.Program, text or proto alike (None: a capture, whose programs
    #: are read from its /host:metadata plane when a stage asks)
    program: Program | None = None
    #: the input the trace was read from, asked for what the planes do not hold (None: a trace built in memory
    #: from no file -- no programs, counters, host lines or allocator to read)
    reads: CaptureReads | None = None

    @property
    def tensorcores(self) -> tuple[Plane, ...]:
        return tuple(p for p in self.planes if p.kind == "tensorcore")

    @property
    def sparsecores(self) -> tuple[Plane, ...]:
        return tuple(p for p in self.planes if p.kind == "sparsecore")

    def sparsecores_of(self, tc: Plane) -> tuple[Plane, ...]:
        return tuple(
            p for p in self.sparsecores if p.host == tc.host and p.device_id == tc.device_id
        )


# ---------------------------------------------------------------------------
# Nesting, self time, overlaps
# ---------------------------------------------------------------------------


#: Deeper nesting than this falls back to a sequential stack walk.
MAX_VECTOR_DEPTH = 64


def nesting(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Direct parent (-1 at top level), depth, and end clipped to the parent,
    for the events of one line sorted by (start, -end).

    Events on a line never partially overlap but may nest. Vectorised by
    levels: an event is at the current level when no other remaining event
    started before it and ends after its start (running maximum of ends); its
    parent is the last event of the previous level starting at or before it.
    A partial overlap (invalid input) makes the later event a child clipped to
    its parent's end.
    """
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int16)
    if n == 0 or bool(np.all(start[1:] >= end[:-1])):
        return parent, depth, end
    end = end.copy()
    remaining = np.arange(n)
    prev = None
    level = 0
    while len(remaining):
        if level > MAX_VECTOR_DEPTH:
            return _nesting_stack(start, end)
        s = start[remaining]
        e = end[remaining]
        pm = np.empty_like(e)
        pm[0] = np.iinfo(np.int64).min
        pm[1:] = np.maximum.accumulate(e)[:-1]
        top = s >= pm
        lvl = remaining[top]
        if prev is not None:
            j = np.searchsorted(start[prev], start[lvl], side="right") - 1
            p = prev[np.maximum(j, 0)]
            parent[lvl] = p
            depth[lvl] = level
            # Clip to the parent's (already clipped) end; a child starting
            # after it (partial overlap) becomes zero-length at its start.
            end[lvl] = np.maximum(np.minimum(end[lvl], end[p]), start[lvl])
        remaining = remaining[~top]
        prev = lvl
        level += 1
    return parent, depth, end


#: Rounds of `sequential_overlaps` before the rest is left to `nesting`.
MAX_OVERLAP_ROUNDS = 8


def sequential_overlaps(start: np.ndarray, end: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Partial overlaps on one line made sequential, for events sorted by
    (start, -end): an event that starts before the running maximum of the
    earlier ends and ends after it starts at that maximum instead (it loses
    exactly the overlap). Returns (number of events moved, starts, the order
    that re-sorts the line; identity when nothing moved). Containment is
    untouched: a child that ends inside its parent is not an overlap.
    """
    n = len(start)
    order = np.arange(n)
    if n < 2:
        return 0, start, order
    moved_total = 0
    for _ in range(MAX_OVERLAP_ROUNDS):
        e = end[order]
        prev_max = np.empty(n, dtype=np.int64)
        prev_max[0] = np.iinfo(np.int64).min
        prev_max[1:] = np.maximum.accumulate(e)[:-1]
        partial = (start < prev_max) & (e > prev_max)
        k = int(partial.sum())
        if not k:
            break
        moved_total += k
        start = np.where(partial, prev_max, start)
        resort = np.lexsort((-e, start))
        start, order = start[resort], order[resort]
    return moved_total, start, order


def _nesting_stack(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int16)
    end_l = end.tolist()
    stack: list[int] = []
    for i, s in enumerate(start.tolist()):
        while stack and end_l[stack[-1]] <= s:
            stack.pop()
        if stack:
            p = stack[-1]
            parent[i] = p
            depth[i] = len(stack)
            end_l[i] = max(s, min(end_l[i], end_l[p]))
        stack.append(i)
    return parent, depth, np.asarray(end_l, dtype=np.int64)


try:  # the optional C accelerator (setup.py): the same passes, without numpy's temporaries
    import profanalyzer.model._nest as _nest  # type: ignore[import-not-found]
except ImportError:  # no compiler at install time: numpy alone
    _nest = None


def nest_line(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`nesting` and the self times of one line's events (sorted by (start,
    -end)): (parent, depth, clipped end, self time). Self time is the
    duration minus the direct children's, floored at 0 (the duration itself
    when no event has a parent). One C pass per level when the accelerator is
    built, else numpy; the same numbers either way (tested)."""
    if _nest is not None and len(start):
        got = _nest.nest(np.ascontiguousarray(start, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64),
                         MAX_VECTOR_DEPTH)
        if got is not None:
            parent, depth, end_c, selft = (np.frombuffer(b, dtype=t) for b, t in zip(got, (np.int64, np.int16, np.int64, np.int64), strict=True))
            return parent, depth, end_c, selft
    parent, depth, end_c = nesting(start, end)
    dur = end_c - start
    selft = dur
    child = parent >= 0
    if child.any():
        selft = dur - np.bincount(parent[child], weights=dur[child], minlength=len(start)).astype(np.int64)
        np.maximum(selft, 0, out=selft)
    return parent, depth, end_c, selft


def self_times(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Self time (duration minus directly nested children) and depth."""
    parent, depth, end_c = nesting(start, end)
    dur = end_c - start
    selft = dur.copy()
    child = parent >= 0
    if child.any():
        selft -= np.bincount(parent[child], weights=dur[child], minlength=len(start)).astype(np.int64)
    np.maximum(selft, 0, out=selft)
    return selft, depth


# ---------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------



_STEP_NUMBER_RE = re.compile(r"^\s*(\d{1,18})\s*$", re.ASCII)


def _ignored(n: int) -> str:
    return f" ({n} zero-length step{'s' if n != 1 else ''} ignored)" if n else ""


def _runs_with_their_ops(plane: Plane, all_start: np.ndarray, all_end: np.ndarray, start: np.ndarray,
                         end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Program runs widened to the ops they ran. The device clock of `XLA Ops`
    and the `XLA Modules` events can disagree by a fraction of a millisecond
    (a real v6e capture starts every run's first DMA wait ~0.25 ms before its
    module event), which would cut the first op out of its step. A run starts
    at the first op after the previous program run (any program) ended, and
    ends at the end of the last op that starts inside it, but never reaches
    into the next program run."""
    ln = plane.line(LINE_OPS)
    if ln is None or not len(ln.events) or not len(start):
        return start, end
    top = ln.events.depth == 0
    os_, oe = ln.events.start_ps[top], ln.events.end_ps[top]
    order = np.argsort(all_start, kind="stable")
    ms, me = all_start[order], all_end[order]
    prev_end = np.maximum.accumulate(me)
    new_s, new_e = start.copy(), end.copy()
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        j = int(np.searchsorted(ms, s, side="left"))  # module events before this run
        lo = int(prev_end[j - 1]) if j > 0 else np.iinfo(np.int64).min
        lo = max(lo, int(new_e[i - 1]) if i else lo)
        k = int(np.searchsorted(os_, lo, side="left"))
        if k < len(os_) and os_[k] < s:
            new_s[i] = os_[k]
        nxt = int(np.searchsorted(ms, s, side="right"))
        hi = int(ms[nxt]) if nxt < len(ms) else np.iinfo(np.int64).max
        a, b = np.searchsorted(os_, new_s[i], side="left"), np.searchsorted(os_, e, side="left")
        if b > a:
            new_e[i] = max(e, min(int(oe[a:b].max()), hi))
    return new_s, new_e


def derive_steps(plane: Plane) -> Steps:
    """Step windows of a TensorCore. Zero-length windows (a corrupt or
    degenerate Steps line) are ignored and counted in `source`; when every
    window of a source is zero-length the next source is used."""
    ln = plane.line(LINE_STEPS)
    if ln is not None and len(ln.events):
        ev = ln.events
        top = ev.depth == 0
        numbers = ev.int_stat("group_id")[top]
        if np.any(numbers < 0):
            # No group_id: the event name is the step number when numeric.
            rows = ev.meta[top]
            fallback = []
            for i, r in enumerate(rows.tolist()):
                m = _STEP_NUMBER_RE.match(plane.meta.name[r] if r >= 0 else "")
                fallback.append(int(m.group(1)) if m else i)
            numbers = np.where(numbers < 0, np.asarray(fallback, dtype=np.int64), numbers)
        start, end = ev.start_ps[top], ev.end_ps[top]
        keep = end > start
        if keep.any():
            return Steps("Steps line" + _ignored(int((~keep).sum())), numbers[keep].astype(np.int64), start[keep], end[keep])
    ln = plane.line(LINE_MODULES)
    if ln is not None and len(ln.events):
        ev = ln.events
        top = np.flatnonzero((ev.depth == 0) & (ev.dur_ps > 0))
        # Group runs by program (the metadata name without the "(id)" suffix is
        # kept whole: "jit_train_step(123)" names one compiled program).
        totals: dict[str, int] = {}
        prog_of = []
        for i in top.tolist():
            r = ev.meta[i]
            nm = plane.meta.name[r] if r >= 0 else "?"
            prog_of.append(nm)
            totals[nm] = totals.get(nm, 0) + int(ev.dur_ps[i])
        if totals:
            dominant = max(sorted(totals), key=lambda k: totals[k])
            sel = top[np.asarray([p == dominant for p in prog_of], dtype=bool)]
            start, end = _runs_with_their_ops(plane, ev.start_ps[top], ev.end_ps[top], ev.start_ps[sel], ev.end_ps[sel])
            return Steps(f"XLA Modules: {dominant}", np.arange(len(sel), dtype=np.int64), start, end)
    ln = plane.line(LINE_OPS)
    if ln is not None and len(ln.events):
        ev = ln.events
        first, last = int(ev.start_ps.min()), int(ev.end_ps.max())
        if last > first:
            return Steps("whole capture", np.zeros(1, dtype=np.int64), np.asarray([first], np.int64), np.asarray([last], np.int64))
    return Steps("none", np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def module_names(trace: Trace) -> frozenset[str]:
    """The programs that ran: the names of the XLA Modules events on every
    TensorCore (as `jit_f(1219...)`)."""
    names: set[str] = set()
    for plane in trace.tensorcores:
        ln = plane.line(LINE_MODULES)
        if ln is None or not len(ln.events):
            continue
        for r in set(ln.events.meta.tolist()):
            if r >= 0:
                names.add(plane.meta.name[r])
    return frozenset(names)
