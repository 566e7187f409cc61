"""What the capture can support: a short verdict on its quality, and the
assumptions the analysis had to make where the trace lacks evidence.

Each issue names the data that is missing and what rests on it (JSON keys or
report sections), so renderers can mark those numbers low-confidence and rules
that need the evidence can stay quiet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from profanalyzer.analyze.attribution import CoreWork
from profanalyzer.core.stats import median
from profanalyzer.core.vocab import PREDICTED_INPUT_KINDS
from profanalyzer.model.analysis import StepsSummary, Utilisation
from profanalyzer.model.parts import CaptureIssue, CaptureQuality
from profanalyzer.model.trace import LINE_OPS, Trace

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

#: Event counts at which profilers cap a line (XProf / TraceMe buffers).
EVENT_CAPS = (1_000_000, 1_048_576, 2_000_000, 2_097_152, 4_000_000, 4_194_304)
#: A capture whose ops miss program_id on more than this share of events was
#: converted from another format (XProf's op tools drop such ops).
NO_PROGRAM_ID_SHARE = 0.5


def capture_quality(att: Attributed, steps: StepsSummary, util: Utilisation,
                    has_collectives: bool) -> CaptureQuality:
    trace, work = att.trace, att.work
    issues: list[CaptureIssue] = []
    # a compiled program replayed is no capture: its one step, its planes and its events are made, not recorded
    captured = trace.input_kind not in PREDICTED_INPUT_KINDS
    if trace.chip_source.startswith("assumed"):
        issues.append(CaptureIssue("chip_assumed", f"chip {trace.chip_source}: peaks, MFU and roofline use its figures",
                                   ("hardware", "utilisation", "top_ops.roofline_fraction")))
    if captured and steps.kept < 2:
        issues.append(CaptureIssue("few_steps", f"{steps.kept} step kept: no step-to-step noise estimate, "
                                   "steady state not established", ("steps", "compare noise")))
    edge = _edge_steps(trace, work) if captured else 0
    if edge:
        issues.append(CaptureIssue("edge_steps", f"{edge} step window(s) end after the last op of their core: "
                                   "the capture stopped inside them", ("steps",)))
    per_chip = trace.chip.planes_per_chip
    if captured and len(trace.tensorcores) % per_chip:
        issues.append(CaptureIssue("missing_cores", f"{len(trace.tensorcores)} TensorCore planes, not a multiple of the "
                                   f"{per_chip} per chip: cores are missing from the capture", ("per_core", "per_host")))
    if util.flops_coverage is not None and util.flops_coverage < 0.9:
        issues.append(CaptureIssue("no_flops", f"FLOPs known for {util.flops_coverage:.0%} of the compute time (kernels "
                                   "without a flops stat or derivable shapes)", ("utilisation.mfu", "bucket_ops.flops")))
    if captured and trace.chip.sparsecores and not trace.sparsecores and has_collectives:
        issues.append(CaptureIssue("no_sparsecore", "no SparseCore planes in this capture: SparseCore offload cannot be "
                                   "observed", ("sparsecore_offload",)))
    share = _share_without_program_id(work) if captured else 0.0
    if share > NO_PROGRAM_ID_SHARE:
        issues.append(CaptureIssue("no_program_id", f"{share:.0%} of the ops carry no program_id (a converted trace): "
                                   "XProf's op tools drop them; profanalyze uses them", ()))
    capped = [f"{w.plane.label} {ln.name}" for w in work for ln in w.plane.lines
              if captured and len(ln.events) in EVENT_CAPS]
    if capped:
        issues.append(CaptureIssue("event_cap", f"event count at a profiler cap on {', '.join(capped[:3])}: the capture "
                                   "may be truncated", ("steps", "breakdown")))
    serious = {"chip_assumed", "missing_cores", "event_cap"}
    verdict = "good" if not issues else ("poor" if any(i.code in serious for i in issues) and len(issues) > 2 else "limited")
    return CaptureQuality(verdict, tuple(issues))


#: A Steps-line window that runs past its core's last op by more than this
#: share of the median step was cut by the end of the capture.
EDGE_SLACK = 0.1


def _edge_steps(trace: Trace, work: list[CoreWork]) -> int:
    """Step windows (Steps line) that run past the last op of their core by
    more than EDGE_SLACK of the median step: the capture stopped inside them."""
    n = 0
    for w in work:
        ln = w.plane.line(LINE_OPS)
        st = trace.steps[w.plane.label]
        if ln is None or not len(ln.events) or not len(st.end_ps) or not st.source.startswith("Steps line"):
            continue
        slack = EDGE_SLACK * median(st.end_ps - st.start_ps)
        n += int(np.sum(st.end_ps > int(ln.events.end_ps.max()) + slack))
    return n


def _share_without_program_id(work: list[CoreWork]) -> float:
    tot = missing = 0
    for w in work:
        ln = w.plane.line(LINE_OPS)
        if ln is None or not len(ln.events):
            continue
        rows = ln.events.meta[ln.events.meta >= 0]
        pid = w.plane.meta.program_id
        tot += len(rows)
        missing += int((pid[rows] == -1).sum()) if len(pid) else len(rows)
    return missing / tot if tot else 0.0


def assumptions(trace: Trace, util: Utilisation) -> tuple[str, ...]:
    out = []
    if trace.input_kind == "compiled_program":  # issue #25: a replayed compiled program, no measurement
        out.append("times: PREDICTED from a compiled program (the compiler's estimated cycles at an assumed clock, "
                   "bytes over assumed bandwidths; see the notes)")
        out.append("FLOPs: derived from the HLO (2 x the multiply-adds of each dot and convolution, from its shapes; "
                   "elementwise work not counted): MFU and TFLOP/s are PREDICTED, over the predicted step")
    if trace.chip_source.startswith("assumed"):
        out.append(f"chip: {trace.chip_source}")
    if util.low_confidence:
        out.append(f"MFU counts FLOPs of {util.flops_coverage:.0%} of the compute time; kernels without FLOPs count 0 "
                   "(a lower bound)")
    if util.mxu_matmul is not None and util.mxu_matmul > 1.0:
        out.append(f"matmuls reach {util.mxu_matmul:.2f}x the {trace.chip.name} peak of their precision: they run at a "
                   "narrower precision on the MXU than their operands say, or the chip is not the one assumed")
    return tuple(out)
