"""The TensorCore lines the analysis reader skips: hardware counter samples
(`_counters_`) and Pallas emit_pipeline phases (`XLA TraceMe`), of one capture
file, decoded from its bytes (a Source's CaptureFile: read once per run).
What they mean is profanalyzer.analyze.counters'.

Imports: xspace (reader, wire, the protobuf module), vocab.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from profanalyzer.core.vocab import COUNTERS_LINE, TRACEME_LINE, UTIL_STAT
from profanalyzer.read.xspace import capturefile, reader, wire, xplane_pb2

__all__ = ["read_counter_lines"]


def read_counter_lines(file: capturefile.CaptureFile | str | Path) -> dict[str, dict[str, tuple[np.ndarray, ...]]]:
    """plane name -> {"counters": (start_ps, end_ps, unit index, util), "units": names,
    "phases": (start_ps, end_ps, is_wait)} for each TensorCore plane of one
    capture file with a `_counters_` or emit_pipeline `XLA TraceMe` line.
    Times are relative to the plane's earliest line timestamp, as the
    analysis reader places them."""
    buf, index = reader.open_space(file, want=lambda r: r.kind == "tensorcore")
    out: dict[str, dict] = {}
    for ref in index.planes:
        if ref.kind != "tensorcore" or not ref.held:
            continue
        start, end = ref.offset, ref.offset + ref.length
        fld, wt, ps, pe, tag = wire.scan_fields(buf, start, end)
        spans = [(int(a), int(b)) for f, w, a, b in zip(fld.tolist(), wt.tolist(), ps.tolist(), pe.tolist(), strict=True) if f == 3 and w == 2]
        heads = [wire.peek_line(buf, a, b) for a, b in spans]
        want = [(a, b) for (a, b), h in zip(spans, heads, strict=True) if h is None or h[0] in (COUNTERS_LINE, TRACEME_LINE)]
        if not want:
            continue
        lines = [xplane_pb2.XLine.FromString(bytes(buf[a:b])) for a, b in want]  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
        lines = [ln for ln in lines if (ln.name or ln.display_name) in (COUNTERS_LINE, TRACEME_LINE) and len(ln.events)]
        if not lines:
            continue
        rest = [(int(t), int(b)) for f, w, t, b in zip(fld.tolist(), wt.tolist(), tag.tolist(), pe.tolist(), strict=True) if f in (4, 5)]
        meta = xplane_pb2.XPlane.FromString(b"".join(bytes(buf[t:b]) for t, b in rest))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
        ev_names = {k: v.name for k, v in meta.event_metadata.items()}
        st_names = {k: v.name for k, v in meta.stat_metadata.items()}
        # the origin: the earliest timestamp of any line with events (the analysis reader's)
        ts_all = [h[1] for h in heads if h is not None and h[2]]
        origin = min(ts_all + [ln.timestamp_ns for ln in lines]) if (ts_all or lines) else 0
        rec: dict = {}
        for ln in lines:
            base = (ln.timestamp_ns - origin) * 1000
            name = ln.name or ln.display_name
            if name == COUNTERS_LINE:
                units: dict[str, int] = {}
                rows = []
                for e in ln.events:
                    util = None
                    for s in e.stats:
                        if st_names.get(s.metadata_id) == UTIL_STAT:
                            util = s.double_value if s.WhichOneof("value") == "double_value" else float(
                                getattr(s, s.WhichOneof("value") or "double_value", 0) or 0)
                    if util is None:
                        continue
                    u = units.setdefault(ev_names.get(e.metadata_id, "?"), len(units))
                    rows.append((base + e.offset_ps, base + e.offset_ps + e.duration_ps, u, util / 100.0))
                if rows:
                    a = np.asarray(rows, dtype=np.float64)
                    rec["counters"] = (a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64), a[:, 3])
                    rec["units"] = tuple(units)
            else:
                phase_rows = [(base + e.offset_ps, base + e.offset_ps + e.duration_ps,
                               ev_names.get(e.metadata_id, "").startswith("ep_wait"))
                              for e in ln.events if ev_names.get(e.metadata_id, "").startswith("ep_")]
                if phase_rows:
                    a = np.asarray(phase_rows, dtype=np.int64)
                    rec["phases"] = (a[:, 0], a[:, 1], a[:, 2].astype(bool))
        if rec:
            out[ref.name] = rec
    return out
