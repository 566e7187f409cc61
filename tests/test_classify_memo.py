"""Classification shared across the TensorCores of a trace (issue #15): the
per-trace memo gives the same buckets, tags and reasons as classifying each
plane on its own, on every sample trace and both real captures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import realcap

from profanalyzer.analyze.attribution import classify_plane
from profanalyzer.classify import Memo, classify_op
from profanalyzer.read.xspace.build import load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
FILES = sorted(p.name for p in SAMPLES.glob("*.xplane.pb.gz"))


def _same(a, b) -> None:
    assert a.columns.keys() == b.columns.keys()
    for k in a.columns:
        assert a.columns[k].tolist() == b.columns[k].tolist(), k
    for k in ("bucket", "remat", "phase", "role"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k


def _check(path: Path) -> int:
    trace = load_trace(str(path))
    memo = Memo()
    rows = 0
    for plane in trace.tensorcores:
        shared = classify_plane(plane, memo)
        _same(shared, classify_plane(plane))
        md = plane.meta
        for r in range(len(md)):  # what the overlap analysis reads (before done ops inherit a kind)
            assert shared.op_class(plane, r) == classify_op(md.name[r], md.display_name[r], md.category[r], md.tf_op[r],
                                                            md.shape_with_layout[r])
        rows += len(md)
    return rows


def test_files_found():
    assert len(FILES) >= 20


@pytest.mark.parametrize("name", FILES)
def test_memo_matches_per_plane_classification_on_samples(name):
    assert _check(SAMPLES / name) > 0


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_memo_matches_per_plane_classification_on_real_captures(name):
    assert _check(realcap.real_path(name)) > 0


def test_memo_is_filled_once_per_distinct_op():
    trace = load_trace(str(SAMPLES / "dense_short_fsdp.xplane.pb.gz"))
    memo = Memo()
    planes = trace.tensorcores
    assert len(planes) > 1
    for plane in planes:
        classify_plane(plane, memo)
    distinct = {tuple(str(x) for x in row) for p in planes
                for row in zip(p.meta.name, p.meta.display_name, p.meta.category, p.meta.tf_op, p.meta.shape_with_layout, strict=True)}
    assert len(memo.ops) == len(distinct)
    assert len(memo.verdicts) <= len(distinct)  # each verdict made once
