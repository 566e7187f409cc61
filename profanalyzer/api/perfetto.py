"""`analyze --trace-out FILE.json[.gz]`: the analysed window as a Chrome /
Perfetto trace (Trace Event Format JSON; ui.perfetto.dev and
chrome://tracing open it), annotated with what the analysis found.

The window: the representative step of the analysis (its timeline's step),
or the steps asked for (`--steps`). Per host a process; per TensorCore of it
these tracks (threads):

    <core> ops           every XLA op's self time, named by the op, its
                         bucket, tags and HLO category in args
    <core> buckets       the same time merged into runs of one bucket
    <core> collectives   each collective window, named by its class
                         ("exposed all-gather ..."; cname shades hidden,
                         partial and exposed), hidden/exposed ps in args
    <sparsecore> ops     the busy spans of each of the core's SparseCores

and a `findings` process with one instant per recommendation, at the first
moment of the window where the time it claims is spent (its first claimed
bucket's first segment on the first TensorCore, or the first recomputed op
for a remat claim; the step start when none shows), with its code, title,
saving and guide section in args.

Times are microseconds from the capture's origin (the trace's timestamps);
events are sorted by time, durations are non-negative. Built from the run's
attributed trace (`run.Run.attributed`: the per-core work and the collective
windows the analysis computed, not a second attribution pass).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from profanalyzer.analyze.attribution import CoreWork, exclusive_segments
from profanalyzer.analyze.overlap import window_class, window_name, windows_for_core
from profanalyzer.core.errors import InputError
from profanalyzer.core.outputs import atomic_open
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Findings
from profanalyzer.model.trace import LINE_SC_OPS, Trace

if TYPE_CHECKING:
    from profanalyzer.analyze.attributed import Attributed

__all__ = ["trace_events", "write_trace", "parse_steps", "marker_notes", "CLASS_COLOURS"]

#: Chrome trace reserved colour names for the window classes (Perfetto keeps
#: the class in the name and args).
CLASS_COLOURS = {"hidden": "good", "partial": "yellow", "exposed": "terrible"}
_PS_PER_US = 1e6
_FINDINGS_PID = 0


def _us(ps: int | float) -> float:
    return round(float(ps) / _PS_PER_US, 6)


def _label(plane, row: int) -> str:
    return (plane.meta.display_name[row] or plane.meta.name[row][:80]) if row >= 0 else "?"


def _step_bounds(trace: Trace, w: CoreWork, step: int) -> tuple[int, int] | None:
    s = trace.steps.get(w.plane.label)
    if s is None:
        return None
    idx = np.flatnonzero(s.number == step)
    if not len(idx):
        return None
    return int(s.start_ps[idx[0]]), int(s.end_ps[idx[0]])


def _core_events(trace: Trace, w: CoreWork, a: int, b: int, pid: int, tid0: int, step: int,
                 first_seen: dict[str, int], windows=None) -> list[dict]:
    """The ops, buckets and collectives tracks of one TensorCore over [a, b);
    `windows`: the core's collective windows (overlap.windows_for_core), else built here."""
    plane = w.plane
    ops_line = plane.line("XLA Ops")
    out: list[dict] = []
    lo, hi = w.ops.window(a, b)
    seg_s, seg_e, owner = exclusive_segments(w.ops.start[lo:hi], w.ops.end[lo:hi])
    owner = owner + lo
    seg_s, seg_e = np.clip(seg_s, a, b), np.clip(seg_e, a, b)
    keep = seg_e > seg_s
    seg_s, seg_e, owner = seg_s[keep], seg_e[keep], owner[keep]
    rows = ops_line.events.meta[owner] if ops_line is not None else np.full(len(owner), -1)
    buckets = w.ev_bucket[owner]
    cat = plane.meta.category
    for s, e, r, bk in zip(seg_s.tolist(), seg_e.tolist(), rows.tolist(), buckets.tolist(), strict=True):
        bucket = BUCKETS[bk]
        remat = bool(w.classes.remat[r]) if r >= 0 and len(w.classes) else False
        args: dict[str, Any] = {"bucket": bucket, "step": step, "self_ps": e - s}
        if r >= 0:
            args["hlo_category"] = cat[r]
        if remat:
            args["remat"] = True
            first_seen.setdefault("remat", s)
        first_seen.setdefault(f"bucket:{bucket}", s)
        out.append({"ph": "X", "pid": pid, "tid": tid0, "ts": _us(s), "dur": _us(e - s), "name": _label(plane, r),
                    "cat": bucket, "args": args})
    # buckets: runs of one bucket
    if len(seg_s):
        brk = np.ones(len(seg_s), dtype=bool)
        brk[1:] = (buckets[1:] != buckets[:-1]) | (seg_s[1:] != seg_e[:-1])
        starts = np.flatnonzero(brk)
        ends = np.append(starts[1:], len(seg_s)) - 1
        for i0, i1 in zip(starts.tolist(), ends.tolist(), strict=True):
            s, e = int(seg_s[i0]), int(seg_e[i1])
            out.append({"ph": "X", "pid": pid, "tid": tid0 + 1, "ts": _us(s), "dur": _us(e - s), "name": BUCKETS[int(buckets[i0])],
                        "cat": "bucket", "args": {"step": step, "ps": e - s}})
    # collective windows, shaded by how much compute hid them
    wins = windows if windows is not None else windows_for_core(plane, w.classes, {})[0]
    sel = np.flatnonzero((wins.end > a) & (wins.start < b))
    if len(sel):
        sub = wins.take(sel)
        ws, we = np.maximum(sub.start, a), np.minimum(sub.end, b)
        hidden = w.compute(we) - w.compute(ws)
        for s, e, typ, eng, row, h in zip(ws.tolist(), we.tolist(), sub.type_names(), sub.engines(), sub.row.tolist(), hidden.tolist(), strict=True):
            span = max(e - s, 0)
            klass = window_class(h, span)
            out.append({"ph": "X", "pid": pid, "tid": tid0 + 2, "ts": _us(s), "dur": _us(span),
                        "name": f"{klass} {typ.replace('_', '-')} {window_name(plane.meta, row)}", "cat": "collective",
                        "cname": CLASS_COLOURS[klass],
                        "args": {"type": typ, "engine": eng, "class": klass, "hidden_ps": int(h), "exposed_ps": int(span - h),
                                 "hidden_fraction": round(h / span, 6) if span else 0.0, "step": step}})
    # SparseCores of this TensorCore
    for k, sc in enumerate(trace.sparsecores_of(plane)):
        ln = sc.line(LINE_SC_OPS)
        if ln is None or not len(ln.events):
            continue
        ev = ln.events
        top = np.flatnonzero((ev.depth == 0) & (ev.end_ps > a) & (ev.start_ps < b))
        for i in top.tolist():
            s, e = max(int(ev.start_ps[i]), a), min(int(ev.end_ps[i]), b)
            out.append({"ph": "X", "pid": pid, "tid": tid0 + 3 + k, "ts": _us(s), "dur": _us(max(e - s, 0)),
                        "name": _label(sc, int(ev.meta[i])), "cat": "sparsecore", "args": {"step": step}})
    return out


def _tracks(trace: Trace, w: CoreWork, pid: int, tid0: int) -> list[dict]:
    core = w.plane.name
    names = [f"{core} ops", f"{core} buckets", f"{core} collectives"]
    names += [f"{sc.name} ops" for sc in trace.sparsecores_of(w.plane)]
    out = []
    for i, n in enumerate(names):
        out.append({"ph": "M", "pid": pid, "tid": tid0 + i, "name": "thread_name", "args": {"name": n}})
        out.append({"ph": "M", "pid": pid, "tid": tid0 + i, "name": "thread_sort_index", "args": {"sort_index": tid0 + i}})
    return out


def trace_events(att: Attributed, analysis: Analysis, findings: Findings | None = None,
                 steps: Collection[int] | None = None) -> dict:
    """The Trace Event Format document (a dict) of the analysed window, from
    the run's attributed trace (`run.Run.attributed`: not attributed again)."""
    trace = att.trace
    if steps:
        wanted = sorted(set(int(s) for s in steps))
    elif analysis.timeline is not None:
        wanted = [analysis.timeline.step]
    else:
        wanted = [r.number for r in analysis.steps.table if r.kept][:1]
    if not wanted:
        raise InputError("--trace-out: no kept step to export (pass --steps)")
    work = att.work
    hosts = sorted({w.plane.host for w in work})
    pid_of = {h: i + 1 for i, h in enumerate(hosts)}
    meta: list[dict] = [{"ph": "M", "pid": _FINDINGS_PID, "tid": 0, "name": "process_name", "args": {"name": "findings"}},
                        {"ph": "M", "pid": _FINDINGS_PID, "tid": 0, "name": "thread_name", "args": {"name": "recommendations"}}]
    for h, pid in pid_of.items():
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": f"host {h}"}})
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
    events: list[dict] = []
    first_seen: dict[str, int] = {}
    found_steps: list[int] = []
    step_start: int | None = None
    tid_next: dict[int, int] = {}
    for w in work:
        pid = pid_of[w.plane.host]
        tid0 = tid_next.get(pid, 1)
        tid_next[pid] = tid0 + 3 + len(trace.sparsecores_of(w.plane))
        meta.extend(_tracks(trace, w, pid, tid0))
        wins = None  # the core's collective windows, built on its first exported step (the run's memo shared)
        for step in wanted:
            bounds = _step_bounds(trace, w, step)
            if bounds is None:
                continue
            a, b = bounds
            if step not in found_steps:
                found_steps.append(step)
            seen = first_seen if w is work[0] else {}
            if w is work[0] and step_start is None:
                step_start = a
            if wins is None:
                wins = windows_for_core(w.plane, w.classes, {}, att.memo)[0]
            events.extend(_core_events(trace, w, a, b, pid, tid0, step, seen, wins))
            events.append({"ph": "i", "s": "p", "pid": pid, "tid": tid0, "ts": _us(a), "name": f"step {step}", "cat": "step",
                           "args": {"step": step, "step_ps": b - a}})
    missing = [s for s in wanted if s not in found_steps]
    if missing:
        have = sorted({int(n) for w in work for n in trace.steps[w.plane.label].number.tolist()})
        raise InputError(f"--steps: no step {', '.join(map(str, missing))} in this trace (steps {_span(have)})")
    for rank, f in enumerate(findings.recommendations if findings is not None else (), 1):
        at = min((first_seen[k] for k, _ in f.claims if k in first_seen), default=step_start or 0)
        events.append({"ph": "i", "s": "g", "pid": _FINDINGS_PID, "tid": 0, "ts": _us(at), "name": f"{f.code} {f.title}",
                       "cat": "finding",
                       "args": {"rank": rank, "code": f.code, "lever": f.lever, "severity": f.severity,
                                "estimated_saving_ps": f.estimated_saving_ps,
                                "estimated_saving_fraction": round(f.estimated_saving_fraction, 6),
                                "guide_section": f.guide_section, "claims": [k for k, _ in f.claims]}})
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], -e.get("dur", 0.0)))
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ns",
        "otherData": {"source": analysis.source, "tool": f"profanalyze {analysis.tool_version}", "steps": found_steps,
                      "chip": analysis.hardware.name, "time_unit": "microseconds from the capture origin"},
    }


def _span(numbers: Iterable[int]) -> str:
    n = list(numbers)
    return f"{n[0]}..{n[-1]}" if n else "none"


def parse_steps(text: str) -> tuple[int, ...]:
    """`--steps` text: step numbers and ranges, e.g. `3` or `3,5-7`."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise InputError(f"--steps: {part!r} is not a step number or a range like 3-5") from None
        if b < a or b - a > 10000:
            raise InputError(f"--steps: {part!r} is not a range of at most 10000 steps")
        out.extend(range(a, b + 1))
    return tuple(out)


def marker_notes(doc: dict, dest: str) -> dict[str, str]:
    """Per rule code, where its marker is in the written trace (the report's
    cards show it): 'Trace export FILE: marker "CODE" at T µs (step N)'."""
    steps = doc.get("otherData", {}).get("steps", [])
    where = f" (step {steps[0]})" if len(steps) == 1 else ""
    out = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "finding":
            code = e["args"]["code"]
            out[code] = f"Trace export {dest}: marker \u201c{code}\u201d at {e['ts']:,.3f} \u00b5s{where}"
    return out


def write_trace(doc: dict, dest: str) -> None:
    """Write the document as JSON, gzipped when `dest` ends in .gz, through
    the output layer (atomic: a temporary file next to `dest`, then a rename)."""
    data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    with atomic_open(dest) as raw:
        if dest.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0, filename="") as f:
                f.write(data)  # mtime 0: the same analysis writes the same bytes
        else:
            raw.write(data)
