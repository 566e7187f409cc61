"""Issue 33 item 2: the optional C accelerator of the HloProto decoder
(`profanalyzer.read.hlo._hlo`) builds the plain instructions in one pass; the
others (constants, convolutions and dots, collectives' replica groups, strings
that need JSON escapes, a field the runtime would merge) take the Python path.
Truth: the Python path, which the equality tests of test_one_source.py hold to
the compiler's own text. Both paths must give equal modules, text included."""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "real-tpu"

proto = pytest.importorskip("profanalyzer.read.hlo.proto")
if proto._accel is None:
    pytest.skip("the C accelerator is not built (no compiler at install time): the Python path alone runs",
                allow_module_level=True)


def both(data: bytes, monkeypatch):
    """The module read with the accelerator and without it."""
    fast = proto.parse_hlo_proto_bytes(data, "x")
    with monkeypatch.context() as m:
        m.setattr(proto, "_accel", None)
        slow = proto.parse_hlo_proto_bytes(data, "x")
    return fast, slow


def _committed_protos() -> list[Path]:
    return sorted((ROOT / "sample_traces" / "compiled").glob("*.hlo.pb.gz"))


@pytest.mark.parametrize("path", _committed_protos(), ids=lambda p: p.name)
def test_the_accelerated_module_equals_the_python_paths(path, monkeypatch):
    fast, slow = both(gzip.decompress(path.read_bytes()), monkeypatch)
    assert fast == slow
    assert [i.text for c in fast.computations for i in c.instructions] == [
        i.text for c in slow.computations for i in c.instructions]


@pytest.mark.parametrize("name", ["moe_gmm", "decode_paged_kernel", "train_remat_full"])
def test_a_real_tpu_programs_are_read_the_same(name, tmp_path, monkeypatch):
    """The dump's HloProto of a program that ran on the lent TPU: most instructions take the fast path."""
    with tarfile.open(CORPUS / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    pb = next((tmp_path / name / "dump").glob("*.after_optimizations.hlo.pb"))
    data = pb.read_bytes()
    fast, slow = both(data, monkeypatch)
    assert fast == slow
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    top = pb2.HloProto.FromString(data)
    nested = bool(top.hlo_module.computations)
    mod = top.hlo_module if nested else pb2.Module.FromString(data)
    made = proto._accelerated(data, nested, proto._names_of(mod.computations))
    fast_share = sum(i is not None for c in made for i in c) / sum(len(c) for c in made)
    assert fast_share > 0.5, fast_share


def _module(*instructions, root_id: int = 0):
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    m = pb2.Module(name="m", entry_computation_name="main", entry_computation_id=1)
    body = m.computations.add(name="body", id=2)
    body.instructions.add(name="b.p", opcode="parameter", id=200, shape=pb2.Shape(element_type=4))
    cond = m.computations.add(name="cond", id=3)
    cond.instructions.add(name="c.p", opcode="parameter", id=300, shape=pb2.Shape(element_type=1))
    main = m.computations.add(name="main", id=1, root_id=root_id)
    for i in instructions:
        main.instructions.append(i)
    return m


def _ins(**kw):
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    kw.setdefault("shape", pb2.Shape(element_type=11, dimensions=[4, 8], layout=pb2.Layout(minor_to_major=[1, 0])))
    return pb2.Instruction(**kw)


def _edge_cases():
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    fa = pb2.FrontendAttributes(map=[pb2.FrontendAttribute(key="_xla_stream", value="1"),
                                     pb2.FrontendAttribute(key="sharding", value="{devices=[2]0,1}")])
    md = pb2.OpMetadata(op_type="dot_general", op_name="jit(f)/dot", source_file="m.py", source_line=3,
                        stack_frame_id=2)
    return {
        "parameter 0": [_ins(name="p0", opcode="parameter", id=10)],
        "parameter 3 with metadata": [_ins(name="p3", opcode="parameter", id=11, parameter_number=3, metadata=md)],
        "operands, root, unknown operand": [_ins(name="p0", opcode="parameter", id=10),
                                            _ins(name="add", opcode="add", id=12, operand_ids=[10, 10, 999])],
        "gte index 0 and 2": [_ins(name="g0", opcode="get-tuple-element", id=13, operand_ids=[10]),
                              _ins(name="g2", opcode="get-tuple-element", id=14, tuple_index=2)],
        "fusion kinds": [_ins(name="f1", opcode="fusion", id=15, fusion_kind="kLoop", called_computation_ids=[2]),
                         _ins(name="f2", opcode="fusion", id=16, fusion_kind="output", called_computation_ids=[2, 3])],
        "while, conditional, to_apply, unknown computation": [
            _ins(name="w", opcode="while", id=17, called_computation_ids=[2, 3, 2]),
            _ins(name="w1", opcode="while", id=18, called_computation_ids=[3]),
            _ins(name="cd", opcode="conditional", id=19, called_computation_ids=[2, 3, 77]),
            _ins(name="r", opcode="reduce", id=20, dimensions=[0, 1], called_computation_ids=[2])],
        "dims, slices, channel, direction": [
            _ins(name="t", opcode="transpose", id=21, dimensions=[1, 0]),
            _ins(name="add2", opcode="add", id=22, dimensions=[1, 0]),  # dimensions not printed for add
            _ins(name="ga", opcode="gather", id=23, gather_slice_sizes=[1, 8]),
            _ins(name="cp", opcode="collective-permute", id=24, channel_id=5),
            _ins(name="cmp", opcode="compare", id=25, comparison_direction="LT")],
        "custom call, thread, frontend, backend": [
            _ins(name="cc", opcode="custom-call", id=26, custom_call_target="tpu_custom_call",
                 backend_config=b'{"k":"v"}', frontend_attributes=fa, async_execution_thread="sparsecore"),
            _ins(name="bad", opcode="custom-call", id=27, backend_config=b"\xff\xfe")],
        "strings that need escapes (Python path)": [
            _ins(name="q", opcode="custom-call", id=28, custom_call_target='a"b'),
            _ins(name="fq", opcode="add", id=29, frontend_attributes=pb2.FrontendAttributes(
                map=[pb2.FrontendAttribute(key="k", value="tab\there")])),
            _ins(name="m\u00e9", opcode="add", id=30,
                 metadata=pb2.OpMetadata(op_name="caf\u00e9/\"x\"", source_file="a\\b.py"))],
        "constant, dot, replica groups (Python path)": [
            _ins(name="c", opcode="constant", id=31, literal=pb2.Literal(s32s=[7])),
            _ins(name="d", opcode="dot", id=32, operand_ids=[10, 10],
                 dot_dimension_numbers=pb2.DotDimensionNumbers(lhs_contracting_dimensions=[1])),
            _ins(name="ar", opcode="all-reduce", id=33, replica_groups=[pb2.ReplicaGroup(replica_ids=[0, 1])],
                 called_computation_ids=[2])],
        "reduce-window's window is not printed": [
            _ins(name="rw", opcode="reduce-window", id=34,
                 window=pb2.Window(dimensions=[pb2.WindowDimension(size=2)]), called_computation_ids=[2])],
        "tuple shape, no shape": [
            _ins(name="tu", opcode="tuple", id=35, shape=pb2.Shape(element_type=13, tuple_shapes=[
                pb2.Shape(element_type=11, dimensions=[2]), pb2.Shape(element_type=16, dimensions=[3, 3])])),
            pb2.Instruction(name="ns", opcode="after-all", id=36)],
    }


@pytest.mark.parametrize("case", list(_edge_cases()))
def test_edge_cases_read_the_same_on_both_paths(case, monkeypatch):
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    instructions = _edge_cases()[case]
    m = _module(*instructions, root_id=instructions[-1].id)
    for data in (m.SerializeToString(), pb2.HloProto(hlo_module=m).SerializeToString()):
        fast, slow = both(data, monkeypatch)
        assert fast == slow, case
        assert [i.text for i in fast.computations[-1].instructions] == [i.text for i in slow.computations[-1].instructions]


def test_bytes_the_accelerator_cannot_read_take_the_python_path(monkeypatch):
    """A module whose bytes this reader does not follow (here: a computation given with a wrong wire type for
    its instructions) is read by the Python path alone, or refused by it alike."""
    from profanalyzer.read.hlo import hlo_min_pb2 as pb2

    names = proto._Names({}, {})
    assert proto._accelerated(b"\x1a\x02\x10\x01", False, names) is None  # computation: field 2 as a varint
    m = _module(_ins(name="p0", opcode="parameter", id=10))
    assert proto._accelerated(pb2.HloProto(hlo_module=m).SerializeToString() * 2, True, names) is None  # module twice
