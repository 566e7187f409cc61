"""Lever L2 — sharding and parallelism (`sharding`)."""

from __future__ import annotations

from profanalyzer.core.hardware import GUIDE_ICI_INTENSITY
from profanalyzer.core.vocab import COMPUTE_BUCKETS
from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct
from .headroom import headroom
from .host_bound import (
    host_bound,  # HB001, filed under this lever
)
from .late_core import late_core  # LC001, filed under this lever
from .optimizer_update import optimizer_update

#: Exposed all-to-all share of the step worth acting on (MoE).
A2A_MIN_FRACTION = 0.03
#: Share of exposed all-to-all that overlapping dispatch/combine with expert
#: compute is assumed to hide.
A2A_HIDEABLE = 0.60
#: Pipeline bubbles (idle) share of the step worth acting on.
BUBBLE_MIN_FRACTION = 0.05
#: Bubble time removed by doubling microbatches (p=4 stages, m=4 -> 8:
#: bubble (p-1)/(m+p-1) falls from 0.43 to 0.27 of the pipeline time).
BUBBLE_REDUCTION = 0.36
#: Exposed FSDP/CP traffic share worth a sharding change.
COMM_MIN_FRACTION = 0.03
#: Doubling the per-device batch halves the per-token cost of FSDP gathers.
FSDP_BATCH_GAIN = 0.50


def step_ici_intensity(analysis) -> tuple[float | None, float, float]:
    """FLOPs per step / collective bytes per step (per TensorCore)."""
    flops = sum(o.flops for b, o in analysis.bucket_ops.items() if b in COMPUTE_BUCKETS)
    nbytes = sum(c.bytes or 0.0 for c in analysis.collectives.values())
    return (flops / nbytes if nbytes > 0 else None), flops, nbytes


def _intensity_line(analysis) -> str:
    i, f, b = step_ici_intensity(analysis)
    if i is None:
        return "collective bytes not recorded in the trace: ICI intensity unknown"
    verdict = "communication-bound over ICI" if i < GUIDE_ICI_INTENSITY else "compute-bound against ICI"
    return (f"step arithmetic intensity against ICI: {i:,.0f} FLOP/byte ({f / 1e12:.2f} TFLOP over {b / 1e9:.2f} GB of "
            f"collectives per core) vs the guide's ~{GUIDE_ICI_INTENSITY:,.0f}: {verdict}")


@rule("SH001", "sharding", "Exposed all-to-all: overlap expert routing", fixtures=("moe_short_fsdp_ep", "dense_short_fsdp"))
def overlap_all_to_all(self, analysis, facts):
    """
    What it detects: a MoE workload whose all-to-all (expert dispatch and
    combine) is exposed on the TensorCore above 3% of the step.

    Why it costs time: expert parallelism routes tokens with all-to-all; when
    it is not overlapped with expert compute the TensorCore waits for ICI
    every MoE layer.

    What to change: keep FSDP + EP as the primary sharding (guide table, MoE
    short sequence) but overlap the all-to-all with compute (pipelined
    dispatch/combine), keep the EP group inside one ICI domain, and make sure
    the expert MLP dimension is large enough to be near the roofline;
    reduce EP if the per-expert work is small.
    """
    if facts.serving:
        return []
    wl = facts.workload
    c = analysis.collectives.get("all_to_all")
    if wl.kind != "moe" or c is None or c.fraction_of_step < A2A_MIN_FRACTION:
        return []
    saving = c.exposed_ps * A2A_HIDEABLE
    return [
        self.finding(
            analysis,
            saving,
            [
                f"all-to-all exposed {ms(c.exposed_ps)} per step ({pct(c.fraction_of_step)}), {c.count:.0f} per step, "
                f"{pct(analysis.communication.all_to_all_share)} of exposed communication",
                f"workload: {wl.row} -> {wl.primary_sharding} (main bottleneck: {wl.main_bottleneck})",
                _intensity_line(analysis),
            ],
            [
                "ici_expert_parallelism=<EP within one slice>  # keep all-to-all on ICI, not DCN",
                "# overlap dispatch/combine all-to-all with expert compute (pipelined MoE layer)",
            ],
            [f"overlapping hides {A2A_HIDEABLE:.0%} of the exposed all-to-all"],
            claims=[Claim.bucket("all_to_all", saving)],
        )
    ]


@rule("SH002", "sharding", "Pipeline bubbles: more microbatches", fixtures=("moe_large_pp", "moe_short_fsdp_ep"))
def pipeline_bubbles(self, analysis, facts):
    """
    What it detects: pipeline parallelism (collective-permute / send-recv
    between stages) with idle TensorCore time above 5% of the step.

    Why it costs time: each pipeline stage idles while the first microbatches
    fill and the last drain the pipeline: bubble share (p-1)/(m+p-1) for p
    stages and m microbatches.

    What to change: raise the number of microbatches (MaxText
    `num_pipeline_microbatches`), or use fewer pipeline stages if the model
    fits (PP only across pods, over DCN).
    """
    colls = analysis.collectives
    if facts.serving or not any(t in colls and colls[t].count > 0 for t in ("collective_permute", "send_recv")):
        return []
    idle = analysis.breakdown["idle"]
    if idle.fraction < BUBBLE_MIN_FRACTION:
        return []
    saving = idle.ps * BUBBLE_REDUCTION
    wl = facts.workload
    return [
        self.finding(
            analysis,
            saving,
            [
                f"idle TensorCore time {ms(idle.ps)} per step ({pct(idle.fraction)}) with pipeline traffic "
                f"({', '.join(t for t in ('collective_permute', 'send_recv') if t in colls)})",
                f"workload: {wl.row} -> {wl.primary_sharding}",
            ],
            ["num_pipeline_microbatches=<2x current>", "# or fewer stages: dcn_pipeline_parallelism=<smaller>"],
            [f"doubling microbatches removes {BUBBLE_REDUCTION:.0%} of the bubble (4 stages, 4 -> 8 microbatches)",
             "all idle time in this trace is pipeline bubble"],
            claims=[Claim.bucket("idle", saving)],
        )
    ]


@rule("SH003", "sharding", "Communication-bound sharding: simplify it", fixtures=("moe_large_pp", "well_tuned"), needs=("memory",))
def communication_bound(self, analysis, facts):
    """
    What it detects: exposed all-gather / reduce-scatter / all-reduce above
    3% of the step on a workload whose arithmetic intensity against ICI is
    below the guide's ~11.5k FLOP/byte, or context-parallel K/V gathers that
    stay exposed.

    Why it costs time: maximising parallelism naively makes the job
    communication-bound; tensor parallelism over ICI needs very large model
    dimensions, and context parallelism adds more traffic than FSDP.

    What to change: use the simplest sharding that fits memory (the guide's
    table: FSDP for dense, FSDP + CP only when long sequences need it, with the
    minimum CP degree); grow the per-device batch so FSDP gathers hide.
    """
    if facts.serving:
        return []
    wl = facts.workload
    exposed = {t: analysis.collectives[t] for t in ("all_gather", "reduce_scatter", "all_reduce") if t in analysis.collectives}
    total = sum(c.exposed_ps for c in exposed.values())
    step = facts.step_ps
    if total / step < COMM_MIN_FRACTION:
        return []
    intensity, _, _ = step_ici_intensity(analysis)
    cp = wl.sequence == "long"
    if not cp and (intensity is None or intensity >= GUIDE_ICI_INTENSITY):
        return []
    saving = total * FSDP_BATCH_GAIN
    actions = [f"# guide table: {wl.row} -> primary {wl.primary_sharding}, secondary {wl.secondary_sharding}"]
    if cp:
        actions += ["ici_context_parallelism=<minimum that fits activation memory>", "ici_fsdp_parallelism=-1  # the rest on FSDP"]
    else:
        actions += ["ici_tensor_parallelism=1  # avoid TP over ICI", "ici_fsdp_parallelism=-1", "per_device_batch_size=<larger, if HBM allows>"]
    return [
        self.finding(
            analysis,
            saving,
            [f"exposed {', '.join(f'{t} {ms(c.exposed_ps)}' for t, c in exposed.items())} per step ({pct(total / step)})",
             _intensity_line(analysis), f"workload: {wl.row} ({'; '.join(wl.reasons)})"],
            actions,
            ["halving the sharded-traffic per token (smaller CP degree or twice the per-device batch) halves its exposed time",
             headroom(analysis).line],
            claims=Claim.buckets({c.bucket: c.exposed_ps * FSDP_BATCH_GAIN for c in exposed.values()}),
        )
    ]


#: Critical-path all-reduce share of the step worth acting on.
TP_CRITICAL_MIN_FRACTION = 0.02
#: Share of a critical-path all-reduce a collective matmul (the all-reduce
#: decomposed and overlapped with the producing matmul's chunks) is assumed to
#: hide; the guide publishes no figure.
COLLECTIVE_MATMUL_HIDES = 0.5


@rule("SH004", "sharding", "Tensor-parallel all-reduces on the critical path", fixtures=("serving_tp2_w4", "dense_short_fsdp"))
def tp_all_reduce_critical(self, analysis, facts):
    """
    What it detects: all-reduces that each consume the op right before them
    (the row-parallel matmul of tensor parallelism) and hide nothing, above
    2% of the step: the TensorCore waits for ICI between two layers.

    Why it costs time: with tensor parallelism every row-parallel linear ends
    in an all-reduce that the next layer needs, so no independent compute is
    ready to overlap it; the guide's ~11.5k FLOP/byte hardware intensity
    against ICI is why TP over ICI easily becomes communication-bound.
    SparseCore offload cannot hide such a collective: nothing independent runs
    beside it.

    What to change: overlap the all-reduce with the matmul that produces it
    (a collective matmul: decompose it into reduce-scatter + all-gather over
    chunks of the matmul), or lower the TP degree (serve more replicas with
    data parallelism) when the weights fit in HBM per core.
    """
    ar = analysis.collectives.get("all_reduce")
    step = facts.step_ps
    if ar is None or ar.critical_path_ps / step < TP_CRITICAL_MIN_FRACTION:
        return []
    mm = sum(b.ps for k, b in analysis.breakdown.items() if k in COMPUTE_BUCKETS and k.startswith("matmul"))
    saving = min(ar.critical_path_ps, mm) * COLLECTIVE_MATMUL_HIDES
    scopes = f" under {', '.join(ar.tf_ops[:2])}" if ar.tf_ops else ""
    evidence = [
        f"all-reduce on the critical path: {ms(ar.critical_path_ps)} per step ({pct(ar.critical_path_ps / step)}) of "
        f"{ms(ar.exposed_ps)} exposed, {ar.count:.0f} per step{scopes}",
        "each consumes the op that ran just before it (named among its operands) and hides no compute",
        _intensity_line(analysis),
    ]
    actions = [
        "# overlap each all-reduce with its producing matmul (collective matmul: reduce-scatter + all-gather over "
        "chunks of the row-parallel matmul), or serve with a lower TP degree and more replicas when the weights fit "
        "in HBM per core (the guide: TP over ICI is easily communication-bound)",
    ]
    assumptions = [
        f"a collective matmul hides {COLLECTIVE_MATMUL_HIDES:.0%} of the critical-path all-reduce time (assumed: the "
        "guide publishes no figure); removing TP altogether would remove all of it if the model fits",
        "SparseCore offload alone would not help: nothing independent of these all-reduces is ready to run",
    ]
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.bucket("all_reduce", saving)])]


RULES = (overlap_all_to_all, pipeline_bubbles, communication_bound, tp_all_reduce_critical, host_bound, late_core,
         optimizer_update)
