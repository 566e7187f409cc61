"""Scenario catalog for the TPU7x XSpace synthesizer: every named
:class:`~.scenario.Scenario` (the samples, the lever variants and the
two-lever pairs), checked against the guide's levers and workload rows when
the module loads.
"""

from __future__ import annotations

from .scenario import COLLECTIVE_TYPES, FORMS, LEVERS, WORKLOADS, Scenario


def _colls(**kw: tuple[str, str]) -> tuple[tuple[str, str, str], ...]:
    base = {
        "all_gather": ("offload", "long"),
        "reduce_scatter": ("offload", "long"),
        "all_reduce": ("offload", "long"),
        "all_to_all": ("sync", "short"),
        "other_collective": ("pair", "long"),
    }
    base.update(kw)
    return tuple((t, base[t][0], base[t][1]) for t in COLLECTIVE_TYPES)


# ---------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------

_DENSE = Scenario(
    name="dense_short_fsdp",
    finding=(
        "BF16 matmul-bound step; remat recompute (policy moderate) is the largest waste; FSDP all-"
        "gather/reduce-scatter offloaded to SparseCore and hidden (offload on). Recommend remat, then"
        " fp8."
    ),
    description=(
        "Dense 8k-sequence transformer (d_model 4096, d_ff 14336, GQA 32/8 heads), FSDP over 64 "
        "cores, splash attention, BF16, remat policy moderate (MLP up-projections and elementwise "
        "recomputed), SparseCore offload of all-gather/reduce-scatter/all-reduce. The default sample."
    ),
    workload="dense, short sequence",
    stresses="remat",
    expect_fire=("remat", "fp8"),
    expect_quiet=("sc_offload", "scoped_vmem"),
)

_CATALOG: list[Scenario] = [
    _DENSE,
    Scenario(
        name="dense_long_fsdp_cp",
        finding=(
            "Splash attention dominates; remat full is expected at 128k (no lighter-remat push "
            "without memory headroom); CP K/V all-gathers mostly hidden; small all-reduces stay on "
            "the TensorCore (offload partial). Recommend tokamax (kernel block tuning, max-logit "
            "estimate)."
        ),
        description=(
            "Dense 128k-sequence transformer with context parallelism 8 on top of FSDP: each core "
            "holds 16k tokens; K/V are all-gathered across the CP group (continuation fusions) and "
            "dK/dV reduce-scattered. Splash attention dominates compute; remat full. All-gather and "
            "reduce-scatter offloaded to SparseCore, the small all-reduces stay on the TensorCore as "
            "all-reduce-start/done pairs (offload verdict partial)."
        ),
        workload="dense, long sequence",
        stresses="tokamax",
        layers=3,
        seq_len=131072,
        cp=8,
        remat="full",
        collectives=_colls(all_reduce=("pair", "long")),
        expect_fire=("tokamax",),
        expect_quiet=("sc_offload",),
        # FP8 already on, so the stressed lever is isolated (FP8 would otherwise top every BF16 run).
        precision="fp8",
        matmul_eff=0.72,
    ),
    Scenario(
        name="moe_short_fsdp_ep",
        finding=(
            "Synchronous all-to-all dispatch/combine exposed; remat second; f32 router matmul lands "
            "in matmul_other; gmm/tgmm kernels are BF16 matmuls. Recommend sharding (overlap all-to-"
            "all), remat."
        ),
        description=(
            "MoE transformer (8 experts, top-2, EP 8 + FSDP), megablox gmm/tgmm kernels, f32 router "
            "matmul, synchronous all-to-all dispatch/combine (heavily exposed), remat moderate, "
            "SparseCore offload of all-gather/reduce-scatter/all-reduce. hlo_category stats interned "
            "as ref_value."
        ),
        workload="MoE, short sequence",
        stresses="sharding",
        pair="moe_dense_padded",
        role="after",
        arch="moe",
        layers=3,
        experts=8,
        top_k=2,
        moe_d_ff=8192,
        ep=8,
        moe_impl="gmm",
        intern_category=True,
        expect_fire=("sharding", "remat"),
        expect_quiet=("scoped_vmem",),
        # FP8 already on, so the stressed lever is isolated (FP8 would otherwise top every BF16 run).
        precision="fp8",
        matmul_eff=0.72,
    ),
    Scenario(
        name="moe_large_pp",
        finding=(
            "Pipeline bubbles show as idle at the start and end of the step; FSDP all-gathers re-run "
            "per microbatch and contend with all-to-all/all-reduce on the TensorCore ICI queue "
            "(exposed); collective-permute and send/recv between stages mostly hidden. Recommend "
            "sharding."
        ),
        description=(
            "Very large MoE with FSDP + EP + 4 pipeline stages (this host is stage 1): 4 microbatches, "
            "activations sent forward with collective-permute-start/done pairs and gradients back with "
            "send/recv pairs over DCN; pipeline bubbles at the start and end of every step appear as idle "
            "TensorCore time; all-to-all routing synchronous; FSDP all-gathers as all-gather-start/done "
            "pairs on the TensorCore (sharing the ICI queue), reduce-scatters offloaded to SparseCore "
            "(offload partial)."
        ),
        workload="MoE, very large",
        stresses="sharding",
        arch="moe",
        layers=2,
        d_model=6144,
        d_ff=16384,
        n_heads=48,
        seq_len=4096,
        experts=16,
        top_k=2,
        moe_d_ff=8192,
        ep=8,
        pp=4,
        microbatches=4,
        moe_impl="gmm",
        collectives=_colls(all_gather=("pair", "long"), all_reduce=("sync", "short")),
        expect_fire=("sharding",),
        # FP8 already on, so the stressed lever is isolated (FP8 would otherwise top every BF16 run).
        precision="fp8",
        matmul_eff=0.72,
    ),
    # ---- lever pairs --------------------------------------------------------
    _DENSE.with_(
        name="remat_full",
        finding=(
            "Remat recompute is a large share of the step (~30% extra forward FLOPs in the backward "
            "pass). Recommend remat; calibrate against remat_minimal."
        ),
        description="Dense short-sequence model with remat policy full: the whole layer forward is "
        "recomputed in the backward pass (~30% extra FLOPs). Before side of the remat pair.",
        stresses="remat",
        pair="remat_minimal",
        role="before",
        remat="full",
        expect_fire=("remat",),
        expect_quiet=("sc_offload", "scoped_vmem"),
    ),
    _DENSE.with_(
        name="remat_minimal",
        finding='Remat share under 1%: the remat rule stays quiet; BF16 matmuls remain (fp8).',
        description="Same model as remat_full with remat policy minimal (only norms recomputed). "
        "After side of the remat pair.",
        stresses="remat",
        pair="remat_full",
        role="after",
        remat="minimal",
        expect_fire=("fp8",),
        expect_quiet=("remat", "sc_offload", "scoped_vmem"),
    ),
    _DENSE.with_(
        name="offload_off",
        finding=(
            "All-gathers as continuation fusions issued just before use, reduce-scatters and all-"
            "reduces synchronous: several % of the step exposed; offload verdict off. Recommend "
            "sc_offload; calibrate against offload_on."
        ),
        description="Dense short-sequence model without SparseCore offload: FSDP all-gathers as "
        "async-collective continuation fusions issued just before use, gradient reduce-scatters as "
        "synchronous all-reduce-scatter fusions, all-reduces synchronous: heavy exposed "
        "communication. Before side of the offload pair.",
        stresses="sc_offload",
        pair="offload_on",
        role="before",
        collectives=_colls(
            all_gather=("cont", "short"),
            reduce_scatter=("sync", "short"),
            all_reduce=("sync", "short"),
        ),
        expect_fire=("sc_offload",),
        expect_quiet=("scoped_vmem",),
    ),
    _DENSE.with_(
        name="offload_on",
        finding='Same collectives offloaded to SparseCore and hidden; sc_offload quiet.',
        description="Same model as offload_off with SparseCore offload of all-gather, "
        "reduce-scatter and all-reduce (issued early, hidden behind compute). After side.",
        stresses="sc_offload",
        pair="offload_off",
        role="after",
        expect_quiet=("sc_offload",),
    ),
    _DENSE.with_(
        name="bf16_dense",
        finding='BF16 matmuls dominate the step. Recommend fp8; calibrate against fp8_dense.',
        description="Dense short-sequence model in BF16 with remat minimal: matmul-bound. Before "
        "side of the FP8 pair.",
        stresses="fp8",
        pair="fp8_dense",
        role="before",
        remat="minimal",
        expect_fire=("fp8",),
        expect_quiet=("remat", "sc_offload"),
    ),
    _DENSE.with_(
        name="fp8_dense",
        finding='FP8 matmuls (f8e4m3fn forward, f8e5m2 gradients) plus quantisation fusions; fp8 quiet.',
        description="Same model as bf16_dense with FP8 matmuls (f8e4m3fn forward, f8e5m2 "
        "gradients) plus quantisation fusions. After side of the FP8 pair.",
        stresses="fp8",
        pair="bf16_dense",
        role="after",
        remat="minimal",
        precision="fp8",
        matmul_eff=0.6,
        expect_quiet=("fp8", "remat", "sc_offload"),
        expect_fire=(),
    ),
    _DENSE.with_(
        name="attention_unfused",
        finding=(
            "Unfused attention (score dots, softmax fusions through HBM) dominates. Recommend tokamax"
            " (splash); calibrate against attention_splash."
        ),
        description="Dense 16k-sequence model with attention as plain dots and softmax fusions "
        "(no Pallas kernel): the score matrix goes through HBM. Before side of the attention "
        "kernel pair (tokamax lever).",
        stresses="tokamax",
        pair="attention_splash",
        role="before",
        seq_len=16384,
        attention="unfused",
        remat="minimal",
        expect_fire=("tokamax",),
    ),
    _DENSE.with_(
        name="attention_splash",
        finding='Splash kernels; tokamax quiet.',
        description="Same model as attention_unfused with splash attention kernels. After side.",
        stresses="tokamax",
        pair="attention_unfused",
        role="after",
        seq_len=16384,
        remat="minimal",
        expect_quiet=("tokamax", "scoped_vmem"),
        expect_fire=("fp8",),
    ),
    _DENSE.with_(
        name="small_tiles",
        finding=(
            "Splash kernels with 128 tiles at a low achieved FLOP rate (memory-stalled). Recommend "
            "scoped_vmem; calibrate against tuned_vmem."
        ),
        description="Dense 32k-sequence model whose splash kernels run with 128-wide tiles under "
        "a small scoped-VMEM limit: memory-stalled, low achieved FLOP rate. Before side of the "
        "scoped VMEM pair.",
        stresses="scoped_vmem",
        pair="tuned_vmem",
        role="before",
        workload="dense, long sequence",
        seq_len=32768,
        remat="minimal",
        kernel_block=128,
        kernel_eff=0.36,
        matmul_eff=0.74,
        expect_fire=("scoped_vmem",),
        expect_quiet=("sc_offload",),
    ),
    _DENSE.with_(
        name="tuned_vmem",
        finding='1024-wide tiles, kernels near their roofline; scoped_vmem quiet.',
        description="Same model as small_tiles with the scoped VMEM limit raised (98304 KiB) and "
        "1024-wide kernel tiles. After side.",
        stresses="scoped_vmem",
        pair="small_tiles",
        role="after",
        workload="dense, long sequence",
        seq_len=32768,
        remat="minimal",
        kernel_block=1024,
        kernel_eff=0.66,
        expect_quiet=("scoped_vmem",),
        expect_fire=("fp8",),
    ),
    Scenario(
        name="moe_dense_padded",
        finding=(
            "Expert FFN as padded dense einsums: model_flops is half of flops on those ops. Recommend"
            " tokamax (megablox gmm); calibrate against moe_short_fsdp_ep."
        ),
        description="The moe_short_fsdp_ep model with experts computed as padded dense einsums "
        "(capacity factor 2.0) instead of megablox grouped matmuls: half the expert FLOPs are "
        "padding. Before side of the gmm pair (tokamax lever).",
        workload="MoE, short sequence",
        stresses="tokamax",
        pair="moe_short_fsdp_ep",
        role="before",
        arch="moe",
        layers=3,
        experts=8,
        top_k=2,
        moe_d_ff=8192,
        ep=8,
        moe_impl="dense_padded",
        capacity_factor=2.0,
        expect_fire=("tokamax", "sharding"),
        # FP8 already on, so the stressed lever is isolated (FP8 would otherwise top every BF16 run).
        precision="fp8",
        matmul_eff=0.72,
    ),
    _DENSE.with_(
        name="well_tuned",
        finding='No lever should claim more than 3% of step time.',
        description="Dense short-sequence model with every lever already pulled: FP8, splash with "
        "tuned tiles, remat minimal, SparseCore offload with early issue. No lever should find "
        "more than 3% of step time.",
        stresses=None,
        workload="dense, short sequence",
        precision="fp8",
        remat="minimal",
        matmul_eff=0.6,
        kernel_block=1024,
        kernel_eff=0.66,
        expect_fire=(),
        expect_quiet=LEVERS,
    ),
    # ---- capture variants ----------------------------------------------------
    _DENSE.with_(
        name="offload_not_captured",
        finding=(
            "TensorCore shows .call-start/.call-done ops but no SparseCore planes: report the "
            "offloaded work as not visible in this capture."
        ),
        description="dense_short_fsdp captured without SparseCore tracing: the TensorCore shows "
        "call-start/call-done ops but no SparseCore planes exist, so the analysis must say the "
        "offloaded work is not visible in this capture.",
        stresses=None,
        sc_traced=False,
        expect_fire=("remat",),
    ),
    _DENSE.with_(
        name="no_steps_line",
        stresses=None,
        finding=(
            "No Steps line: steps come from the XLA Modules runs of jit_train_step; same breakdown as"
            " dense_short_fsdp."
        ),
        description="dense_short_fsdp captured without a Steps line: steps must be derived from "
        "the XLA Modules runs of jit_train_step (the small jit_fold_in program before each step "
        "falls outside the step window).",
        steps_line=False,
    ),
    _DENSE.with_(
        name="zero_timestamps",
        stresses=None,
        finding='Line timestamp_ns 0 with device-uptime offsets; same breakdown as dense_short_fsdp.',
        description="dense_short_fsdp with every line timestamp_ns = 0 and large offset_ps "
        "(device uptime clock), as some captures have.",
        zero_timestamps=True,
    ),
    _DENSE.with_(
        name="straggler_core",
        stresses=None,
        finding=(
            "TPU:5 runs ~8% slower: it shows less collective wait, every other core waits for it "
            "inside collective done ops."
        ),
        description="dense_short_fsdp where TensorCore 5 runs ~8% slower on every op; the other "
        "cores wait for it inside collectives (their exposed communication grows).",
        straggler_core=5,
        expect_quiet=("scoped_vmem",),
        expect_fire=("remat", "fp8"),
    ),
    _DENSE.with_(
        name="xss_names",
        stresses=None,
        finding='A report must HTML-escape the <script>alert(1)</script> op name and tf_op.',
        description="dense_short_fsdp with an op whose HLO name, display name and tf_op contain "
        "<script>alert(1)</script> (report HTML escaping); hlo_category interned as ref_value.",
        layers=2,
        xss=True,
        intern_category=True,
    ),
    # ---- shapes of real captures (issue #14) -----------------------------------
    Scenario(
        name="serving_tp2_w4",
        finding=(
            "Inference (vLLM serving step, TP=2): W4A16 quantized Pallas matmuls (no FLOPs stat: FLOPs "
            "from operand shapes) and the fused ragged-paged-attention kernel dominate; layout ops under "
            "jit(ragged_paged_attention) are attention layout time, not unfused attention; each TP psum "
            "consumes the matmul before it (critical path, nothing to hide it behind); 1 ps overlaps "
            "between consecutive ops are not idle; slice-start/done and copy-start/done are not collectives."
        ),
        description=(
            "vLLM-style serving step (jit_step_fun, 1,024 tokens, Qwen3-32B-like shapes, 2 TensorCores "
            "with tensor parallelism 2): per layer QKV/out/gate-up/down quantized_matmul_kernel Pallas "
            "custom calls (f4e2m1fn weights, bf16 activations, f32 scales, no flops stat), the ragged "
            "paged attention kernel (RPA-bq_32-bkvp_32-p_128-) with its transpose/reshape/copy layout "
            "ops, norm and elementwise fusions, a synchronous psum all-reduce after each row-parallel "
            "linear, an all-to-all of the QKV scales, async slice-start/done and VMEM copy-start/done "
            "pairs. No Steps line (steps are jit_step_fun runs), no SparseCore planes, no "
            "device_type_string, every op with device_offset_ps/device_duration_ps and consecutive ops "
            "overlapping by 1 ps."
        ),
        program="vllm",
        run_kind="inference",
        cores_per_host=2,
        device_type=None,
        tp=2,
        layers=4,
        steps=4,
        d_model=5120,
        d_ff=25600,
        n_heads=64,
        n_kv_heads=8,
        head_dim=128,
        seq_len=1024,
        batch_per_core=1,
        vocab=151936,
        fsdp=1,
        remat="minimal",
        attention="ragged_paged",
        kernel_eff=0.45,
        matmul_eff=0.6,
        collectives=_colls(all_reduce=("sync", "short"), all_to_all=("sync", "short")),
        sc_traced=False,
        steps_line=False,
        device_stats_every=0,
        overlap_ps=1,
        overlap_every=3,
        async_line=False,
        expect_quiet=("remat", "sc_offload"),
    ),
    _DENSE.with_(
        name="host_offload_train",
        finding=(
            "Training step with remat_policy=offload: the TensorCore waits in copy-done for host<->HBM "
            "DMA (memory space S(5)) for a large share of the step; that is host_offload time with its "
            "bytes per step, not compute. Recommend keeping activations on device where HBM allows "
            "(remat_policy=custom with device), or fewer bytes (quantized activations)."
        ),
        description=(
            "dense_short_fsdp with activation offload (remat_policy=offload): every forward layer "
            "copies two activations (the layer input and the MLP hidden activation) to host memory "
            "(copy-start/copy-done to S(5)) and every backward layer copies them back; host DMA at ~40 GB/s per TensorCore is slower than the layer's "
            "compute, so the TensorCore waits in copy-done."
        ),
        stresses=None,
        remat="minimal",
        host_offload=True,
        host_gbps=40.0,
        expect_fire=(),
        expect_quiet=("sc_offload",),
    ),
    Scenario(
        name="host_offload_loop",
        finding=(
            "Not a training step and no matmul: a jitted loop (jit_f) whose TensorCore waits in copy-done "
            "for host->HBM prefetches of three host-resident arrays (S(5)) for most of every step; "
            "host_offload dominates."
        ),
        description=(
            "A jitted loop like the v6e host-offload capture: three f32 arrays live in host memory "
            "(S(5)) and are prefetched to HBM with copy-start/copy-done, three elementwise fusions use "
            "them and one result is copied back to host; separate jit__psum all-reduce programs run "
            "outside the loop. No Steps line (steps are jit_f runs), no SparseCore planes."
        ),
        program="offload_loop",
        run_kind="inference",
        cores_per_host=4,
        layers=3,
        steps=5,
        fsdp=4,
        collectives=_colls(all_reduce=("sync", "short")),
        sc_traced=False,
        steps_line=False,
        device_stats_every=0,
        host_gbps=20.0,
        expect_quiet=("sc_offload", "fp8"),
        expect_fire=("remat",),
    ),
    _DENSE.with_(
        name="host_bound_input",
        finding=(
            "Host-bound steps: every step the TensorCore sits idle ~15 ms between programs before the train "
            "step launches (the host was late: input pipeline, dispatch, a block_until_ready in the loop); "
            "that idle is host dispatch, not device work. Recommend prefetching input to device and "
            "asynchronous dispatch before any device-side lever."
        ),
        description=(
            "dense_short_fsdp with 2 layers whose host launches the train program 15 ms late every step: "
            "the gap lies inside the step window but outside every program run on XLA Modules."
        ),
        stresses=None,
        layers=2,
        steps=5,
        host_gap_us=15000.0,
        expect_fire=("sharding",),
        expect_quiet=("sc_offload", "scoped_vmem", "tokamax"),
    ),
    _DENSE.with_(
        name="periodic_checkpoint",
        finding=(
            "Every 3rd step (3, 6, 9) is ~40 ms slower: the host saves a checkpoint before the train step "
            "launches, so the TensorCore idles between programs. A periodic class (every 3 steps, its "
            "cost amortised over the period), not outliers to drop silently."
        ),
        description=(
            "dense_short_fsdp with 2 layers and 10 steps; steps 3, 6 and 9 wait 40 ms on the host "
            "(outside every program run) before the train program."
        ),
        stresses=None,
        layers=2,
        steps=10,
        heavy_every=3,
        heavy_extra_us=40000.0,
        expect_fire=(),
        expect_quiet=("sc_offload", "scoped_vmem", "tokamax"),
    ),
    _DENSE.with_(
        name="hlo_memory_dense",
        finding=(
            "The train program's buffer assignment is in /host:metadata: per TensorCore the stacked layer "
            "weights and Adam moments (parameters), and a temp heap that peaks at logits_dense with every "
            "layer's saved activation and the f32 logits live. Memory: peak, top buffers and headroom."
        ),
        description=(
            "dense_short_fsdp with 2 layers and 4 steps whose train program carries a real HloProto "
            "(instructions, shapes, buffer assignment with a heap-simulator trace); no allocator activity."
        ),
        stresses=None,
        layers=2,
        steps=4,
        hlo_memory=True,
        expect_fire=(),
        expect_quiet=("sc_offload", "scoped_vmem", "tokamax"),
    ),
    # ---- inside the kernels (issue #26) -------------------------------------------
    _DENSE.with_(
        name="pallas_kernel_counters",
        finding=(
            "Captured with the kernel-profiling flags: counters show the MLP's unfamiliar Pallas kernel "
            "fused_ffn_down_block MXU-bound (72% MXU, a bf16 matmul by its operand shapes: FP8 next), the "
            "splash dK/dV kernels waiting on their pipeline's DMA (40% ep_wait: block sizes, scoped VMEM) "
            "and the other attention kernels vector-bound."
        ),
        description=(
            "dense_short_fsdp with 1 layer whose MLP down projection is a user's Pallas kernel under a "
            "name that says nothing (typed operands and block-size metadata, no flops stat), and a "
            "_counters_ line (MXU / vector % util samples) and emit_pipeline ep_wait_in / ep_run_kernel "
            "phases on XLA TraceMe over every Pallas kernel."
        ),
        stresses=None,
        layers=1,
        custom_matmul=True,
        counters=True,
    ),
]

# ---- two-lever pairs (issue #18): the combined what-if is checked against them ----
_OFFLOAD_OFF = _colls(all_gather=("cont", "short"), reduce_scatter=("sync", "short"), all_reduce=("sync", "short"))
_CATALOG += [
    _DENSE.with_(
        name="fp8_offload_before",
        finding="BF16 matmuls and exposed FSDP collectives (no SparseCore offload). Recommend fp8 and sc_offload; "
        "calibrate the two together against fp8_offload_after.",
        description="Dense 4k-sequence model in BF16 without SparseCore offload (all-gathers as continuation "
        "fusions issued just before use, reduce-scatters and all-reduces synchronous). Before side of a pair "
        "that changes two levers at once (fp8 + sc_offload).",
        stresses="fp8",
        also=("sc_offload",),
        pair="fp8_offload_after",
        role="before",
        seq_len=4096,
        collectives=_OFFLOAD_OFF,
        expect_fire=("fp8", "sc_offload"),
        expect_quiet=("scoped_vmem",),
    ),
    _DENSE.with_(
        name="fp8_offload_after",
        finding="FP8 matmuls and collectives offloaded to SparseCore and hidden; fp8 and sc_offload quiet.",
        description="Same model as fp8_offload_before with FP8 matmuls and SparseCore offload of all-gather, "
        "reduce-scatter and all-reduce. After side.",
        stresses="fp8",
        also=("sc_offload",),
        pair="fp8_offload_before",
        role="after",
        seq_len=4096,
        precision="fp8",
        matmul_eff=0.6,
        expect_quiet=("fp8", "sc_offload"),
        expect_fire=("remat",),
    ),
    _DENSE.with_(
        name="fp8_remat_before",
        finding="BF16 matmuls with a full remat policy: recompute and BF16 both large. Recommend fp8 and remat; "
        "calibrate the two together against fp8_remat_after.",
        description="Dense 4k-sequence model in BF16 with remat policy full. Before side of a pair that changes "
        "two levers at once (fp8 + remat).",
        stresses="fp8",
        also=("remat",),
        pair="fp8_remat_after",
        role="before",
        seq_len=4096,
        remat="full",
        expect_fire=("fp8", "remat"),
    ),
    _DENSE.with_(
        name="fp8_remat_after",
        finding="FP8 matmuls, remat policy minimal; fp8 and remat quiet.",
        description="Same model as fp8_remat_before with FP8 matmuls and remat policy minimal. After side.",
        stresses="fp8",
        also=("remat",),
        pair="fp8_remat_before",
        role="after",
        seq_len=4096,
        remat="minimal",
        precision="fp8",
        matmul_eff=0.6,
        expect_quiet=("fp8", "remat"),
        expect_fire=(),
    ),
    _DENSE.with_(
        name="remat_offload_before",
        finding="Full remat and exposed FSDP collectives. Recommend remat and sc_offload; calibrate the two "
        "together against remat_offload_after.",
        description="Dense 8k-sequence model in BF16, remat policy full, without SparseCore offload. Before side "
        "of a pair that changes two levers at once (remat + sc_offload).",
        stresses="remat",
        also=("sc_offload",),
        pair="remat_offload_after",
        role="before",
        layers=3,
        remat="full",
        collectives=_OFFLOAD_OFF,
        expect_fire=("remat", "sc_offload"),
        expect_quiet=("scoped_vmem",),
    ),
    _DENSE.with_(
        name="remat_offload_after",
        finding="Remat policy minimal, collectives offloaded and hidden; remat and sc_offload quiet (fp8 remains).",
        description="Same model as remat_offload_before with remat policy minimal and SparseCore offload. After side.",
        stresses="remat",
        also=("sc_offload",),
        pair="remat_offload_before",
        role="after",
        layers=3,
        remat="minimal",
        expect_fire=("fp8",),
        expect_quiet=("remat", "sc_offload"),
    ),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _CATALOG}


def get_scenario(name_or_spec: str | Scenario) -> Scenario:
    if isinstance(name_or_spec, Scenario):
        return name_or_spec
    try:
        return SCENARIOS[name_or_spec]
    except KeyError:
        raise KeyError(
            f"unknown scenario {name_or_spec!r}; known: {', '.join(sorted(SCENARIOS))}"
        ) from None


def _check_catalog() -> None:
    for s in _CATALOG:
        if s.pair is not None and s.pair not in SCENARIOS:
            raise AssertionError(f"{s.name}: pair {s.pair} unknown")
        if any(x not in LEVERS for x in s.also):
            raise AssertionError(f"{s.name}: lever in {s.also} unknown")
        if s.stresses is not None and s.stresses not in LEVERS:
            raise AssertionError(f"{s.name}: lever {s.stresses} unknown")
        if s.workload is not None and s.workload not in WORKLOADS:
            raise AssertionError(f"{s.name}: workload {s.workload} unknown")
        assert s.program in ("maxtext", "vllm", "offload_loop") and s.run_kind in ("training", "inference"), s.name
        for t, f, o in s.collectives:
            assert t in COLLECTIVE_TYPES and f in FORMS and o in ("long", "short"), s.name


_check_catalog()

__all__ = ["SCENARIOS", "get_scenario"]
