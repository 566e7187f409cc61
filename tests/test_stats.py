"""profanalyzer.core.stats: its medians equal numpy's and the statistics module's."""

import math
import statistics
import warnings

import numpy as np
import pytest

from profanalyzer.core.stats import (
    median,
    median_of,
    modified_z,
    nanmedian_rows,
    percentile,
)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 10, 101, 1000])
def test_medians_equal_numpy_and_statistics(n):
    rng = np.random.default_rng(n)
    for values in (rng.normal(size=n) * 1e6,
                   rng.integers(0, 10**13, size=n),  # picoseconds
                   rng.integers(0, 5, size=n),  # many ties
                   np.full(n, 7.25)):
        assert median(values) == float(np.median(values))
        assert median(list(values)) == float(np.median(values))
        as_list = values.tolist()
        assert median_of(as_list) == statistics.median(as_list)
        assert type(median_of(as_list)) is type(statistics.median(as_list))


def test_median_of_nothing_or_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert math.isnan(float(np.median(np.zeros(0))))
    assert math.isnan(median([]))
    assert math.isnan(median([1.0, math.nan, 3.0])) and math.isnan(float(np.median([1.0, math.nan, 3.0])))
    with pytest.raises(ValueError):
        median_of([])


def test_median_of_a_column_view():
    a = np.arange(30, dtype=np.int64).reshape(10, 3) ** 3
    assert median(a[:, 1]) == float(np.median(a[:, 1]))


@pytest.mark.parametrize("cols", [1, 2, 3, 4, 8, 33])
def test_row_nanmedians_equal_numpy(cols):
    """nanmedian_rows is np.nanmedian(axis=1) bit for bit: NaNs dropped per row (odd and even counts), ties,
    picosecond magnitudes, infinities; a row of NaNs only is NaN."""
    rng = np.random.default_rng(cols)
    for a in (rng.normal(size=(50, cols)) * 1e6,
              rng.integers(0, 10**13, size=(50, cols)).astype(np.float64),
              rng.integers(0, 3, size=(50, cols)).astype(np.float64)):
        a[rng.random(a.shape) < 0.3] = np.nan
        a[0] = np.nan
        if cols > 2:
            a[1, :2] = (np.inf, -np.inf)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.nanmedian(a, axis=1)
        got = nanmedian_rows(a)
        assert np.array_equal(got, want, equal_nan=True)
        assert math.isnan(got[0])
    assert nanmedian_rows(np.zeros((0, 3))).shape == (0,)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 37, 1000])
def test_percentiles_equal_numpy(n):
    """percentile is np.percentile (linear) bit for bit, on floats and on int64 picoseconds."""
    rng = np.random.default_rng(n)
    for values in (rng.normal(size=n) * 1e6, rng.integers(0, 10**13, size=n), rng.integers(0, 4, size=n),
                   np.full(n, 3, dtype=np.int64)):
        for q in (0, 1, 10, 25, 50, 90, 99, 99.9, 100):
            got, want = percentile(values, q), float(np.percentile(values, q))
            assert got == want, (n, q, got, want)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_modified_z_flags_the_outlier_only():
    z = modified_z([10.0, 10.1, 9.9, 10.0, 30.0])
    assert abs(z[-1]) > 3.5 and all(abs(v) < 3.5 for v in z[:-1])
