"""Lever L4 — activation rematerialisation (`remat`)."""

from __future__ import annotations

from profanalyzer.core.vocab import COLLECTIVE_BUCKETS, COMPUTE_BUCKETS
from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, op_line, pct
from .headroom import headroom

#: Recompute share of the step above which a lighter policy is worth trying.
REMAT_MIN_FRACTION = 0.04
#: Above this share on a short-sequence workload, go straight to `minimal`.
REMAT_HEAVY_FRACTION = 0.12
#: Ops a `minimal` policy still recomputes: cheap elementwise / norm fusions
#: (the other_compute bucket); matmul and attention outputs are saved.
MINIMAL_KEEPS = ("other_compute",)
#: Long sequences: recomputed ops moved to `device`/`offload` in a custom policy.
CUSTOM_TOP_OPS = 3


@rule("RM001", "remat", "Recompute is a large share of a compute-bound step", fixtures=("remat_full", "remat_minimal"), needs=("memory",))
def lighter_remat_policy(self, analysis, facts):
    """
    What it detects: time spent re-running forward ops in the backward pass
    (ops named `.remat` or under `rematted_computation`) above 4% of the step.

    Why it costs time: remat trades HBM for FLOPs (~25-30% extra for a
    transformer block under a full policy). On short sequences the step is
    compute-bound and activation memory is not the limit, so recompute is
    often the single largest waste; on long sequences activations dominate HBM
    and remat is needed, but the most expensive recomputed dots can be kept or
    offloaded instead.

    What to change: pick a lighter MaxText `remat_policy` (`minimal`,
    `save_dot_with_context_except_mlp`, `save_qkv_proj`, `save_out_proj`) on
    short sequences, or `remat_policy=custom` with per-layer `device` /
    `offload` for the top recomputed ops on long sequences; check HBM headroom
    (192 GiB per TPU7x chip, the chip table; the guide rounds it to 192 GB) after the change.
    """
    remat = analysis.remat
    if remat.fraction < REMAT_MIN_FRACTION or facts.serving:
        return []
    wl = facts.workload
    by_bucket = {b: o.remat_ps for b, o in analysis.bucket_ops.items() if b in COMPUTE_BUCKETS | COLLECTIVE_BUCKETS}
    kept_by_minimal = sum(by_bucket.get(b, 0.0) for b in MINIMAL_KEEPS)
    evidence = [
        f"recomputed ops take {ms(remat.ps)} per step ({pct(remat.fraction)} of the step)",
        "by bucket: " + ", ".join(f"{b} {ms(v)}" for b, v in sorted(by_bucket.items(), key=lambda kv: -kv[1]) if v > 0),
        f"workload: {wl.row} ({'; '.join(wl.reasons)})",
    ]
    evidence += [f"recomputed: {op_line(op)}" for op in analysis.remat_ops[:5]]
    top_names = [op.name for op in analysis.remat_ops[:CUSTOM_TOP_OPS]]
    if wl.sequence == "long":
        saving = sum(op.self_ps for op in analysis.remat_ops[:CUSTOM_TOP_OPS] if op.bucket != "other_compute")
        actions = [
            "remat_policy=custom",
            "# keep the most expensive recomputed dots instead of recomputing them:",
            *(f"#   {n}: device (or offload if HBM is short)" for n in top_names),
            "# keep everything else on remat",
        ]
        assumptions = [
            f"the top {CUSTOM_TOP_OPS} recomputed matmul/attention ops stop being recomputed; "
            "offloaded activations move over PCIe hidden behind compute",
            "activation memory on long sequences may not allow `device`: then use `offload`",
        ]
        title = "Keep or offload the most expensive recomputed ops (custom remat policy)"
    else:
        saving = remat.ps - kept_by_minimal
        policy = "minimal" if remat.fraction >= REMAT_HEAVY_FRACTION else "save_dot_with_context_except_mlp"
        saved = [op for op in analysis.remat_ops if op.bucket not in MINIMAL_KEEPS and op.output_bytes]
        need = sum(op.output_bytes * op.count for op in saved) if saved else None
        room = headroom(analysis, need)
        # a saved activation is written to HBM in the forward and read back in the backward: that traffic
        # replaces the recompute (measured on a TPU v5e pair: full -> dots saved 3.4 ms of 7.2 ms recompute)
        io_ps = 2.0 * need / (analysis.hardware.per_core.hbm_gbps * 1e9) * 1e12 if need else 0.0
        saving = max(0.0, saving - io_ps)
        if room.fits is False and need:
            m = analysis.memory
            share = max(0.0, (m.headroom_bytes or 0) / need) if m is not None else 0.0
            saving *= min(1.0, share)
            policy = "save_qkv_proj"
        actions = [
            f"remat_policy={policy}",
            "# intermediate steps if HBM is short: save_dot_with_context_except_mlp, save_qkv_proj, save_out_proj",
        ]
        assumptions = [
            "a `minimal` policy saves matmul and attention outputs: their recompute disappears; "
            f"cheap elementwise recompute ({ms(kept_by_minimal)} per step) stays",
            "the saved activations fit in HBM; the rest of the step is unchanged",
            *([f"saving them costs {ms(io_ps)} per step: {need / 1e9:.2f} GB written in the forward and read in the "
               "backward at the HBM bandwidth, taken off the recompute"] if need else []),
            room.line + (f" (need: the outputs of the top {len(saved)} recomputed matmul/attention ops per step, "
                         "an estimate from their HLO shapes)" if need else ""),
            *(["the saved activations do not fit: the estimate keeps only the share that fits, with an intermediate policy"]
              if room.fits is False else []),
            f"measured recompute, not a modelled one (the guide: ~25-30% extra FLOPs per transformer block under "
            f"full remat; here {pct(remat.fraction)} of the step)",
        ]
        title = f"Use a lighter remat policy ({policy}): recompute is {pct(remat.fraction)} of a compute-bound step"
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.remat(saving)], title=title)]


#: Exposed host-offload wait (share of the step) worth acting on.
HOST_OFFLOAD_MIN_FRACTION = 0.03


@rule("HO001", "remat", "The TensorCore waits for host offload transfers", fixtures=("host_offload_loop", "dense_short_fsdp"), needs=("memory",))
def host_offload_wait(self, analysis, facts):
    """
    What it detects: time the TensorCore sits in copy-start / copy-done of
    buffers in host memory (memory space S(5)) waiting for the host <-> HBM
    DMA, above 3% of the step, with the bytes moved and the achieved rate.

    Why it costs time: host offload frees HBM at the cost of transfer latency
    over PCIe / the host link, which is far slower than HBM; when the copies
    are not hidden behind independent compute the core stalls in copy-done.

    What to change: keep the offloaded tensors in HBM where it has room
    (training: `remat_policy=custom` with `device` instead of `offload` for
    them; serving / inference: place the arrays in device memory rather than
    pinned host memory), or issue the copies earlier so they overlap compute;
    where HBM has no room, store them in a narrower type (BF16 from F32, 8 bits
    where the model tolerates it) to halve the bytes. The finding is always
    this lever's (L4): narrower storage halves bytes on any chip, whatever its
    MXU runs.
    """
    ho = analysis.host_offload
    if ho is None or ho.fraction < HOST_OFFLOAD_MIN_FRACTION:
        return []
    rate = f", {ho.gbps:.1f} GB/s achieved while waiting" if ho.gbps else ""
    evidence = [
        f"host offload waits: {ms(ho.ps)} per step ({pct(ho.fraction)} of the step) on each TensorCore",
        f"{ho.bytes_per_step / 1e9:.2f} GB moved per step and TensorCore ({ho.from_host_bytes / 1e9:.2f} GB from host, "
        f"{ho.to_host_bytes / 1e9:.2f} GB to host) in {ho.transfers:.0f} transfers{rate}",
    ]
    evidence += [op_line(op) for op in analysis.top_ops if op.bucket == "host_offload"][:4]
    if facts.serving:
        actions = [
            "# keep these arrays in device memory (HBM) instead of pinned host memory where they fit, e.g. create / "
            "device_put them without a host memory kind; or prefetch them earlier so the copy overlaps compute",
            "# no room in HBM: store them narrower (BF16 from F32, 8 bits where quality allows) to halve the bytes over "
            "the host link",
        ]
    else:
        actions = [
            "remat_policy=custom",
            "# set the offloaded checkpoints to `device` (keep in HBM) instead of `offload` where HBM allows",
            "# no room in HBM: narrower offloaded activations (BF16 from F32, 8 bits where quality allows) halve the "
            "bytes that still have to move",
        ]
    m = analysis.memory
    room = headroom(analysis, float(m.host_offload_bytes) if m is not None and m.host_offload_bytes else None)
    saving = ho.ps
    assumptions = [
        "with the buffers in HBM the copy-done waits disappear; the rest of the step is unchanged",
        room.line,
    ]
    if room.fits is False:
        # no room in HBM: the estimate is the narrower storage's (half the bytes, half the wait), its action first
        saving = ho.ps * 0.5
        assumptions.append("the offloaded buffers do not fit in HBM: the estimate halves the bytes (half the wait)")
        actions = [a for a in actions if "no room in HBM" in a] + [a for a in actions if "no room in HBM" not in a]
    else:
        assumptions.append("halving the bytes instead (narrower storage) would save about half of this")
    return [self.finding(analysis, saving, evidence, actions, assumptions, claims=[Claim.bucket("host_offload", saving)])]


RULES = (lighter_remat_policy, host_offload_wait)
