"""Expected vs measured: the compiler's own estimate of each op beside what a
capture measured, for captures whose `/host:metadata` carries the programs'
HloProtos.

Per op of the step's program (the main module the capture carries: its
instructions, matched by name in its runs on the XLA Modules line, inside the
kept steps; ops of other programs run beside it, a `jit__psum` say, are
counted apart and named in a note): the ops doing the work, at any depth (the
body of a while loop is compared op by op; the loop itself, whose time is its
body's, is not an op of its own here):
the compiler's `estimated_cycles` at the chip's assumed clock
(profanalyzer.core.hardware `clock_ghz`) and the measured durations on every
TensorCore of the capture, pooled: min, max and mean over all its runs on
all cores (`occurrences` counts them all, `cores` says on how many
TensorCores it ran). The TensorCores of an SPMD program run the same
instructions, so one pool per op; the per-step figures of the summary are
per TensorCore (the pooled sums over steps x TensorCores), as the rest of
the report. Ops the compiler gave no estimate (copy-done waits, custom
calls, synchronous collectives) are listed as measured time the compiler
did not count.

Imports: model, vocab, trace, hlo (the analysis stage's floor).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from profanalyzer.analyze.attributed import Attributed
from profanalyzer.analyze.attribution import locate
from profanalyzer.core.vocab import CONTROL_FLOW, PREDICTED_INPUT_KINDS
from profanalyzer.model.analysis import (
    ExpectedFamily,
    ExpectedOp,
    ExpectedSlow,
    ExpectedSummary,
)
from profanalyzer.model.trace import LINE_MODULES, LINE_OPS, Trace
from profanalyzer.read.hlo.model import Instruction, Program

__all__ = ["OpExpectation", "Expected", "expected_vs_measured", "summarize", "family_of", "SLOW_RATIO"]


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
    cores: int = 1  # TensorCores whose runs are pooled in the occurrences

    @property
    def ratio(self) -> float | None:
        """measured mean / expected."""
        return self.measured_mean_ps / self.expected_ps if self.expected_ps else None


@dataclass(frozen=True)
class Expected:
    clock_ghz: float
    ops: tuple[OpExpectation, ...]  # ops with an estimate, then without, each by measured time descending
    notes: tuple[str, ...]
    cores: int = 0  # TensorCores with XLA Ops events, pooled

    @property
    def with_estimate(self) -> tuple[OpExpectation, ...]:
        return tuple(o for o in self.ops if o.expected_ps is not None)

    @property
    def without_estimate(self) -> tuple[OpExpectation, ...]:
        return tuple(o for o in self.ops if o.expected_ps is None)


def expected_vs_measured(trace: Trace, programs: tuple[Program | None, str] | None = None,
                         kept_steps: Collection[int] | None = None) -> Expected:
    """Per measured op of the step's program on every TensorCore (runs pooled), the compiler's
    expectation. `programs`: the trace's programs and why none (Attributed.programs, read once per
    run); by default they are read from the trace's first host file. `kept_steps`: only the ops inside
    these steps' windows (None: the whole capture)."""
    notes: list[str] = []
    chip = trace.chip
    own = trace.program  # a replayed compiled program carries its own, text or proto alike
    if own is None and not trace.hosts:
        return Expected(chip.clock_ghz, (), ("no host files",))
    if own is None and not any(h.plane_kinds.get("metadata") for h in trace.hosts):
        return Expected(chip.clock_ghz, (), ("no HLO: the capture has no /host:metadata plane",))
    if programs is not None:
        program, why = programs
    else:
        program, why = ((own, "") if own is not None else trace.reads.programs(trace.hosts[0].file)
                        if trace.reads is not None else (None, "no host files"))
    if program is None:
        return Expected(chip.clock_ghz, (), (why,))
    main = program.main
    clock = chip.clock_hz
    rows: list[OpExpectation] = []
    by: dict[str, list[int]] = {}  # instruction name -> measured durations on every TensorCore
    on: dict[str, int] = {}  # instruction name -> TensorCores that ran it
    other: dict[str, float] = {}  # other programs -> their ops' time
    cores = 0
    matched_runs = False
    for plane in trace.tensorcores:
        ln = plane.line(LINE_OPS)
        if ln is None or not len(ln.events):
            continue
        cores += 1
        ev = ln.events
        names = plane.meta.short_names
        # the ops doing the work: events that enclose no other op (a loop's body ops, not the loop)
        keep = ~ev.encloses() & (ev.meta >= 0)
        if kept_steps is not None:
            st = trace.steps.get(plane.label)
            if st is not None and len(st):
                sel = np.isin(st.number, np.fromiter(kept_steps, dtype=np.int64))
                o = np.argsort(st.start_ps[sel])
                keep &= locate(st.start_ps[sel][o], st.end_ps[sel][o], ev.start_ps)[1]
        mods = plane.line(LINE_MODULES)
        if mods is not None and len(mods.events):
            me = mods.events
            top = np.flatnonzero(me.depth == 0)
            prog = [plane.meta.name[int(r)] if r >= 0 else "" for r in me.meta[top].tolist()]
            mine = np.asarray([p.split("(")[0] == main.name for p in prog], dtype=bool)
            if mine.any():
                matched_runs = True
                ws, we = me.start_ps[top], me.end_ps[top]
                o = np.argsort(ws[mine])
                in_main = locate(ws[mine][o], we[mine][o], ev.start_ps)[1]
                # the other programs' runs, all at once: each event in one of them, its time to that program
                theirs = np.flatnonzero(~mine)
                if len(theirs):
                    order = theirs[np.argsort(ws[theirs])]
                    at, inside = locate(ws[order], we[order], ev.start_ps)
                    inside &= keep & ~in_main
                    per_run = np.bincount(at[inside], weights=ev.dur_ps[inside], minlength=len(order))
                    for i, d in zip(order.tolist(), per_run.tolist(), strict=True):
                        if d > 0:
                            nm = prog[int(i)].split("(")[0] or "?"
                            other[nm] = other.get(nm, 0.0) + float(d)
                keep &= in_main
        idx = np.flatnonzero(keep)
        seen: set[str] = set()
        for r, d in zip(ev.meta[idx].tolist(), ev.dur_ps[idx].tolist(), strict=True):
            name = names[int(r)]
            by.setdefault(name, []).append(int(d))
            seen.add(name)
        for name in seen:
            on[name] = on.get(name, 0) + 1
    instr: dict[str, tuple[str, Instruction]] = {}
    for m in ((main,) if matched_runs else program.modules):
        for c in m.computations:
            for one in c.instructions:
                instr.setdefault(one.name, (m.name, one))
    for name, durs in by.items():
        prog_name, ins = instr.get(name, ("", None))
        if ins is None or ins.opcode in CONTROL_FLOW:
            continue
        cyc = ins.estimated_cycles
        rows.append(OpExpectation(name, prog_name, ins.opcode, ins.metadata.op_name, cyc,
                                  (cyc / clock * 1e12) if cyc is not None and clock else None, len(durs),
                                  min(durs), max(durs), float(np.mean(durs)), on[name]))
    if not clock:
        notes.append(f"no clock for {chip.name}: estimates not converted")
    if matched_runs and other:
        listed = ", ".join(f"{k} ({v / 1e9:.3f} ms)" for k, v in sorted(other.items(), key=lambda kv: (-kv[1], kv[0])))
        notes.append(f"the step's program is {main.name}; ops of other programs run in the same window are "
                     f"not compared (their HLO is not the step's): {listed}, over all runs and TensorCores")
    elif not matched_runs and len(program.modules) > 1:
        notes.append("no XLA Modules runs named like the main module: ops matched by name in every program "
                     "the capture carries")
    rows.sort(key=lambda r: (r.expected_ps is None, -r.measured_mean_ps * r.occurrences, r.name))
    if cores > 1:
        notes.append(f"measured runs pooled over {cores} TensorCores; per-step figures are per TensorCore")
    return Expected(chip.clock_ghz, tuple(rows), tuple(notes), cores)


#: An op is called out when its measured mean is at least this many times the compiler's expectation
#: (and it is at least SLOW_MIN_SHARE of the measured time of the ops with an estimate).
SLOW_RATIO = 1.5
SLOW_MIN_SHARE = 0.01
_SUFFIX = re.compile(r"(?:\.\d+)+$")


def family_of(name: str) -> str:
    """An op family: the instruction name without its `.N` numbers."""
    return _SUFFIX.sub("", name) or name


def _lever(o: OpExpectation) -> str:
    op = o.opcode
    if op.startswith("copy") or op in ("dynamic-slice", "dynamic-update-slice"):
        return "host offload / layout copies: check what the copy moves and whether it overlaps compute"
    if any(k in op for k in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")):
        return "collective overlap and SparseCore offload (the guide's communication levers)"
    if op in ("fusion", "convolution", "dot") and "dot_general" in o.tf_op:
        return "matmul shapes: MXU-aligned dimensions, FP8 where the model allows"
    return ""


def summarize(att: Attributed, steps: int) -> ExpectedSummary | None:
    """The analysis document's `expected` section (None when the capture carries no HLO or is itself a
    replayed compiled program, whose every time is the expectation)."""
    trace = att.trace
    if trace.input_kind in PREDICTED_INPUT_KINDS:
        return None
    exp = expected_vs_measured(trace, att.programs, att.kept_steps)
    if not exp.ops:
        return None
    n = max(1, steps) * max(1, exp.cores)  # per step per TensorCore

    def rec(o: OpExpectation) -> ExpectedOp:
        return ExpectedOp(o.name, family_of(o.name), o.program, o.opcode, o.tf_op, o.estimated_cycles, o.expected_ps,
                          o.occurrences, float(o.measured_min_ps), float(o.measured_max_ps), o.measured_mean_ps,
                          o.ratio, o.cores)

    with_est, without = exp.with_estimate, exp.without_estimate
    step_exp = sum((o.expected_ps or 0.0) * o.occurrences for o in with_est) / n
    step_meas = sum(o.measured_mean_ps * o.occurrences for o in with_est) / n
    step_un = sum(o.measured_mean_ps * o.occurrences for o in without) / n
    fam: dict[str, list[OpExpectation]] = {}
    for o in exp.ops:
        fam.setdefault(family_of(o.name), []).append(o)
    families = []
    for f, os_ in fam.items():
        e = [o for o in os_ if o.expected_ps is not None]
        e_ps = sum((o.expected_ps or 0.0) * o.occurrences for o in e) if e else None
        m_ps = sum(o.measured_mean_ps * o.occurrences for o in os_)
        m_e = sum(o.measured_mean_ps * o.occurrences for o in e)
        families.append(ExpectedFamily(f, len(os_), e_ps, m_ps, (m_e / e_ps) if e_ps else None))
    families.sort(key=lambda r: (-r.measured_ps, r.family))
    total = sum(o.measured_mean_ps * o.occurrences for o in with_est) or 1.0
    slower = []
    for o in with_est:
        r = o.ratio
        if r is None or r < SLOW_RATIO or o.measured_mean_ps * o.occurrences < SLOW_MIN_SHARE * total:
            continue
        ev = (f"measured {o.measured_mean_ps / 1e9:.3f} ms mean over {o.occurrences} run(s) on {o.cores} TensorCore(s) "
              f"({o.measured_min_ps / 1e9:.3f}-{o.measured_max_ps / 1e9:.3f} ms) vs the compiler's "
              f"{(o.expected_ps or 0) / 1e9:.3f} ms ({o.estimated_cycles} estimated cycles at {exp.clock_ghz:g} GHz): "
              f"{r:.2f}x")
        slower.append(ExpectedSlow(o.name, r, ev, _lever(o)))
    slower.sort(key=lambda s: (-s.ratio, s.name))
    notes = list(exp.notes)  # (the ops without an estimate: step_measured_unestimated_ps, said once by the page)
    notes.append(f"expected = estimated_cycles / {exp.clock_ghz:g} GHz, an assumed clock (inferred from the "
                 "chip's BF16 peak)")
    return ExpectedSummary(exp.clock_ghz, max(1, steps), step_exp, step_meas, step_un, SLOW_RATIO,
                           tuple(rec(o) for o in with_est), tuple(rec(o) for o in without), tuple(families),
                           tuple(slower), tuple(notes), max(1, exp.cores))
