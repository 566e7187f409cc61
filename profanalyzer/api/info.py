"""`profanalyze info`: what is in an unknown profile, before any analysis.

`trace_info(trace)` returns a frozen, JSON-ready summary (`program_info(path)`
of a compiled program); the renderers of report/registry.py (INFO_RENDERERS,
PROGRAM_INFO_RENDERERS) write it as JSON or plain text. All deterministic.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from profanalyzer.analyze.analysis import median_kept_step
from profanalyzer.model.trace import LINE_MODULES, Trace


@dataclass(frozen=True)
class PlaneInfo:
    host: str
    name: str
    kind: str
    lines: tuple[tuple[str, int], ...]  # (line name, event count)
    op_metadata: int


@dataclass(frozen=True)
class HostSummary:
    name: str
    file: str
    size_bytes: int  # the XSpace's bytes, uncompressed
    file_bytes: int | None  # the file's size on disk (None: not a local file)
    plane_kinds: tuple[tuple[str, int], ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class ProgramInfo:
    name: str
    runs: int
    total_ps: int


@dataclass(frozen=True)
class TraceInfo:
    source: str
    input_kind: str
    run: str | None
    note: str | None
    chip: str
    chip_source: str
    hosts: tuple[HostSummary, ...]
    tensorcores: int
    sparsecores: int
    planes: tuple[PlaneInfo, ...]
    device_events: int
    steps_source: tuple[str, ...]  # distinct step sources over cores
    steps_count: int  # steps on the first TensorCore
    step_numbers: tuple[int, ...]
    step_ps_median: int | None  # as `analyze`: median of the kept steps' times (median over TensorCores)
    steps_kept: int
    programs: tuple[ProgramInfo, ...]  # first TensorCore's XLA Modules
    span_ps: int

    def to_dict(self) -> dict:
        return asdict(self)


def trace_info(trace: Trace) -> TraceInfo:
    planes = []
    start: int | None = None
    end: int | None = None
    n_events = 0
    for p in trace.planes:
        lines = tuple((ln.name, len(ln.events)) for ln in p.lines)
        planes.append(PlaneInfo(p.host, p.name, p.kind, lines, len(p.meta)))
        for ln in p.lines:
            ev = ln.events
            n_events += len(ev)
            if len(ev):
                s, e = int(ev.start_ps.min()), int(ev.end_ps.max())
                start = s if start is None else min(start, s)
                end = e if end is None else max(end, e)
    tcs = trace.tensorcores
    first = tcs[0]
    step_median, steps_kept, _ = median_kept_step(trace)
    steps = trace.steps[first.label]
    programs: dict[str, list[int]] = {}
    mods = first.line(LINE_MODULES)
    if mods is not None:
        ev = mods.events
        for r, d in zip(ev.meta.tolist(), ev.dur_ps.tolist(), strict=True):
            name = first.meta.name[r] if r >= 0 else "?"
            programs.setdefault(name, []).append(d)
    progs = tuple(
        sorted(
            (ProgramInfo(k, len(v), int(sum(v))) for k, v in programs.items()),
            key=lambda p: (-p.total_ps, p.name),
        )
    )
    return TraceInfo(
        source=trace.source,
        input_kind=trace.input_kind,
        run=trace.run,
        note=trace.note,
        chip=trace.chip.name,
        chip_source=trace.chip_source,
        hosts=tuple(
            HostSummary(h.name, h.file, h.size_bytes, _file_bytes(h.file), tuple(h.plane_kinds.items()), h.errors, h.warnings)
            for h in trace.hosts
        ),
        tensorcores=len(tcs),
        sparsecores=len(trace.sparsecores),
        planes=tuple(planes),
        device_events=n_events,
        steps_source=tuple(sorted({s.source for s in trace.steps.values()})),
        steps_count=len(steps),
        step_numbers=tuple(int(x) for x in steps.number.tolist()),
        step_ps_median=int(round(step_median)) if step_median is not None else None,
        steps_kept=steps_kept,
        programs=progs,
        span_ps=(end - start) if start is not None and end is not None else 0,
    )


def _file_bytes(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class ModuleInfo:
    name: str
    stage: str
    instructions: int
    computations: int
    estimated_cycles: int
    partitions: int


@dataclass(frozen=True)
class ProgramSummary:
    """What `info` says of a compiled program (an HLO module or an XLA dump): no capture, no run."""

    source: str
    input_kind: str
    chip: str
    chip_source: str
    modules: tuple[ModuleInfo, ...]
    main: str
    why_main: str
    next_step: str

    def to_dict(self) -> dict:
        return asdict(self)


def program_info(path: str, chip: str | None = None) -> ProgramSummary:
    """The modules of a compiled program, its main one and the chip it was compiled for."""
    from profanalyzer.read.compiled import INPUT_KIND, program_chip
    from profanalyzer.read.hlo.load import read_program

    program = read_program(path)
    c, where = program_chip(program, chip)
    mods = tuple(ModuleInfo(m.name, m.stage, m.instruction_count, len(m.computations), m.estimated_cycles,
                            max(1, m.num_partitions)) for m in program.modules)
    return ProgramSummary(str(path), INPUT_KIND, c.name, where, mods, program.main.name, program.why_main,
                          f"profanalyze analyze {path}: the predicted step, its buckets and the levers, before any run")
