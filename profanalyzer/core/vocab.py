"""The project's vocabulary, one table each: buckets, levers, chips, phases.

Every other module (classification, attribution, overlap, workload, rules,
charts, report, CLI choices) reads these tables instead of keeping a copy;
`tests/test_vocab.py` ties each entry to what it must have (label, colour,
kind, guide section, rule, chip spec, CLI choice).

This module imports nothing from the project: it is the bottom floor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

BucketKind = Literal["matmul", "compute", "collective", "transfer", "idle"]


@dataclass(frozen=True)
class Bucket:
    name: str  # the key in the JSON and in every table
    label: str  # what the reports call it
    colour: str  # fixed fill in every chart (Paul Tol's colour-blind-safe "muted" scheme)
    kind: BucketKind
    precision: str | None = None  # matmuls: the precision whose peak applies


#: TensorCore time buckets, in report order. Compute in blues/greens,
#: communication in reds/purples/yellows, greys for the rest.
BUCKET_TABLE: tuple[Bucket, ...] = (
    Bucket("matmul_bf16", "Matmul BF16", "#332288", "matmul", "bf16"),
    Bucket("matmul_fp8", "Matmul FP8", "#88CCEE", "matmul", "fp8"),
    Bucket("matmul_int8", "Matmul INT8", "#6699CC", "matmul", "int8"),
    Bucket("matmul_other", "Matmul other", "#44AA99", "matmul", "other"),
    Bucket("attention", "Attention", "#117733", "compute"),
    Bucket("all_gather", "All-gather", "#CC6677", "collective"),
    Bucket("reduce_scatter", "Reduce-scatter", "#882255", "collective"),
    Bucket("all_reduce", "All-reduce", "#AA4499", "collective"),
    Bucket("all_to_all", "All-to-all", "#DDCC77", "collective"),
    Bucket("other_collective", "Other collective", "#999933", "collective"),
    # the TensorCore waiting for host<->HBM DMA (copies of memory space S(5) buffers)
    Bucket("host_offload", "Host offload wait", "#EE8866", "transfer"),
    Bucket("other_compute", "Other compute", "#8A8F98", "compute"),
    Bucket("idle", "Idle", "#D9D9D9", "idle"),
)
BUCKET_BY_NAME: dict[str, Bucket] = {b.name: b for b in BUCKET_TABLE}

BUCKETS: tuple[str, ...] = tuple(b.name for b in BUCKET_TABLE)
MATMUL_BUCKETS: frozenset[str] = frozenset(b.name for b in BUCKET_TABLE if b.kind == "matmul")
COLLECTIVE_BUCKETS: frozenset[str] = frozenset(b.name for b in BUCKET_TABLE if b.kind == "collective")
#: The pools a finding's saving is claimed from (model.findings.Claim): a bucket of the step
#: (CLAIM_BUCKET + its name) or the recomputed ops (CLAIM_REMAT).
CLAIM_BUCKET = "bucket:"
CLAIM_REMAT = "remat"
#: TensorCore compute: matmuls, attention, other compute (not collectives, not idle).
COMPUTE_BUCKETS: frozenset[str] = frozenset(b.name for b in BUCKET_TABLE if b.kind in ("matmul", "compute"))
#: The compute buckets in report order (for sums that must add in a fixed order).
COMPUTE_ORDER: tuple[str, ...] = tuple(b.name for b in BUCKET_TABLE if b.kind in ("matmul", "compute"))
BUCKET_LABELS: dict[str, str] = {b.name: b.label for b in BUCKET_TABLE}
BUCKET_COLOURS: dict[str, str] = {b.name: b.colour for b in BUCKET_TABLE}

#: Causes of the idle bucket (profanalyzer.analyze.idle), in report order: name -> (label, colour).
IDLE_CAUSE_TABLE: tuple[tuple[str, str, str], ...] = (
    ("host_dispatch", "Between programs (host dispatch)", "#BB5566"),
    ("host_wait", "Waiting on the host (infeed/outfeed, callbacks, transfers)", "#EE8866"),
    ("peer_wait", "Waiting on a peer (before a collective or barrier)", "#DDAA33"),
    ("unexplained", "Unexplained", "#BBBBBB"),
)
IDLE_CAUSES: tuple[str, ...] = tuple(c[0] for c in IDLE_CAUSE_TABLE)
IDLE_CAUSE_LABELS: dict[str, str] = {c[0]: c[1] for c in IDLE_CAUSE_TABLE}
IDLE_CAUSE_COLOURS: dict[str, str] = {c[0]: c[2] for c in IDLE_CAUSE_TABLE}

#: Collective kinds (the `collective` of a classified op) -> the bucket their time goes to.
COLLECTIVE_KIND_BUCKET: dict[str | None, str] = {
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "all_reduce": "all_reduce",
    "all_to_all": "all_to_all",
    "collective_permute": "other_collective",
    "send_recv": "other_collective",
    "host_transfer": "other_collective",
    None: "other_collective",
}

#: Collective types of the overlap analysis (a classified op's `collective`,
#: or unknown when its kind is not visible), in report order.
COLLECTIVE_TYPES: tuple[str, ...] = (
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute", "send_recv", "host_transfer", "unknown",
)

#: What the reports call each collective type.
COLLECTIVE_TYPE_LABELS: dict[str, str] = {
    "all_gather": "All-gather",
    "reduce_scatter": "Reduce-scatter",
    "all_reduce": "All-reduce",
    "all_to_all": "All-to-all",
    "collective_permute": "Collective-permute",
    "send_recv": "Send/recv",
    "host_transfer": "Host transfer",
    "unknown": "Unknown kind",
}

#: Collective types SparseCore offload handles on TPU7x (guide L3 flags).
OFFLOADABLE: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_reduce")
#: What to capture when SparseCore activity is missing from a trace.
SPARSECORE_CAPTURE_HINT = (
    "SparseCore activity is not in this capture: enable SparseCore offload tracing "
    "(LIBTPU_INIT_ARGS: --xla_tpu_enable_all_gather_offload_tracing=true "
    "--xla_tpu_enable_reduce_scatter_offload_tracing=true --xla_tpu_enable_all_reduce_offload_tracing=true) "
    "and capture device traces of all planes"
)

#: Per-bucket op summaries add attention split into the fused kernel itself,
#: the layout ops that feed it (under the kernel's own scope) and attention
#: computed from separate ops (unfused).
ATTENTION_SPLIT: tuple[str, ...] = ("attention_kernel", "attention_layout", "attention_unfused", "attention_decode")

#: Run kinds of a capture (profanalyzer.analyze.runkind).
RUN_KINDS: tuple[str, ...] = ("training", "inference", "unknown")

#: Training phases an op can be tagged with.
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class Lever:
    id: str  # rule lever / heuristics module name
    section: str  # guide section number: L1..L6
    title: str  # guide section title
    label: str  # short label in tables

    @property
    def guide_section(self) -> str:
        """The reference a finding carries: 'L1 — FP8 low-precision training (fp8)'."""
        return f"{self.section} — {self.title} ({self.id})"


#: The TPU7x performance guide's levers, in guide order.
LEVER_TABLE: tuple[Lever, ...] = (
    Lever("fp8", "L1", "FP8 low-precision training", "Low precision"),  # FP8 on TPU7x, INT8 or BF16 where the MXU has no FP8
    Lever("sharding", "L2", "Sharding and parallelism", "Sharding"),
    Lever("sc_offload", "L3", "Communication optimisation: SparseCore collective offload", "SparseCore offload"),
    Lever("remat", "L4", "Activation rematerialisation", "Remat"),
    Lever("scoped_vmem", "L5", "Scoped VMEM tuning", "Scoped VMEM"),
    Lever("tokamax", "L6", "Tokamax kernels", "Tokamax kernels"),
)
LEVER_BY_ID: dict[str, Lever] = {lv.id: lv for lv in LEVER_TABLE}
LEVERS: tuple[str, ...] = tuple(lv.id for lv in LEVER_TABLE)
GUIDE_SECTIONS: dict[str, str] = {lv.id: lv.guide_section for lv in LEVER_TABLE}
LEVER_LABELS: dict[str, str] = {lv.id: lv.label for lv in LEVER_TABLE}


@dataclass(frozen=True)
class ChipName:
    key: str  # CLI name (--chip), hardware.CHIPS key
    display: str  # human name


#: Key orders of the records' mappings: the JSON sorts keys, a record read
#: back keeps its mappings in these orders (the order the analysis builds).
MAPPING_ORDERS: tuple[tuple[str, ...], ...] = (
    BUCKETS + ATTENTION_SPLIT,
    COLLECTIVE_TYPES,
    PHASES,
    ("median", "min", "max", "mean"),
    ("select", "ignore"),
)

#: Chip generations this tool has peaks for (specs live in hardware.py).
CHIP_TABLE: tuple[ChipName, ...] = (
    ChipName("tpu7x", "TPU7x (Ironwood)"),
    ChipName("v6e", "TPU v6e (Trillium)"),
    ChipName("v5p", "TPU v5p"),
    ChipName("v5e", "TPU v5e"),
    ChipName("v4", "TPU v4"),
)
#: `click.Choice(CHIP_CHOICES, case_sensitive=False)` for every --chip option.
CHIP_CHOICES: tuple[str, ...] = tuple(c.key for c in CHIP_TABLE)


#: What the times of an analysis are (issue #25): measured in a capture, or predicted by replaying a
#: compiled program's schedule with the compiler's estimates (input_kind -> basis; default measured).
TIME_BASES = ("measured", "predicted")
PREDICTED_INPUT_KINDS = frozenset({"compiled_program"})

#: The levers the what-if re-timing models (profanalyzer.findings.whatif), in order.
WHAT_IF_LEVERS = ("remat", "fp8", "sc_offload")

#: The file names of a host's XSpace (the .gz first: strip it before the other).
XPLANE_SUFFIXES = (".xplane.pb.gz", ".xplane.pb")


#: The stat of a `/host:metadata` event that holds a program's serialized HloProto (XProf's name).
HLO_PROTO_STAT = "Hlo Proto"
#: Source files of frameworks and libraries, not the user's model code: a source line walks out of them
#: (through the op's stack frames) to the first frame of the user's own (profanalyzer.read.hlo.model.StackFrames).
FRAMEWORK_FILE = re.compile(r"(?:^|/)(?:jax|jaxlib|flax|optax|orbax|chex|haiku|equinox|torch|torch_xla|numpy|absl)/"
                            r"|^<|(?:^|/)python3\.\d+/[^/]+\.py$")
#: HLO ops whose work is their body's: the body's ops run (and are measured, and carry the FLOPs) as events of
#: their own, enclosed by the op's event (a scanned layer stack's while loop)
CONTROL_FLOW = frozenset({"while", "conditional", "call"})

#: TensorCore lines the analysis reader skips and the kernel-counter reader reads (profanalyzer.read.xspace.counterlines):
#: the hardware counter samples (one event per sample, named by unit, with a `% util` stat) and the emit_pipeline
#: phases of Pallas kernels.
COUNTERS_LINE = "_counters_"
TRACEME_LINE = "XLA TraceMe"
UTIL_STAT = "% util"
#: Host-plane lines that dispatch work or feed input (profanalyzer.read.xspace.hostlines): the Python main thread, JAX's
#: execute threads, input-pipeline threads.
HOST_LINES = re.compile(r"^(?:main|python|MainThread|py_xla_execute|pjrt|.*(?:input|infeed|prefetch|tf_data|grain|"
                        r"dataloader|data_loader|pipeline)).*", re.I)
#: The runtime's allocator TraceMe events on the host planes (profanalyzer.read.allocator).
MEMORY_EVENTS = ("MemoryAllocation", "MemoryDeallocation")
