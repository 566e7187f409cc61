"""Numbers as the reports print them: one set of formatters for the
terminal, the HTML context, Markdown, the diff, the budget check and the
rules' evidence, so that every surface agrees digit for digit.

Picoseconds print as milliseconds, fractions as percentages. A missing value
(None) prints as MISSING; the fleet view's tables print an em dash and the
budget check "n/a" (their output predates this module: they pass
`missing=EM_DASH` / `missing=NOT_AVAILABLE`).
"""

from __future__ import annotations

MISSING = "-"
EM_DASH = "—"
NOT_AVAILABLE = "n/a"

PS_PER_MS = 1e9
#: Memory held (HBM capacity, peak in use, buffers) prints in GiB, as the chips' own tables give HBM
#: (192 GiB per TPU7x chip, 96 GiB per TensorCore); bytes moved and bandwidths print in decimal GB (GB/s).
GIB = 2**30


def binary_size(n: float | None, missing: str = MISSING) -> str:
    """Bytes held in the largest binary unit that keeps a digit before the point: '5.00 GiB', '12.0 MiB', '512 B'."""
    if n is None:
        return missing
    for unit, div, d in (("GiB", GIB, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 1)):
        if abs(n) >= div:
            return f"{n / div:,.{d}f} {unit}"
    return f"{n:,.0f} B"


def gib(n: float | None, digits: int = 2, *, signed: bool = False, missing: str = MISSING) -> str:
    """Bytes held as GiB: `gib(2**31)` -> '2.00 GiB'."""
    if n is None:
        return missing
    return f"{n / GIB:{'+' if signed else ''},.{digits}f} GiB"


def ms(ps: float | None, digits: int = 3, *, unit: bool = False, missing: str = MISSING) -> str:
    """Picoseconds as milliseconds: '12.345' (or '12.345 ms' with unit)."""
    if ps is None:
        return missing
    return f"{ps / PS_PER_MS:.{digits}f}" + (" ms" if unit else "")


def signed_ms(ps: float | None, digits: int = 3, *, zero_unsigned: bool = True, missing: str = MISSING) -> str:
    """A change in milliseconds with its sign: '+1.234' / '-0.500'. With
    zero_unsigned a change that rounds to zero prints without a sign."""
    if ps is None:
        return missing
    v = ps / PS_PER_MS
    if zero_unsigned and round(v, digits) == 0:
        return f"{0.0:.{digits}f}"
    return f"{v:+.{digits}f}"


def pct(x: float | None, digits: int = 1, *, missing: str = MISSING) -> str:
    """A fraction as a percentage: 0.1234 -> '12.3%'."""
    return missing if x is None else f"{x * 100:.{digits}f}%"


def signed_pct(x: float | None, digits: int = 2, *, suffix: str = "%", missing: str = MISSING) -> str:
    """A relative change with its sign, '0.00%' when it rounds to zero."""
    if x is None:
        return missing
    return f"{0.0:.{digits}f}{suffix}" if round(x * 100, digits) == 0 else f"{x * 100:+.{digits}f}{suffix}"


def pts(x: float | None, digits: int = 1, *, missing: str = MISSING) -> str:
    """A change of a share of the step, in signed percentage points."""
    return signed_pct(x, digits, suffix=" pts", missing=missing)


def noise(ps: float | None, digits: int = 3, *, missing: str = MISSING) -> str:
    """A noise band in milliseconds: '±0.012'."""
    return missing if ps is None else f"±{ps / PS_PER_MS:.{digits}f}"


def count(x: float | None, missing: str = MISSING) -> str:
    """A count: a whole number as an integer ('21', not '21.0'); a mean count
    that is not whole (occurrences per step averaged over cores) with one
    decimal ('20.5')."""
    if x is None:
        return missing
    r = round(float(x), 1)
    return f"{r:,.0f}" if r == int(r) else f"{r:,.1f}"
