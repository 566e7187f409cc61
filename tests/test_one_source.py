"""Issue 33 (in part): HloProtos are decoded by the protobuf runtime from the
project's own `hlo_min.proto`, and a compiled program keeps its Program
through the replay, text and proto alike. Truth: the compiler wrote the same
module as text and as proto into each corpus dump; they must read the same
(the text prints a while's condition before its body, the proto's ids list
the body first: called computations compare as sets)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "real-tpu"


def _key(m):
    def shape(s):
        return tuple((x.dtype, x.dims, x.memory_space) for x in s.leaves())

    return {c.name: [(i.name, i.opcode, shape(i.shape), i.operands, tuple(sorted(i.called)), i.metadata.op_name,
                      i.metadata.stack_frame_id, i.parameter_number, i.is_root) for i in c.instructions]
            for c in m.computations}


@pytest.mark.parametrize("name", ["decode_paged_kernel", "long_splash_b512", "train_remat_dots"])
def test_proto_and_text_of_one_compile_read_the_same(name, tmp_path):
    from profanalyzer.hlo.proto import parse_hlo_proto_bytes
    from profanalyzer.hlo.text import parse_text

    with tarfile.open(CORPUS / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    dump = tmp_path / name / "dump"
    pb = next(dump.glob("*.after_optimizations.hlo.pb"))
    t = parse_text(pb.with_name(pb.name.removesuffix(".hlo.pb") + ".txt").read_text())
    p = parse_hlo_proto_bytes(pb.read_bytes())
    assert sum(len(c.instructions) for c in p.computations) > 100
    assert _key(t) == _key(p)
    assert (t.entry, t.stack) == (p.entry, p.stack)


def test_bytes_that_are_no_hlo_proto_say_so():
    from profanalyzer.hlo.proto import parse_hlo_proto_bytes

    with pytest.raises(ValueError, match="not an HloProto"):
        parse_hlo_proto_bytes(b"\x0f\xff\xff")


def test_no_field_walk_left_in_the_module_decoder():
    src = (ROOT / "profanalyzer" / "hlo" / "proto.py").read_text()
    assert "iter_fields" not in src and "xspace import wire" not in src and "hlo_min_pb2" in src


@pytest.mark.parametrize("form", ["hlo.txt.gz", "hlo.pb.gz"])
def test_a_compiled_program_keeps_its_program(form):
    from profanalyzer.analyze.analysis import read_trace
    from profanalyzer.analyze.attributed import trace_program
    from profanalyzer.hlo.load import read_program
    from profanalyzer.run import run

    path = ROOT / "sample_traces" / "compiled" / f"dense_fsdp.{form}"
    trace = read_trace(path)
    program, why = trace_program(trace)
    assert program is trace.program and why == ""
    assert program.main.name == read_program(path).main.name
    # the anti-patterns read the program: the text form has them as the proto form does
    a = run(path).analysis
    assert a.antipatterns is not None and len(a.antipatterns) > 0
