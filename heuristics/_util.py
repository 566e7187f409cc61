"""Small helpers shared by the lever modules (formatting evidence)."""

from __future__ import annotations


def ms(ps: float) -> str:
    return f"{ps / 1e9:.3f} ms"


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def op_line(op) -> str:
    """One evidence line for a TopOp."""
    extra = []
    if op.roofline_fraction is not None:
        extra.append(f"{op.roofline_fraction * 100:.0f}% of roofline, {op.bound_by}-bound")
    if op.tflops_per_s is not None:
        extra.append(f"{op.tflops_per_s:.0f} TFLOP/s")
    tail = f" ({'; '.join(extra)})" if extra else ""
    return f"{op.name}: {ms(op.self_ps)} per step ({pct(op.fraction)}){tail}"


def libtpu_args(args: list[str]) -> list[str]:
    """One LIBTPU_INIT_ARGS assignment, one flag per line (copy-paste ready)."""
    body = " \\\n  ".join(args)
    return [f'LIBTPU_INIT_ARGS="$LIBTPU_INIT_ARGS \\\n  {body}"']
