"""The exported window of a run (`analyze --trace-out`): the representative
step, or the steps asked for, as typed tracks and events in the trace's
picoseconds. Built by the analysis stage (profanalyzer.analyze.window, from
the run's attributed trace) and held by the run (`Run.window`); written as a
Chrome / Perfetto trace by its renderer (profanalyzer.report.perfetto), which
adds the findings' markers. Not part of the JSON document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TraceWindow", "WindowEvent", "WindowTrack"]


@dataclass(frozen=True, slots=True)
class WindowTrack:
    """One track (a thread of the trace): a TensorCore's ops, buckets or collectives, or a SparseCore's ops."""

    pid: int  # the host's process (1-based, hosts in order)
    tid: int
    name: str


@dataclass(frozen=True, slots=True)
class WindowEvent:
    """One event of a track: a span (`dur_ps` set) or an instant (a step's start)."""

    pid: int
    tid: int
    start_ps: int  # from the capture's origin
    name: str
    cat: str  # the op's bucket, "bucket", "collective", "sparsecore" or "step"
    args: Mapping[str, Any]
    dur_ps: int | None = None  # None: an instant
    #: a collective window's class by how much compute hid it: hidden, partial or exposed
    shade: str | None = None


@dataclass(frozen=True)
class TraceWindow:
    """The exported steps of every TensorCore of the run, in the order they were built."""

    source: str
    tool_version: str
    chip: str
    hosts: tuple[str, ...]  # the host of process pid is hosts[pid - 1]
    tracks: tuple[WindowTrack, ...]
    events: tuple[WindowEvent, ...]
    steps: tuple[int, ...]  # the steps found, in the order asked
    #: claim pool (`bucket:<name>`, `remat`) -> the first moment its time is spent on the first TensorCore
    first_ps: Mapping[str, int]
    #: the first exported step's start on the first TensorCore (None: it has none of them)
    start_ps: int | None
