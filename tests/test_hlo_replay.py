"""Analysis before the run: the MaxText TPU7x dump replayed into a predicted
step and analysed by the unchanged pipeline (`profanalyze analyze PROGRAM`),
and the compiler's expectation beside the real v6e capture's measurement."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import run_cli

from profanalyzer.core.hardware import CHIPS, TPU7X, V6E
from profanalyzer.core.vocab import BUCKETS, MATMUL_BUCKETS, OFFLOADABLE
from profanalyzer.read.hlo.load import read_program
from profanalyzer.read.hlo.replay import replay
from profanalyzer.read.hlo.schedule import op_remat as _remat
from profanalyzer.read.hlo.schedule import schedule
from profanalyzer.read.hlo.truth import hlo_bucket

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DUMP = SHARED / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz"
V6E_CAPTURE = SHARED / "real-traces" / "v6e_host_offload.xplane.pb.gz"
need_dump = pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")
need_v6e = pytest.mark.skipif(not V6E_CAPTURE.exists(), reason="../shared/real-traces/v6e_host_offload not present")


def test_assumed_clocks_follow_from_the_peaks():
    # f = peak / (MXUs x 2 x dim^2): v6e 918 TFLOP/s over 4 MXUs of 256x256 -> ~1.75 GHz
    assert V6E.clock_ghz == pytest.approx(918e12 / (4 * 2 * 256 * 256) / 1e9, rel=1e-3)
    assert 1.74 < V6E.clock_ghz < 1.76
    assert TPU7X.clock_ghz == pytest.approx(TPU7X.peak_bf16_tflops * 1e12 / (8 * 2 * 256 * 256) / 1e9, rel=1e-3)
    assert all(c.clock_ghz > 0 for c in CHIPS.values())


@pytest.fixture(scope="module")
def dump():
    return read_program(DUMP)


@need_dump
def test_replay_takes_the_compilers_estimates(dump):
    rep = replay(dump, TPU7X)
    m = dump.main
    rows = schedule(m)
    # every estimated TensorCore op of every loop iteration runs at estimated_cycles / clock
    est_cycles = sum((r.estimated_cycles or 0) * r.count for r in rows if not r.sparsecore)
    assert rep.estimated_ps == pytest.approx(est_cycles / TPU7X.clock_hz * 1e12, rel=1e-6)
    tc = [o for o in rep.ops if not o.sparsecore]
    # the TensorCore runs one op at a time, in schedule order
    assert all(a.start_ps + a.dur_ps <= b.start_ps for a, b in pairwise(tc))
    assert rep.step_ps >= rep.estimated_ps
    # SparseCore work sits between its start and its done on the TensorCore
    sc = [o for o in rep.ops if o.sparsecore]
    assert sc and all(o.instruction.opcode != "async-start" for o in sc)
    assert any(o.instruction.opcode == "all-gather" for o in sc)
    assert any("assumed" in a or "inferred" in a for a in rep.assumptions)


@need_dump
def test_analyze_a_compiled_program(dump, capsys, tmp_path):
    out = tmp_path / "a.json"
    rc, stdout, _err = run_cli(capsys, "analyze", DUMP, "--json", out, "--no-html")
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["input_kind"] == "compiled_program"
    assert any("PREDICTED" in n for n in doc["notes"])
    assert any(a.startswith("times: PREDICTED") for a in doc["assumptions"])
    # HBM beside the compiler's own memory analysis, with the fit in the chip
    mem = next(n for n in doc["notes"] if "HBM from the buffer assignment" in n)
    from profanalyzer.read.hlo.memory import compiler_stats

    comp = compiler_stats(dump.files.compile_log)
    assert comp is not None and f"temp {comp.temp} = {comp.peak} bytes" in mem and "GiB per TensorCore" in mem
    # the dump names its chip in target_arguments.txt (TPU7x's version), read before compile.log
    assert "target_arguments" in doc["chip_source"] and doc["hardware"]["key"] == "tpu7x"
    assert doc["run_kind"]["kind"] == "training"
    rep = replay(dump, TPU7X)
    step = doc["steps"]["step_time_ps"]["median"]
    assert step == rep.step_ps
    # the buckets add up to the predicted step, and the matmul share is the replay's own
    assert sum(doc["breakdown"][b]["ps"] for b in BUCKETS) == pytest.approx(step, rel=1e-6)
    m = dump.main
    truth = {id(r.instruction): hlo_bucket(m, r).bucket for r in schedule(m)}
    mm = sum(o.dur_ps for o in rep.ops if not o.sparsecore and truth.get(id(o.instruction)) in MATMUL_BUCKETS)
    got = sum(doc["breakdown"][b]["ps"] for b in MATMUL_BUCKETS)
    assert got == pytest.approx(mm, rel=1e-6)
    # SparseCore offload verdict per collective type = the compiler's placement (a type is offloaded when
    # the HLO runs an instruction of that kind on the SparseCore)
    off = doc["sparsecore_offload"]["offloaded"]
    placed = {k: False for k in OFFLOADABLE}
    for r in schedule(m):
        t = hlo_bucket(m, r)
        if r.sparsecore and t.collective in placed:
            placed[t.collective] = True
    assert off == placed and placed["all_gather"] and not placed["reduce_scatter"]
    # the remat share is the replay's own: predicted time of the remat ops over the step
    remat_ps = sum(o.dur_ps for o in rep.ops if not o.sparsecore and _remat(o.instruction))
    assert doc["remat"]["ps"] == pytest.approx(remat_ps, rel=1e-6)


@need_dump
def test_check_gates_a_compiled_program(capsys, tmp_path):
    budget = tmp_path / "profanalyze.toml"
    budget.write_text("[budget]\nstep_time_ms = { max = 1 }\n")
    rc, stdout, _ = run_cli(capsys, "check", DUMP, "--budget", budget)
    assert rc == 1 and "step_time_ms" in stdout


@need_v6e
def test_expected_vs_measured_on_the_v6e_capture():
    from profanalyzer.analyze.expected import expected_vs_measured
    from profanalyzer.read.xspace.build import load_trace

    trace = load_trace(V6E_CAPTURE)
    assert trace.chip.key == "v6e"
    exp = expected_vs_measured(trace)
    adds = [o for o in exp.with_estimate if o.tf_op.endswith("/add")]
    assert len(adds) == 3 and {o.estimated_cycles for o in adds} == {14180608}
    for o in adds:  # 14,180,608 cycles at ~1.75 GHz = 8.10 ms; measured 7.9-8.2 ms
        assert o.expected_ps / 1e9 == pytest.approx(8.10, abs=0.01)
        assert 0.97 < o.ratio < 1.03
    # the copy-done waits: measured time the compiler counted no cycles for
    waits = [o for o in exp.without_estimate if o.opcode == "copy-done"]
    assert waits and sum(o.measured_mean_ps * o.occurrences for o in waits) > sum(
        o.measured_mean_ps * o.occurrences for o in adds)


@need_dump
def test_reports_mark_a_compiled_program_predicted(capsys, tmp_path):
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    rc, _, _ = run_cli(capsys, "analyze", DUMP, "--markdown", md, "-o", html)
    assert rc == 0
    assert "**PREDICTED**" in md.read_text().split("\n\n")[1]
    text = html.read_text()
    assert "(PREDICTED)</title>" in text and 'id="headline">PREDICTED' in text


VLLM = SHARED / "real-traces" / "vllm_w4_tp2_2026_01_12_00_26_20.xplane.pb.gz"


@pytest.mark.skipif(not VLLM.exists(), reason="../shared/real-traces vLLM capture not present")
def test_expected_vs_measured_says_when_a_capture_has_no_hlo():
    from profanalyzer.analyze.expected import expected_vs_measured
    from profanalyzer.read.xspace.build import load_trace

    exp = expected_vs_measured(load_trace(VLLM))
    assert exp.ops == () and any("no HLO" in n for n in exp.notes)


@need_v6e
def test_a_proto_program_carries_its_buffer_assignment(capsys, tmp_path):
    from profanalyzer.read.xspace import reader, xplane_pb2

    buf, index = reader.open_space(V6E_CAPTURE, want=lambda r: r.kind == "metadata")
    ref = next(p for p in index.planes if p.kind == "metadata")
    plane = xplane_pb2.XPlane.FromString(bytes(buf[ref.offset:ref.offset + ref.length]))
    sid = next(k for k, v in plane.stat_metadata.items() if v.name == "Hlo Proto")
    blob = next(s.bytes_value for em in plane.event_metadata.values() if em.name.startswith("jit_f(")
                for s in em.stats if s.metadata_id == sid)
    prog = tmp_path / "jit_f.hlo_proto.pb"
    prog.write_bytes(blob)
    docs = []
    for src in (prog, V6E_CAPTURE):
        out = tmp_path / f"{len(docs)}.json"
        rc, _, _ = run_cli(capsys, "analyze", src, "--chip", "v6e", "--memory", "--json", out, "--no-html")
        assert rc == 0
        docs.append(json.loads(out.read_text()))
    predicted, measured = docs
    assert predicted["input_kind"] == "compiled_program" and measured["input_kind"] == "file"
    # the same program's buffer assignment: the same HBM and host-offload bytes as the real capture's
    for key in ("program_hbm_bytes", "host_offload_bytes", "peak_instruction"):
        assert predicted["memory"][key] == measured["memory"][key], key


@need_v6e
def test_expected_vs_measured_pools_every_tensorcore():
    """The v6e capture's program runs on its 4 TensorCores: each op's runs on all four are pooled (each core's
    100 steps), not only the first core's; the slowest broadcast_add_fusion.1 run (8.216 ms) is TPU:3's."""
    import numpy as np

    from profanalyzer.analyze.expected import expected_vs_measured
    from profanalyzer.model.trace import LINE_MODULES, LINE_OPS
    from profanalyzer.read.xspace.build import load_trace

    trace = load_trace(V6E_CAPTURE)
    exp = expected_vs_measured(trace)
    assert exp.cores == len(trace.tensorcores) == 4
    # the step's program's ops: those inside its runs on the XLA Modules line (jit__psum and
    # jit_broadcast_in_dim run beside it and are named in a note, not compared)
    (main,) = {o.program for o in exp.ops}
    assert any("not compared" in n and "jit__psum" in n for n in exp.notes)
    per_core: dict[str, list[int]] = {}
    for pl in trace.tensorcores:
        ev, names = pl.line(LINE_OPS).events, pl.meta.short_names
        mods = pl.line(LINE_MODULES).events
        runs = [(int(mods.start_ps[i]), int(mods.end_ps[i])) for i in range(len(mods))
                if mods.depth[i] == 0 and pl.meta.name[int(mods.meta[i])].split("(")[0] == main]
        for k in np.flatnonzero(ev.depth == 0).tolist():
            if any(a <= int(ev.start_ps[k]) < b for a, b in runs):
                per_core.setdefault(names[int(ev.meta[k])], []).append(int(ev.dur_ps[k]))
    for o in exp.ops:
        d = per_core[o.name]
        assert (o.occurrences, o.measured_min_ps, o.measured_max_ps) == (len(d), min(d), max(d))
        assert o.measured_mean_ps == pytest.approx(float(np.mean(d)))
    adds = [o for o in exp.with_estimate if o.tf_op.endswith("/add")]
    assert {o.cores for o in adds} == {4} and {o.occurrences for o in adds} == {400}
    assert max(o.measured_max_ps for o in adds) / 1e9 == pytest.approx(8.216, abs=0.001)


def test_expected_vs_measured_on_a_replayed_program():
    """A replayed corpus program is a capture of its own prediction: on each of the chip's TensorCores every op
    with an estimate measures what the compiler expects, and runs as often as the schedule says."""
    from collections import Counter

    from profanalyzer.analyze.expected import expected_vs_measured
    from profanalyzer.read.compiled import load_program_trace

    src = Path(__file__).resolve().parents[1] / "sample_traces" / "compiled" / "dense_fsdp.after_codegen.hlo.pb.gz"
    trace = load_program_trace(src)
    exp = expected_vs_measured(trace)
    assert exp.cores == len(trace.tensorcores) == TPU7X.planes_per_chip == 2
    runs = Counter(o.instruction.name for o in replay(read_program(src), TPU7X).ops if not o.sparsecore)
    assert exp.with_estimate and all(o.ratio == pytest.approx(1.0, abs=1e-3) for o in exp.with_estimate)
    assert all(o.cores == 2 and o.occurrences == 2 * runs[o.name] for o in exp.ops)


@need_v6e
def test_expected_vs_measured_counts_the_steps_program_once(capsys):
    """#32 item 7: per step, the step's program only (jit__psum and jit_broadcast_in_dim run beside it and
    are named, not compared), no row that reads 0.000 ms on both sides, no range "a-a", the unestimated time
    said once, the op table's runs and the family table's per-step figures labelled as such."""
    from profanalyzer.pipeline.run import run_analysis
    from profanalyzer.report.expected_view import expected_view, markdown_expected

    a = run_analysis(V6E_CAPTURE)
    e = a.expected
    assert e is not None and {o.program for o in (*e.ops, *e.without_estimate)} == {"jit_f"}
    assert not [o for o in (*e.ops, *e.without_estimate) if o.name.startswith(("all-reduce", "broadcast."))]
    v = expected_view(a)
    for r in (*v.rows, *v.without):
        assert not (r.measured_ms == "0.000" and r.expected_ms in ("0.000", "-")), r
        lo, _, hi = r.measured_range.partition("-")
        assert lo != hi, r.measured_range
    assert all(not (f.measured_ms == "0.000" and f.expected_ms in ("0.000", "-")) for f in v.families)
    text = "\n".join(markdown_expected(a, lambda x, **_: x))
    assert text.count("did not count as compute") == 1
    assert "runs (kept steps, every TensorCore)" in text and "measured ms/step" in text


@need_dump
def test_a_compiled_program_carries_no_capture_only_statements(capsys, tmp_path):
    """#32 item 8 (part): a replayed program is no capture: no capture-quality issue about its one step, its
    cores or SparseCores, and no note about device planes' peaks or missing host planes."""
    out = tmp_path / "p.json"
    rc, _, _ = run_cli(capsys, "analyze", DUMP, "--json", out, "--no-html", "-q")
    doc = json.loads(out.read_text())
    assert rc == 0 and doc["input_kind"] == "compiled_program"
    codes = {i["code"] for i in doc["capture"]["issues"]}
    assert not codes & {"few_steps", "edge_steps", "missing_cores", "no_sparsecore", "no_program_id", "event_cap"}
    assert not [n for n in doc["notes"] if "device planes" in n or "no host planes" in n]
