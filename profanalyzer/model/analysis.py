"""The analysis stage's records (`Analysis` and what it holds), the JSON
document's first half; the findings stage's are in model/findings.py.

    analyze -> Analysis ; findings -> Findings ; both -> the `--json` document

Every record is a frozen dataclass deriving from `Record` (model/records.py),
which gives it `to_dict()` (deterministic: sorted keys, large numbers as
integers, others to 12 significant digits; see `round_number`) and
`from_dict()` (driven by the type hints, the inverse of `to_dict` on what the
JSON holds). The round trip is exact on the dictionary:

    from_dict(to_dict(a)).to_dict() == to_dict(a)

and a record read back is a fixed point (`from_dict(to_dict(b)) == b` for
`b = from_dict(to_dict(a))`). `a` itself is not always equal to `b`: `to_dict`
rounds (that is what keeps the JSON stable across platforms), so a float such
as 1234567.8 ps comes back as 1234568.0; the reports print the same from `b`
as from `a` (tests/test_model.py renders every sample both ways).

The leaf records are in model/parts.py, the one list of an analysis's
invariants (`check_analysis`) in model/invariants.py, saved documents
(writing, reading and validating the `--json` document) in
model/documents.py.

Imports: the model room's records, parts and invariants, the core's vocab and
errors only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from profanalyzer.core.errors import InvariantError
from profanalyzer.model.invariants import check_analysis
from profanalyzer.model.parts import (
    CaptureQuality,
    ChipSpec,
    HostActivity,
    HostOffloadSummary,
    IdleCause,
    MemorySummary,
    ProgramMemory,
    RunKind,
    ScopeRow,
    TimelineSample,
)
from profanalyzer.model.records import Record

if TYPE_CHECKING:
    from profanalyzer.model.findings import Findings

#: Version of the JSON that `--json` writes, and the versions this one reads.
SCHEMA_VERSION = 1
READS_SCHEMA = (1,)


# ---------------------------------------------------------------------------
# The records
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketShare(Record):
    ps: float  # mean per kept step, averaged over TensorCores
    fraction: float  # of step time
    time_basis: str = "measured"  # "predicted": replayed from a compiled program's estimates (vocab.TIME_BASES)


@dataclass(frozen=True)
class StepRow(Record):
    number: int
    step_ps: float  # median over TensorCores
    kept: bool
    reason: str  # why dropped ('' when kept)
    buckets: Mapping[str, float]  # mean over TensorCores


@dataclass(frozen=True)
class StepClass(Record):
    """Dropped steps that recur on a schedule (profanalyzer.analyze.stepclass)."""

    kind: str  # periodic
    period: int  # every `period` steps
    first: int  # from this step number
    steps: tuple[int, ...]  # its steps in the capture
    step_ps: float  # their mean step time (median over TensorCores per step)
    extra_ps: float  # over the median kept step
    amortized_fraction: float  # extra / period / median kept step: what it costs the average step
    main_bucket: str  # the bucket that grew most
    main_bucket_extra_ps: float


@dataclass(frozen=True)
class StepsSummary(Record):
    count: int  # steps seen
    kept: int
    source: str
    step_time_ps: Mapping[str, float]  # median/min/max/mean over kept steps
    dropped: tuple[StepRow, ...]
    rule: str
    table: tuple[StepRow, ...]
    classes: tuple[StepClass, ...] = ()  # periodic heavy steps among the dropped (profanalyzer.analyze.stepclass)
    time_basis: str = "measured"  # "predicted": the step of a replayed compiled program (vocab.TIME_BASES)


@dataclass(frozen=True)
class CoreSummary(Record):
    core: str  # host:plane
    host: str
    plane: str
    steps_kept: int
    step_ps: float  # mean over kept steps
    busy_ps: float  # step minus idle
    compute_ps: float  # step minus idle, collectives and host-offload waits
    buckets: Mapping[str, float]
    remat_ps: float
    straggler: bool
    busy_z: float
    idle_causes: Mapping[str, float] = field(default_factory=dict)  # ps per kept step by cause (profanalyzer.analyze.idle)


@dataclass(frozen=True)
class HostSummary(Record):
    """One host's TensorCores, means over its cores and the kept steps."""

    host: str
    cores: int
    step_ps: float
    compute_ps: float
    exposed_comm_ps: float
    idle_ps: float
    step_z: float  # modified z-score of step time across hosts
    wait_z: float  # of waiting time (idle + exposed communication)
    straggler: bool


@dataclass(frozen=True)
class TopOp(Record):
    name: str  # instruction name (display name)
    hlo_category: str
    bucket: str
    tags: tuple[str, ...]
    tf_op: str
    reason: str
    self_ps: float  # per kept step, averaged over TensorCores
    fraction: float  # of step time
    count: float  # occurrences per step per core
    flops: float | None  # per occurrence
    bytes: float | None  # per occurrence
    intensity: float | None  # FLOP/byte
    tflops_per_s: float | None  # achieved
    gbps: float | None  # achieved HBM GB/s
    bound_by: str  # compute | hbm | unknown
    roofline_fraction: float | None  # achieved / attainable at its intensity
    deduplicated_name: str
    model_flops_ratio: float | None = None  # model FLOPs / executed FLOPs (< 1: padding or recompute)
    output_bytes: float | None = None  # bytes of the op's output (from its HLO shape), per occurrence
    source: str = ""  # Python file:line (function) its HLO came from (profanalyzer.analyze.sourcelines), "" when unknown
    time_basis: str = "measured"  # "predicted": self_ps is the replay's, not a measurement (vocab.TIME_BASES)


@dataclass(frozen=True)
class BucketOps(Record):
    """What the ops of one bucket did, per kept step per TensorCore."""

    ps: float
    fraction: float
    ops: int  # distinct ops
    flops: float
    model_flops: float
    bytes: float
    compute_bound_ps: float
    hbm_bound_ps: float
    remat_ps: float


@dataclass(frozen=True)
class Utilisation(Record):
    mfu: float | None  # model FLOPs / (step time x BF16 peak), per core; recomputed (remat) ops excluded
    mfu_flops_source: str  # 'model_flops' | 'flops' | 'none'
    mxu_matmul: float | None  # matmul FLOPs / (matmul time x peak of its precision)
    flops_coverage: float | None = None  # share of compute time whose FLOPs are known (stat or operand shapes)
    low_confidence: bool = False  # MFU rests on FLOPs of less than 90% of the compute time
    #: hardware FLOPs utilisation: every executed FLOP (recompute included) / (step time x BF16 peak)
    hfu: float | None = None


@dataclass(frozen=True)
class CollectiveTypeSummary(Record):
    type: str
    bucket: str
    count: float  # windows per step per TensorCore
    window_ps: float  # per step per TensorCore
    exposed_ps: float  # attribution bucket share of this type (per step per core)
    hidden_ps: float  # compute inside its windows
    hidden_fraction: float | None
    engine: str  # TensorCore | SparseCore | mixed
    bytes: float | None  # moved per device over the links, per step per core, when its shapes are known (hlo.traffic)
    fraction_of_step: float  # exposed / step
    tf_ops: tuple[str, ...] = ()  # framework scopes of its most exposed windows (up to 3)
    critical_path_ps: float = 0.0  # exposed time of windows on the critical path (nothing independent to hide behind)


@dataclass(frozen=True)
class KernelCounters(Record):
    """Hardware counters and pipeline phases of one op (profanalyzer.analyze.counters)."""

    op: str
    bucket: str
    ps: float  # its time per kept step per TensorCore (over the spans with samples or phases)
    fraction: float  # of the step
    utilisation: Mapping[str, float]  # unit -> time-weighted utilisation over the op's span (0..1)
    median_utilisation: Mapping[str, float]  # unit -> median sample
    samples: int
    ep_wait_fraction: float | None  # share of its span in emit_pipeline ep_wait_* phases (None: no phases)
    verdict: str  # mxu_bound | vector_bound | waiting_on_dma | low_utilisation | ""
    lever: str
    reason: str


@dataclass(frozen=True)
class AntiPattern(Record):
    """One HLO anti-pattern of the compiled program (profanalyzer.analyze.antipatterns)."""

    kind: str  # layout_copy | f32_promotion | runtime_fp8_scaling | unfused_reshape | unfused_update | state_copy | page_gather
    op: str  # instruction name
    opcode: str
    detail: str  # what it is, with the shapes and neighbours that show it
    ps: float  # measured self time per kept step per TensorCore (0: not on the trace)
    fraction: float  # of the step
    lever: str  # the guide lever the fix belongs to
    fix: str


@dataclass(frozen=True)
class DecodeCache(Record):
    """What a decode step's attention over its KV cache reads (profanalyzer.analyze.kvcache)."""

    dtypes: tuple[str, ...]  # the cache's element types
    bytes_per_step: float  # cache bytes the contractions read per step (every run)
    ps: float  # attention over the cache, per step per TensorCore
    contractions: int  # distinct ops contracting the cache
    #: the contractions ran faster than HBM delivers their bytes: they read copies of the cache other ops staged
    #: in VMEM (async copies, overlapped), so `gbps` over their time is above the HBM peak and not a read rate
    staged: bool = False

    @property
    def gbps(self) -> float:
        """Achieved cache read bandwidth, GB/s (above the HBM peak where `staged`: not a read rate then)."""
        return self.bytes_per_step / (self.ps * 1e-12) / 1e9 if self.ps > 0 else 0.0


@dataclass(frozen=True)
class AttentionKernel(Record):
    """One fused attention kernel's work from the program (profanalyzer.analyze.kernelflops): its half,
    shapes, block sizes, FLOPs for every (q, k) pair and the share of pairs its block mask computes."""

    op: str  # instruction name
    half: str  # forward | dq | dkv
    heads: int  # batch x heads
    seq_q: int
    seq_kv: int
    head_dim: int
    block_q: int | None
    block_kv: int | None
    dense_flops: float  # every (q, k) pair, per run
    computed_fraction: float | None  # of the block pairs, from the mask's values; None: the program lacks them
    ps: float  # measured (or predicted) self time per step per TensorCore, all runs

    @property
    def flops_upper(self) -> float:
        """FLOPs per run, at most: the computed pairs' when known, else every pair's."""
        return self.dense_flops * (self.computed_fraction if self.computed_fraction is not None else 1.0)


@dataclass(frozen=True)
class CollectiveDiagnosis(Record):
    """One collective type across the TensorCores (profanalyzer.analyze.collectives)."""

    type: str
    instances: int  # cross-core instances over the kept steps (one per step, type and order on each core)
    per_step: float  # windows per step per TensorCore
    bytes_per_instance: float | None  # median buffer bytes of its windows (profanalyzer.read.hlo.traffic, from its shapes)
    moved_per_instance: float | None  # median bytes moved per device over the links (the algorithm's factor x the buffer)
    group: int | None  # devices per group, the most common over its windows (None: unknown, the large-group bound)
    algorithm: str  # how the moved bytes follow from the buffer (profanalyzer.read.hlo.traffic.ALGORITHM)
    achieved_gbps: float | None  # bus bandwidth: bytes moved / window time, per TensorCore
    link_gbps: float  # the chip's ICI per TensorCore (hardware table)
    link_fraction: float | None  # achieved / link
    above_link: bool  # achieved above the link: not a rate the link carried (flagged, never shown plain)
    exposed_ps: float  # per step per TensorCore (the attribution bucket's share of this type)
    exposed_fraction: float  # of the step
    exposed_window_fraction: float | None  # 1 - hidden fraction of its windows
    arrival_spread_ps: float  # median over instances of the latest minus the earliest arrival
    last_core: str | None  # the core that arrives last most often (None: arrivals within the tolerance)
    last_core_share: float | None  # of the instances with a distinct last arrival
    window_p50_ps: float
    window_p90_ps: float
    window_cv: float | None  # std / mean of window durations across instances and cores


@dataclass(frozen=True)
class CollectiveDiagnostics(Record):
    """Per-collective diagnosis: which core the others wait for, per type and overall."""

    cores: int
    instances: int  # cross-core instances of every type
    distinct_last: int  # instances whose last arrival is later than the others' by more than the tolerance
    tolerance_ps: float
    last_core: str | None  # the core that arrives last most often, over every type
    last_core_share: float | None  # of distinct_last
    last_core_lateness_ps: float  # median lateness of that core when last (its start minus the others' median)
    last_counts: Mapping[str, int] = field(default_factory=dict)  # core -> instances it arrived last
    types: Mapping[str, CollectiveDiagnosis] = field(default_factory=dict)
    rule: str = ""


@dataclass(frozen=True)
class WindowRecord(Record):
    core: str
    step: int
    type: str
    name: str
    tf_op: str
    engine: str
    offset_ps: int  # from step start
    offset_fraction: float  # of the step
    window_ps: int
    hidden_ps: int
    exposed_ps: int
    hidden_fraction: float
    klass: str  # hidden | partial | exposed
    before_first_compute: bool


@dataclass(frozen=True)
class SparseCoreSummary(Record):
    detected: bool  # SparseCore planes with events in this capture
    planes: int
    planes_with_activity: int
    offloaded: Mapping[str, bool]  # per offloadable type present
    sc_types: tuple[str, ...]  # collective types seen on SparseCore ops
    busy_fraction: float | None  # mean SparseCore busy time / step
    concurrency: float | None  # share of SparseCore busy time with the TensorCore computing
    queueing_ps: float | None  # per step per TensorCore: offloaded work waiting for a busy SparseCore
    verdict: str
    reason: str


@dataclass(frozen=True)
class CommunicationSummary(Record):
    top_exposed: tuple[WindowRecord, ...]
    per_step_exposed: Mapping[int, Mapping[str, float]]  # step -> type -> ps (mean over cores)
    unmatched: Mapping[str, int]  # 'start'/'done' halves without a partner (all cores)
    window_source: str
    all_to_all_share: float  # all-to-all exposed / all exposed collective time
    exposed_total_ps: float
    exposed_total_fraction: float


@dataclass(frozen=True)
class ExpectedOp(Record):
    """One op of a capture that carries its programs' HLO: the compiler's
    estimate beside the measured durations (every TensorCore's runs pooled, whole capture)."""

    name: str  # instruction name
    family: str  # the instruction name without its .N numbers
    program: str  # HLO module
    opcode: str
    tf_op: str
    estimated_cycles: int | None  # None: the compiler gave no estimate
    expected_ps: float | None  # estimated_cycles at the assumed clock, per occurrence
    occurrences: int
    measured_min_ps: float
    measured_max_ps: float
    measured_mean_ps: float
    ratio: float | None  # measured mean / expected
    cores: int = 1  # TensorCores whose runs are pooled (occurrences counts the runs of all of them)


@dataclass(frozen=True)
class ExpectedFamily(Record):
    family: str
    ops: int
    expected_ps: float | None  # sum over occurrences (None: no op of the family has an estimate)
    measured_ps: float  # sum over occurrences
    ratio: float | None


@dataclass(frozen=True)
class ExpectedSlow(Record):
    """An op that ran far slower than the compiler expected."""

    name: str
    ratio: float
    evidence: str
    lever: str  # the guide's lever that fits, or ""


@dataclass(frozen=True)
class ExpectedSummary(Record):
    """Expected (the compiler's estimated_cycles at the assumed clock) vs
    measured, per op and op family, for a capture whose /host:metadata holds
    the programs' HloProtos."""

    clock_ghz: float  # assumed (profanalyzer.core.hardware clock_ghz)
    steps: int  # steps the per-step figures divide by (with the TensorCores: per step per TensorCore)
    step_expected_ps: float  # per step: the ops with an estimate, as the compiler expects them
    step_measured_estimated_ps: float  # per step: the same ops, measured
    step_measured_unestimated_ps: float  # per step: measured time of ops the compiler gave no estimate
    slow_ratio: float  # an op is called out from this measured / expected ratio
    ops: tuple[ExpectedOp, ...]  # with an estimate, by measured time
    without_estimate: tuple[ExpectedOp, ...]  # no estimate (copy-done waits, custom calls, ...), by measured time
    families: tuple[ExpectedFamily, ...]
    slower: tuple[ExpectedSlow, ...]
    notes: tuple[str, ...]
    cores: int = 1  # TensorCores pooled: the per-step figures are over steps x cores


@dataclass(frozen=True)
class Analysis(Record):
    schema_version: int
    tool_version: str
    source: str
    input_kind: str
    run: str | None
    hosts: tuple[str, ...]
    hardware: ChipSpec  # the chip: generation, per-chip and per-core peaks, ridge points
    chip_source: str
    tensorcores: int
    sparsecores: int
    steps: StepsSummary
    breakdown: Mapping[str, BucketShare]
    remat: BucketShare
    phases: Mapping[str, BucketShare]
    per_core: tuple[CoreSummary, ...]
    per_host: tuple[HostSummary, ...]
    top_ops: tuple[TopOp, ...]
    remat_ops: tuple[TopOp, ...]  # top recomputed ops
    kernel_ops: tuple[TopOp, ...]  # Pallas / custom kernels
    bucket_ops: Mapping[str, BucketOps]  # per bucket (+ attention_kernel / attention_unfused)
    utilisation: Utilisation
    collectives: Mapping[str, CollectiveTypeSummary]
    communication: CommunicationSummary
    sparsecore_offload: SparseCoreSummary
    timeline: TimelineSample | None
    definitions: Mapping[str, str]
    notes: tuple[str, ...]
    run_kind: RunKind | None = None
    host_offload: HostOffloadSummary | None = None
    capture: CaptureQuality | None = None
    assumptions: tuple[str, ...] = ()  # what the analysis assumed where the trace lacks evidence
    scopes: tuple[ScopeRow, ...] = ()  # by JAX name scope, folded (profanalyzer.analyze.scopes)
    idle_causes: Mapping[str, IdleCause] = field(default_factory=dict)  # the idle bucket by cause (profanalyzer.analyze.idle)
    memory: MemorySummary | None = None  # HBM use and headroom (profanalyzer.analyze.memory), only with --memory
    idle_host_activity: tuple[HostActivity, ...] = ()  # host TraceMe names during host-caused idle (--host-activity)
    idle_causes_by_step: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # step -> cause -> ps, mean over cores
    collective_diagnosis: CollectiveDiagnostics | None = None  # per collective type, the late core (profanalyzer.analyze.collectives)
    antipatterns: tuple[AntiPattern, ...] | None = None  # HLO anti-patterns (profanalyzer.analyze.antipatterns); None: no program
    kernel_counters: tuple[KernelCounters, ...] | None = None  # per op counters (profanalyzer.analyze.counters); None: no counter lines
    #: fused attention kernels' work from the program (profanalyzer.analyze.kernelflops); None: no program or none
    attention_kernels: tuple[AttentionKernel, ...] | None = None
    #: what the attention over a KV cache reads per step (profanalyzer.analyze.kvcache); None: no decode attention
    decode_cache: DecodeCache | None = None
    # "measured" (a capture) or "predicted" (a compiled program replayed from the compiler's estimates: every
    # time of the document is predicted; steps, breakdown, remat, phases and the op tables say so too)
    time_basis: str = "measured"
    expected: ExpectedSummary | None = None  # the compiler's expected time beside the measured (profanalyzer.analyze.expected)
    program_memory: ProgramMemory | None = None  # a compiled program's HBM per TensorCore (read.compiled); None: a capture

    def frames(self, findings: Findings | None = None) -> dict:
        """pandas DataFrames of this analysis (steps, buckets, ops, windows,
        findings; columns in profanalyzer.model.frames). Imports pandas."""
        from profanalyzer.model.frames import analysis_frames

        return analysis_frames(self, findings)

    def self_check(self) -> None:
        """Raise InvariantError when the analysis contradicts itself (see check_analysis)."""
        problems = check_analysis(self)
        if problems:
            raise InvariantError(f"analysis self-check failed: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
