"""An independent per-op reading of the real captures in ../shared/real-traces/
for tests: decoded with the protobuf library (not profanalyzer's wire decoder),
self times by a plain containment stack, buckets by a small table written for
these tests. It shares no code with profanalyzer's reader or classifier."""

from __future__ import annotations

import functools
import gzip
from collections import defaultdict
from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real-traces"
VLLM = "vllm_w4_tp2_2026_01_12_00_26_20.xplane.pb.gz"
V6E = "v6e_host_offload.xplane.pb.gz"


def real_path(name: str) -> Path:
    p = REAL / name
    if not p.exists():
        pytest.skip(f"real capture {name} not available (../shared/real-traces/ absent)")
    return p


def _stats(plane, stats) -> dict:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = {}
    for s in stats:
        kind = s.WhichOneof("value")
        v = getattr(s, kind) if kind else None
        if kind == "ref_value":
            v = names.get(v, "")
        out[names.get(s.metadata_id, "")] = v
    return out


def _bucket(category: str, text: str, tf_op: str) -> str:
    c, t, f = category.lower(), text.lower(), tf_op.lower()
    head = t.split("=", 1)[0]
    if c in ("copy-start", "copy-done") or " copy(" in t:
        return "host_offload" if "s(5)}" in t else "other_compute"
    if c.startswith("all-reduce"):
        return "all_reduce"
    if c.startswith("all-to-all"):
        return "all_to_all"
    if c.startswith("all-gather"):
        return "all_gather"
    if "reduce-scatter" in c:
        return "reduce_scatter"
    if "quantized_matmul" in head or c == "convolution fusion":
        return "matmul"
    if "paged_attention" in f or "rpa-" in head:
        return "attention"
    return "other_compute"


@functools.cache
def per_op_reading(name: str, plane_name: str = "/device:TPU:0") -> dict:
    """{'step_ps', 'steps', 'buckets': {bucket: ps per step}, 'idle_ps'} over the
    runs of the program that takes the most time on the plane's XLA Modules line."""
    from profanalyzer.read.xspace import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(gzip.decompress(real_path(name).read_bytes()))
    plane = next(p for p in space.planes if p.name == plane_name)
    lines = {ln.name: ln for ln in plane.lines}

    def events(line):
        base = line.timestamp_ns * 1000
        for e in line.events:
            st = _stats(plane, e.stats)
            off = st.get("device_offset_ps", e.offset_ps)
            dur = st.get("device_duration_ps", e.duration_ps)
            yield e, base + off, base + off + dur

    progs = defaultdict(list)
    for e, s, t in events(lines["XLA Modules"]):
        progs[plane.event_metadata[e.metadata_id].name].append((s, t))
    runs = max(progs.values(), key=lambda r: sum(t - s for s, t in r))
    ops = []
    for e, s, t in events(lines["XLA Ops"]):
        md = plane.event_metadata[e.metadata_id]
        mst = _stats(plane, md.stats)
        ops.append((s, t, _bucket(str(mst.get("hlo_category", "")), md.name, str(mst.get("tf_op", "")))))
    ops.sort(key=lambda o: (o[0], -o[1]))
    buckets: dict[str, float] = defaultdict(float)
    busy = 0.0

    def pop(stack: list[list]) -> None:
        s0, t0, b0, ch = stack.pop()
        buckets[b0] += (t0 - s0) - ch
        if stack:
            stack[-1][3] += t0 - s0

    for rs, rt in runs:
        # ops overlapping the run, clipped to it (device and module clocks differ by a little)
        inside = [(max(o[0], rs), min(o[1], rt), o[2]) for o in ops if o[0] < rt and o[1] > rs]
        stack: list[list] = []  # [start, end, bucket, child time]
        covered_to = rs
        for s, t, b in inside:
            while stack and stack[-1][1] <= s:
                pop(stack)
            if stack and t > stack[-1][1]:  # partial overlap: sequential, starts at the earlier end
                s = stack[-1][1]
                while stack and stack[-1][1] <= s:
                    pop(stack)
            stack.append([s, t, b, 0])
            if t > covered_to:
                busy += t - max(s, covered_to)
                covered_to = t
        while stack:
            pop(stack)
    n = len(runs)
    step = sum(t - s for s, t in runs) / n
    return {"step_ps": step, "steps": n, "buckets": {k: v / n for k, v in buckets.items()}, "idle_ps": step - busy / n}
