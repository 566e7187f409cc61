"""Levers together: re-time the step with several levers applied at once.

    what_if(analysis, findings, ("fp8", "sc_offload", "remat")) -> WhatIf

Savings of several findings do not add: removing recompute leaves fewer BF16
matmuls for FP8 to speed up, and a faster compute stream leaves less compute
for offloaded collectives to hide behind. So each TensorCore's step is
re-timed with the chosen levers applied in turn, each reading its rule's
finding (never the rule's formula: the rates below come from the Findings'
`claims`):

  remat       RM001 claims part of the recompute (`remat`): that share r of
              every compute bucket's recomputed time goes (bucket_ops[b].remat_ps
              / bucket_ops[b].ps of the bucket, scaled by r);
  fp8         FP001 claims part of the BF16 matmul bucket: the claimed share k
              of what is left of that bucket after remat goes;
  sc_offload  SC001/SC002 claim part of the exposed time of collective types:
              moved to SparseCores, a collective is hidden only behind
              independent compute. On the representative step (the analysis'
              timeline, its op order and collective windows) each exposed
              window of a claimed type can hide behind the compute between the
              previous window of the same type and its own start, that compute
              re-timed by the levers above; the hideable share h of the exposed
              time bounds the claim on every core.

Bounds: FP8 never makes a core's step faster than the fastest published
Ironwood recipe measured end to end (hardware.FP8_MAX_SPEEDUP, 1.54x; the
guide's typical figure is 1.3x), so fp8 never saves more than (1 - 1/1.54)
of the step; remat costs about 25-30% extra FLOPs (the guide,
../shared/guide/tpu7x-performance-guide.md), so removing it never saves more
than 30/130 of a core's compute time.

Range: the central estimate uses the rules' claims as stated; `low_ps` (the
fastest step) and `high_ps` (the slowest) vary each rule's stated assumption
by the RANGE factors (fp8: the MXU efficiency FP8 reaches; remat: whether the
lighter policy also saves the cheap elementwise recompute (up to all of it),
or the guide's 25/30 low end of the overhead; sc_offload: issued early
enough to hide everything claimed (h = 1) or only behind the compute its op
order allows, less the call-start/call-done residual).

The step time reported is the base mean step minus the mean over TensorCores
of each core's re-timed saving; per core the re-timed step is listed too.
Imports: model, hardware and vocab only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from profanalyzer.core.errors import InputError
from profanalyzer.core.hardware import FP8_MAX_SPEEDUP
from profanalyzer.core.vocab import (
    CLAIM_BUCKET,
    CLAIM_REMAT,
    COLLECTIVE_BUCKETS,
    COMPUTE_BUCKETS,
    WHAT_IF_LEVERS,
)
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Findings
from profanalyzer.model.parts import TimelineSample
from profanalyzer.model.records import to_jsonable

#: Levers --what-if knows, in the order they are applied.
#: Guide: remat recompute overhead, extra FLOPs of a transformer block (high end).
GUIDE_REMAT_MAX_OVERHEAD = 0.30
GUIDE_REMAT_MIN_OVERHEAD = 0.25
#: (pessimistic, optimistic) multipliers of each lever's claimed rate.
RANGE = {
    "fp8": (0.75, 1.15),  # FP8 MXU efficiency relative to BF16 (the rule's main assumption) lower / higher
    "remat": (GUIDE_REMAT_MIN_OVERHEAD / GUIDE_REMAT_MAX_OVERHEAD, None),  # None: all recompute goes
    "sc_offload": (0.75, None),  # None: h = 1 (issued early enough); 0.75 x h: residual + SparseCore queueing
}
_SCENARIOS = ("central", "pessimistic", "optimistic")


@dataclass(frozen=True)
class LeverEffect:
    lever: str
    rules: tuple[str, ...]  # the findings read
    claimed_ps: float  # the findings' estimated saving, summed
    alone_ps: float  # saving of this lever applied alone (re-timed)
    combined_ps: float  # its marginal saving in the combination (applied in WHAT_IF_LEVERS order)
    bounded: bool  # a guide bound cut it
    note: str


@dataclass(frozen=True)
class CoreWhatIf:
    core: str
    step_ps: float
    new_step_ps: float


@dataclass(frozen=True)
class WhatIf:
    levers: tuple[str, ...]
    base_step_ps: float
    step_time_ps: float  # combined, re-timed
    low_ps: float  # fastest within the rules' stated assumptions
    high_ps: float  # slowest
    saving_ps: float  # base - step_time
    sum_of_claims_ps: float  # what subtracting the findings' savings would say
    contributions: Mapping[str, LeverEffect]
    hideable_fraction: Mapping[str, float]  # sc_offload: per collective type, share of exposed time the op order can hide
    per_core: tuple[CoreWhatIf, ...]
    bounds: tuple[str, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return to_jsonable(self)


def parse_levers(text: str) -> tuple[str, ...]:
    """`fp8,sc_offload,remat` -> the levers in application order; InputError on an unknown one."""
    asked = [x.strip().lower() for x in text.split(",") if x.strip()]
    bad = [x for x in asked if x not in WHAT_IF_LEVERS]
    if bad or not asked:
        raise InputError(f"--what-if: unknown lever {', '.join(bad) or '(none given)'}; choose from {', '.join(WHAT_IF_LEVERS)}")
    return tuple(lv for lv in WHAT_IF_LEVERS if lv in asked)


# ---------------------------------------------------------------------------
# Rates read from the findings
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rates:
    remat: float  # share of the recompute the remat finding claims
    fp8: float  # share of the BF16 matmul bucket the fp8 finding claims
    sc: Mapping[str, float]  # bucket -> share of its exposed time the offload findings claim
    rules: Mapping[str, tuple[str, ...]]
    claimed: Mapping[str, float]


def _rates(a: Analysis, f: Findings) -> _Rates:
    rules: dict[str, list[str]] = {lv: [] for lv in WHAT_IF_LEVERS}
    claimed = {lv: 0.0 for lv in WHAT_IF_LEVERS}
    by_key: dict[str, dict[str, float]] = {lv: {} for lv in WHAT_IF_LEVERS}
    for x in f.recommendations:
        if x.lever not in rules or x.estimated_saving_ps <= 0:
            continue
        rules[x.lever].append(x.code)
        claimed[x.lever] += float(x.estimated_saving_ps)
        for key, ps in x.claims:
            by_key[x.lever][key] = by_key[x.lever].get(key, 0.0) + float(ps)

    def share(key: str, total: float, lever: str) -> float:
        return min(1.0, by_key[lever].get(key, 0.0) / total) if total > 0 else 0.0

    mm = a.breakdown.get("matmul_bf16")
    sc = {}
    for key in by_key["sc_offload"]:
        b = key.removeprefix(CLAIM_BUCKET)
        share_b = a.breakdown.get(b)
        sc[b] = share(key, share_b.ps if share_b else 0.0, "sc_offload")
    return _Rates(
        remat=share(CLAIM_REMAT, a.remat.ps, "remat"),
        fp8=share(CLAIM_BUCKET + "matmul_bf16", mm.ps if mm else 0.0, "fp8"),
        sc=sc,
        rules={k: tuple(sorted(set(v))) for k, v in rules.items()},
        claimed=claimed,
    )


def modelled(finding) -> bool:
    """Whether the re-timing models what this finding claims: its lever is
    one of WHAT_IF_LEVERS and every claim is one `_rates` reads (remat: the
    recompute; fp8: the BF16 matmul bucket; sc_offload: collective buckets).
    A finding filed under a lever for a claim the model does not re-time
    (HO001's host-offload wait under fp8) is not: pulling its lever here
    would re-time nothing of it."""
    if finding.lever not in WHAT_IF_LEVERS or not finding.claims:
        return False
    ok = {"remat": lambda k: k == CLAIM_REMAT, "fp8": lambda k: k == CLAIM_BUCKET + "matmul_bf16",
          "sc_offload": lambda k: k.startswith(CLAIM_BUCKET) and k.removeprefix(CLAIM_BUCKET) in COLLECTIVE_BUCKETS}[finding.lever]
    return all(ok(k) for k, _ in finding.claims)


# ---------------------------------------------------------------------------
# Hiding behind independent compute, from the representative step's op order
# ---------------------------------------------------------------------------


def _compute_scale(a: Analysis, levers: Sequence[str], rates: _Rates, mult: Mapping[str, float | None]) -> dict[str, float]:
    """Per compute bucket: the factor its time is multiplied by under the levers before sc_offload."""
    scale = {b: 1.0 for b in COMPUTE_BUCKETS}
    if "remat" in levers:
        r = _remat_share(rates, mult)
        for b in COMPUTE_BUCKETS:
            o = a.bucket_ops.get(b)
            if o is not None and o.ps > 0:
                scale[b] *= 1.0 - r * o.remat_ps / o.ps
    if "fp8" in levers:
        scale["matmul_bf16"] = scale.get("matmul_bf16", 1.0) * (1.0 - _fp8_share(rates, mult))
    return scale


def _remat_share(rates: _Rates, mult: Mapping[str, float | None]) -> float:
    m = mult.get("remat", 1.0)
    if rates.remat <= 0:
        return 0.0
    return 1.0 if m is None else min(1.0, rates.remat * m)


def _fp8_share(rates: _Rates, mult: Mapping[str, float | None]) -> float:
    m = mult.get("fp8", 1.0)
    return min(1.0 - 1.0 / 2.0, rates.fp8 * (m if m is not None else 1.0))  # never beyond FP8's 2x peak


def hideable_fraction(t: TimelineSample | None, types_buckets: Mapping[str, str], scale: Mapping[str, float]) -> dict[str, float]:
    """Per collective type (by its bucket): share of its exposed window time on
    the representative step that the compute between the previous window of
    the same type and its own start (re-timed by `scale`) can hide. 1.0 for a
    type with no exposed window in the sample."""
    out: dict[str, float] = {}
    if t is None:
        return {ty: 1.0 for ty in types_buckets}
    tc = [ln for ln in t.lanes if ln.engine == "TensorCore"]
    spans = sorted((s for ln in tc[:1] for s in ln.spans if s.bucket in COMPUTE_BUCKETS), key=lambda s: s.start_ps)

    def compute_between(lo: int, hi: int) -> float:
        tot = 0.0
        for s in spans:
            if s.end_ps <= lo:
                continue
            if s.start_ps >= hi:
                break
            tot += (min(s.end_ps, hi) - max(s.start_ps, lo)) * scale.get(s.bucket, 1.0)
        return tot

    for ty in types_buckets:
        wins = sorted((w for w in t.windows if w.type == ty), key=lambda w: w.start_ps)
        exposed = hide = 0.0
        prev_end = 0
        for w in wins:
            e = (w.end_ps - w.start_ps) * (1.0 - w.hidden_fraction)
            if e > 0:
                # the transfer needs its whole window behind compute once moved off the TensorCore
                need = float(w.end_ps - w.start_ps)
                avail = compute_between(prev_end, w.start_ps)
                exposed += e
                hide += e * min(1.0, avail / need) if need > 0 else e
            prev_end = max(prev_end, w.end_ps)
        out[ty] = hide / exposed if exposed > 0 else 1.0
    return out


# ---------------------------------------------------------------------------
# Re-timing
# ---------------------------------------------------------------------------


def _savings(a: Analysis, rates: _Rates, levers: Sequence[str], mult: Mapping[str, float | None],
             bounds: list[str]) -> tuple[list[tuple[str, float, float]], dict[str, float], dict[str, float]]:
    """Per core (core, step, saving) under `levers`; per lever the mean saving; h per type."""
    scale = _compute_scale(a, levers, rates, mult)
    type_bucket = {t: c.bucket for t, c in a.collectives.items() if c.bucket in rates.sc}
    h = hideable_fraction(a.timeline, type_bucket, scale) if "sc_offload" in levers else {}
    h_bucket: dict[str, float] = {}
    for t, b in type_bucket.items():
        h_bucket[b] = min(h_bucket.get(b, 1.0), h.get(t, 1.0))
    per_lever = {lv: 0.0 for lv in levers}
    cores = []
    n = max(1, len(a.per_core))
    for c in a.per_core:
        step = c.step_ps
        compute = math.fsum(v for b, v in c.buckets.items() if b in COMPUTE_BUCKETS)
        saved = {lv: 0.0 for lv in levers}
        left = dict(c.buckets)
        if "remat" in levers:
            r = _remat_share(rates, mult)
            cut = 0.0
            for b in COMPUTE_BUCKETS:
                o = a.bucket_ops.get(b)
                if o is not None and o.ps > 0 and b in left:
                    d = left[b] * r * o.remat_ps / o.ps
                    left[b] -= d
                    cut += d
            cap = compute * GUIDE_REMAT_MAX_OVERHEAD / (1.0 + GUIDE_REMAT_MAX_OVERHEAD)
            if cut > cap:
                bounds.append(f"remat on {c.core}: {cut / 1e9:.3f} ms cut to the guide's 25-30% overhead bound {cap / 1e9:.3f} ms")
                cut = cap
            saved["remat"] = cut
        if "fp8" in levers:
            mm = left.get("matmul_bf16", 0.0)
            d = mm * _fp8_share(rates, mult)
            cap = step * (1.0 - 1.0 / FP8_MAX_SPEEDUP)
            if d > cap:
                bounds.append(f"fp8 on {c.core}: {d / 1e9:.3f} ms cut to the fastest published recipe's "
                              f"{FP8_MAX_SPEEDUP:.2f}x end-to-end bound {cap / 1e9:.3f} ms")
                d = cap
            saved["fp8"] = d
        if "sc_offload" in levers:
            m = mult.get("sc_offload", 1.0)
            d = 0.0
            for b, share in rates.sc.items():
                hb = 1.0 if m is None else min(1.0, h_bucket.get(b, 1.0) * m)
                d += c.buckets.get(b, 0.0) * share * hb
            saved["sc_offload"] = d
        total = math.fsum(saved.values())
        cores.append((c.core, step, total))
        for lv in levers:
            per_lever[lv] += saved[lv] / n
    return cores, per_lever, h


def _mult(kind: str) -> dict[str, float | None]:
    if kind == "central":
        return {lv: 1.0 for lv in WHAT_IF_LEVERS}
    i = 0 if kind == "pessimistic" else 1
    return {lv: RANGE[lv][i] for lv in WHAT_IF_LEVERS}


def what_if(a: Analysis, f: Findings, levers: Sequence[str]) -> WhatIf:
    """Re-time the step with `levers` (a subset of WHAT_IF_LEVERS) applied together."""
    levers = tuple(lv for lv in WHAT_IF_LEVERS if lv in levers)
    rates = _rates(a, f)
    base = float(a.steps.step_time_ps.get("mean", 0.0) or 0.0)
    notes = []
    for lv in levers:
        if not rates.rules[lv]:
            notes.append(f"{lv}: no finding of this lever in the analysis: nothing to pull (its rules stayed quiet)")
    if not a.per_core:
        notes.append("no per-core data: nothing re-timed")
    bounds: list[str] = []
    res = {}
    for kind in _SCENARIOS:
        cores, per_lever, h = _savings(a, rates, levers, _mult(kind), bounds if kind == "central" else [])
        n = max(1, len(cores))
        saving = math.fsum(s for _, _, s in cores) / n
        res[kind] = (saving, cores, per_lever, h)
    saving, cores, per_lever, h = res["central"]
    contributions = {}
    for lv in levers:
        alone = _savings(a, rates, (lv,), _mult("central"), [])[1][lv]
        contributions[lv] = LeverEffect(
            lever=lv,
            rules=rates.rules[lv],
            claimed_ps=rates.claimed[lv],
            alone_ps=alone,
            combined_ps=per_lever[lv],
            bounded=any(b.startswith(lv + " ") for b in bounds),
            note=_lever_note(lv, h),
        )
    if a.timeline is None and "sc_offload" in levers:
        notes.append("no timeline sample: offloaded collectives assumed hidden as claimed (no op order to check)")
    if a.timeline is not None:
        notes.append(f"op order and collective windows from the representative step ({a.timeline.core}, step {a.timeline.step}); "
                     "bucket rates applied to every TensorCore")
    return WhatIf(
        levers=levers,
        base_step_ps=base,
        step_time_ps=base - saving,
        low_ps=base - res["optimistic"][0],
        high_ps=base - res["pessimistic"][0],
        saving_ps=saving,
        sum_of_claims_ps=math.fsum(rates.claimed[lv] for lv in levers),
        contributions=contributions,
        hideable_fraction=dict(sorted(h.items())),
        per_core=tuple(CoreWhatIf(core, step, step - s) for core, step, s in cores),
        bounds=tuple(sorted(set(bounds)))[:8],
        notes=tuple(notes),
    )


def _lever_note(lv: str, h: Mapping[str, float]) -> str:
    if lv == "sc_offload" and h:
        return "hideable behind independent compute: " + ", ".join(f"{t} {v:.0%}" for t, v in sorted(h.items()))
    return ""


__all__ = ["WHAT_IF_LEVERS", "FP8_MAX_SPEEDUP", "GUIDE_REMAT_MAX_OVERHEAD", "RANGE", "LeverEffect", "CoreWhatIf", "WhatIf",
           "parse_levers", "hideable_fraction", "what_if", "modelled"]
