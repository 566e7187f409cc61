"""A compiled program as a Trace: the replayed, predicted step
(profanalyzer.hlo.replay) written as an XSpace into a private temporary
folder and read back by the trace reader, so the whole pipeline (buckets,
overlap, rules, reports, JSON) runs on it unchanged. The Trace says
`input_kind: "compiled_program"`, and its note that every time is predicted.

The chip: `--chip`; else the compile topology a dump's `compile.log`
names (MaxText's `compile_topology: tpu7x-16`); else TPU7x, assumed.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from profanalyzer.errors import InputError
from profanalyzer.hardware import TPU7X, Chip, chip_by_key, chip_from_device_type
from profanalyzer.hlo.load import is_program_path, read_program
from profanalyzer.hlo.memory import (
    assignment_stats,
    compiler_stats,
    parse_buffer_assignment,
    proto_allocations,
)
from profanalyzer.hlo.model import Program
from profanalyzer.hlo.replay import PREDICTED_NOTE, replay, to_xspace
from profanalyzer.trace import Trace
from profanalyzer.xspace.build import load_trace

__all__ = ["is_program_path", "load_program_trace", "INPUT_KIND", "STEP_SOURCE"]

INPUT_KIND = "compiled_program"
#: Where a replayed program's one step comes from (what a capture's `Steps.source` says: `Steps line`, ...).
STEP_SOURCE = "the replayed schedule (compiled program)"
_TMP: list[str] = []


def _tmpdir() -> Path:
    if not _TMP:
        d = tempfile.mkdtemp(prefix="profanalyze-compiled-")
        _TMP.append(d)
        atexit.register(shutil.rmtree, d, True)
    return Path(_TMP[0])


def _chip(program, chip: str | None) -> tuple[Chip, str]:
    if chip:
        return chip_by_key(chip), "--chip flag"
    m = re.search(r"compile_topology: ([A-Za-z0-9]+)-\d+", program.files.compile_log)
    found = chip_from_device_type(m.group(1)) if m else None
    if found is not None:
        return found, f"compile_topology {m.group(1)} in the dump's compile.log"  # type: ignore[union-attr]
    return TPU7X, "assumed TPU7x (compiled program; pass --chip)"


def memory_note(program: Program, chip: Chip) -> str:
    """HBM of the program per TensorCore: the buffer assignment's argument +
    output - alias + temp, the compiler's own figure, the fit in the chip."""
    parts = []
    cap = chip.hbm_gib * 2**30 / max(1, chip.planes_per_chip)
    allocs = (parse_buffer_assignment(program.files.buffer_assignment) if program.files.buffer_assignment
              else proto_allocations(program.main.proto) if program.main.proto else ())
    if allocs:
        ba = assignment_stats(allocs)
        parts.append(f"HBM from the buffer assignment: argument {ba.argument} + output {ba.output} - alias {ba.alias} "
                     f"+ temp {ba.temp} = {ba.peak} bytes ({ba.peak / cap:.1%} of {cap / 2**30:g} GiB per TensorCore)")
    comp = compiler_stats(program.files.compile_log) if program.files.compile_log else None
    if comp is None and program.files.compiler_json:
        comp = compiler_stats(program.files.compiler_json)
    if comp is not None:
        parts.append(f"the compiler's memory_analysis: argument {comp.argument} + output {comp.output} - alias "
                     f"{comp.alias} + temp {comp.temp} = {comp.peak} bytes ({comp.peak / cap:.1%} of the HBM)")
    return "; ".join(parts)


def load_program_trace(path: str | Path, *, chip: str | None = None, lines: Collection[str] | None = None) -> Trace:
    program = read_program(path)
    ch, chip_source = _chip(program, chip)
    rep = replay(program, ch)
    if not rep.ops:
        raise InputError(f"{path}: module {program.main.name} has no instructions to replay (statements not parsed?)")
    out = _tmpdir() / f"{len(list(_tmpdir().iterdir()))}.xplane.pb"
    out.write_bytes(to_xspace(rep))
    trace = load_trace(out, chip=ch.key, lines=lines)
    note = (f"{PREDICTED_NOTE}; module {program.why_main}; predicted step {rep.step_ps / 1e9:.3f} ms; "
            "assumptions: " + "; ".join(rep.assumptions))
    mem = memory_note(program, ch)
    if mem:
        note += "; " + mem
    # the replay writes a Steps line to give the pipeline its one step: the step is the schedule's, say so
    steps = {k: replace(v, source=STEP_SOURCE) for k, v in trace.steps.items()}
    return replace(trace, source=str(path), input_kind=INPUT_KIND, run=None, note=note,
                   chip_source=chip_source, steps=steps)
