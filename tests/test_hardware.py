"""The one chip table (issue #24): every per-chip figure is a field of its `Chip`."""

from __future__ import annotations

from dataclasses import replace

import profanalyzer.core.hardware as hw
from profanalyzer.core.hardware import CHIPS


def test_clock_is_inferred_from_fields_of_the_chip():
    """The MXU figures that infer the clock live on each Chip (no second table keyed by chip name)."""
    assert not hasattr(hw, "MXU_ASSUMPTIONS")
    for c in CHIPS.values():
        assert c.mxus > 0 and c.mxu_dim > 0
        assert c.clock_ghz == round(c.peak_bf16_tflops * 1e12 / (c.mxus * 2 * c.mxu_dim ** 2) / 1e9, 4)


def test_a_peak_read_later_keeps_the_clock():
    """counters replaces a chip's peaks with those the device planes state; the assumed clock stays the
    one inferred from the published peak."""
    for c in CHIPS.values():
        assert replace(c, peak_bf16_tflops=c.peak_bf16_tflops / 2).clock_ghz == c.clock_ghz
