"""Exclusive attribution: segments, conservation, hand-built traces."""

from __future__ import annotations

import numpy as np
import pytest

from profanalyzer.analyze.attribution import (
    BUCKET_INDEX,
    CoreAttribution,
    OpTimeline,
    attribute_core,
    exclusive_segments,
)
from profanalyzer.classify import BUCKETS
from profanalyzer.core.errors import InvariantError
from profanalyzer.model.trace import nesting

I = BUCKET_INDEX


def _arr(*xs):
    return np.asarray(xs, dtype=np.int64)


def test_segments_flat_line_is_identity():
    s, e, o = exclusive_segments(_arr(0, 10, 30), _arr(10, 20, 40))
    assert s.tolist() == [0, 10, 30] and e.tolist() == [10, 20, 40] and o.tolist() == [0, 1, 2]


def test_segments_nested_owner_is_deepest():
    # parent [0,100) with children [10,30) (grandchild [15,20)) and [50,60)
    s, e, o = exclusive_segments(_arr(0, 10, 15, 50), _arr(100, 30, 20, 60))
    assert list(zip(s.tolist(), e.tolist(), o.tolist(), strict=True)) == [
        (0, 10, 0), (10, 15, 1), (15, 20, 2), (20, 30, 1), (30, 50, 0), (50, 60, 3), (60, 100, 0),
    ]


def test_segments_partial_overlap_is_clipped():
    # [0,50) and [40,80) on one line (invalid input): the later starts, the earlier's tail is not double counted.
    s, e, o = exclusive_segments(_arr(0, 40), _arr(50, 80))
    total = int((e - s).sum())
    assert total <= 80
    assert np.all(s[1:] >= e[:-1])


def _attribute(starts, ends, buckets, steps):
    st = _arr(*starts)
    en = _arr(*ends)
    order = np.lexsort((-en, st))
    b = np.asarray([I[x] for x in buckets], dtype=np.int64)[order]
    remat = np.zeros(len(st), dtype=bool)
    phase = np.full(len(st), -1, dtype=np.int64)
    numbers = np.arange(len(steps), dtype=np.int64)
    ss = _arr(*[a for a, _ in steps])
    se = _arr(*[z for _, z in steps])
    att = attribute_core("core", OpTimeline.of(st[order], en[order], nesting(st[order], en[order])[0]), b, remat, phase, numbers, ss, se)
    return att


def test_conservation_with_nesting_gaps_and_async_windows():
    # Step [0, 1000): a while [100, 700) holding a matmul [150, 400) and an
    # all-gather-done wait [400, 450); an async window's start op [50, 60);
    # a sync all-reduce [800, 900); gaps elsewhere are idle. A second step
    # [1000, 2000) with an op straddling the boundary [950, 1100).
    att = _attribute(
        [100, 150, 400, 50, 800, 950],
        [700, 400, 450, 60, 900, 1100],
        ["other_compute", "matmul_bf16", "all_gather", "all_gather", "all_reduce", "other_compute"],
        [(0, 1000), (1000, 2000)],
    )
    att.self_check()
    b0 = dict(zip(BUCKETS, att.buckets[0].tolist(), strict=True))
    assert b0["matmul_bf16"] == 250
    assert b0["all_gather"] == 50 + 10
    assert b0["all_reduce"] == 100
    assert b0["other_compute"] == (600 - 250 - 50) + 50  # while self + straddler's part in step 0
    assert b0["idle"] == 1000 - sum(v for k, v in b0.items() if k != "idle")
    b1 = dict(zip(BUCKETS, att.buckets[1].tolist(), strict=True))
    assert b1["other_compute"] == 100 and b1["idle"] == 900
    assert att.buckets.sum(axis=1).tolist() == [1000, 1000]


def test_self_check_raises_on_mismatch():
    att = CoreAttribution(
        "c", _arr(0), _arr(100), np.zeros((1, len(BUCKETS)), dtype=np.int64), _arr(0), np.zeros((1, 3), dtype=np.int64)
    )
    with pytest.raises(InvariantError, match="sum to 0 ps"):
        att.self_check()


def test_empty_step_is_all_idle():
    att = _attribute([5000], [5100], ["matmul_bf16"], [(0, 1000)])
    assert att.buckets[0, I["idle"]] == 1000


def test_locate_finds_the_window_holding_each_time():
    from profanalyzer.analyze.attribution import locate

    ws = np.asarray([10, 30, 50], dtype=np.int64)
    we = np.asarray([20, 40, 60], dtype=np.int64)
    t = np.asarray([5, 10, 19, 20, 35, 45, 59, 60, 100], dtype=np.int64)
    pos, inside = locate(ws, we, t)
    assert inside.tolist() == [False, True, True, False, True, False, True, False, False]
    assert pos[inside].tolist() == [0, 0, 1, 2]
    pos, inside = locate(ws[:0], we[:0], t)  # no windows: nothing inside
    assert not inside.any() and len(pos) == len(t)


def test_done_ops_inherit_their_start_ops_kind(tmp_path):
    """A done op whose kind its own text does not show (cut before the
    operands) takes the bucket and kind of its start op, with the reason."""
    from xsb import SpaceBuilder

    from profanalyzer.analyze.attribution import classify_plane
    from profanalyzer.read.xspace.build import load_trace

    sp = SpaceBuilder()
    tc = sp.plane("/device:TPU:0")
    ops = tc.line("XLA Ops", timestamp_ns=1_000)
    ops.event("%async-collective-start.3 = (bf16[8,128]{1,0}, bf16[64,128]{1,0}) fusion(bf16[8,128]{1,0} %p.1), "
              "calls=%all-gather.3.clone", start_ps=0, dur_ps=10, display="async-collective-start.3",
              meta_stats={"hlo_category": "custom fusion"})
    ops.event("%async-collective-done.3", start_ps=50, dur_ps=10, display="async-collective-done.3",
              meta_stats={"hlo_category": "custom fusion"})
    ops.event("%fusion.9 = bf16[8]{0} fusion(bf16[8]{0} %p.2)", start_ps=100, dur_ps=10, display="fusion.9",
              meta_stats={"hlo_category": "loop fusion"})
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(sp.bytes())
    plane = load_trace(str(path)).tensorcores[0]
    classes = classify_plane(plane)
    md = plane.meta
    row = {md.display_name[r]: r for r in range(len(md))}
    start, done, other = row["async-collective-start.3"], row["async-collective-done.3"], row["fusion.9"]
    assert classes.columns["collective"][start] == "all_gather"
    assert classes.columns["collective"][done] == "all_gather"
    assert classes.bucket[done] == classes.bucket[start] == BUCKET_INDEX["all_gather"]
    assert classes.columns["reason"][done].endswith("kind from its start op async-collective-start.3")
    assert classes.bucket[other] == BUCKET_INDEX["other_compute"]
