"""profanalyzer.core.stats: its medians equal numpy's and the statistics module's."""

import math
import statistics
import warnings

import numpy as np
import pytest

from profanalyzer.core.stats import median, median_of, modified_z


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


def test_modified_z_flags_the_outlier_only():
    z = modified_z([10.0, 10.1, 9.9, 10.0, 30.0])
    assert abs(z[-1]) > 3.5 and all(abs(v) < 3.5 for v in z[:-1])
