"""What the host was doing while the TensorCore waited for it (`--host-activity`).

The host planes' dispatch and input lines (HOST_LINES: the Python main
thread, JAX's execute threads, input-pipeline threads) are asked of the
trace's input (`Trace.reads.host_events`: profanalyzer.read.xspace.hostlines reads
only those lines, from the bytes the run read once).

`host_activity` overlaps those TraceMe events with the host-caused idle gaps
of the kept steps (idle between programs and idle waiting on the host, from
profanalyzer.analyze.idle) on each host's first TensorCore, and returns the names
with the most overlapped time per kept step. A capture without host planes
gets a note saying so.

Imports: model, trace, idle, vocab (the analysis stage; no reader).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # no stubs installed

from profanalyzer.analyze.idle import host_gaps, union_intervals
from profanalyzer.core.vocab import HOST_LINES
from profanalyzer.model.parts import HostActivity
from profanalyzer.model.trace import Trace

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["HOST_LINES", "TOP_NAMES", "host_activity", "no_host_planes_note"]

#: Host TraceMe names reported.
TOP_NAMES = 5


def no_host_planes_note(trace: Trace) -> str | None:
    """A note when no host file of the trace has host planes."""
    if any(h.plane_kinds.get("host", 0) for h in trace.hosts):
        return None
    return "the capture has no host planes (/host:CPU): the host activity during idle gaps cannot be named"


def _overlap(gs: np.ndarray, ge: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per event: time inside the union of the sorted disjoint gaps [gs, ge)."""
    if not len(gs) or not len(s):
        return np.zeros(len(s), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ge - gs)])

    def before(t):
        i = np.searchsorted(gs, t, side="right") - 1
        ic = np.clip(i, 0, len(gs) - 1)
        return np.where(i >= 0, cum[ic] + np.clip(np.minimum(t, ge[ic]) - gs[ic], 0, None), 0)

    return np.maximum(before(e) - before(s), 0)


def host_activity(att: Attributed) -> tuple[tuple[HostActivity, ...], tuple[str, ...]]:
    """The host TraceMe names with the most time overlapping host-caused idle
    (per kept step, on each host's first TensorCore, averaged over hosts)."""
    trace, work, kept_steps = att.trace, att.work, att.kept_steps
    note = no_host_planes_note(trace)
    if note:
        return (), (note,)
    kept_list = np.asarray(sorted(kept_steps), dtype=np.int64)
    totals: dict[str, float] = {}
    idle_total = 0.0
    hosts_used = lines = 0
    for h in trace.hosts:
        if not h.plane_kinds.get("host", 0):
            continue
        w = next((x for x in work if x.plane.host == h.name), None)
        if w is None or not h.file or trace.reads is None:  # a host built in memory (a replayed program) has no host planes
            continue
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        if not kept.any():
            continue
        gs, ge = host_gaps(w, steps.start_ps[kept], steps.end_ps[kept])
        try:
            names, ix, s, e, n_lines = trace.reads.host_events(h.file, trace.origin_ns)
        except (ValueError, DecodeError) as exc:
            return (), (f"{h.name}: host planes not read: corrupt ({exc})",)
        lines += n_lines
        hosts_used += 1
        nk = int(kept.sum())
        for i in np.unique(ix).tolist():  # per name: the union of its events (threads, nesting) against the gaps
            sel = ix == i
            order = np.argsort(s[sel], kind="mergesort")
            us, ue, _ = union_intervals(s[sel][order], e[sel][order])
            ov = float(_overlap(gs, ge, us, ue).sum())
            if ov > 0:
                totals[names[i]] = totals.get(names[i], 0.0) + ov / nk
        idle_total += float((ge - gs).sum()) / int(kept.sum())
    if not hosts_used:
        return (), ("no host file has both host planes and a TensorCore with kept steps",)
    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_NAMES]
    denom = idle_total or 1.0
    out = tuple(HostActivity(n, ps / hosts_used, ps / denom) for n, ps in top)
    notes = () if out else (f"no host TraceMe event on the {lines} host line(s) read overlaps a host-caused idle gap",)
    return out, notes
