"""`Attributed`: the attributed trace, built once per run and the one
argument every analysis stage takes (opstats, overlap, idle, scopes,
timeline, hostplanes, capture).

    trace -> analysis.attribute(trace) -> Attributed -> the stages -> Analysis

It holds the built trace, each TensorCore's work (classification and
exclusive attribution, `attribution.CoreWork`), the steady-state steps kept,
the mean step time over them and the consensus step table. `run.Run` keeps
it so that later consumers (the trace export, the notebook's per-core steps)
read it instead of attributing the trace again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profanalyzer.attribution import CoreWork
    from profanalyzer.model import StepRow
    from profanalyzer.trace import Trace

__all__ = ["Attributed"]


@dataclass(frozen=True, eq=False)
class Attributed:
    trace: Trace = field(repr=False)
    work: list[CoreWork] = field(repr=False)  # one per TensorCore of the trace, in its order
    kept_steps: set[int]  # the steady-state step numbers
    step_mean: float  # mean step time (ps) over the kept steps, averaged over the cores
    step_table: tuple[StepRow, ...]  # the consensus step table (median over cores)
    #: The per-(core, step) rows and the consensus arrays the analysis summarises
    #: (analysis.attribute built them; nothing outside analysis.py reads them).
    tables: Any = field(default=None, repr=False)
