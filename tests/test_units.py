"""Issue 32 item 11: units as the chip's own tables give them. HBM capacity
and memory held print in GiB (TPU7x: 192 GiB per chip, 96 GiB per
TensorCore: the XSpace facts' chip table, which the guide rounds to "192 GB"),
per TensorCore, never as decimal GB of a GiB figure; bytes moved stay in GB
(bandwidths are GB/s). VMEM: per TensorCore (tests/test_vmem_rule.py)."""

from __future__ import annotations

from conftest import sample_path

from profanalyzer.core.format import gib
from profanalyzer.core.hardware import CHIPS
from profanalyzer.heuristics.headroom import headroom
from profanalyzer.pipeline.run import RunOptions, run_analysis


def test_gib_formatter():
    assert gib(96 * 2**30) == "96.00 GiB" and gib(None) == "-" and gib(-2**30, signed=True) == "-1.00 GiB"


def test_capacity_is_the_chip_tables_gib_per_tensorcore():
    a = run_analysis(sample_path("hlo_memory_dense"), RunOptions(memory=True))
    chip = CHIPS["tpu7x"]
    assert a.memory.hbm_bytes == chip.hbm_gib * 2**30 // chip.planes_per_chip
    line = headroom(a, 1e9).line
    assert f"of {chip.hbm_gib / chip.planes_per_chip:.1f} GiB per TensorCore" in line  # 96.0, not "103.1 GB"
    assert " GB " not in line


def test_memory_section_and_budget_speak_gib():
    from profanalyzer.compare.budget import evaluate, parse_budget
    from profanalyzer.report.sections import memory_view

    a = run_analysis(sample_path("hlo_memory_dense"), RunOptions(memory=True))
    v = memory_view(a)
    assert "of 96.00 GiB HBM per TensorCore" in v.summary and " GB" not in v.summary
    r = evaluate(parse_budget({"budget": {"memory.peak_bytes": {"max": 1}}}), a)
    assert f"({a.memory.peak_bytes / 2**30:.2f} GiB)" in r.checks[0].message


def test_buffer_sizes_keep_a_digit():
    from profanalyzer.core.format import binary_size

    assert (binary_size(5 * 2**30), binary_size(12.5 * 2**20), binary_size(3000), binary_size(12)) == (
        "5.00 GiB", "12.5 MiB", "2.9 KiB", "12 B")
