"""Lever L3 — SparseCore collective offload (`sc_offload`)."""

from __future__ import annotations

from profanalyzer.core.vocab import OFFLOADABLE
from profanalyzer.core.vocab import SPARSECORE_CAPTURE_HINT as CAPTURE_HINT
from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: Exposed time of a collective type (share of step) worth acting on.
EXPOSED_MIN_FRACTION = 0.01
#: TensorCore time an offloaded collective still costs per window (call-start
#: + call-done), used when the trace has no offloaded collective to measure it.
DEFAULT_RESIDUAL_PS_PER_WINDOW = 1_500_000  # 1.5 us
#: Latency multiplier to try when offloaded collectives are still exposed.
LATENCY_MULTIPLIER = 2.0

_FLAG = {
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "all_reduce": "all_reduce",
}


def _residual_per_window(analysis) -> tuple[float, str]:
    """Measured TensorCore cost of one offloaded collective window, if any."""
    wins = [c for c in analysis.collectives.values() if c.engine == "SparseCore" and c.count > 0]
    if wins:
        per = sum(c.exposed_ps for c in wins) / sum(c.count for c in wins)
        return per, f"measured: offloaded collectives in this trace cost {per / 1e6:.2f} us of TensorCore time per window"
    return float(DEFAULT_RESIDUAL_PS_PER_WINDOW), f"assumed {DEFAULT_RESIDUAL_PS_PER_WINDOW / 1e6:.1f} us of TensorCore time per offloaded window (call-start + call-done)"


def enable_flags(types) -> list[str]:
    """The LIBTPU_INIT_ARGS flags that offload `types` to SparseCores."""
    args = ["--xla_tpu_use_tc_device_shape_on_sc=true"]
    for t in types:
        f = _FLAG[t]
        args += [
            f"--xla_tpu_enable_sparse_core_collective_offload_{f}=true",
            f"--xla_tpu_enable_async_collective_fusion_fuse_{f}=false",
            f"--xla_tpu_enable_{f}_offload_tracing=true",
        ]
    return args


def latency_flag(t: str) -> str:
    return f"--xla_tpu_sparse_core_{_FLAG[t]}_latency_multiplier={LATENCY_MULTIPLIER}"


def tracing_flags() -> list[str]:
    return [f"--xla_tpu_enable_{_FLAG[t]}_offload_tracing=true" for t in OFFLOADABLE]


@rule("SC001", "sc_offload", "Exposed collectives that SparseCore offload would hide", fixtures=("offload_off", "offload_on"),
      flags=enable_flags(OFFLOADABLE))
def enable_offload(self, analysis, facts):
    """
    What it detects: all-gather, reduce-scatter or all-reduce time exposed on
    the TensorCore (the core stalls in the collective's ops) for collective
    types that are not offloaded to SparseCores.

    Why it costs time: without offload, collectives run as synchronous ops or
    TensorCore-driven async (continuation) fusions issued close to their use:
    the TensorCore waits for ICI. On TPU7x, SparseCores can drive these
    transfers as independent control threads, in parallel with TensorCore
    compute.

    What to change: enable SparseCore collective offload for the exposed
    types (LIBTPU_INIT_ARGS flags below; on by default in recent MaxText on
    Ironwood) and disable continuation fusion for them (the two are
    exclusive).
    """
    sc = analysis.sparsecore_offload
    if sc.verdict == "not_visible":
        return []
    todo = []
    for t in OFFLOADABLE:
        c = analysis.collectives.get(t)
        if c is None or c.engine == "SparseCore" or sc.offloaded.get(t):
            continue
        # only what independent compute can hide: not the critical-path windows
        if (c.exposed_ps - c.critical_path_ps) / facts.step_ps >= EXPOSED_MIN_FRACTION:
            todo.append(c)
    if not todo:
        return []
    residual, how = _residual_per_window(analysis)
    claims = {}
    evidence = [f"SparseCore offload verdict: {sc.verdict} ({sc.reason})"]
    for c in todo:
        if c.critical_path_ps > 0:
            evidence.append(f"{c.type}: {ms(c.critical_path_ps)} per step is on the critical path (each consumes the op "
                            "just before it): offload cannot hide it and it is not counted")
        s = max(0.0, c.exposed_ps - c.critical_path_ps - c.count * residual)
        claims[c.bucket] = s
        hf = f", {pct(c.hidden_fraction)} of its window hidden" if c.hidden_fraction is not None else ""
        evidence.append(
            f"{c.type}: {ms(c.exposed_ps)} exposed per step ({pct(c.fraction_of_step)} of the step), "
            f"{c.count:.0f} windows per step on the {c.engine}{hf}"
        )
    saving = sum(claims.values())
    assumptions = [
        "offloaded collectives are issued early enough to hide behind compute (as the cost model schedules them); "
        "the TensorCore keeps only the call-start/call-done ops",
        how,
    ]
    types = [c.type for c in todo]
    return [
        self.finding(
            analysis,
            saving,
            evidence,
            [],
            assumptions,
            claims=Claim.buckets(claims),
            flags=enable_flags(types),
            title=f"Offload {', '.join(t.replace('_', '-') for t in types)} to SparseCores: {ms(saving)} per step exposed",
        )
    ]


@rule("SC002", "sc_offload", "Offloaded collectives still stall the TensorCore", fixtures=("straggler_core", "offload_on"),
      flags=[latency_flag(t) for t in OFFLOADABLE])
def schedule_offload_earlier(self, analysis, facts):
    """
    What it detects: collectives that already run on SparseCores but whose
    call-done still waits (exposed time above the call-start/call-done cost),
    and SparseCore queueing.

    Why it costs time: the scheduler issues the offloaded collective too late
    for the transfer to finish behind compute, or several collectives queue on
    a busy SparseCore.

    What to change: raise the SparseCore latency multiplier of the exposed
    type (1.0 = cost model, larger = schedule earlier at some memory cost);
    check the queueing evidence before raising it for every type.
    """
    sc = analysis.sparsecore_offload
    found = []
    floor = DEFAULT_RESIDUAL_PS_PER_WINDOW
    claims = {}
    evidence = [f"SparseCore offload verdict: {sc.verdict} ({sc.reason})"]
    flags = []
    for t in OFFLOADABLE:
        c = analysis.collectives.get(t)
        if c is None or c.engine != "SparseCore":
            continue
        excess = c.exposed_ps - c.count * floor
        if excess / (facts.step_ps) < EXPOSED_MIN_FRACTION:
            continue
        claims[c.bucket] = excess
        evidence.append(f"{t}: {ms(c.exposed_ps)} exposed per step over {c.count:.0f} offloaded windows")
        flags.append(latency_flag(t))
    if not claims:
        return []
    if sc.queueing_ps:
        evidence.append(f"SparseCore queueing: {ms(sc.queueing_ps)} per step of offloaded work waited for a busy SparseCore")
    if sc.busy_fraction is not None:
        evidence.append(f"SparseCores busy {pct(sc.busy_fraction)} of the step")
    saving = sum(claims.values())
    found.append(
        self.finding(
            analysis,
            saving,
            evidence,
            [],
            [
                f"issued earlier, the transfers finish behind compute; {floor / 1e6:.1f} us per window stays on the TensorCore",
                "a straggler core or input imbalance also shows up as collective waits: check per-core spread first",
            ],
            claims=Claim.buckets(claims),
            flags=flags,
        )
    )
    return found


@rule("SC003", "sc_offload", "SparseCore activity not captured", fixtures=("offload_not_captured", "offload_on"),
      flags=tracing_flags())
def capture_sparsecore(self, analysis, facts):
    """
    What it detects: TensorCores hand collectives to SparseCores
    (call-start/call-done ops) but the capture has no SparseCore activity.

    Why it costs time: it does not by itself; but offloaded collectives cannot
    be checked for queueing or late issue without the SparseCore planes, so
    offload problems stay invisible.

    What to change: capture again with SparseCore offload tracing enabled.
    """
    sc = analysis.sparsecore_offload
    if sc.verdict != "not_visible":
        return []
    return [
        self.finding(
            analysis,
            0.0,
            [sc.reason],
            ["# then re-capture the profile (device tracing of all planes)"],
            [CAPTURE_HINT],
            flags=tracing_flags(),
        )
    ]


RULES = (enable_offload, schedule_offload_earlier, capture_sparsecore)
