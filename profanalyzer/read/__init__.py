"""The read stage: the input of a run, opened once, and its two decoders.

* `source.open_source(path) -> Source`: what the user passed (a capture file,
  a run folder, a log dir, a saved document, a compiled program), its bytes
  read once and its kind told from them; `sources`: the URL inputs fetched
  into a private folder first.
* `trace.read_trace(source) -> Trace`: the stage's entry point as
  `pipeline.run` calls it; a capture is decoded by `xspace/`, a compiled
  program is read by `hlo/` and replayed into its predicted step in memory
  (`compiled`).
* `xspace/`: the XSpace capture decoder (wire format, planes, op tables, the
  trace model's build).
* `hlo/`: the compiled program's decoder and model (HLO text and HloProto,
  buffer assignment, schedule, flops, the replay).
* `allocator`: a capture's memory sources (its program's buffer assignment,
  decoded by `hlo/`, and the allocator events of its host planes).

`xspace/` never imports `hlo/`; what joins them lives here at the room's top.
Nothing after this stage imports a reader: the Trace keeps its Source as
`Trace.reads`, and later stages ask it (tests/test_architecture.py).
"""
