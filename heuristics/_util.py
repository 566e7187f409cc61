"""Small helpers shared by the lever modules (formatting evidence). The facts the rules derive from an
analysis (the step, serving or not, the FP8 cap, the workload) are RuleFacts' (findings/rules.py), computed once."""

from __future__ import annotations

from profanalyzer.core import format as fmt
from profanalyzer.core.format import pct

__all__ = ["ms", "pct", "op_line"]


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
