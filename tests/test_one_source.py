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
    from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes
    from profanalyzer.read.hlo.text import parse_text

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
    from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes

    with pytest.raises(ValueError, match="not an HloProto"):
        parse_hlo_proto_bytes(b"\x0f\xff\xff")


def test_the_decoders_instruction_constructor_equals_the_dataclass():
    """`Instruction.decoded` fills the instance dict in one step; it must give exactly the dataclass's fields and
    an object equal to (and hashing like) the one `__init__` builds."""
    import dataclasses

    from profanalyzer.read.hlo.model import Instruction, OpMetadata, Shape

    args = dict(name="dot.1", opcode="dot", shape=Shape("bf16", (8, 16)), operands=("p0", "p1"), called=(),
                attrs=(("lhs_contracting_dims", "{1}"),), metadata=OpMetadata("dot_general", "jit(f)/dot", "m.py", 3, 1),
                backend_config='{"x":1}', text="%dot.1 = ...", is_root=True, parameter_number=-1, literal="",
                literal_stats=())
    fast, slow = Instruction.decoded(**args), Instruction(**args)
    assert fast == slow and hash(fast) == hash(slow)
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(Instruction)}
    assert fast.config == {"x": 1}  # cached properties still work on the filled dict
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("s", ["jit(f)/dot_general", 'a"b', "back\\slash", "tab\there", "del\x7f", "caf\u00e9",
                               "", " spaced "])
def test_quoting_in_the_text_is_jsons(s):
    import json

    from profanalyzer.read.hlo.proto import _quoted

    assert _quoted(s) == json.dumps(s)


def test_no_field_walk_left_in_the_module_decoder():
    src = (ROOT / "profanalyzer" / "read" / "hlo" / "proto.py").read_text()
    assert "iter_fields" not in src and "xspace import wire" not in src and "hlo_min_pb2" in src


@pytest.mark.parametrize("form", ["hlo.txt.gz", "hlo.pb.gz"])
def test_a_compiled_program_keeps_its_program(form):
    from profanalyzer.analyze.attributed import trace_program
    from profanalyzer.pipeline.run import run
    from profanalyzer.read.hlo.load import read_program
    from profanalyzer.read.trace import read_trace

    path = ROOT / "sample_traces" / "compiled" / f"dense_fsdp.{form}"
    trace = read_trace(path)
    program, why = trace_program(trace)
    assert program is trace.program and why == ""
    assert program.main.name == read_program(path).main.name
    # the anti-patterns read the program: the text form has them as the proto form does
    a = run(path).analysis
    assert a.antipatterns is not None and len(a.antipatterns) > 0


def test_one_buffer_assignment_decoder():
    for rel in ("profanalyzer/analyze/memory.py", "profanalyzer/read/hlo/memory.py"):
        src = (ROOT / rel).read_text()
        assert "iter_fields(proto" not in src and "def parse_hlo_proto" not in src and "_HLO_MODULE" not in src, rel
    assert "read_assignment" in (ROOT / "profanalyzer" / "analyze" / "memory.py").read_text()


def test_the_peak_rule():
    from profanalyzer.read.hlo.memory import (
        ALLOC,
        FREE,
        SHARE_WITH,
        HeapEvent,
        trace_peak,
    )

    sizes = {1: 10, 2: 10, 3: 5}
    ev = [HeapEvent(ALLOC, 1, "a"), HeapEvent(SHARE_WITH, 2, "b", 1),  # b shares a's live memory: adds nothing
          HeapEvent(ALLOC, 3, "c"), HeapEvent(FREE, 1, "d"), HeapEvent(FREE, 2, "e"), HeapEvent(FREE, 3, "f")]
    p = trace_peak(sizes, ev)
    assert (p.bytes, p.at, p.live) == (15, 2, (1, 3))
    # a share whose canonical buffer is no longer live holds its own bytes
    ev2 = [HeapEvent(ALLOC, 1, "a"), HeapEvent(FREE, 1, "b"), HeapEvent(SHARE_WITH, 2, "c", 1), HeapEvent(ALLOC, 3, "d")]
    assert trace_peak(sizes, ev2).bytes == 15 and trace_peak(sizes, ev2).live == (2, 3)


@pytest.mark.parametrize("name", ["train_remat_full", "decode_gqa_bf16"])
def test_the_peak_rule_meets_the_compilers_recorded_peak(name, tmp_path):
    """The compiler records the heap's peak buffers (BufferAssignmentProto field 5); replaying its
    heap-simulator trace with the one rule comes within 0.01% of them (the real-TPU dumps; 6 KiB on the
    compiled corpus, tests/test_hlo_corpus_truth.py)."""
    from profanalyzer.read.hlo.memory import read_assignment, trace_peak

    with tarfile.open(CORPUS / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    ba = read_assignment(next((tmp_path / name / "dump").glob("*.after_optimizations.hlo.pb")).read_bytes())
    heap = next(a for a in ba.allocations if a.color == 0 and a.temp)
    sizes = dict(heap.assigned)
    recorded = sum(sizes.get(i, 0) for i in ba.peak_buffers[heap.index])
    trace = max((tuple(e for e in ev if e.buffer_id in sizes) for _i, ev in ba.heap_traces), key=len)
    assert recorded > 0 and abs(trace_peak(sizes, trace).bytes - recorded) <= 1e-4 * recorded


def test_a_compiled_program_is_built_in_memory(monkeypatch):
    """The replayed step is read as a capture from memory: no temporary capture is written."""
    import tempfile

    from profanalyzer.pipeline.run import RunOptions, run

    def no_disk(*a, **k):
        raise AssertionError("a temporary file was made for a compiled program")

    for name in ("mkdtemp", "mkstemp", "NamedTemporaryFile", "TemporaryDirectory"):
        monkeypatch.setattr(tempfile, name, no_disk)
    r = run(ROOT / "sample_traces" / "compiled" / "dense_fsdp.hlo.pb.gz", RunOptions(memory=True))
    assert r.attributed.trace.hosts[0].file == ""
    m, pm = r.analysis.memory, r.analysis.program_memory
    # the memory section and the program's HBM tell one peak (the compiler's sum), from its own buffer assignment
    assert m.source == "buffer_assignment" and m.peak_bytes == pm.peak_bytes and m.hbm_bytes == pm.capacity_bytes


def _count_opens(monkeypatch, paths) -> dict[str, list[str]]:
    """Each open of a file under `paths` while the returned counter is live: file -> the functions of
    profanalyzer's that opened it (builtins.open and io.open: what Path.read_bytes, gzip.open and
    mmap's file all go through)."""
    import builtins
    import io
    import os
    import traceback

    roots = [os.path.abspath(p) for p in paths]
    seen: dict[str, list[str]] = {}
    real = builtins.open

    def counting(f, *a, **k):
        if isinstance(f, (str, os.PathLike)):
            full = os.path.abspath(os.fspath(f))
            if any(full == r or full.startswith(r + os.sep) for r in roots):
                seen.setdefault(full, []).append(next((fr.name for fr in reversed(traceback.extract_stack()[:-1])
                                                       if "/profanalyzer/" in fr.filename), "?"))
        return real(f, *a, **k)

    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr(io, "open", counting)
    return seen


def _inputs() -> list[Path]:
    """Every sample capture, the two-host run folder, one corpus program of each form, the shared real captures."""
    from realcap import REAL

    samples = ROOT / "sample_traces"
    out = sorted(samples.glob("*.xplane.pb.gz")) + [samples / "dense_short_fsdp_2hosts"]
    out += [samples / "compiled" / n for n in ("dense_fsdp.hlo.pb.gz", "dense_fsdp.hlo.txt.gz", "serving_decode.hlo.pb.gz")]
    out += sorted(REAL.glob("*.xplane.pb.gz")) if REAL.is_dir() else []
    return out


@pytest.mark.parametrize("path", _inputs(), ids=lambda p: p.name)
def test_a_run_opens_its_input_once(path, monkeypatch):
    """Issue 33: the input is opened once per run, whatever the run reads of it -- the trace, its programs,
    counter lines, host lines and allocator activity (--memory --host-activity ask for every one) -- and the
    report's hash is of the same bytes. Before the Source: 4 opens (the JSON sniff, the trace, the programs,
    the counters), 9 for a plain real-TPU capture with --memory."""
    from profanalyzer.pipeline.run import RunOptions, run

    seen = _count_opens(monkeypatch, [path])
    r = run(path, RunOptions(memory=True, host_activity=True))
    digest = r.source.sha256()
    monkeypatch.undo()
    from profanalyzer.core.outputs import file_sha256

    assert digest == file_sha256(path)  # the footer's hash: the bytes read are the file's
    captures = {k: v for k, v in seen.items() if ".xplane.pb" in k or not path.is_dir()}
    assert captures and all(v == ["_read_raw"] for v in captures.values()), seen
    # a folder's other files (its truth.json) are hashed for the footer, never read by the analysis
    assert all(v == ["add_file_to_hash"] for k, v in seen.items() if k not in captures), seen


def test_a_real_tpu_capture_with_its_dump_opens_the_capture_once(monkeypatch):
    """A plain (not gzipped) capture of the real-TPU corpus, whose memory, programs and dump are read."""
    from conftest import sample_path

    from profanalyzer.pipeline.run import RunOptions, run

    logdir = sample_path("real-tpu/train_remat_full")
    (capture,) = logdir.rglob("*.xplane.pb")
    seen = _count_opens(monkeypatch, [capture])
    r = run(logdir, RunOptions(memory=True, host_activity=True))
    monkeypatch.undo()
    assert r.analysis.memory is not None and r.analysis.memory.program
    assert seen == {str(capture): ["_read_raw"]}, seen


def test_a_saved_document_is_opened_once(monkeypatch, tmp_path):
    import json

    from profanalyzer.pipeline.run import run

    doc = tmp_path / "a.json"
    doc.write_text(json.dumps(run(ROOT / "sample_traces" / "bf16_dense.xplane.pb.gz").document()))
    seen = _count_opens(monkeypatch, [doc])
    r = run(doc)
    assert r.attributed is None and r.source is not None and r.source.kind == "document"
    assert seen == {str(doc): ["_read_raw"]}


def test_the_cli_opens_a_capture_once_for_its_report_and_hash(monkeypatch, tmp_path, capsys):
    """`profanalyze analyze` writing the HTML (whose footer hashes the input) and the JSON."""
    from conftest import run_cli

    path = ROOT / "sample_traces" / "serving_tp2_w4.xplane.pb.gz"
    seen = _count_opens(monkeypatch, [path])
    rc, _, err = run_cli(capsys, "analyze", path, "-o", tmp_path / "r.html", "--json", tmp_path / "r.json", "-q")
    assert rc == 0, err
    assert seen == {str(path): ["_read_raw"]}, seen


def test_the_overlap_stage_returns_its_windows_and_writes_nothing_into_the_context():
    """Stages return their outputs: the overlap stage's windows are its result's, the context (Attributed)
    holds none, and the trace export builds the same windows from the run's memo."""
    import dataclasses

    import numpy as np

    from profanalyzer.analyze.overlap import analyze_overlap, windows_for_core
    from profanalyzer.pipeline.run import run

    att = run(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz").attributed
    assert "windows" not in {f.name for f in dataclasses.fields(att)}
    res = analyze_overlap(att)
    assert len(res.windows) == len(att.work) > 1
    for w, wins in zip(att.work, res.windows, strict=True):
        mine = windows_for_core(w.plane, w.classes, {}, att.memo)[0]
        assert len(wins) and np.array_equal(mine.start, wins.start) and np.array_equal(mine.end, wins.end)
        assert np.array_equal(mine.type, wins.type)


@pytest.mark.parametrize("name", ["dense_short_fsdp.xplane.pb.gz", "pallas_kernel_counters.xplane.pb.gz"])
def test_the_analysis_stages_write_nothing_into_the_context(name):
    """What `attribute` reads once for the later stages (the programs, counter lines, KV-cache contractions,
    kernel bytes) are typed fields of the context, set when it is built; the analysis stages read them and
    change nothing of it (no `lazy` dict filled on the way)."""
    import copy
    import dataclasses

    from profanalyzer.analyze.analysis import analyze_attributed
    from profanalyzer.pipeline.run import run

    att = run(ROOT / "sample_traces" / name).attributed
    fields = {f.name for f in dataclasses.fields(att)}
    assert {"programs", "counter_lines", "kv_contractions", "kernel_bytes"} <= fields and "lazy" not in fields
    kept = {k: (id(getattr(att, k)), copy.deepcopy(getattr(att, k)))
            for k in ("programs", "counter_lines", "kv_contractions", "kernel_bytes", "kept_steps", "step_table")}
    analyze_attributed(att)
    for k, (ident, value) in kept.items():
        now = getattr(att, k)
        assert id(now) == ident, k
        assert repr(now) == repr(value), k
