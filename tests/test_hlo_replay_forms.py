"""The same compiled module read from its HloProto and from its HLO text
replays into the same predicted step (issue #25).

The text prints an `async-start` that wraps one instruction in its short
form (`call-start(...), to_apply=%called_computation`, `slice-start(...)`),
where the proto holds `async-start(calls=%async_computation)` around it; the
schedule and the replay read both as the same async pair, so the SparseCore
work inside an offloaded collective and the bytes of an async slice are
counted the same way whichever file was read."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from profanalyzer.core.hardware import TPU7X
from profanalyzer.read.hlo.load import read_program
from profanalyzer.read.hlo.model import Instruction, Shape
from profanalyzer.read.hlo.replay import replay
from profanalyzer.read.hlo.schedule import async_wrapper_role, schedule, wrapped_op

CORPUS = Path(__file__).resolve().parents[1] / "sample_traces" / "compiled"
#: programs with both forms of their final module: the after_codegen HloProto and the text of it
BOTH = sorted(p.name.removesuffix(".hlo.txt.gz") for p in CORPUS.glob("*.hlo.txt.gz")
              if (CORPUS / p.name.replace(".hlo.txt.gz", ".after_codegen.hlo.pb.gz")).exists())


def test_the_corpus_has_both_forms():
    assert len(BOTH) >= 15


@pytest.mark.parametrize("name", BOTH)
def test_proto_and_text_predict_the_same_step(name):
    proto = read_program(CORPUS / f"{name}.after_codegen.hlo.pb.gz")
    text = read_program(CORPUS / f"{name}.hlo.txt.gz")
    a, b = replay(proto, TPU7X), replay(text, TPU7X)
    # a kernel whose work needs a constant's values (a splash kernel's block mask): the proto carries them, the
    # text prints large constants as {...}: the proto prices it at its roofline, the text at its bytes, and says so
    roofline = {o.instruction.name for o in a.ops if o.how == "kernel_roofline"}
    elided = {o.instruction.name for o in b.ops if o.how == "hbm_bytes" and o.instruction.name in roofline}
    if elided:
        assert any(x.startswith("not priced honestly") for x in b.assumptions)
        ours = {o.instruction.name: (o.dur_ps, o.how) for o in a.ops if o.instruction.name not in elided}
        theirs = {o.instruction.name: (o.dur_ps, o.how) for o in b.ops if o.instruction.name not in elided}
        assert ours == theirs  # every other op costed the same way
        return
    assert a.step_ps == b.step_ps
    assert a.estimated_ps == b.estimated_ps
    # op by op: the same instructions at the same times, on the same core, costed the same way
    assert [(o.instruction.name, o.start_ps, o.dur_ps, o.sparsecore, o.how) for o in a.ops] == \
        [(o.instruction.name, o.start_ps, o.dur_ps, o.sparsecore, o.how) for o in b.ops]

    # the schedule tables hold the same work (the async wrappers themselves aside)
    def work(module):
        return Counter((r.count, r.thread, bool(r.in_async), r.opcode) for r in schedule(module)
                       if not r.trivial and r.opcode != "call" and async_wrapper_role(r.opcode) is None)

    assert work(proto.main) == work(text.main)


def test_short_form_async_starts_are_recognised():
    assert async_wrapper_role("call-start") == "start" and async_wrapper_role("slice-done") == "done"
    assert async_wrapper_role("async-update") == "update"
    # async pairs of their own are not wrappers
    for op in ("all-gather-start", "all-reduce-done", "copy-start", "collective-permute-done", "send-done", "fusion"):
        assert async_wrapper_role(op) is None
    start = Instruction("slice-start.2", "slice-start",
                        Shape("tuple", parts=(Shape("tuple", parts=(Shape("s8", (16,)),)), Shape("s8", (4,)),
                                              Shape("s32"))), operands=("p",), attrs=(("slice", "{[0:4]}"),))
    inner = wrapped_op(start)
    assert inner is not None and inner.opcode == "slice" and inner.shape == Shape("s8", (4,))
    assert inner.operands == ("p",) and inner.attr("slice") == "{[0:4]}"
    assert wrapped_op(Instruction("copy-start.1", "copy-start", Shape("f32", (4,)))) is None
