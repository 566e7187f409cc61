"""`Attributed`: the attributed trace, built once per run and the one
argument every analysis stage takes (opstats, overlap, idle, scopes,
timeline, hostplanes, capture).

    trace -> analysis.attribute(trace) -> Attributed -> the stages -> Analysis

It holds the built trace, each TensorCore's work (classification and
exclusive attribution, `attribution.CoreWork`), the steady-state steps kept,
the mean step time over them, the consensus step table and the run's two
memos: `classify` (the classify path's one cache, `classify.Memo`) and
`memo` (the stages' per-table features, `TableMemo`). `run.Run` keeps
it so that later consumers (the extras phase's trace export, the notebook's
per-core steps) read it instead of attributing the trace again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from profanalyzer.classify import Memo

if TYPE_CHECKING:
    from profanalyzer.analyze.attribution import CoreWork, PlaneClasses
    from profanalyzer.model.analysis import StepRow
    from profanalyzer.model.trace import Plane, Trace

__all__ = ["Attributed", "TableMemo"]

T = TypeVar("T")


class TableMemo:
    """Per-row features of the op-metadata tables of one trace, computed once
    per table rather than once per TensorCore (analysis-internal).

    The TensorCores of a run usually carry equal metadata tables (the same
    programs). The reader shares one table object between every plane whose
    event-metadata map is byte-identical, the cores of a host and the hosts
    of a run alike (read.xspace.optable.MetadataCache, one per trace), and
    attribution classifies each table once (`attribution.attribute_trace`:
    the planes of one table share its PlaneClasses). So a feature is keyed by
    the identity of the shared table and its classes: no column is compared.
    `shared` holds trace-wide state of the features (ids that must agree
    between tables)."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, int, int], tuple[object, object, object]] = {}
        self.shared: dict[str, object] = {}

    def get(self, name: str, plane: Plane, classes: PlaneClasses | None, compute: Callable[[], T]) -> T:
        """compute(), once per (feature, table, classes): a plane sharing the table gets the first value."""
        key = (name, id(plane.meta), id(classes))
        hit = self._values.get(key)
        if hit is None:  # holds the table and its classes: their ids stay theirs while the memo lives
            hit = self._values[key] = (plane.meta, classes, compute())
        return hit[2]  # type: ignore[return-value]


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
    #: The per-table features of the stages (opstats, overlap, idle, scopes):
    #: the run's one memo of the analysis path, living as long as this context.
    memo: TableMemo = field(default_factory=TableMemo, repr=False)
    #: The run's one classify cache (`classify.Memo`): what analysis.attribute
    #: classified, for the stages that classify an op again (overlap's windows,
    #: the SparseCore ops).
    classify: Memo = field(default_factory=Memo, repr=False)
    #: What `attribute` read or derived once per run, for the stages after it (each a field of its own:
    #: no stage writes into the context). The HLO programs the trace's first host file carries (Program
    #: or None, why none): source lines, anti-patterns, the compiler's expectations read them.
    programs: tuple[Any, str] = (None, "not read")
    #: (host, plane name) -> counter-line record (counters.trace_counter_lines): the re-bucketing, then
    #: the kernel counters; None: not read (the kernel counters read them then).
    counter_lines: dict[tuple[str, str], dict] | None = None
    #: instruction name -> (why, cache element type, bytes read per run) of the main module's ops that
    #: contract a KV cache (kvcache.cache_contractions): the re-bucketing and the decode-cache summary.
    kv_contractions: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    #: plane label -> {metadata row: bytes} of the matmul kernels whose bytes the capture does not state
    #: (kernelflops.kernel_byte_rows); None: none derived.
    kernel_bytes: dict[str, dict[int, float]] | None = None

    @property
    def main_module(self) -> Any:
        """The main module of the program the trace carries, or None."""
        program = self.programs[0]
        return program.main if program is not None and program.modules else None


def trace_program(trace: Trace) -> tuple[Any, str]:
    """The HLO programs a trace's first host file carries, those that ran (a capture keeps every program
    it compiled): (Program or None, why none)."""
    from profanalyzer.model.trace import module_names

    if trace.program is not None:  # a compiled program: the one it was replayed from, text or proto
        return trace.program, ""
    if trace.reads is None:
        return None, "no host files"
    ran = module_names(trace)
    return trace.reads.programs(trace.hosts[0].file if trace.hosts else None, ran or None)
