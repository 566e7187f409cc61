"""Exclusive per-step, per-core attribution of TensorCore time to buckets.

The timeline of a TensorCore's `XLA Ops` line is cut into exclusive segments,
each owned by the deepest op running then (nested ops count once: a parent
owns only its self time). Every instant of a step window goes to exactly one
bucket: the owning op's bucket, or `idle` when no op runs. Collective ops
(synchronous ones, and the start/done halves of async ones, including
SparseCore call-start/call-done wrappers) own their time as that collective's
bucket: the TensorCore was not computing, so this is exposed communication.

`CoreAttribution.self_check()` enforces conservation: on every step the
buckets sum to the step window exactly (integer picoseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profanalyzer.classify import BUCKETS
from profanalyzer.errors import InvariantError

BUCKET_INDEX = {b: i for i, b in enumerate(BUCKETS)}
IDLE = BUCKET_INDEX["idle"]

#: Relative tolerance of the conservation check (the brief asks for 0.1%;
#: integer arithmetic makes the sums exact, so any mismatch is a bug).
RECONCILE_TOLERANCE = 1e-3


def exclusive_segments(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-overlapping segments of a line's events, each owned by the deepest event.

    `start`/`end` are sorted by (start, -end). Returns (seg_start, seg_end,
    owner) where owner indexes the events. Partial overlaps (invalid on one
    line) are resolved by letting the earlier event end where the later starts.
    """
    n = len(start)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, np.zeros(0, dtype=np.int64)
    if bool(np.all(start[1:] >= end[:-1])):
        keep = end > start
        idx = np.flatnonzero(keep)
        return start[keep], end[keep], idx
    s_l = start.tolist()
    e_l = end.tolist()
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_o: list[int] = []
    stack: list[int] = []  # open events; cursor = where the innermost's next self segment starts
    cursor = s_l[0]

    def close_until(t: int) -> None:
        # Close events on the stack that end at or before t, emitting their tails.
        nonlocal cursor
        while stack and e_l[stack[-1]] <= t:
            top = stack.pop()
            e = e_l[top]
            if e > cursor:
                seg_s.append(cursor)
                seg_e.append(e)
                seg_o.append(top)
            cursor = max(cursor, e)

    for i in range(n):
        s, e = s_l[i], e_l[i]
        close_until(s)
        if stack:
            parent = stack[-1]
            if s > cursor:
                seg_s.append(cursor)
                seg_e.append(s)
                seg_o.append(parent)
            if e > e_l[parent]:  # partial overlap: clip the child to its parent
                e_l[i] = e = e_l[parent]
        cursor = max(cursor, s)
        stack.append(i)
    close_until(max(e_l) + 1)
    ss = np.asarray(seg_s, dtype=np.int64)
    se = np.asarray(seg_e, dtype=np.int64)
    so = np.asarray(seg_o, dtype=np.int64)
    keep = se > ss
    return ss[keep], se[keep], so[keep]


@dataclass(frozen=True, eq=False)
class CoreAttribution:
    """Per-step bucket totals of one TensorCore (integer ps)."""

    label: str
    step_numbers: np.ndarray  # int64 (n_steps,)
    step_ps: np.ndarray  # int64 (n_steps,)
    buckets: np.ndarray  # int64 (n_steps, len(BUCKETS))
    remat_ps: np.ndarray  # int64 (n_steps,)
    phase_ps: np.ndarray  # int64 (n_steps, 3): forward, backward, optimizer

    def self_check(self) -> None:
        sums = self.buckets.sum(axis=1)
        if np.any(self.buckets < 0):
            raise InvariantError(f"{self.label}: negative bucket time")
        bad = np.abs(sums - self.step_ps) > np.maximum(RECONCILE_TOLERANCE * self.step_ps, 0)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise InvariantError(
                f"{self.label}: step {int(self.step_numbers[i])}: buckets sum to {int(sums[i])} ps, "
                f"step window is {int(self.step_ps[i])} ps"
            )
        if np.any(self.remat_ps > self.step_ps):
            raise InvariantError(f"{self.label}: remat time exceeds step time")


PHASES = ("forward", "backward", "optimizer")


def attribute_core(
    label: str,
    start: np.ndarray,
    end: np.ndarray,
    op_bucket: np.ndarray,
    op_remat: np.ndarray,
    op_phase: np.ndarray,
    step_numbers: np.ndarray,
    step_start: np.ndarray,
    step_end: np.ndarray,
) -> tuple[CoreAttribution, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Attribute one TensorCore's ops (sorted events of its XLA Ops line).

    op_bucket/op_remat/op_phase are per event (bucket index, bool, phase index
    0..2 or -1). Returns the attribution and the exclusive segments used.
    """
    seg_s, seg_e, owner = exclusive_segments(start, end)
    seg_bucket = op_bucket[owner] if len(owner) else np.zeros(0, dtype=np.int64)
    seg_remat = op_remat[owner] if len(owner) else np.zeros(0, dtype=bool)
    seg_phase = op_phase[owner] if len(owner) else np.zeros(0, dtype=np.int64)
    n_steps = len(step_numbers)
    nb = len(BUCKETS)
    buckets = np.zeros((n_steps, nb), dtype=np.int64)
    remat = np.zeros(n_steps, dtype=np.int64)
    phase = np.zeros((n_steps, len(PHASES)), dtype=np.int64)
    step_ps = (step_end - step_start).astype(np.int64)
    for k in range(n_steps):
        a, b = int(step_start[k]), int(step_end[k])
        lo = int(np.searchsorted(seg_e, a, side="right"))
        hi = int(np.searchsorted(seg_s, b, side="left"))
        if hi > lo:
            cs = np.clip(seg_s[lo:hi], a, b)
            ce = np.clip(seg_e[lo:hi], a, b)
            d = ce - cs
            bk = seg_bucket[lo:hi]
            # Weighted bincount sums in float64, exact for integers below 2**53
            # ps (about 2.5 hours): step windows are far shorter.
            buckets[k] += np.rint(np.bincount(bk, weights=d, minlength=nb)).astype(np.int64)
            remat[k] = int(d[seg_remat[lo:hi]].sum())
            ph = seg_phase[lo:hi]
            ok = ph >= 0
            phase[k] += np.rint(np.bincount(ph[ok], weights=d[ok], minlength=len(PHASES))).astype(np.int64)
        covered = int(buckets[k].sum())
        buckets[k, IDLE] += max(int(step_ps[k]) - covered, 0)
    att = CoreAttribution(label, step_numbers.astype(np.int64), step_ps, buckets, remat, phase)
    att.self_check()
    return att, (seg_s, seg_e, owner)
