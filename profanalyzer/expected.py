"""Expected vs measured: the compiler's own estimate of each op beside what a
capture measured, for captures whose `/host:metadata` carries the programs'
HloProtos.

Per op (instruction name, on the first TensorCore that ran it): the
compiler's `estimated_cycles` at the chip's assumed clock
(profanalyzer.hardware `clock_ghz`) and the measured durations (min, max,
mean over its occurrences). Ops the compiler gave no estimate (copy-done
waits, custom calls, synchronous collectives) are listed as measured time
the compiler did not count.

Imports: hardware, trace, hlo (the analysis stage's floor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profanalyzer.errors import InputError
from profanalyzer.hlo.load import read_program
from profanalyzer.trace import LINE_OPS, Trace

__all__ = ["OpExpectation", "Expected", "expected_vs_measured"]


@dataclass(frozen=True)
class OpExpectation:
    name: str
    program: str
    opcode: str
    tf_op: str
    estimated_cycles: int | None
    expected_ps: float | None
    occurrences: int
    measured_min_ps: int
    measured_max_ps: int
    measured_mean_ps: float

    @property
    def ratio(self) -> float | None:
        """measured mean / expected."""
        return self.measured_mean_ps / self.expected_ps if self.expected_ps else None


@dataclass(frozen=True)
class Expected:
    clock_ghz: float
    ops: tuple[OpExpectation, ...]  # ops with an estimate, then without, each by measured time descending
    notes: tuple[str, ...]

    @property
    def with_estimate(self) -> tuple[OpExpectation, ...]:
        return tuple(o for o in self.ops if o.expected_ps is not None)

    @property
    def without_estimate(self) -> tuple[OpExpectation, ...]:
        return tuple(o for o in self.ops if o.expected_ps is None)


def expected_vs_measured(trace: Trace) -> Expected:
    notes: list[str] = []
    chip = trace.chip
    if not trace.hosts:
        return Expected(chip.clock_ghz, (), ("no host files",))
    try:
        program = read_program(trace.hosts[0].file)
    except InputError as e:
        return Expected(chip.clock_ghz, (), (f"no HLO: {e}",))
    instr = {}
    for m in program.modules:
        for c in m.computations:
            for i in c.instructions:
                instr.setdefault(i.name, (m.name, i))
    clock = chip.clock_hz
    rows: list[OpExpectation] = []
    for plane in trace.tensorcores[:1]:
        ln = plane.line(LINE_OPS)
        if ln is None or not len(ln.events):
            continue
        ev = ln.events
        names = plane.meta.short_names
        top = ev.depth == 0
        by: dict[str, list[int]] = {}
        for k in np.flatnonzero(top).tolist():
            by.setdefault(names[int(ev.meta[k])], []).append(int(ev.dur_ps[k]))
        for name, durs in by.items():
            prog, ins = instr.get(name, ("", None))
            if ins is None:
                continue
            cyc = ins.estimated_cycles
            rows.append(OpExpectation(name, prog, ins.opcode, ins.metadata.op_name, cyc,
                                      (cyc / clock * 1e12) if cyc is not None and clock else None, len(durs),
                                      min(durs), max(durs), float(np.mean(durs))))
    if not clock:
        notes.append(f"no clock for {chip.name}: estimates not converted")
    rows.sort(key=lambda r: (r.expected_ps is None, -r.measured_mean_ps * r.occurrences, r.name))
    return Expected(chip.clock_ghz, tuple(rows), tuple(notes))
