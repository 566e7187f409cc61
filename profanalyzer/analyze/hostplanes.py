"""What the host was doing while the TensorCore waited for it (`--host-activity`).

Reads, from each host file's host planes (`/host:CPU`), only the thread lines
that dispatch work or feed input (HOST_LINES: the Python main thread, JAX's
execute threads, input-pipeline threads), selectively: every line's name is
peeked from the bytes before its events (`wire.peek_line`) and only matching
lines are decoded (the vectorised decoder without stats; the protobuf runtime
for a line the fast path refuses). Event names come from the plane's
event-metadata map, decoded field by field.

`host_activity` overlaps those TraceMe events with the host-caused idle gaps
of the kept steps (idle between programs and idle waiting on the host, from
profanalyzer.analyze.idle) on each host's first TensorCore, and returns the names
with the most overlapped time per kept step. A capture without host planes
gets a note saying so.

Imports: model, trace, attribution, idle, xspace (the analysis stage).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # no stubs installed

from profanalyzer.analyze.idle import host_gaps, union_intervals
from profanalyzer.model import HostActivity
from profanalyzer.trace import Trace
from profanalyzer.xspace import reader, wire, xplane_pb2

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["HOST_LINES", "TOP_NAMES", "host_activity", "read_host_events", "no_host_planes_note"]

#: Host thread lines read (by name): Python/JAX dispatch and input pipelines.
HOST_LINES = re.compile(r"^(?:main|python|MainThread|py_xla_execute|pjrt|.*(?:input|infeed|prefetch|tf_data|grain|dataloader|data_loader|pipeline)).*", re.I)
TOP_NAMES = 5
_PLANE_LINES, _PLANE_EVENT_METADATA = 3, 4


def no_host_planes_note(trace: Trace) -> str | None:
    """A note when no host file of the trace has host planes."""
    if any(h.plane_kinds.get("host", 0) for h in trace.hosts):
        return None
    return "the capture has no host planes (/host:CPU): the host activity during idle gaps cannot be named"


def _event_names(buf, start: int, end: int) -> dict[int, str]:
    names: dict[int, str] = {}
    for f, wt, _v, a, b, _ in wire.iter_fields(buf, start, end):
        if f != _PLANE_EVENT_METADATA or wt != 2:
            continue
        key, name = wire.metadata_entry(buf, a, b)
        if key is not None:
            names[key] = name or ""
    return names


def _host_lines_trim(ref: reader.PlaneRef) -> reader.FieldTrim:
    """While a .gz streams: a host plane's lines whose name (peeked before
    their events) is not a HOST_LINES one are dropped, never held."""

    def trim(f: int, raw, start: int):
        if f == _PLANE_LINES and raw[0] & 7 == 2:
            head = wire.peek_line(raw, start, len(raw))
            if head is not None and not HOST_LINES.match(head[0]):
                return None
        return raw

    return trim


def read_host_events(file: str | Path, origin_ns: int = 0) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, int]:
    """(event names, name index, start ps, end ps, lines read) of the
    matching host lines of one file; times in picoseconds from `origin_ns`."""
    path = Path(file)
    buf, index = reader.open_space(path, want=lambda r: r.kind == "host", trim=_host_lines_trim)
    names: list[str] = []
    name_ix: dict[str, int] = {}
    idx, st, en = [], [], []
    read = 0
    for ref in index.planes:
        if ref.kind != "host":
            continue
        a0, b0 = ref.offset, ref.offset + ref.length
        meta = _event_names(buf, a0, b0)
        for f, wt, _v, a, b, _ in wire.iter_fields(buf, a0, b0):
            if f != _PLANE_LINES or wt != 2:
                continue
            head = wire.peek_line(buf, a, b)
            if head is not None and not HOST_LINES.match(head[0]):
                continue
            got = wire.decode_line(buf, a, b, want=())
            if got is not None:
                hdr, ev = got
                if not HOST_LINES.match(hdr.name or hdr.display_name):
                    continue
                base, mids, off, dur = (hdr.timestamp_ns - origin_ns) * 1000, ev.metadata_id, ev.offset_ps, ev.duration_ps
            else:
                line = xplane_pb2.XLine.FromString(bytes(buf[a:b]))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
                if not HOST_LINES.match(line.name or line.display_name):
                    continue
                base = (line.timestamp_ns - origin_ns) * 1000
                mids = np.asarray([e.metadata_id for e in line.events], dtype=np.int64)
                off = np.asarray([e.offset_ps for e in line.events], dtype=np.int64)
                dur = np.asarray([e.duration_ps for e in line.events], dtype=np.int64)
            read += 1
            for m in np.unique(mids).tolist():
                n = meta.get(m, f"#{m}")
                if n not in name_ix:
                    name_ix[n] = len(names)
                    names.append(n)
            lut = {m: name_ix[meta.get(m, f"#{m}")] for m in np.unique(mids).tolist()}
            idx.append(np.asarray([lut[m] for m in mids.tolist()], dtype=np.int64))
            st.append(base + off)
            en.append(base + off + dur)
    if not idx:
        z = np.zeros(0, dtype=np.int64)
        return names, z, z, z, read
    return names, np.concatenate(idx), np.concatenate(st), np.concatenate(en), read


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
        if w is None or not h.file:  # a host built in memory (a replayed program) has no host planes
            continue
        steps = trace.steps[w.plane.label]
        kept = np.isin(steps.number, kept_list)
        if not kept.any():
            continue
        gs, ge = host_gaps(w, steps.start_ps[kept], steps.end_ps[kept])
        try:
            names, ix, s, e, n_lines = read_host_events(h.file, trace.origin_ns)
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
