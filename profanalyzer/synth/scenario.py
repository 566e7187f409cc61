"""What a scenario of the TPU7x XSpace synthesizer is.

A :class:`Scenario` is a frozen description of one training run: the model
(dense or MoE transformer), how it is compiled (precision, remat policy,
attention kernel, collective forms, SparseCore offload) and how it was captured
(Steps line present, SparseCore planes traced, epoch or zero line timestamps).
The schedule and the ground truth are derived from it in :mod:`.model`.

Every scenario names the guide workload row it stands for (``workload``), the
guide lever it is built to stress (``stresses``, a lever id of
``shared/guide/tpu7x-performance-guide.md``), and for lever variants the paired
scenario that differs by that one lever (``pair``; ``role`` says which side is
``before`` and which is ``after`` the change).

The catalog of named scenarios is :mod:`.scenarios`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Lever ids of the TPU7x guide.
LEVERS = ("fp8", "sharding", "sc_offload", "remat", "scoped_vmem", "tokamax")

#: Guide workload table rows.
WORKLOADS = (
    "dense, short sequence",
    "dense, long sequence",
    "MoE, short sequence",
    "MoE, very large",
)

#: Collective types (also the names of the communication buckets).
COLLECTIVE_TYPES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "other_collective")

#: Collective forms a scenario can choose per collective type.
#: ``offload``: SparseCore call-start/call-done (the real work on SparseCore planes);
#: ``pair``: ``all-gather-start.N``/``all-gather-done.N`` style async pairs (ICI DMA on the TensorCore);
#: ``cont``: ``async-collective-start.N``/``-done.N`` continuation fusions (category ``custom fusion``);
#: ``sync``: one synchronous op (``all-gather.N``, ``all-reduce.N``, ``all-to-all.N``,
#: ``all-reduce-scatter fusion``, ``collective-permute.N``), fully exposed.
FORMS = ("offload", "pair", "cont", "sync")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    workload: str | None = None
    stresses: str | None = None
    pair: str | None = None
    role: str | None = None  # "before" / "after" for lever pairs
    expect_fire: tuple[str, ...] = ()  # levers a good analysis should recommend
    expect_quiet: tuple[str, ...] = ()  # levers a good analysis must not push (<3% saving)
    finding: str = ""  # what a good analysis should find (README table)

    # -- model -------------------------------------------------------------
    arch: str = "dense"  # dense | moe
    layers: int = 4  # sample default (scan-over-layers trip count)
    steps: int = 6  # sample default (step 0 = warm-up)
    d_model: int = 4096
    d_ff: int = 14336
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 128
    seq_len: int = 8192  # global sequence length
    batch_per_core: int = 1
    vocab: int = 32768
    fsdp: int = 64  # FSDP degree (world the weights are sharded over)
    cp: int = 1  # context parallel degree (sequence shard)
    ep: int = 1  # expert parallel degree
    pp: int = 1  # pipeline stages
    microbatches: int = 1
    experts: int = 0
    top_k: int = 0
    moe_d_ff: int = 0
    moe_impl: str | None = None  # gmm | dense_padded
    capacity_factor: float = 1.0  # dense_padded: padded tokens / routed tokens

    # -- compilation choices -------------------------------------------------
    precision: str = "bf16"  # bf16 | fp8
    remat: str = "moderate"  # full | moderate | minimal
    attention: str = "splash"  # splash | unfused
    kernel_block: int = 512  # Pallas tile size (small_tiles: 128)
    matmul_eff: float = 0.78  # MXU efficiency of convolution fusions
    kernel_eff: float = 0.62  # attention kernel efficiency at kernel_block
    # per collective type: (form, overlap) with overlap "long" | "short"
    collectives: tuple[tuple[str, str, str], ...] = (
        ("all_gather", "offload", "long"),
        ("reduce_scatter", "offload", "long"),
        ("all_reduce", "offload", "long"),
        ("all_to_all", "sync", "short"),
        ("other_collective", "pair", "long"),
    )

    # -- capture -------------------------------------------------------------
    sc_traced: bool = True  # SparseCore planes present when something is offloaded
    steps_line: bool = True
    zero_timestamps: bool = False
    straggler_core: int | None = None  # local TensorCore index that runs ~8% slower
    straggler_factor: float = 1.08
    xss: bool = False
    intern_category: bool = False  # hlo_category as ref_value stats
    device_stats_every: int = 3  # 1 in N op templates lack device_offset_ps/device_duration_ps

    # -- issue #14: shapes seen in real captures (defaults keep the old bytes) --
    program: str = "maxtext"  # maxtext (training step) | vllm (serving step) | offload_loop (host offload loop)
    run_kind: str = "training"  # training | inference (ground truth of the run kind)
    cores_per_host: int = 8  # TensorCore planes per host file
    device_type: str | None = "TPU v7x"  # device_type_string plane stat (None: absent, as in converted captures)
    tp: int = 1  # tensor parallel degree (vllm)
    weight_dtype: str = "f4e2m1fn"  # vllm quantized linears: weight element type (f4e2m1fn | s4 | s8)
    act_dtype: str = "bf16"  # vllm quantized linears: activation (MXU input) element type (bf16 | s8 | f8e4m3fn)
    host_offload: bool = False  # maxtext: remat_policy=offload activation offload to host memory (S(5))
    host_gbps: float = 24.0  # host<->HBM DMA bandwidth per TensorCore (GB/s)
    overlap_ps: int = 0  # consecutive XLA Ops overlap by this much (device timestamp rounding) ...
    overlap_every: int = 3  # ... on 1 in N consecutive op pairs
    async_line: bool = True  # write the Async XLA Ops line

    # -- issue #18: lever pairs that change two levers at once (defaults keep the old bytes) --
    also: tuple[str, ...] = ()  # levers the pair changes besides `stresses`
    # -- issue #16 (defaults keep the old bytes) --------------------------------
    host_gap_us: float = 0.0  # host-bound: each step's train program launches this late (host dispatch / input pipeline)
    heavy_every: int = 0  # periodic heavy steps: steps s >= N with s % N == 0 (checkpointing) ...
    heavy_extra_us: float = 0.0  # ... wait this long on the host before their train program
    hlo_memory: bool = False  # the train program's Hlo Proto is a real one with a buffer assignment (synth.hlo_memory)
    peer_gate: bool = False  # each top-level collective done/sync op waits, idle, until the slowest core reaches it (a barrier)
    # -- issue #26 (defaults keep the old bytes) --------------------------------
    custom_matmul: bool = False  # the MLP's down projection is a Pallas kernel with an unfamiliar name (no flops stat)
    counters: bool = False  # _counters_ (% util samples) and emit_pipeline XLA TraceMe phases over the Pallas kernels
    opaque_kernel: bool = False  # custom_matmul's kernel shows no operand types, layout constraints or metadata: only counters say matmul

    @property
    def extended_truth(self) -> bool:
        """Truth carries the #14 fields (run kind, host offload, layout, precision, overlaps)."""
        return (self.program != "maxtext" or self.host_offload or self.run_kind != "training"
                or self.overlap_ps > 0)

    def coll(self, ctype: str) -> tuple[str, str]:
        for t, form, overlap in self.collectives:
            if t == ctype:
                return form, overlap
        return "sync", "short"

    @property
    def offloaded_types(self) -> tuple[str, ...]:
        return tuple(t for t, f, _ in self.collectives if f == "offload")

    def __post_init__(self) -> None:
        both = set(self.expect_fire) & set(self.expect_quiet)
        if both:  # a derived scenario keeps its base's lists: each must say what it is about
            raise ValueError(f"scenario {self.name}: {sorted(both)} both expected to fire and to stay quiet")

    def with_(self, **kw) -> Scenario:
        return replace(self, **kw)


__all__ = ["Scenario", "LEVERS", "WORKLOADS", "COLLECTIVE_TYPES", "FORMS"]
