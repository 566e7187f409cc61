"""The compiler as the second witness, on every program of the real-compiler
corpus (sample_traces/compiled/): each scheduled instruction of the final
(after_codegen) module goes through the trace classifier as a capture would
name it (profanalyzer.read.hlo.schedule.xprof_text: the HLO long form with operand
shapes), and through the whole trace pipeline's per-plane classification once
the program is replayed into a capture; both are compared with the bucket
the HLO itself gives (profanalyzer.read.hlo.truth). Then the replay's SparseCore
offload verdict against the compiler's placement, and the buffer
assignment's HBM against the compiler's memory_analysis()."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import ROOT
from test_hlo_truth import compare, weighted_agreement

from profanalyzer.analyze.attribution import classify_plane
from profanalyzer.core.hardware import chip_from_device_type
from profanalyzer.core.vocab import BUCKETS, OFFLOADABLE
from profanalyzer.model.trace import LINE_OPS
from profanalyzer.read.compiled import load_program_trace
from profanalyzer.read.hlo.load import read_program
from profanalyzer.read.hlo.schedule import schedule
from profanalyzer.read.hlo.truth import hlo_bucket

CORPUS = ROOT / "sample_traces" / "compiled"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PROGRAMS = MANIFEST["programs"]

_RING_BACKWARD = ("a backward hop of a collective-matmul ring that sends a weight shard just sliced out of the "
                  "stacked layer weights (a dynamic-slice fusion, through a copy / bitcast): its own text cannot "
                  "tell an all-gather hop from a reduce-scatter one (the classifier reads a computed operand as "
                  "partial sums); the HLO can (the windowed loop of its computation rings that shape, an _ag loop); "
                  "no compiler estimate (ICI time only)")
#: program -> instruction -> (truth, classifier, reason). Nothing else may disagree.
KNOWN_MISSES: dict[str, dict[str, tuple[str, str, str]]] = {
    "mlp_fsdp_collective_matmul": {
        f"collective-permute-{r}.{n}": ("all_gather", "reduce_scatter", _RING_BACKWARD)
        for n in (8, 9) for r in ("start", "done")
    },
}


def _program(p: dict):
    return read_program(CORPUS / p["files"]["hlo_proto_after_codegen"])


def _chip(p: dict):
    chip = chip_from_device_type(p["device_kind"])
    assert chip is not None, p["device_kind"]
    return chip


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_classifier_agrees_with_the_hlo(p):
    rows = compare(_program(p))
    share, total = weighted_agreement(rows)
    assert total > 0 and share >= 0.99, share
    misses = {r.name: (t.bucket, b) for r, t, _c, b in rows if b != t.bucket}
    assert misses == {k: v[:2] for k, v in KNOWN_MISSES.get(p["name"], {}).items()}


def _replayed_rows(p: dict):
    """(instruction name, truth bucket, pipeline bucket, predicted ps of its estimated runs) per op of the
    replayed capture's first TensorCore."""
    prog = _program(p)
    m = prog.main
    truth = {}
    estimated = set()
    for r in schedule(m):
        t = hlo_bucket(m, r)
        if t.bucket is not None:
            truth[r.name] = t.bucket
        if r.estimated_cycles:
            estimated.add(r.name)
    trace = load_program_trace(CORPUS / p["files"]["hlo_proto_after_codegen"], chip=_chip(p).key)
    plane = trace.tensorcores[0]
    classes = classify_plane(plane)
    ev = plane.line(LINE_OPS).events
    dur = np.bincount(ev.meta.astype(np.int64), weights=ev.dur_ps.astype(np.float64), minlength=len(plane.meta))
    seen = np.zeros(len(plane.meta), dtype=bool)
    seen[np.unique(ev.meta.astype(np.int64))] = True
    out = []
    for k in np.flatnonzero(seen).tolist():
        name = plane.meta.display_name[k]
        if name in truth:
            out.append((name, truth[name], BUCKETS[int(classes.bucket[k])], dur[k] if name in estimated else 0.0))
    return trace, out


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_the_replayed_capture_agrees_with_the_hlo(p):
    trace, rows = _replayed_rows(p)
    assert trace.input_kind == "compiled_program"
    total = sum(w for *_, w in rows)
    agree = sum(w for _n, t, b, w in rows if t == b)
    assert total > 0 and agree / total >= 0.99, agree / total
    misses = {n: (t, b) for n, t, b, _w in rows if t != b}
    assert misses == {k: v[:2] for k, v in KNOWN_MISSES.get(p["name"], {}).items()}


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_partitions_from_the_collectives_groups(p):
    # the HloProto holds no num_partitions: the collectives' replica groups give the device count
    assert _program(p).main.num_partitions == p["devices"]


def _analyze(p: dict, tmp_path, capsys, *extra) -> dict:
    from conftest import run_cli

    out = tmp_path / f"{p['name']}.json"
    rc, _, _ = run_cli(capsys, "analyze", CORPUS / p["files"]["hlo_proto"], "--chip", _chip(p).key, "--json", out,
                       "--no-html", *extra)
    assert rc == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_sparsecore_offload_verdict_is_the_compilers_placement(p, tmp_path, capsys):
    doc = _analyze(p, tmp_path, capsys)
    m = _program(p).main
    placed = {k: False for k in OFFLOADABLE}
    present = set()
    for r in schedule(m):
        t = hlo_bucket(m, r)
        present.add(t.collective)
        if r.sparsecore and t.collective in placed:
            placed[t.collective] = True
    sc = doc["sparsecore_offload"]
    verdict = sc.get("offloaded") or {}
    # per collective type the program runs: offloaded in the analysis <=> on the SparseCore in the HLO
    assert {k: bool(verdict.get(k)) for k in OFFLOADABLE if k in present} == \
        {k: v for k, v in placed.items() if k in present}, (sc, placed)
    assert sc["detected"] == any(placed.values()) or not any(placed.values())
    off_flags = [f for f in p["flags"] if "sparse_core_collective_offload" in f and f.endswith("=false")]
    for f in off_flags:  # a flag turned off: that type is not offloaded
        kind = f.split("offload_", 1)[1].split("=")[0]
        assert not placed[kind], f
    if p["name"] == "dense_fsdp":  # default flags on TPU7x: all-gathers and reduce-scatters on the SparseCore
        assert placed["all_gather"] and placed["reduce_scatter"] and not placed["all_reduce"]


def _hbm(p: dict):
    from profanalyzer.read.hlo.memory import (
        assignment_stats,
        compiler_stats,
        proto_allocations,
    )

    proto = gzip.decompress((CORPUS / p["files"]["hlo_proto"]).read_bytes())
    ours = assignment_stats(proto_allocations(proto))
    comp = compiler_stats((CORPUS / p["files"]["compiler"]).read_text())
    assert comp is not None
    return ours, comp


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
@pytest.mark.parametrize("stage", ["hlo_proto", "hlo_proto_after_codegen"])
def test_the_analysis_states_the_final_hbm_beside_memory_analysis(p, stage, tmp_path, capsys):
    # the after-optimizations proto carries its buffer assignment; the after_codegen one (the final stage) has
    # none and the analysis reads the assignment of the proto beside it. Either way the note states the final
    # executable's figures (hlo.memory.final_stats), the compiler's, and the fit per TensorCore
    from conftest import run_cli

    ours, comp, _, _ = _final(p)
    assert ours is not None
    out = tmp_path / "doc.json"
    rc, _, _ = run_cli(capsys, "analyze", CORPUS / p["files"][stage], "--chip", _chip(p).key, "--json", out,
                       "--no-html")
    assert rc == 0
    note = next(n for n in json.loads(out.read_text())["notes"] if "HBM from the buffer assignment" in n)
    assert f"temp {ours.temp} = {ours.peak} bytes" in note and f"temp {comp.temp} = {comp.peak} bytes" in note
    assert "final-executable temp" in note and "GiB per TensorCore" in note
    assert abs(ours.peak - comp.peak) <= 0.01 * comp.peak


def _final(p: dict):
    from profanalyzer.read.hlo.memory import compiler_stats, final_stats, proto_heap

    proto = gzip.decompress((CORPUS / p["files"]["hlo_proto"]).read_bytes())
    comp = compiler_stats((CORPUS / p["files"]["compiler"]).read_text())
    assert comp is not None
    return final_stats(proto), comp, proto_heap(proto), proto


def _hbm_per_tensorcore(p: dict) -> float:
    chip = _chip(p)
    return chip.hbm_gib * 2**30 / chip.planes_per_chip


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_peak_hbm_of_the_final_executable_within_1pct_of_memory_analysis(p):
    # the definition-of-done item (issue #25): argument + output - alias + temp from the buffer assignment,
    # the temp as the final executable holds the heap (padded to 16 KiB + its fragmentation), within 1% of
    # compiled.memory_analysis() on every corpus program, and its fit in the chip's HBM per TensorCore
    # (tools/corpus_table.py prints both per program)
    ours, comp, heap, _ = _final(p)
    assert ours is not None and heap is not None
    assert (ours.argument, ours.output, ours.alias) == (comp.argument, comp.output, comp.alias)
    assert abs(ours.peak - comp.peak) <= 0.01 * comp.peak, (ours, comp)
    fit = ours.peak / _hbm_per_tensorcore(p)
    assert 0 < fit < 1, fit  # every corpus program fits its chip (the largest, the collective matmul: 5.4%)


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_the_temp_rule_gives_the_compilers_temp_to_the_byte(p):
    # stronger than the 1% criterion: with the peak buffers the assignment records, the rule is exact
    from profanalyzer.read.hlo.memory import HBM_PROGRAM_ALIGNMENT, final_temp

    ours, comp, heap, _ = _final(p)
    assert heap.peak_source == "peak buffers of the assignment"
    assert final_temp(heap) == comp.temp and ours.temp == comp.temp
    if heap.held:
        assert heap.padded % HBM_PROGRAM_ALIGNMENT == 0 and 0 <= heap.padded - heap.size < HBM_PROGRAM_ALIGNMENT
        assert comp.temp == heap.padded + (heap.padded - heap.peak_buffers)
    else:
        assert comp.temp == 0


def test_the_heap_is_left_out_only_where_no_value_is_held_in_hbm():
    # serving_decode's heap holds only tuple tables and scalars of non-fusion ops: the final program keeps
    # none of it in HBM (compiler temp 0 beside a 131136-byte heap); every other heap holds arrays
    heaps = {p["name"]: _final(p)[2] for p in PROGRAMS}
    assert sorted(n for n, h in heaps.items() if not h.held) == ["serving_decode"]
    assert heaps["serving_decode"].size == 131136


def test_the_heap_alone_is_not_the_compilers_temp():
    # why the fragmentation term: the assignment's heap misses the compiler's temp by more than 1% of the peak
    # on 13 of the 15 programs (within 1% only on v5p_dense_fsdp, little fragmentation, and serving_decode)
    close = sorted(p["name"] for p in PROGRAMS
                   if abs(_hbm(p)[0].peak - _hbm(p)[1].peak) <= 0.01 * _hbm(p)[1].peak)
    assert close == ["serving_decode", "v5p_dense_fsdp"], close


def _without_peak_buffers(proto: bytes) -> bytes:
    """The HloProto with its BufferAssignmentProto's peak buffers (field 5) removed."""
    from profanalyzer.read.xspace.wire import encode_varint, iter_fields

    def keep(buf: bytes, a: int, b: int, drop: int) -> bytes:
        return b"".join(buf[tag:pb] for f, _w, _v, _pa, pb, tag in iter_fields(buf, a, b) if f != drop)

    out = bytearray()
    for f, _w, _v, pa, pb, tag in iter_fields(proto, 0, len(proto)):
        if f == 3:
            inner = keep(proto, pa, pb, 5)
            out += encode_varint(3 << 3 | 2) + encode_varint(len(inner)) + inner
        else:
            out += proto[tag:pb]
    return bytes(out)


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_without_recorded_peak_buffers_the_heap_trace_gives_the_peak(p):
    # an assignment without field 5: the peak replayed from its heap-simulator trace (XLA's peak rule), within
    # 8 KiB of the recorded one, the peak HBM still within 1% of the compiler's
    from profanalyzer.read.hlo.memory import final_temp, proto_allocations, proto_heap

    _, comp, recorded, proto = _final(p)
    stripped = _without_peak_buffers(proto)
    assert len(stripped) < len(proto) and proto_allocations(stripped) == proto_allocations(proto)
    heap = proto_heap(stripped)
    assert heap is not None and heap.held == recorded.held
    if heap.peak_source != "heap-simulator trace":
        pytest.skip(f"no heap-simulator trace for the heap ({heap.peak_source})")
    assert 0 <= recorded.peak_buffers - heap.peak_buffers <= 8192, (recorded, heap)
    assert abs(final_temp(heap) - comp.temp) <= 0.01 * comp.peak


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_the_compilers_temp_is_computed_not_stored(p):
    # the figure memory_analysis() reports is neither a field of the after_optimizations HloProto (with
    # its buffer assignment) or the after_codegen one (which carries none), nor a number in the HLO text:
    # libtpu's allocator derives it (padded heap + fragmentation), and so does hlo.memory.final_temp
    from profanalyzer.read.hlo.memory import proto_allocations
    from profanalyzer.read.xspace.wire import encode_varint as _varint

    want = json.loads((CORPUS / p["files"]["compiler"]).read_text())["memory_analysis"]["temp_size_in_bytes"]
    if want == 0:
        pytest.skip("temp 0: nothing to look for")
    after_opt = gzip.decompress((CORPUS / p["files"]["hlo_proto"]).read_bytes())
    after_codegen = gzip.decompress((CORPUS / p["files"]["hlo_proto_after_codegen"]).read_bytes())
    text = gzip.decompress((CORPUS / p["files"]["hlo_text"]).read_bytes())
    assert proto_allocations(after_opt) and not proto_allocations(after_codegen)
    assert _varint(want) not in after_opt and _varint(want) not in after_codegen
    assert str(want).encode() not in text


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_the_proto_and_the_text_of_a_program_replay_alike(p):
    # the after_codegen HloProto and compiled.as_text() are one module: the same loops, trip counts,
    # while body / condition, and the same compiler-estimated time in the replay
    from profanalyzer.read.hlo.replay import replay
    from profanalyzer.read.hlo.schedule import trip_counts

    proto, text = _program(p).main, read_program(CORPUS / p["files"]["hlo_text"]).main
    tp, tt = trip_counts(proto), trip_counts(text)
    assert {k: v.n for k, v in tp.items()} == {k: v.n for k, v in tt.items()} and all(v.n for v in tp.values())
    for m in (proto, text):
        for c in m.computations:
            for i in c.instructions:
                if i.opcode == "while":
                    assert "cond" in i.attr("condition") or "body" not in i.attr("condition"), i.attr("condition")
    chip = _chip(p)
    assert replay(_program(p), chip).estimated_ps == replay(read_program(CORPUS / p["files"]["hlo_text"]),
                                                           chip).estimated_ps
