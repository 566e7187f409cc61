"""profanalyzer.read.hlo readers on real compiled programs: the MaxText llama3.1-8b
TPU7x train-step dump (../shared/real-programs) and the HloProtos inside the
real v6e capture's /host:metadata. Expected values come from the files
themselves (regex passes over the raw text), not from literals."""

from __future__ import annotations

import ast
import gzip
import re
import tarfile
from pathlib import Path

import pytest

from profanalyzer.core.errors import InputError
from profanalyzer.read.hlo.load import is_program_path, read_program
from profanalyzer.read.hlo.model import UNKNOWN_CYCLES
from profanalyzer.read.hlo.schedule import schedule, trip_counts
from profanalyzer.read.hlo.text import parse_instruction, parse_text

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DUMP = SHARED / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz"
V6E = SHARED / "real-traces" / "v6e_host_offload.xplane.pb.gz"

need_dump = pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")
need_v6e = pytest.mark.skipif(not V6E.exists(), reason="../shared/real-traces/v6e_host_offload not present")


@pytest.fixture(scope="module")
def dump():
    return read_program(DUMP)


def _member(suffix: str) -> str:
    with tarfile.open(DUMP) as tf:
        m = next(m for m in tf.getmembers() if m.name.endswith(suffix))
        f = tf.extractfile(m)
        assert f is not None
        return f.read().decode()


@need_dump
def test_dump_picks_the_final_stage_and_the_main_module(dump):
    m = dump.main
    assert m.stage == "after_codegen" and m.source.endswith("after_codegen.txt")
    assert m.name == "jit_train_step" and m.is_scheduled and m.num_partitions == 16
    assert "jit_train_step" in dump.why_main
    text = _member("after_codegen.txt")
    # every instruction statement of the text is read (one per `%name = ` at the start of a statement)
    n_stmt = len(re.findall(r"^\s+(?:ROOT )?%[^\s=]+ = ", text, re.M))
    assert m.instruction_count == n_stmt
    assert "not parsed" not in m.source
    # the compiler's estimates: every `"estimated_cycles":"N"` of the text, INT64_MAX meaning unknown
    est = [int(x) for x in re.findall(r'"estimated_cycles":"(\d+)"', text)]
    known = [x for x in est if x < UNKNOWN_CYCLES]
    got = [i.estimated_cycles for c in m.computations for i in c.instructions if i.estimated_cycles is not None]
    assert sorted(got) == sorted(known) and len(est) > len(known)  # some are unknown
    assert m.estimated_cycles == sum(known)


@need_dump
def test_tarball_and_extracted_folder_read_the_same(dump, tmp_path):
    with tarfile.open(DUMP) as tf:
        tf.extractall(tmp_path, filter="data")
    folder = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert is_program_path(folder) and is_program_path(DUMP)
    again = read_program(folder)
    assert again.main.instruction_count == dump.main.instruction_count
    assert again.main.estimated_cycles == dump.main.estimated_cycles
    assert again.files.compile_log == dump.files.compile_log
    # a single stage file alone reads the same module
    one = read_program(next(folder.glob("*.after_codegen.txt")))
    assert one.main.instruction_count == dump.main.instruction_count
    # after_optimizations is chosen when after_codegen is absent
    next(folder.glob("*.after_codegen.txt")).unlink()
    assert read_program(folder).main.stage == "after_optimizations"


@need_dump
def test_multi_line_statements_stack_frames_and_metadata(dump):
    m = dump.main
    text = _member("after_codegen.txt")
    # a Pallas kernel whose frontend_attributes={kernel_metadata={...}} holds line breaks
    multi = [i for c in m.computations for i in c.instructions if "\n" in i.text]
    n_multi = len(re.findall(r"kernel_metadata=\{\n", text))
    assert len(multi) == n_multi > 0 and all("xprof_metadata" in i.kernel_metadata for i in multi)
    kernels = [i for i in multi if i.opcode == "custom-call"]
    assert kernels and all(i.custom_call_target == "tpu_custom_call" for i in kernels)
    for i in multi:  # the attributes after the line break are read too
        assert "splash" in i.metadata.op_name and i.metadata.stack_frame_id > 0 and i.config
    multi = kernels
    n_files = len(re.findall(r'^\d+ "', text.split("FunctionNames", 1)[0], re.M))
    assert len(m.stack.file_names) == n_files
    rows = [r for r in schedule(m) if r.instruction in multi]
    assert rows and all(r.source.endswith(tuple(f":{n}" for n in range(1, 10000))) for r in rows)
    # the innermost frame is the kernel's own (jax's splash module); the source line is the user's call of it
    assert all("splash_attention" in m.stack.location(r.instruction.metadata.stack_frame_id)[0] for r in rows)
    assert all("maxtext/layers/attention" in r.source for r in rows)
    assert {r.kernel for r in rows} == {re.sub(r"(\.\d+)+$", "", r.name) for r in rows}
    assert all(r.kernel.startswith("splash_mha_") for r in rows)


@need_dump
def test_while_trip_counts_from_the_condition(dump):
    m = dump.main
    log = dump.files.compile_log
    layers = int(re.search(r"Config param base_num_decoder_layers: (\d+)", log).group(1))
    trips = trip_counts(m)
    assert trips and all(t.n is not None for t in trips.values())
    assert "known_trip_count" not in _member("after_codegen.txt")  # libtpu 0.0.50.1: counted from the condition
    scans = {k: t for k, t in trips.items() if not re.search("windowed", m.instruction(k).attr("body"))}
    assert scans and {t.n for t in scans.values()} == {layers}  # the decoder-layer scans, forward and backward
    # a windowed-einsum ring visits every one of the fsdp shards: trip count x hops per trip
    for k, t in trips.items():
        body = m.by_name[m.instruction(k).attr("body").lstrip("%")]
        if "windowed" not in body.name:
            continue
        starts = [i for i in body.instructions if i.opcode == "collective-permute-start"]
        directions = len({i.attr("source_target_pairs") for i in starts})
        assert t.n * len(starts) // directions * directions == m.num_partitions, (k, t)


@need_dump
def test_async_pairs_and_threads(dump):
    from profanalyzer.read.hlo.schedule import async_pairs

    m = dump.main
    pairs = async_pairs(m)
    rows = {r.name: r for r in schedule(m)}
    dones = [r for r in rows.values() if r.async_role == "done"]
    assert dones and all(r.name in pairs for r in dones)
    for r in dones:
        start = rows[pairs[r.name]]
        assert start.async_role == "start" and start.computation == r.computation
        assert start.async_thread == m.instruction(pairs[r.name]).async_execution_thread
    # the all-gathers' starts and dones share one name stem (`<name>.call-start` / `.call-done`)
    ag = {d: s for d, s in pairs.items() if d.startswith("all-gather.") and d.endswith(".call-done")}
    assert ag and all(s == d[: -len("done")] + "start" for d, s in ag.items())
    assert {rows[s].async_thread for s in ag.values()} == {"sparsecore"}


@need_dump
def test_rows_count_each_execution(dump):
    m = dump.main
    rows = schedule(m)
    trips = trip_counts(m)
    for r in rows:
        want = 1
        for w in r.loops:
            want *= trips[w].n or 1
        in_cond = any(m.instruction(w).attr("condition").lstrip("%") == r.computation for w in r.loops[-1:])
        assert r.count == (want // (trips[r.loops[-1]].n or 1) * ((trips[r.loops[-1]].n or 1) + 1) if in_cond else want)


@need_v6e
def test_capture_metadata_protos():
    prog = read_program(V6E)
    names = {m.name for m in prog.modules}
    assert {"jit_f", "jit__psum", "jit_broadcast_in_dim", "jit_convert_element_type"} == names
    m = prog.main
    assert m.name == "jit_f" and m.is_scheduled
    adds = [i for c in m.computations for i in c.instructions if i.metadata.op_name.endswith("/add")
            and i.estimated_cycles]
    assert len(adds) == 3 and {i.estimated_cycles for i in adds} == {14180608}
    # the one-line text rendered for each proto instruction reads back as the same instruction
    for c in m.computations:
        for i in c.instructions:
            back = parse_instruction(i.text)
            assert back is not None and (back.name, back.opcode, back.shape.dims, back.operands) == (
                i.name, i.opcode, i.shape.dims, i.operands)
    assert any(s.memory_space == 5 for c in m.computations for i in c.instructions for s in i.shape.leaves())


@need_v6e
def test_proto_files_by_suffix(tmp_path):
    from profanalyzer.read.xspace import reader, xplane_pb2

    buf, index = reader.open_space(V6E, want=lambda r: r.kind == "metadata")
    ref = next(p for p in index.planes if p.kind == "metadata")
    plane = xplane_pb2.XPlane.FromString(bytes(buf[ref.offset:ref.offset + ref.length]))
    sid = next(k for k, v in plane.stat_metadata.items() if v.name == "Hlo Proto")
    blob = next(s.bytes_value for em in plane.event_metadata.values() if em.name.startswith("jit_f(")
                for s in em.stats if s.metadata_id == sid)
    want = read_program(V6E).main
    for name, data in (("jit_f.hlo_proto.pb", blob), ("module.hlo.pb", blob), ("jit_f.hlo_proto.pb.gz", gzip.compress(blob)),
                       ("module.hlo.pb.gz", gzip.compress(blob))):
        p = tmp_path / name
        p.write_bytes(data)
        assert is_program_path(p)
        got = read_program(p).main
        assert (got.name, got.instruction_count, got.estimated_cycles) == (want.name, want.instruction_count,
                                                                            want.estimated_cycles)


def test_text_reader_on_a_small_module():
    text = """HloModule m, is_scheduled=true

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %c = s32[] constant(3)
  %n = s32[] add(%p#0, %c)
  %x = f8e4m3fn[8]{0:S(1)} convert(%p#1)
  ROOT %t = (s32[], f32[8]{0}) tuple(%n, %p#1)
}

%cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]{0}) parameter(0)
  %lim = s32[] constant(10)
  ROOT %lt = pred[] compare(%q#0, %lim), direction=LT
}

ENTRY %main (a: f32[8]) -> (s32[], f32[8]) {
  %a = f32[8]{0} parameter(0)
  %z = s32[] constant(1)
  %init = (s32[], f32[8]{0}) tuple(%z, %a)
  ROOT %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, metadata={op_name="jit(f)/while" source_file="f.py" source_line=7}
}
"""
    m = parse_text(text)
    assert m.entry == "main" and m.is_scheduled
    t = trip_counts(m)["w"]
    assert t.n == 3 and "start 1" in t.how and "step 3" in t.how  # ceil((10 - 1) / 3)
    x = m.instruction("x")
    assert x.shape.dtype == "f8e4m3fn" and x.shape.memory_space == 1 and x.shape.bytes == 8
    rows = schedule(m)
    assert [r.name for r in rows][:4] == ["a", "z", "init", "w"]
    assert {r.count for r in rows if r.computation == "body"} == {3}
    assert {r.count for r in rows if r.computation == "cond"} == {4}
    assert next(r for r in rows if r.name == "w").source == "f.py:7"


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "junk.hlo.pb"
    bad.write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(InputError) as e:
        read_program(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(InputError):
        read_program(tmp_path / "missing.hlo.pb")
    empty = tmp_path / "dump"
    empty.mkdir()
    with pytest.raises(InputError):
        read_program(empty)


def test_the_package_is_the_input_floor():
    allowed = ("profanalyzer.read.hlo", "profanalyzer.core.errors", "profanalyzer.core.vocab", "profanalyzer.core.hardware",
               "profanalyzer.model.records", "profanalyzer.model.parts", "profanalyzer.model.trace", "profanalyzer.read.xspace")
    for f in sorted((ROOT / "profanalyzer" / "read" / "hlo").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for mod in mods:
                if mod.startswith("profanalyzer"):
                    assert mod.startswith(allowed), f"{f.name} imports {mod}"


def test_gzipped_hlo_text_is_a_program(tmp_path):
    # `NAME.hlo.txt.gz` (the corpus keeps compiled.as_text() gzipped) is read as HLO text, not tried as a capture
    src = ROOT / "sample_traces" / "compiled" / "dense_fsdp.hlo.txt.gz"
    assert is_program_path(src)
    prog = read_program(src)
    assert prog.main.is_scheduled and prog.main.instruction_count > 100
    junk = tmp_path / "notes.txt.gz"
    junk.write_bytes(gzip.compress(b"not HLO at all"))
    assert not is_program_path(junk)


@pytest.mark.parametrize("s", [
    "(bf16[8]{0} %a, f32[2,3]{1,0} %b), replica_groups={{0,1}}",
    '(s32[] %x), metadata={op_name="a(b" source_file="c)d"}), backend_config="{\\"k\\":1}"',
    '{1,0:T(8,128)} rest', "(a, (b, [c]), {d})", "(unclosed", '("q\\"(", x)', "(a\\b)", "(x)(y)",
])
def test_the_bracket_matcher_equals_the_quote_aware_walk(s):
    """_match_close counts brackets in one loop until a quote or backslash comes first (then the walk
    decides): the same index as the quote-aware walk from every bracket of the text."""
    from profanalyzer.read.hlo.text import _match_close, _match_close_quoted

    for i, c in enumerate(s):
        if c in "([{":
            assert _match_close(s, i) == _match_close_quoted(s, i), (s, i)


def test_parsed_shapes_are_shared_and_equal_to_a_fresh_parse():
    from profanalyzer.read.hlo.text import parse_shape

    text = "(bf16[8,128]{1,0:T(8,128)(2,1)}, s32[], (f32[2]{0}))"
    first = parse_shape(text)
    parse_shape.cache_clear()
    assert parse_shape(text) == first and parse_shape(text) is parse_shape(text)
    assert first.is_tuple and [p.dtype for p in first.parts] == ["bf16", "s32", "tuple"]
