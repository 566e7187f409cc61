"""#32 item 1: the drawn timeline accounts for every op's time. On every sample and the real inputs of
../shared/ (skipped when absent), the TensorCore lane's drawn spans sum to the representative step's busy
time (the exclusive op segments inside it) within 0.5%, per bucket too, and every collective window of the
step is drawn (alone, or counted in a merged one that says how many it holds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import sample_names, sample_path

from profanalyzer.analyze.analysis import attribute
from profanalyzer.analyze.attribution import exclusive_segments
from profanalyzer.analyze.overlap import analyze_overlap
from profanalyzer.analyze.timeline import MAX_SPANS_PER_LANE, build_timeline
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.read.trace import read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = {
    "vllm": SHARED / "real-traces" / "vllm_w4_tp2_2026_01_12_00_26_20.xplane.pb.gz",
    "v6e": SHARED / "real-traces" / "v6e_host_offload.xplane.pb.gz",
    "maxtext": SHARED / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz",
}


def _check(path: Path) -> bool:
    att = attribute(read_trace(path))
    overlap = analyze_overlap(att)
    wins = overlap.windows[0] if overlap.windows else None
    tl = build_timeline(att, wins)
    assert tl is not None
    w = att.work[0]
    steps = att.trace.steps[w.plane.label]
    k = int(np.flatnonzero(steps.number == tl.step)[0])
    a, b = int(steps.start_ps[k]), int(steps.end_ps[k])
    lo, hi = w.ops.window(a, b)
    s, e, owner = exclusive_segments(w.ops.start[lo:hi], w.ops.end[lo:hi])
    s, e = np.clip(s, a, b), np.clip(e, a, b)
    busy = {}
    for dur, bk in zip((e - s).tolist(), w.ev_bucket[owner + lo].tolist(), strict=True):
        busy[BUCKETS[bk]] = busy.get(BUCKETS[bk], 0) + dur
    drawn: dict[str, int] = {}
    for sp in tl.lanes[0].spans:
        drawn[sp.bucket] = drawn.get(sp.bucket, 0) + sp.end_ps - sp.start_ps
    total = sum(busy.values())
    assert abs(sum(drawn.values()) - total) <= 0.005 * max(total, 1), (sum(drawn.values()), total)
    for bucket, ps in busy.items():
        assert abs(drawn.get(bucket, 0) - ps) <= 0.005 * max(total, 1), (bucket, drawn.get(bucket, 0), ps)
    assert len(tl.lanes[0].spans) <= MAX_SPANS_PER_LANE * len(BUCKETS)
    if wins is not None:
        in_step = int(((wins.start >= a) & (wins.start < b)).sum())
        assert sum(x.count for x in tl.windows) == in_step, (sum(x.count for x in tl.windows), in_step)
        assert all(x.count == int(x.name.split()[0]) for x in tl.windows if x.count > 1)
    return tl.coalesced


@pytest.mark.parametrize("name", sample_names())
def test_every_ops_time_is_drawn_on_the_samples(name):
    _check(sample_path(name))


@pytest.mark.parametrize("name", sorted(REAL))
def test_every_ops_time_is_drawn_on_real_inputs(name):
    path = REAL[name]
    if not path.exists():
        pytest.skip(f"{path} not present (../shared)")
    _check(path)
