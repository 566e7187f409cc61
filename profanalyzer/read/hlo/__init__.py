"""Compiled programs: the HLO the TPU compiler emits, read as a second,
independent witness of a step (issue #25).

* `load.read_program(path)`: HLO text, an HloProto (`*.hlo_proto.pb`,
  `*.hlo.pb`, `.gz`), an XLA dump folder or a `.tar.gz` of one, or the
  HloProtos in a capture's `/host:metadata` -> a frozen `model.Program`;
* `schedule.schedule(module)`: the per-scheduled-instruction table
  (`ScheduledOp`: opcode, fusion body, dtypes, async pairs and threads,
  SparseCore placement, custom-call targets, remat and phase, source line,
  estimated cycles, executions per step from while trip counts);
* `truth.hlo_bucket(...)`: each instruction's time bucket from the HLO alone;
* `memory`: the buffer assignment's peak HBM against the compiler's own
  `Memory analysis`;
* `replay`: the schedule replayed into a predicted step, built as an XSpace
  (profanalyzer.read.compiled hands it to the trace pipeline).

Imports: core, model and xspace (a capture's `/host:metadata` programs, the replay's XSpace);
never the read room's top (source, trace, compiled, allocator).
"""
