"""`Attributed`: the attributed trace, built once per run and the one
argument every analysis stage takes (opstats, overlap, idle, scopes,
timeline, hostplanes, capture).

    trace -> analysis.attribute(trace) -> Attributed -> the stages -> Analysis

It holds the built trace, each TensorCore's work (classification and
exclusive attribution, `attribution.CoreWork`), the steady-state steps kept,
the mean step time over them, the consensus step table and the run's two
memos: `classify` (the classify path's one cache, `classify.Memo`) and
`memo` (the stages' per-table features, `TableMemo`). `run.Run` keeps
it so that later consumers (the trace export, the notebook's per-core steps)
read it instead of attributing the trace again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from profanalyzer.classify import Memo

if TYPE_CHECKING:
    from profanalyzer.analyze.attribution import CoreWork, PlaneClasses
    from profanalyzer.model.analysis import StepRow
    from profanalyzer.model.trace import Plane, Trace

__all__ = ["Attributed", "TableMemo"]

T = TypeVar("T")


class TableMemo:
    """Per-row features of the op-metadata tables of one trace, computed once
    per distinct table rather than once per TensorCore (analysis-internal).

    The TensorCores of a host usually carry equal metadata tables (the same
    programs), each core its own copy. A feature names the columns it reads
    (`md.<field>` of the plane's OpMetadata, `cls.<column>` of its
    classification columns, `cls:<array>` of its PlaneClasses arrays); a core
    reuses the value an earlier core computed when every one of those columns
    is equal (compared once per pair of columns). `shared` holds trace-wide
    state of the features (ids that must agree between tables)."""

    def __init__(self) -> None:
        self._values: dict[str, list[tuple[tuple, object]]] = {}
        self._equal: dict[tuple[int, int], tuple[object, object, bool]] = {}
        self.shared: dict[str, object] = {}

    @staticmethod
    def column(plane: Plane, classes: PlaneClasses, dep: str):
        if dep.startswith("md."):
            return getattr(plane.meta, dep[3:])
        if dep.startswith("cls."):
            return classes.columns.get(dep[4:]) if len(classes) else None
        return getattr(classes, dep[4:])

    def same(self, a, b) -> bool:
        """Equal columns (tuples or numpy arrays of one dtype)."""
        if a is b:
            return True
        if a is None or b is None:
            return False
        key = (id(a), id(b))
        hit = self._equal.get(key)
        if hit is None:
            try:
                if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                    eq = a.dtype == b.dtype and a.shape == b.shape and (
                        a.tolist() == b.tolist() if a.dtype == object else bool(np.array_equal(a, b)))
                elif isinstance(a, tuple) and isinstance(b, tuple):
                    eq = a == b
                else:
                    eq = False
            except (TypeError, ValueError):
                eq = False
            hit = self._equal[key] = (a, b, bool(eq))  # holds both: their ids stay theirs
        return hit[2]

    def get(self, name: str, plane: Plane, classes: PlaneClasses, deps: tuple[str, ...], compute: Callable[[], T]) -> T:
        """compute(), or the value it gave for an earlier table whose `deps` columns are equal."""
        cols = tuple(self.column(plane, classes, d) for d in deps)
        seen = self._values.setdefault(name, [])
        for c, value in seen:
            if all(self.same(a, b) for a, b in zip(c, cols, strict=True)):
                return value  # type: ignore[return-value]
        value = compute()
        seen.append((cols, value))
        return value



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
