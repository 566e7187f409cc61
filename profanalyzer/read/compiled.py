"""A compiled program as a Trace: the replayed, predicted step
(profanalyzer.read.hlo.replay) built as an XSpace in memory and decoded by
the trace builder (nothing is written), so the whole pipeline (buckets,
overlap, rules, reports, JSON) runs on it unchanged; the Trace keeps the
`Program` (text and proto alike) and the Source. The Trace says
`input_kind: "compiled_program"`, and its note that every time is predicted.

The chip: `--chip`; else the compile topology a dump's `compile.log`
names (MaxText's `compile_topology: tpu7x-16`); else TPU7x, assumed.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from profanalyzer.core.errors import InputError
from profanalyzer.core.hardware import (
    TPU7X,
    Chip,
    chip_by_key,
    chip_from_device_type,
    chip_from_target_arguments,
)
from profanalyzer.model.parts import ProgramMemory
from profanalyzer.model.trace import Trace
from profanalyzer.read.hlo.load import is_program_path, read_program
from profanalyzer.read.hlo.memory import (
    MemoryStats,
    assignment_final_stats,
    assignment_stats,
    compiler_stats,
    final_temp,
    parse_buffer_assignment,
    read_assignment,
    text_heap,
)
from profanalyzer.read.hlo.model import Program
from profanalyzer.read.hlo.replay import PREDICTED_NOTE, replay, to_xspace
from profanalyzer.read.source import Source
from profanalyzer.read.xspace.build import trace_from_bytes

__all__ = ["is_program_path", "load_program_trace", "program_chip", "INPUT_KIND", "STEP_SOURCE"]

INPUT_KIND = "compiled_program"
#: Where a replayed program's one step comes from (what a capture's `Steps.source` says: `Steps line`, ...).
STEP_SOURCE = "the replayed schedule (compiled program)"
def program_chip(program: Program, chip: str | None = None) -> tuple[Chip, str]:
    """The chip a compiled program was compiled for (`chip`: the --chip flag), and where that comes from."""
    if chip:
        return chip_by_key(chip), "--chip flag"
    by_target = chip_from_target_arguments(program.files.target_arguments)
    if by_target is not None:
        return by_target, "the dump's target_arguments.txt (tpu_topology_args)"
    m = re.search(r"compile_topology: ([A-Za-z0-9]+)-\d+", program.files.compile_log)
    found = chip_from_device_type(m.group(1)) if m else None
    if found is not None:
        return found, f"compile_topology {m.group(1)} in the dump's compile.log"  # type: ignore[union-attr]
    return TPU7X, "assumed TPU7x (compiled program; pass --chip)"


def _assignment(program: Program) -> MemoryStats | None:
    """argument / output / alias / temp of the final executable, from the
    program's buffer assignment: an HloProto that carries one (the main
    module's own, else the after-optimizations proto of the same module
    beside it), else a text dump's buffer assignment and live ranges; the
    temp is the heap as libtpu holds it (hlo.memory.final_temp). None
    without a buffer assignment."""
    name = program.main.name
    for proto in ((program.main.proto,) if program.main.proto else ()) + program.files.assignment_protos:
        try:
            assigned = read_assignment(proto)  # each proto decoded once
        except ValueError:
            continue
        if assigned is None or (proto is not program.main.proto and assigned.module != name):
            continue
        got = assignment_final_stats(assigned)
        if got is not None:
            return got
        if assigned.allocations:  # an assignment with no color-0 heap: nothing temporary in HBM
            return replace(assignment_stats(assigned.allocations), source="buffer assignment (no HBM heap)")
    ba_text = program.files.buffer_assignment
    if ba_text:
        ba = assignment_stats(parse_buffer_assignment(ba_text))
        heap = text_heap(ba_text, program.files.live_range) if program.files.live_range else None
        if heap is None:
            return replace(ba, source="buffer assignment text, heap only (no live ranges: the final temp is not known)")
        return MemoryStats(ba.argument, ba.output, ba.alias, final_temp(heap),
                           f"buffer assignment text, final-executable temp (peak from the {heap.peak_source})")
    return None


def _compiler(program: Program):
    comp = compiler_stats(program.files.compile_log) if program.files.compile_log else None
    if comp is None and program.files.compiler_json:
        comp = compiler_stats(program.files.compiler_json)
    return comp


def program_hbm(program: Program) -> tuple[MemoryStats | None, MemoryStats | None]:
    """(the buffer assignment's figures, the compiler's memory_analysis) of a program, each read once."""
    return _assignment(program), _compiler(program)


def program_memory(ba: MemoryStats | None, comp: MemoryStats | None, chip: Chip) -> ProgramMemory | None:
    """HBM of the program per TensorCore as a record (the note's figures, `program_hbm`): the buffer
    assignment's sum, else the compiler's memory_analysis; against the chip's HBM per TensorCore. None when
    the dump has neither."""
    cap = int(chip.hbm_gib * 2**30 / max(1, chip.planes_per_chip))
    got = ba if ba is not None else comp
    if got is None:
        return None
    return ProgramMemory(got.source, got.argument, got.output, got.alias, got.temp, got.peak, cap,
                         got.peak / cap if cap else 0.0, got.peak <= cap,
                         comp.peak if comp is not None and ba is not None else None)


def memory_note(ba: MemoryStats | None, comp: MemoryStats | None, chip: Chip) -> str:
    """HBM of the program per TensorCore (`program_hbm`): the buffer assignment's argument +
    output - alias + temp, the compiler's own figure, the fit in the chip."""
    parts = []
    cap = chip.hbm_gib * 2**30 / max(1, chip.planes_per_chip)
    if ba is not None:
        parts.append(f"HBM from the {ba.source}: argument {ba.argument} + output {ba.output} - "
                     f"alias {ba.alias} + temp {ba.temp} = {ba.peak} bytes ({ba.peak / cap:.1%} of {cap / 2**30:g} GiB "
                     "per TensorCore)")
    if comp is not None:
        parts.append(f"the compiler's memory_analysis: argument {comp.argument} + output {comp.output} - alias "
                     f"{comp.alias} + temp {comp.temp} = {comp.peak} bytes ({comp.peak / cap:.1%} of the HBM)")
    return "; ".join(parts)


def load_program_trace(source: Source | str | Path, *, chip: str | None = None,
                       lines: Collection[str] | None = None) -> Trace:
    """The predicted step of a compiled program (a path, or a program's Source: its bytes as read), built in
    memory; the Trace keeps the Program and the Source."""
    src = source if isinstance(source, Source) else Source(Path(source), "program")
    path = src.path
    program = read_program(path, data=bytes(src.files[0].raw()) if src.files else None)
    ch, chip_source = program_chip(program, chip)
    rep = replay(program, ch)
    if not rep.ops:
        raise InputError(f"{path}: module {program.main.name} has no instructions to replay (statements not parsed?)")
    # the predicted step as a capture, built and read in memory (nothing is written)
    trace = trace_from_bytes(to_xspace(rep), str(path), chip=ch.key, lines=lines)
    note = (f"{PREDICTED_NOTE}; module {program.why_main}; predicted step {rep.step_ps / 1e9:.3f} ms; "
            "assumptions: " + "; ".join(rep.assumptions))
    hbm = program_hbm(program)
    mem = memory_note(*hbm, ch)
    if mem:
        note += "; " + mem
    # the replay writes a Steps line to give the pipeline its one step: the step is the schedule's, say so
    steps = {k: replace(v, source=STEP_SOURCE) for k, v in trace.steps.items()}
    return replace(trace, source=str(path), input_kind=INPUT_KIND, run=None, note=note,
                   chip_source=chip_source, steps=steps, program_memory=program_memory(*hbm, ch), program=program,
                   reads=src)
