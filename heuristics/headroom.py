"""HBM headroom for the rules that trade memory for time (issue #16).

A lighter remat policy, `device` instead of `offload`, a bigger per-device
batch or less sharding all need HBM. `headroom` states what the capture says
about it (from `Analysis.memory`, read with `--memory`), so a card can say
"+X GiB needed, peak Y of Z GiB" or that memory is not in the capture.
Not a rule: the lever modules call it (RM001, HO001, SH003).
"""

from __future__ import annotations

from dataclasses import dataclass

from profanalyzer.core.format import GIB

__all__ = ["Headroom", "headroom"]




@dataclass(frozen=True)
class Headroom:
    known: bool  # the capture has memory (peak and capacity)
    fits: bool | None  # the extra bytes fit in the headroom (None: unknown)
    line: str  # an assumption/evidence line for the card


def headroom(analysis, need_bytes: float | None = None) -> Headroom:
    """What the capture says about HBM for a change needing `need_bytes` more per device."""
    m = analysis.memory
    if m is None or m.peak_bytes is None or m.headroom_bytes is None:
        why = "memory not read (analyze --memory)" if m is None else "memory not in this capture"
        need = f" (+{need_bytes / GIB:.1f} GiB per TensorCore)" if need_bytes else ""
        return Headroom(False, None, f"{why}: the HBM headroom this change needs{need} is unchecked")
    peak = f"peak {m.peak_bytes / GIB:.1f} of {m.hbm_bytes / GIB:.1f} GiB per TensorCore"
    if need_bytes is None:
        return Headroom(True, None, f"HBM headroom {m.headroom_bytes / GIB:.1f} GiB ({peak}, {m.source})")
    fits = need_bytes <= m.headroom_bytes
    verdict = "fits" if fits else "does not fit"
    return Headroom(True, fits, f"+{need_bytes / GIB:.1f} GiB needed, {peak}: {verdict} (headroom {m.headroom_bytes / GIB:.1f} GiB)")
