"""Rules that trade HBM for time state the headroom their change needs, in
bytes, and recommend only what fits (issue #16)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import sample_path

from profanalyzer.findings.engine import run_rules
from profanalyzer.pipeline.run import RunOptions, run_analysis


@pytest.fixture(scope="module")
def with_memory():
    return run_analysis(sample_path("hlo_memory_dense"), RunOptions(memory=True))


def _rm001(a):
    return next(r for r in run_rules(a).recommendations if r.code == "RM001")


def test_remat_card_states_the_bytes_it_needs_and_that_they_fit(with_memory):
    f = _rm001(with_memory)
    line = next(x for x in f.assumptions if "GiB needed" in x)
    assert "fits" in line and "does not fit" not in line
    need = sum(op.output_bytes * op.count for op in with_memory.remat_ops if op.bucket != "other_compute" and op.output_bytes)
    assert f"+{need / 2**30:.1f} GiB needed" in line


def test_remat_card_shrinks_to_what_fits(with_memory):
    full = _rm001(with_memory)
    need = sum(op.output_bytes * op.count for op in with_memory.remat_ops if op.bucket != "other_compute" and op.output_bytes)
    m = dataclasses.replace(with_memory.memory, headroom_bytes=int(need / 4))
    tight = _rm001(dataclasses.replace(with_memory, memory=m))
    assert any("does not fit" in x for x in tight.assumptions)
    assert tight.estimated_saving_ps == pytest.approx(full.estimated_saving_ps / 4, rel=1e-3)
    assert any("save_qkv_proj" in x for x in tight.actions)


def test_without_memory_the_card_says_unchecked():
    a = run_analysis(sample_path("remat_full"))
    f = _rm001(a)
    assert any("unchecked" in x and "GiB per TensorCore" in x for x in f.assumptions)
