"""Host-bound steps (`HB001`): the TensorCore idle because the host was late.

Filed under lever L2 (sharding and parallelism): the per-device batch and the
work per dispatched program are what set how much device time each host
launch buys. Tied to the guide's premise that TPU performance is data
movement across VMEM -> HBM -> host: the host end of that chain can starve
the core before any device-side lever matters. Reads `Analysis.idle_causes`
(profanalyzer.analyze.idle).
"""

from __future__ import annotations

from profanalyzer.findings.rules import rule
from profanalyzer.model.findings import Claim

from ._util import ms, pct

#: Host-caused idle (between programs + waiting on the host) worth acting on.
HOST_IDLE_MIN_FRACTION = 0.05
#: Share of the host-caused idle that prefetching input and asynchronous
#: dispatch are assumed to hide (the host work itself remains; it overlaps).
HOST_IDLE_HIDEABLE = 0.80


@rule("HB001", "sharding", "Host-bound steps: the TensorCore waits for the host", fixtures=("host_bound_input", "dense_short_fsdp"))
def host_bound(self, analysis, facts):
    """
    What it detects: idle TensorCore time caused by the host above 5% of the
    step: idle between program runs (the host had not dispatched the next
    program: input pipeline, Python between steps, `jax.block_until_ready`
    in the training loop) plus idle inside a program waiting on the host
    (infeed/outfeed, host callbacks, host transfers).

    Why it costs time: the guide's premise is that TPU performance is data
    movement from host memory through HBM to VMEM; when the host end is late,
    the TensorCore has nothing to run and no device-side lever (FP8, remat,
    offload, kernels) can recover that time.

    What to change: keep the host ahead of the device: prefetch input batches
    to device memory (a device-side prefetch buffer of 2 or more batches),
    remove `jax.block_until_ready` / host reads of device values from the
    step loop (log asynchronously, every N steps), and give each dispatch
    more device work (a larger per-device batch, or several steps per jitted
    call) so the host's per-step cost is amortised.
    """
    ic = analysis.idle_causes
    if not ic:
        return []
    dispatch, host = ic.get("host_dispatch"), ic.get("host_wait")
    ps = (dispatch.ps if dispatch else 0.0) + (host.ps if host else 0.0)
    frac = (dispatch.fraction if dispatch else 0.0) + (host.fraction if host else 0.0)
    if frac < HOST_IDLE_MIN_FRACTION:
        return []
    saving = ps * HOST_IDLE_HIDEABLE
    evidence = [f"host-caused idle {ms(ps)} per step ({pct(frac)} of the step)"]
    if dispatch and dispatch.ps > 0:
        evidence.append(f"between programs (host dispatch): {ms(dispatch.ps)} per step ({pct(dispatch.fraction)})")
    if host and host.ps > 0:
        evidence.append(f"inside programs, waiting on the host (infeed/outfeed, callbacks, transfers): {ms(host.ps)} per step ({pct(host.fraction)})")
    evidence.append(f"idle in all: {ms(analysis.breakdown['idle'].ps)} per step ({pct(analysis.breakdown['idle'].fraction)})")
    for h in analysis.idle_host_activity[:3]:
        evidence.append(f"host activity then: {h.name} {ms(h.ps)} per step ({pct(h.fraction)} of the host-caused idle)")
    return [
        self.finding(
            analysis,
            saving,
            evidence,
            [
                "# prefetch input to device: keep >= 2 batches in flight (e.g. a device-side prefetch iterator)",
                "# remove jax.block_until_ready(...) and host reads of device values from the step loop; log every N steps",
                "per_device_batch_size=<2x>  # more device work per dispatch amortises the host's per-step cost",
            ],
            [f"prefetching and asynchronous dispatch hide {HOST_IDLE_HIDEABLE:.0%} of the host-caused idle"],
            claims=[Claim.bucket("idle", saving)],
        )
    ]


RULES = (host_bound,)
