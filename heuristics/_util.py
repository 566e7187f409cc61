"""Small helpers shared by the lever modules (formatting evidence)."""

from __future__ import annotations

from profanalyzer.core import format as fmt
from profanalyzer.core.format import pct
from profanalyzer.core.hardware import FP8_MAX_SPEEDUP

__all__ = ["ms", "pct", "op_line", "serving", "step_ps", "fp8_cap"]


def serving(analysis) -> bool:
    """The capture is an inference (serving) step: training-only advice stays quiet."""
    return analysis.run_kind is not None and analysis.run_kind.kind == "inference"


def step_ps(analysis) -> float:
    return analysis.steps.step_time_ps["mean"] or 1.0


def fp8_cap(analysis) -> float:
    """The most an FP8 change may save per step: the fastest published
    Ironwood recipe's end-to-end speed-up (hardware.FP8_MAX_SPEEDUP)."""
    return (1.0 - 1.0 / FP8_MAX_SPEEDUP) * step_ps(analysis)


def ms(ps: float) -> str:
    """Evidence times: '1.234 ms' (profanalyzer.core.format.ms with its unit)."""
    return fmt.ms(ps, unit=True)


def op_line(op) -> str:
    """One evidence line for a TopOp."""
    extra = []
    if op.roofline_fraction is not None:
        extra.append(f"{op.roofline_fraction * 100:.0f}% of roofline, {op.bound_by}-bound")
    if op.tflops_per_s is not None:
        extra.append(f"{op.tflops_per_s:.0f} TFLOP/s")
    tail = f" ({'; '.join(extra)})" if extra else ""
    return f"{op.name}: {ms(op.self_ps)} per step ({pct(op.fraction)}){tail}"
