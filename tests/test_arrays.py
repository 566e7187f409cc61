"""arrays.unique_ids equals np.unique, output for output."""

from __future__ import annotations

import numpy as np
import pytest

from profanalyzer.core.arrays import unique_ids

_OPTIONS = [{}, {"return_index": True}, {"return_inverse": True}, {"return_counts": True},
            {"return_index": True, "return_inverse": True, "return_counts": True}]


def _same(a, b) -> None:
    if not isinstance(a, tuple):
        a, b = (a,), (b,)
    assert isinstance(b, tuple) and len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


@pytest.mark.parametrize("options", _OPTIONS)
def test_equals_numpy_on_dense_sparse_and_odd_arrays(options):
    rng = np.random.default_rng(5)
    arrays = [rng.integers(0, 35_000, 280_000),  # dense ids: counted
              rng.integers(0, 6, 50).astype(np.int32), rng.integers(0, 3, 9).astype(np.uint8),
              np.zeros(1, dtype=np.int64), np.arange(10)[::-1].copy(),
              rng.integers(0, 10**12, 1000),  # sparse: numpy's sort
              rng.integers(-5, 5, 100),  # negative: numpy's sort
              np.zeros(0, dtype=np.int64), rng.integers(0, 4, 30).astype(np.uint64)]
    for x in arrays:
        _same(np.unique(x, **options), unique_ids(x, **options))


def test_first_index_is_the_first_occurrence():
    x = np.asarray([3, 1, 3, 0, 1, 3])
    u, first, inv, cnt = unique_ids(x, return_index=True, return_inverse=True, return_counts=True)
    assert u.tolist() == [0, 1, 3] and first.tolist() == [3, 1, 0]
    assert inv.tolist() == [2, 1, 2, 0, 1, 2] and cnt.tolist() == [1, 2, 3]


def test_object_array_keeps_sequences_as_cells():
    from profanalyzer.core.arrays import object_array

    a = object_array([(1, 2), "x", None, [3]])
    assert a.shape == (4,) and a.dtype == object and a[0] == (1, 2) and a[3] == [3]
    assert object_array([]).shape == (0,)
