"""OpTimeline.exclusive_many: the C pass (profanalyzer.analyze._windows) gives the
numpy sums exactly, nesting, clipping and several labellings included."""

from __future__ import annotations

import numpy as np
import pytest

import profanalyzer.analyze.attribution as A
from profanalyzer.model.trace import nest_line


def _timeline(rng, n):
    s = np.sort(rng.integers(0, 50 * n + 1, n)).astype(np.int64)
    e = s + rng.integers(0, 200, n)
    order = np.lexsort((-e, s))
    s, e = s[order], e[order]
    parent, _, e, _ = nest_line(s, e)
    return A.OpTimeline.of(s, e, parent)


@pytest.mark.skipif(A._windows is None, reason="C accelerator not built (no compiler at install)")
def test_c_window_sums_equal_numpy(monkeypatch):
    rng = np.random.default_rng(2)
    for n in (1, 5, 60, 4000):
        ops = _timeline(rng, n)
        span = int(ops.end.max()) + 10
        for nw in (0, 1, 3, 17):
            wa = np.sort(rng.integers(-5, span, nw)).astype(np.int64)
            wb = wa + rng.integers(0, span // 2 + 1, nw)  # windows may overlap and run past the line
            sets = [(rng.integers(0, k, n).astype(np.int64), k) for k in (1, 3, 15)]
            got = ops.exclusive_many(sets, wa, wb)
            totals = ops.exclusive_totals(sets, wa, wb)
            with monkeypatch.context() as m:
                m.setattr(A, "_windows", None)
                want = ops.exclusive_many(sets, wa, wb)
                want_totals = ops.exclusive_totals(sets, wa, wb)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
            for g, w, per_window in zip(totals, want_totals, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
                assert np.array_equal(g, per_window.sum(axis=0))


@pytest.mark.skipif(A._windows is None, reason="C accelerator not built (no compiler at install)")
def test_c_window_sums_refuse_bad_labels():
    ops = _timeline(np.random.default_rng(0), 10)
    lo = np.zeros(1, dtype=np.int64)
    hi = np.full(1, 10, dtype=np.int64)
    w = np.asarray([0], dtype=np.int64)
    bad = np.full(10, 7, dtype=np.int64)  # label 7 of 3
    assert A._windows.window_sums(ops.start, ops.end, ops.parent, lo, hi, w, w + 10**6, (bad,), (3,)) is None
