"""Leaf records of an analysis: the parts of `model.analysis.Analysis` that hold no
other part of it (chip spec, timeline sample, host-offload traffic, run kind,
capture quality, name-scope rows, idle causes, host activity, memory).

Split out of the analysis records (model/analysis.py) to keep each module
readable; callers import them from here (no module re-exports them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from profanalyzer.model.records import Record

__all__ = [
    "collapse",
    "NO_SCOPE",
    "TOP_LEVEL",
    "DEFAULT_DEPTH",
    "HostOffloadSummary",
    "RunKind",
    "CaptureIssue",
    "CaptureQuality",
    "Span",
    "Lane",
    "WindowSpan",
    "TimelineSample",
    "CorePeaks",
    "RidgePoints",
    "ChipSpec",
    "ScopeRow",
    "IdleCause",
    "HostActivity",
    "MemoryBuffer",
    "MemorySummary",
    "ProgramMemory",
]


@dataclass(frozen=True)
class HostOffloadSummary(Record):
    """Host <-> HBM transfers (memory space S(5)) the TensorCore waited for,
    per kept step and TensorCore."""

    ps: float  # the host_offload bucket: exposed DMA wait
    fraction: float  # of the step
    bytes_per_step: float  # bytes moved (each transfer once, on its done half)
    to_host_bytes: float
    from_host_bytes: float
    gbps: float | None  # bytes / exposed wait: the achieved host link rate while the core waits
    transfers: float  # transfers per step


@dataclass(frozen=True)
class RunKind(Record):
    kind: str  # training | inference | unknown (vocab.RUN_KINDS)
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class CaptureIssue(Record):
    code: str  # short key: edge_steps, missing_cores, no_flops, no_sparsecore, no_program_id, event_cap, chip_assumed, ...
    message: str
    affects: tuple[str, ...] = ()  # what rests on the missing data (JSON keys / report sections)


@dataclass(frozen=True)
class CaptureQuality(Record):
    verdict: str  # good | limited | poor
    issues: tuple[CaptureIssue, ...]


@dataclass(frozen=True)
class Span(Record):
    start_ps: int  # from step start
    end_ps: int
    bucket: str  # a BUCKETS name, or 'busy' on SparseCore lanes
    label: str  # op name of the longest piece


@dataclass(frozen=True)
class Lane(Record):
    name: str
    engine: str  # TensorCore | SparseCore
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class WindowSpan(Record):
    start_ps: int
    end_ps: int
    type: str
    name: str
    hidden_fraction: float
    klass: str
    count: int = 1  # the windows it stands for (neighbours of one type drawn as one past the drawing's limit)


@dataclass(frozen=True)
class TimelineSample(Record):
    core: str
    step: int
    step_ps: int
    lanes: tuple[Lane, ...]
    windows: tuple[WindowSpan, ...]
    coalesced: bool  # spans were binned to stay under MAX_SPANS_PER_LANE (windows say their own `count`)


@dataclass(frozen=True)
class CorePeaks(Record):
    """One TensorCore plane's peaks (the chip's divided by its planes)."""

    peak_bf16_tflops: float
    peak_fp8_tflops: float
    hbm_gbps: float


@dataclass(frozen=True)
class RidgePoints(Record):
    """Roofline ridge points of the chip, FLOP/byte."""

    hbm_bf16: float
    hbm_fp8: float
    ici: float


@dataclass(frozen=True)
class ChipSpec(Record):
    """The chip an analysis used (hardware.Chip.to_dict(), typed)."""

    key: str
    name: str
    peak_bf16_tflops_per_chip: float
    peak_fp8_tflops_per_chip: float
    hbm_gib_per_chip: float
    hbm_gbps_per_chip: float
    ici_gbps_per_chip: float
    tensorcores_per_chip: int
    sparsecores_per_chip: int
    planes_per_chip: int
    vmem_mib_per_core: int
    per_core: CorePeaks
    ridge_points_flop_per_byte: RidgePoints
    peak_int8_tops_per_chip: float = 0.0
    #: the chip's low-precision matmul lever: fp8 (TPU7x), int8 (v5e, v5p, v6e) or None (v4)
    low_precision_lever: str | None = None
    #: where the chip's figures come from
    source: str = ""


@dataclass(frozen=True)
class ScopeRow(Record):
    """Time of one JAX name scope (tf_op path, folded: see profanalyzer.analyze.scopes),
    self time per kept step per TensorCore."""

    scope: str  # folded path ('decoder/layers/mlp'), '(no scope)' for ops without tf_op
    ps: float  # all of its ops' self time
    fraction: float  # of step time
    buckets: Mapping[str, float]  # bucket -> ps (non-zero ones)
    exposed_comm_ps: float  # collective buckets
    remat_ps: float  # recomputed ops
    ops: int  # distinct ops (metadata rows, all cores)
    count: int  # repeats per step: layer indices folded, or runs of its most run op (a scanned loop's trip count)
    source: str = ""  # Python file:line (function) its ops came from, the most common (profanalyzer.analyze.sourcelines)


#: The scope of ops without a tf_op, and of ops whose scope folds to nothing
#: (profanalyzer.analyze.scopes folds the tf_op stats into these paths).
NO_SCOPE = "(no scope)"
TOP_LEVEL = "(top level)"
#: The depth of the HTML table and Markdown (the terminal's `--by-scope DEPTH` picks any).
DEFAULT_DEPTH = 3


def _prefix(scope: str, depth: int) -> str:
    if scope in (NO_SCOPE, TOP_LEVEL) or depth <= 0:
        return scope
    return "/".join(scope.split("/")[:depth])


def collapse(rows: Iterable[ScopeRow], depth: int) -> tuple[ScopeRow, ...]:
    """The rows summed to their first `depth` components (sorted by time, then name).

    Times, ops and buckets add up; count is the largest of the merged rows;
    source that of the merged row with the most time that has one."""
    acc: dict[str, list] = {}
    src: dict[str, tuple[float, str]] = {}
    for r in rows:
        key = _prefix(r.scope, depth)
        if r.source and (key not in src or r.ps > src[key][0]):
            src[key] = (r.ps, r.source)
        a = acc.get(key)
        if a is None:
            acc[key] = [r.ps, r.fraction, dict(r.buckets), r.exposed_comm_ps, r.remat_ps, r.ops, r.count]
            continue
        a[0] += r.ps
        a[1] += r.fraction
        for b, v in r.buckets.items():
            a[2][b] = a[2].get(b, 0.0) + v
        a[3] += r.exposed_comm_ps
        a[4] += r.remat_ps
        a[5] += r.ops
        a[6] = max(a[6], r.count)
    out = [ScopeRow(k, ps, fr, {b: v for b, v in sorted(bk.items())}, ex, rm, ops, cnt, src.get(k, (0.0, ""))[1])
           for k, (ps, fr, bk, ex, rm, ops, cnt) in acc.items()]
    return tuple(sorted(out, key=lambda r: (-r.ps, r.scope)))


@dataclass(frozen=True)
class IdleCause(Record):
    """One cause of the idle bucket (profanalyzer.analyze.idle)."""

    ps: float  # per kept step per TensorCore
    fraction: float  # of step time (the causes' fractions sum to the idle bucket's)


@dataclass(frozen=True)
class HostActivity(Record):
    """A host TraceMe name overlapping host-caused idle (profanalyzer.analyze.hostplanes)."""

    name: str
    ps: float  # overlapped time per kept step (first TensorCore of each host, averaged over hosts)
    fraction: float  # of the host-caused idle (between programs + waiting on the host)


@dataclass(frozen=True)
class MemoryBuffer(Record):
    """One buffer of the dominant program's buffer assignment."""

    name: str  # defining instruction (and shape index)
    size_bytes: int
    shape: str
    kind: str  # parameter | output | temp | constant | preallocated
    memory_space: str  # hbm | host (S(5)) | other


@dataclass(frozen=True)
class ProgramMemory(Record):
    """A compiled program's HBM per TensorCore, before any run (profanalyzer.read.compiled): the buffer
    assignment's argument + output - alias + temp, against the chip's HBM per TensorCore (its table);
    the compiler's own memory_analysis beside it when the dump has one. A budget gates on `peak_bytes`
    and `fraction` (`check --budget`: program.hbm_peak_bytes, program.hbm_fraction)."""

    source: str  # which assignment and which temp rule (hlo.memory)
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    peak_bytes: int  # argument + output - alias + temp
    capacity_bytes: int  # HBM per TensorCore (the chip table's GiB per chip / TensorCores per chip)
    fraction: float  # peak / capacity
    fits: bool  # peak <= capacity
    compiler_peak_bytes: int | None = None  # the compiler's memory_analysis, same sum (None: not in the dump)


@dataclass(frozen=True)
class MemorySummary(Record):
    """HBM use and headroom of one device (profanalyzer.analyze.memory; `--memory`)."""

    source: str  # allocator | buffer_assignment | allocator+buffer_assignment | program (a compiled one's figures) | none
    program: str  # the dominant program whose HLO was read ('' when none)
    peak_bytes: int | None  # peak HBM in use per device (the allocator's when recorded, else the program's allocations)
    peak_instruction: str  # where the program's temp heap peaks ('' when unknown)
    hbm_bytes: int  # capacity per device (the allocator's when recorded, else the chip's HBM per TensorCore plane)
    headroom_bytes: int | None  # hbm_bytes - peak_bytes
    top_buffers: tuple[MemoryBuffer, ...]  # live at the program's peak, largest first
    host_offload_bytes: int  # program buffers in host memory (memory space S(5))
    program_hbm_bytes: int | None = None  # the program's HBM allocations (buffer assignment)
    allocator_peak_bytes: int | None = None  # max over devices of stack + heap in use (allocator activity)
    allocator_stack_bytes: int | None = None  # stack reservation at that peak
    allocator_heap_bytes: int | None = None  # heap allocations at that peak
    capacity_source: str = ""
    notes: tuple[str, ...] = ()
