"""Issue 32 item 8: a compiled program carries no capture-only statements --
no why-idle section or idle causes (a replay runs back to back by
construction), no per-core spread of the identical replicas the replay
writes, SparseCore counts from the chip table, not from the made planes --
and its HBM (argument, output, alias, temp, peak, fit) is a JSON field a
budget gates on. Truth: the compiler's own memory_analysis (the
`compiler.json` written beside the sample program by tools/compile_corpus.py)
and the chip table."""

from __future__ import annotations

import functools
import json

import pytest
from conftest import run_cli
from test_report_html import parse

PROGRAM = "sample_traces/compiled/dense_fsdp.hlo.txt.gz"
PROTO = "sample_traces/compiled/dense_fsdp.hlo.pb.gz"
COMPILER = "sample_traces/compiled/dense_fsdp.compiler.json"


@functools.cache
def _analysis(path: str):
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import run_analysis

    a = run_analysis(path)
    return a, run_rules(a)


@functools.cache
def _dom(path: str):
    from profanalyzer.report.html import render_html

    a, f = _analysis(path)
    return parse(render_html(a, f, command_line="profanalyze p", input_sha256="0" * 64))


@pytest.mark.parametrize("path", [PROGRAM, PROTO])
def test_no_idle_causes_and_no_replica_spread(path):
    a, _ = _analysis(path)
    assert a.time_basis == "predicted" and a.tensorcores == 2  # the replay writes one plane per TensorCore
    assert not a.idle_causes and not a.idle_causes_by_step
    dom = _dom(path)
    assert dom.find(id="idle") is None and dom.find(id="cores") is None
    hrefs = {x.attrs.get("href") for x in dom.find("nav").find_all("a")}
    assert "#idle" not in hrefs and "#cores" not in hrefs
    # the collectives are diagnosed on one replica: no arrivals compared, no spread of 0.000 ms
    d = a.collective_diagnosis
    assert d is not None and d.cores == 1 and d.last_core is None
    assert "replays the same schedule" in dom.by_id("late-core").norm_text()


def test_cores_from_the_chip_table():
    a, _ = _analysis(PROGRAM)
    text = _dom(PROGRAM).by_id("fact-cores").norm_text()
    assert f"{a.hardware.sparsecores_per_chip} SparseCores (chip table" in text
    assert a.sparsecores != a.hardware.sparsecores_per_chip  # the made planes would have said 2


def test_a_capture_keeps_its_idle_and_cores():
    from profanalyzer.report.html import render_html

    a, f = _analysis("sample_traces/dense_short_fsdp.xplane.pb.gz")
    dom = parse(render_html(a, f, command_line="p", input_sha256="0" * 64))
    assert a.idle_causes and dom.find(id="cores") is not None and dom.find(id="idle") is not None


@pytest.mark.parametrize("path", [PROGRAM, PROTO])
def test_program_hbm_is_a_json_field(path):
    m = json.loads(open(COMPILER).read())["memory_analysis"]
    a, _ = _analysis(path)
    pm = a.program_memory
    assert pm is not None
    assert (pm.argument_bytes, pm.output_bytes, pm.alias_bytes) == (
        m["argument_size_in_bytes"], m["output_size_in_bytes"], m["alias_size_in_bytes"])
    want = m["argument_size_in_bytes"] + m["output_size_in_bytes"] - m["alias_size_in_bytes"] + m["temp_size_in_bytes"]
    assert pm.peak_bytes == want
    cap = a.hardware.hbm_gib_per_chip * 2**30 / a.hardware.tensorcores_per_chip
    assert pm.capacity_bytes == cap and pm.fraction == pytest.approx(want / cap) and pm.fits
    assert a.to_dict()["program_memory"]["peak_bytes"] == want
    assert _analysis("sample_traces/dense_short_fsdp.xplane.pb.gz")[0].program_memory is None


def test_program_hbm_is_a_budget_metric(tmp_path, capsys):
    m = json.loads(open(COMPILER).read())["memory_analysis"]
    peak = m["argument_size_in_bytes"] + m["output_size_in_bytes"] - m["alias_size_in_bytes"] + m["temp_size_in_bytes"]
    tight, loose = tmp_path / "tight.toml", tmp_path / "loose.toml"
    tight.write_text(f"[budget]\nprogram.hbm_peak_bytes = {{ max = {peak - 1} }}\n")
    loose.write_text(f"[budget]\nprogram.hbm_peak_bytes = {{ max = {peak} }}\nprogram.hbm_fraction = {{ max = 0.5 }}\n")
    rc, out, _ = run_cli(capsys, "check", PROGRAM, "--budget", tight)
    assert rc == 1 and "FAIL program.hbm_peak_bytes" in out
    rc, out, _ = run_cli(capsys, "check", PROGRAM, "--budget", loose)
    assert rc == 0, out
    # a capture has no program HBM: the check says so, it does not pass silently
    rc, out, _ = run_cli(capsys, "check", "sample_traces/dense_short_fsdp.xplane.pb.gz", "--budget", loose)
    assert rc == 1 and "not available" in out


def test_program_facts_are_its_hbm_and_input_not_hosts_and_capture():
    a, _ = _analysis(PROGRAM)
    dom = _dom(PROGRAM)
    assert dom.find(id="fact-hosts") is None
    hbm = dom.by_id("fact-program-hbm").norm_text()
    assert f"{a.program_memory.peak_bytes / 2**30:.2f} GiB of 96.00 GiB per TensorCore" in hbm and "fits" in hbm
    assert "compiled program" in dom.by_id("fact-capture").norm_text()
    assert "Capture" not in dom.by_id("fact-capture").norm_text()
