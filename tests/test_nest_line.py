"""trace.nest_line: the C pass (profanalyzer.model._nest) gives numpy's nesting and
self times exactly, partial overlaps and ties included."""

from __future__ import annotations

import numpy as np
import pytest

import profanalyzer.model.trace as T


def _numpy(start, end, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(T, "_nest", None)
        return T.nest_line(start, end)


def _lines(rng):
    """Sorted by (start, -end): flat runs, nested runs, ties, zero durations,
    partial overlaps (hostile input), long and short."""
    for n in (1, 2, 3, 5, 17, 200, 3000):
        for kind in ("flat", "nested", "overlap", "ties"):
            if kind == "flat":
                d = rng.integers(0, 50, n)
                s = np.cumsum(rng.integers(0, 60, n))
                e = s + d
            elif kind == "ties":
                s = np.sort(rng.integers(0, 20, n))
                e = s + rng.integers(0, 5, n)
            else:
                s = np.sort(rng.integers(0, 10 * n, n))
                e = s + rng.integers(0, 40 if kind == "nested" else 400, n)
            order = np.lexsort((-e, s))
            yield s[order].astype(np.int64), e[order].astype(np.int64)


@pytest.mark.skipif(T._nest is None, reason="C accelerator not built (no compiler at install)")
def test_c_nesting_equals_numpy_on_random_lines(monkeypatch):
    rng = np.random.default_rng(11)
    for s, e in _lines(rng):
        want = _numpy(s, e, monkeypatch)
        got = T.nest_line(s, e)
        for w, g, name in zip(want, got, ("parent", "depth", "end", "self"), strict=True):
            assert g.dtype == w.dtype, name
            assert np.array_equal(g, w), (name, s.tolist()[:20], e.tolist()[:20])
        assert all(x.flags.writeable for x in got)


@pytest.mark.skipif(T._nest is None, reason="C accelerator not built (no compiler at install)")
def test_c_nesting_defers_to_numpy_on_deep_or_unsorted_lines(monkeypatch):
    depth = T.MAX_VECTOR_DEPTH + 5  # beyond the vectorised levels: numpy's stack walk
    s = np.arange(depth, dtype=np.int64)
    e = 10_000 - s
    assert T._nest.nest(s, e, T.MAX_VECTOR_DEPTH) is None
    for w, g in zip(_numpy(s, e, monkeypatch), T.nest_line(s, e), strict=True):
        assert np.array_equal(g, w)
    assert int(T.nest_line(s, e)[1].max()) == depth - 1
    unsorted = np.asarray([5, 1], dtype=np.int64)
    assert T._nest.nest(unsorted, unsorted + 3, T.MAX_VECTOR_DEPTH) is None


def test_partial_overlap_resolves_as_the_level_walk_does(monkeypatch):
    """A [0,10), B [1,30) (partial), C [12,15): B is clipped into A; C, whose
    start lies before B's unclipped end, becomes a zero-length child of B (the
    level walk compares unclipped ends). Both paths agree on it."""
    s = np.asarray([0, 1, 12], dtype=np.int64)
    e = np.asarray([10, 30, 15], dtype=np.int64)
    for parent, depth, end, selft in (T.nest_line(s, e), _numpy(s, e, monkeypatch)):
        assert parent.tolist() == [-1, 0, 1] and depth.tolist() == [0, 1, 2]
        assert end.tolist() == [10, 10, 12] and selft.tolist() == [1, 9, 0]
