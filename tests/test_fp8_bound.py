"""FP8 estimates against published figures: the saving is the model's
(Amdahl: only the BF16 matmuls get faster), bounded by the fastest measured
Ironwood recipe (1.54x end to end), and its assumptions cite both the guide's
typical 1.3x and the recipes' measured 1.12x-1.54x."""

from __future__ import annotations

import pytest
from conftest import analysis_of, findings_of

from profanalyzer.core.hardware import (
    FP8_GUIDE_TYPICAL_SPEEDUP,
    FP8_MEASURED_SPEEDUPS,
    fp8_measured_range,
)
from profanalyzer.findings.whatif import FP8_MAX_SPEEDUP, what_if
from profanalyzer.heuristics.fp8 import fp8_saving


def _fp8(name: str, code: str = "FP001"):
    a = analysis_of(name)
    rec = next(r for r in findings_of(name).recommendations if r.code == code)
    return a, rec


def _end_to_end(a, rec) -> float:
    step = a.steps.step_time_ps["mean"]
    return step / (step - rec.estimated_saving_ps)


def test_published_figures_are_the_recipes():
    lo, hi = fp8_measured_range()
    assert (round(lo, 2), round(hi, 2)) == (1.12, 1.54)
    by_model = {m.model: m.speedup for m in FP8_MEASURED_SPEEDUPS}
    assert round(by_model["llama3.1-70b"], 2) == 1.54 and round(by_model["llama3.1-405b"], 2) == 1.53
    assert round(by_model["deepseek-v3"], 2) == 1.20 and round(by_model["qwen3-235b-a22b"], 2) == 1.12
    assert FP8_GUIDE_TYPICAL_SPEEDUP == 1.3
    assert FP8_MAX_SPEEDUP == hi


@pytest.mark.parametrize("name", ["fp8_remat_before", "bf16_dense", "offload_off"])
def test_matmul_heavy_estimate_lies_in_the_published_range(name):
    a, rec = _fp8(name)
    mm = a.bucket_ops["matmul_bf16"]
    assert mm.fraction > 0.6
    lo, hi = fp8_measured_range()
    e2e = _end_to_end(a, rec)
    assert lo <= e2e <= hi, f"{name}: {e2e:.3f}x"
    # the model's figure, not a cap: only the BF16 matmuls' time changes
    assert rec.estimated_saving_ps == pytest.approx(fp8_saving(mm.ps, mm.flops, a.hardware.per_core.peak_fp8_tflops * 1e12))
    text = " ".join(rec.assumptions)
    assert "1.3x" in text and "typical" in text, text
    assert "1.12x" in text and "1.54x" in text and "tpu-recipes" in text, text
    assert f"{e2e:.2f}x" in text, text


def test_small_matmul_share_gets_a_small_estimate():
    """attention_unfused: BF16 matmuls are ~22% of the step: the model gives
    about 1.1x, below the recipes' range, and the estimate says so (no cap
    and no floor moves it)."""
    a, rec = _fp8("attention_unfused")
    mm = a.bucket_ops["matmul_bf16"]
    assert mm.fraction < 0.3
    e2e = _end_to_end(a, rec)
    lo, _ = fp8_measured_range()
    assert e2e < lo
    assert rec.estimated_saving_ps == pytest.approx(fp8_saving(mm.ps, mm.flops, a.hardware.per_core.peak_fp8_tflops * 1e12))
    assert rec.estimated_saving_ps < (1 - 1 / lo) * a.steps.step_time_ps["mean"]
    text = " ".join(rec.assumptions)
    assert f"{e2e:.2f}x" in text and "below" in text, text


def test_the_cap_is_the_fastest_recipe(monkeypatch):
    """A step that is all BF16 matmul: the model alone would promise ~1.66x;
    the estimate stops at the fastest measured recipe, and says so."""
    from dataclasses import replace

    from profanalyzer.heuristics.fp8 import bf16_to_fp8

    a = analysis_of("bf16_dense")
    step = a.steps.step_time_ps["mean"]
    mm = replace(a.bucket_ops["matmul_bf16"], ps=step, fraction=1.0, flops=0.0)
    a2 = replace(a, bucket_ops={**a.bucket_ops, "matmul_bf16": mm})
    (rec,) = bf16_to_fp8.check(a2)
    _, hi = fp8_measured_range()
    assert step / (step - rec.estimated_saving_ps) == pytest.approx(hi)
    assert fp8_saving(step) > rec.estimated_saving_ps
    assert any("bounded by" in x and "1.54x" in x for x in rec.assumptions), rec.assumptions


@pytest.mark.parametrize("name", ["bf16_dense", "fp8_remat_before"])
def test_what_if_uses_the_same_bound(name):
    a, f = analysis_of(name), findings_of(name)
    w = what_if(a, f, ("fp8",))
    for c in w.per_core:
        assert c.new_step_ps >= c.step_ps / FP8_MAX_SPEEDUP - 1
