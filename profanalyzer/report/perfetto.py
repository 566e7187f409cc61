"""The exported window as a Chrome / Perfetto trace (Trace Event Format JSON;
ui.perfetto.dev and chrome://tracing open it), annotated with what the
analysis found: `analyze --trace-out FILE.json[.gz]` (the renderer
`WINDOW_RENDERERS["perfetto"]` of report/registry.py).

The window (profanalyzer.model.window, built by profanalyzer.analyze.window):
per host a process, per TensorCore its ops, buckets and collectives tracks
and its SparseCores' ops. A collective window's colour is the reserved
Chrome colour of its class (CLASS_COLOURS). A `findings` process holds one
instant per recommendation, at the first moment of the window where the time
it claims is spent (its first claimed pool's first moment on the first
TensorCore; the step start when none shows), with its code, title, saving
and guide section in args.

Times are microseconds from the capture's origin; events are sorted by time,
durations are non-negative.
"""

from __future__ import annotations

import json
from typing import Any

from profanalyzer.model.findings import Finding, Findings
from profanalyzer.model.window import TraceWindow, WindowEvent

__all__ = ["CLASS_COLOURS", "marker_notes", "trace_document", "trace_json"]

#: Chrome trace reserved colour names for the window classes (Perfetto keeps
#: the class in the name and args).
CLASS_COLOURS = {"hidden": "good", "partial": "yellow", "exposed": "terrible"}
_PS_PER_US = 1e6
_FINDINGS_PID = 0


def _us(ps: int | float) -> float:
    return round(float(ps) / _PS_PER_US, 6)


def _event(e: WindowEvent) -> dict[str, Any]:
    if e.dur_ps is None:
        return {"ph": "i", "s": "p", "pid": e.pid, "tid": e.tid, "ts": _us(e.start_ps), "name": e.name, "cat": e.cat,
                "args": dict(e.args)}
    out: dict[str, Any] = {"ph": "X", "pid": e.pid, "tid": e.tid, "ts": _us(e.start_ps), "dur": _us(e.dur_ps),
                           "name": e.name, "cat": e.cat}
    if e.shade is not None:
        out["cname"] = CLASS_COLOURS[e.shade]
    out["args"] = dict(e.args)
    return out


def _marker_ps(w: TraceWindow, f: Finding) -> int:
    """Where a finding's marker goes: the first moment of its first claimed pool, else the step start."""
    return min((w.first_ps[c.pool] for c in f.claims if c.pool in w.first_ps), default=w.start_ps or 0)


def trace_document(w: TraceWindow, findings: Findings | None = None) -> dict:
    """The Trace Event Format document (a dict) of the window, with the findings' markers."""
    meta: list[dict] = [{"ph": "M", "pid": _FINDINGS_PID, "tid": 0, "name": "process_name", "args": {"name": "findings"}},
                        {"ph": "M", "pid": _FINDINGS_PID, "tid": 0, "name": "thread_name", "args": {"name": "recommendations"}}]
    for pid, h in enumerate(w.hosts, 1):
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": f"host {h}"}})
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
    for t in w.tracks:
        meta.append({"ph": "M", "pid": t.pid, "tid": t.tid, "name": "thread_name", "args": {"name": t.name}})
        meta.append({"ph": "M", "pid": t.pid, "tid": t.tid, "name": "thread_sort_index", "args": {"sort_index": t.tid}})
    events = [_event(e) for e in w.events]
    for rank, f in enumerate(findings.recommendations if findings is not None else (), 1):
        events.append({"ph": "i", "s": "g", "pid": _FINDINGS_PID, "tid": 0, "ts": _us(_marker_ps(w, f)),
                       "name": f"{f.code} {f.title}", "cat": "finding",
                       "args": {"rank": rank, "code": f.code, "lever": f.lever, "severity": f.severity,
                                "estimated_saving_ps": f.estimated_saving_ps,
                                "estimated_saving_fraction": round(f.estimated_saving_fraction, 6),
                                "guide_section": f.guide_section, "claims": [c.pool for c in f.claims]}})
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], -e.get("dur", 0.0)))
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ns",
        "otherData": {"source": w.source, "tool": f"profanalyze {w.tool_version}", "steps": list(w.steps),
                      "chip": w.chip, "time_unit": "microseconds from the capture origin"},
    }


def trace_json(w: TraceWindow, findings: Findings | None = None) -> str:
    """The document as compact JSON (what `--trace-out` writes, gzipped when its name ends in .gz)."""
    return json.dumps(trace_document(w, findings), separators=(",", ":"), ensure_ascii=False)


def marker_notes(w: TraceWindow, findings: Findings | None, dest: str) -> dict[str, str]:
    """Per rule code, where its marker is in the written trace (the report's
    cards show it): 'Trace export FILE: marker "CODE" at T µs (step N)'."""
    where = f" (step {w.steps[0]})" if len(w.steps) == 1 else ""
    recs = sorted(findings.recommendations if findings is not None else (), key=lambda f: _us(_marker_ps(w, f)))
    return {f.code: f"Trace export {dest}: marker \u201c{f.code}\u201d at {_us(_marker_ps(w, f)):,.3f} \u00b5s{where}"
            for f in recs}  # in the trace's order: a code marked twice notes its later marker
