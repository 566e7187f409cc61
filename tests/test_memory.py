"""HBM memory (profanalyzer.analyze.memory, `--memory`): a hand-built HloProto with a
known buffer assignment, the real v6e capture against XProf's memory_profile,
and the default path never reading memory."""

from __future__ import annotations

import json

import pytest
from conftest import sample_path
from realcap import V6E as V6E_FILE
from realcap import real_path

from profanalyzer.analyze import memory
from profanalyzer.core.hardware import V6E
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.trace import MemorySources
from profanalyzer.pipeline.run import RunOptions, run_analysis
from profanalyzer.read import allocator
from profanalyzer.synth.pbenc import f_bytes, f_varint

GB = 10**9


def _shape(et: int, dims: list[int]) -> bytes:
    return f_varint(2, et) + b"".join(f_varint(3, d) for d in dims)


def _instruction(iid: int, name: str, shape: bytes) -> bytes:
    return f_bytes(1, name) + f_bytes(2, "fusion") + f_bytes(3, shape) + f_varint(35, iid)


def _buffer(bid: int, size: int, iid: int, color: int = 0) -> bytes:
    return f_varint(1, bid) + f_varint(2, size) + f_bytes(3, f_varint(4, iid)) + (f_varint(4, color) if color else b"")


def _allocation(index: int, size: int, buffers: list[int], color: int = 0, parameter: bool = False, live_out: bool = False) -> bytes:
    out = f_varint(1, index) + f_varint(2, size)
    if parameter:
        out += f_varint(5, 1)
    if live_out:
        out += f_varint(7, 1)
    if color:
        out += f_varint(8, color)
    return out + b"".join(f_bytes(9, f_varint(1, b) + f_varint(3, size)) for b in buffers)


def _event(kind: int, bid: int, inst: str) -> bytes:
    return (f_varint(1, kind) if kind else b"") + f_varint(2, bid) + f_bytes(3, "main") + f_bytes(4, inst)


#: The plan of the hand-built program: a 4 GB f32 weight parameter in HBM, a
#: 2 GB bf16 activation parameter in host memory (S(5)), a 1 GB output, and a
#: temp heap where a (3 GB) and b (2 GB) overlap at `mul.2`, then c (4 GB)
#: alone at `add.3` after both are freed: the heap peaks at 5 GB at mul.2, and
#: its allocation (sized by the heap simulator) holds 5 GB.
PLAN = {
    "instructions": {1: ("param.w", 11, [1024, 1024, 1000]), 2: ("param.act", 16, [1024, 1024, 1000]),
                     3: ("exp.1", 11, [750, 1000, 1000]), 4: ("mul.2", 16, [1000, 1000, 1000]),
                     5: ("add.3", 11, [1000, 1000, 1000]), 6: ("out", 16, [500, 1000, 1000])},
    "buffers": {10: (4 * GB, 1, 0), 11: (2 * GB, 2, 5), 12: (3 * GB, 3, 0), 13: (2 * GB, 4, 0), 14: (4 * GB, 5, 0), 15: (1 * GB, 6, 0)},
    "events": [(0, 12, "exp.1"), (0, 13, "mul.2"), (1, 12, "mul.2"), (1, 13, "add.3"), (0, 14, "add.3"), (1, 14, "out")],
}
WANT_PEAK_INSTRUCTION = "mul.2"
WANT_HEAP = 5 * GB


def _hlo_proto() -> bytes:
    ins = b"".join(f_bytes(2, _instruction(i, n, _shape(et, d))) for i, (n, et, d) in PLAN["instructions"].items())
    module = f_bytes(1, "jit_step") + f_bytes(3, f_bytes(1, "main") + ins)
    bufs = b"".join(f_bytes(1, _buffer(b, s, i, c)) for b, (s, i, c) in PLAN["buffers"].items())
    allocs = (f_bytes(3, _allocation(0, 4 * GB, [10], parameter=True))
              + f_bytes(3, _allocation(1, 2 * GB, [11], color=5, parameter=True))
              + f_bytes(3, _allocation(2, WANT_HEAP, [12, 13, 14]))
              + f_bytes(3, _allocation(3, 1 * GB, [15], live_out=True)))
    trace = f_bytes(4, b"".join(f_bytes(1, _event(*e)) for e in PLAN["events"]) + f_varint(3, 2))
    return f_bytes(1, module) + f_bytes(3, bufs + allocs + trace)


def test_buffer_assignment_from_a_known_plan():
    from profanalyzer.read.hlo.memory import read_assignment

    ba = read_assignment(_hlo_proto())
    assert ba is not None and len(ba.allocations) == 4 and len(ba.heap_traces) == 1 and ba.module == "jit_step"
    pm = memory.assignment_memory(ba)
    # HBM: the weight, the temp heap, the output; the activation is in host memory
    assert pm.hbm_bytes == 4 * GB + WANT_HEAP + 1 * GB
    assert pm.host_bytes == 2 * GB
    assert pm.peak_instruction == WANT_PEAK_INSTRUCTION
    top = [(b.name, b.size_bytes, b.kind, b.memory_space, b.shape) for b in pm.top]
    assert top == [
        ("param.w", 4 * GB, "parameter", "hbm", "f32[1024,1024,1000]"),
        ("exp.1", 3 * GB, "temp", "hbm", "f32[750,1000,1000]"),
        ("mul.2", 2 * GB, "temp", "hbm", "bf16[1000,1000,1000]"),
        ("out", 1 * GB, "output", "hbm", "bf16[500,1000,1000]"),
    ]
    s = memory.summarize(MemorySources("jit_step", ba, None, []), V6E)
    assert s.source == "buffer_assignment" and s.peak_bytes == pm.hbm_bytes
    assert s.hbm_bytes == 32 * 2**30 and s.headroom_bytes == 32 * 2**30 - pm.hbm_bytes
    assert s.host_offload_bytes == 2 * GB and s.peak_instruction == WANT_PEAK_INSTRUCTION


def test_no_buffer_assignment_and_malformed_bytes():
    from profanalyzer.read.hlo.memory import read_assignment

    assert read_assignment(f_bytes(1, f_bytes(1, "m"))) is None
    with pytest.raises(ValueError):
        read_assignment(b"\x0a\xff\xff\xff\x0f")
    s = memory.summarize(MemorySources(notes=["no host planes"]), V6E)
    assert s.source == "none" and s.peak_bytes is None and s.headroom_bytes is None and s.top_buffers == ()


def test_default_analysis_never_reads_memory(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("memory read without --memory")

    monkeypatch.setattr(allocator, "read_sources", boom)
    a = run_analysis(sample_path("dense_short_fsdp"))
    assert a.memory is None and "memory" not in {k for k, v in a.to_dict().items() if v is not None}


def test_sample_without_memory_says_so():
    a = run_analysis(sample_path("dense_short_fsdp"), RunOptions(memory=True))
    m = a.memory
    assert m is not None and m.source == "none" and m.peak_bytes is None
    assert any("HLO proto" in n for n in m.notes) and any("allocator" in n for n in m.notes)


@pytest.fixture(scope="module")
def v6e():
    return run_analysis(real_path(V6E_FILE), RunOptions(memory=True))


def test_real_v6e_memory(v6e):
    m = v6e.memory
    assert m.source == "allocator+buffer_assignment" and m.program.startswith("jit_f(")
    # three f32[5,1024,1024,256] arrays (5.37 GB each) live in host memory
    assert m.host_offload_bytes == 3 * 5 * 1024 * 1024 * 256 * 4
    big = [b for b in m.top_buffers if b.size_bytes == 5 * 1024 * 1024 * 256 * 4]
    assert len(big) == 4 and all(b.shape == "f32[5,1024,1024,256]" and b.memory_space == "hbm" for b in big)
    assert m.headroom_bytes == m.hbm_bytes - m.peak_bytes
    # the program's HBM allocations are what the allocator reserves as its stack
    assert m.program_hbm_bytes == pytest.approx(m.allocator_stack_bytes, rel=0.01)
    d = json.loads(json.dumps(v6e.to_dict()))
    assert Analysis.from_dict(d).memory == Analysis.from_dict(Analysis.from_dict(d).to_dict()).memory
    assert {"peak_bytes", "peak_instruction", "hbm_bytes", "headroom_bytes", "top_buffers", "host_offload_bytes", "source"} <= set(d["memory"])


def test_real_v6e_peak_matches_xprof_memory_profile(v6e):
    pytest.importorskip("xprof", reason="the XProf cross-check needs the optional [xprof] extra")
    from xprof_util import run_converters

    out, _ = run_converters(real_path(V6E_FILE), ("memory_profile",))
    per = out["memory_profile"]["memoryProfilePerAllocator"]
    peaks = [int(v["profileSummary"]["peakStats"]["peakBytesInUse"]) for v in per.values()]
    caps = [int(v["profileSummary"]["memoryCapacity"]) for v in per.values()]
    m = v6e.memory
    assert m.peak_bytes == pytest.approx(max(peaks), rel=0.01)  # ~21.49 GB
    assert m.hbm_bytes == pytest.approx(max(caps), rel=0.01)  # ~33.55 GB
    assert m.program_hbm_bytes == pytest.approx(max(peaks), rel=0.01)


def test_check_budget_names_memory_peak(v6e):
    from profanalyzer.compare.budget import evaluate, metric_value, parse_budget
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.model.documents import result_document

    doc = result_document(v6e, run_rules(v6e))
    assert metric_value(doc, "memory.peak_bytes") == v6e.memory.peak_bytes
    ok = evaluate(parse_budget({"budget": {"memory.peak_bytes": {"max": 30e9}}}), doc)
    bad = evaluate(parse_budget({"budget": {"memory.peak_bytes": {"max": 20e9}}}), doc)
    assert ok.passed and not bad.passed and "bytes" in bad.checks[0].message
    no_mem = run_analysis(sample_path("dense_short_fsdp"))
    assert metric_value(no_mem, "memory.peak_bytes") is None


def test_compare_shows_memory_deltas(v6e):
    from profanalyzer.compare.comparison import compare
    from profanalyzer.report.diff import format_text, render_diff_markdown

    c = compare(v6e, v6e)
    assert c.memory["peak_bytes"].delta == 0 and c.memory["peak_bytes"].base == v6e.memory.peak_bytes
    assert "memory peak_bytes" in format_text(c) and "Memory peak_bytes" in render_diff_markdown(c)


def test_memory_regression_against_a_baseline(v6e):
    from profanalyzer.compare.budget import evaluate, parse_budget
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.model.documents import result_document

    doc = result_document(v6e, run_rules(v6e))
    same = evaluate(parse_budget({"baseline": "x", "max_regression": {"memory.peak_bytes": "0%"}}), doc, doc)
    assert same.passed and "bytes" in same.checks[0].message
    smaller = json.loads(json.dumps(doc))
    smaller["memory"]["peak_bytes"] = v6e.memory.peak_bytes // 2
    worse = evaluate(parse_budget({"baseline": "x", "max_regression": {"memory.peak_bytes": 1e9}}), doc, smaller)
    assert not worse.passed


def test_synthesized_capture_matches_its_plan():
    from conftest import truth_of

    from profanalyzer.core.hardware import TPU7X

    t = truth_of("hlo_memory_dense")["memory"]
    a = run_analysis(sample_path("hlo_memory_dense"), RunOptions(memory=True))
    m = a.memory
    assert m.source == "buffer_assignment" and m.program.startswith("jit_train_step")
    assert m.program_hbm_bytes == t["program_hbm_bytes"] and m.peak_bytes == t["program_hbm_bytes"]
    assert m.peak_instruction == t["peak_instruction"] and m.host_offload_bytes == t["host_offload_bytes"]
    assert [[b.name, b.size_bytes, b.kind, b.shape] for b in m.top_buffers] == t["top_buffers"]
    per_device = int(TPU7X.hbm_gib * 2**30 / TPU7X.planes_per_chip)
    assert m.hbm_bytes == per_device and m.headroom_bytes == per_device - t["program_hbm_bytes"]


def test_headroom_line_for_the_rules(v6e):
    from profanalyzer.heuristics.headroom import headroom

    h = headroom(v6e, need_bytes=5e9)
    m = v6e.memory  # memory held prints in GiB (issue 32 item 11), the allocator's capacity here
    assert h.known and h.fits and (f"+{5e9 / 2**30:.1f} GiB needed, peak {m.peak_bytes / 2**30:.1f} of "
                                   f"{m.hbm_bytes / 2**30:.1f} GiB per TensorCore: fits") in h.line
    assert headroom(v6e, need_bytes=20e9).fits is False
    plain = run_analysis(sample_path("dense_short_fsdp"))
    assert headroom(plain).known is False and "analyze --memory" in headroom(plain).line
    none = run_analysis(sample_path("dense_short_fsdp"), RunOptions(memory=True))
    assert headroom(none, 1e9).fits is None and "not in this capture" in headroom(none).line


def test_cli_reads_memory_only_when_a_memory_rule_fires(monkeypatch, capsys, tmp_path):
    """`analyze` without --memory: no rule that trades HBM for time fires on
    bf16_dense, so nothing reads memory; on a sample where RM001 fires and the
    capture has a buffer assignment (hlo_memory_dense), the card states the
    headroom in bytes."""
    import json

    from conftest import run_cli

    from profanalyzer.findings.engine import all_rules

    MEMORY_RULES = {r.code for r in all_rules() if "memory" in r.needs}
    assert MEMORY_RULES == {"HO001", "RM001", "SH003"}  # the rules that trade HBM for time declare it
    calls = []
    real = allocator.read_sources
    monkeypatch.setattr(allocator, "read_sources", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = tmp_path / "a.json"
    rc, _, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), "--json", out, "--no-html", "-q")
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert not {r["code"] for r in doc["recommendations"]} & MEMORY_RULES
    assert calls == [] and doc.get("memory") is None
    rc, _, err = run_cli(capsys, "analyze", sample_path("hlo_memory_dense"), "--json", out, "--no-html", "-q")
    assert rc == 0, err
    doc = json.loads(out.read_text())
    fired = [r for r in doc["recommendations"] if r["code"] in MEMORY_RULES]
    assert fired and calls and doc["memory"]["peak_bytes"] > 0
    assert all(not any("memory not read" in x for x in r["assumptions"]) for r in fired)
