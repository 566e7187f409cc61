"""Hardware counters (issue 26): per-op time-weighted unit utilisation from
the `_counters_` line, the emit_pipeline `ep_wait_*` share from `XLA
TraceMe`, the kernel verdict and its lever; device-plane peaks preferred
over the hardware table. Truth: the synthesizer's counter profiles
(synth.counters) and the real v6e capture's plane stats."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from profanalyzer.analyze.counters import (
    VERDICTS,
    _has_counter_names,
    with_device_peaks,
)
from profanalyzer.pipeline.run import run_analysis
from profanalyzer.read.trace import read_trace
from profanalyzer.synth import SCENARIOS, write_scenario

ROOT = Path(__file__).resolve().parents[1]
V6E = ROOT.parent / "shared" / "real-traces" / "v6e_host_offload.xplane.pb.gz"


@pytest.fixture(scope="module")
def ctr(tmp_path_factory):
    path = tmp_path_factory.mktemp("ctr") / "ctr.xplane.pb"
    spec = SCENARIOS["dense_short_fsdp"].with_(name="counters", custom_matmul=True, counters=True)
    truth = write_scenario(spec, path, steps=3, layers=1)
    return run_analysis(path), truth


def test_every_kernel_with_counters_matches_its_profile(ctr):
    a, truth = ctr
    got = {k.op: k for k in a.kernel_counters}
    assert set(truth["counters"]) <= set(got)
    for name, t in truth["counters"].items():
        k = got[name]
        assert set(k.utilisation) == set(t["utilisation"])
        for u, v in t["utilisation"].items():
            assert k.utilisation[u] == pytest.approx(v, abs=0.01)  # time-weighted over the kernel's runs
            assert k.median_utilisation[u] == pytest.approx(v, abs=1e-9)  # every sample says the same
        assert k.ep_wait_fraction == pytest.approx(t["ep_wait_fraction"], abs=0.02)
        assert k.verdict == t["verdict"] and k.lever == VERDICTS[k.verdict][0]
        assert k.samples > 0 and k.ps > 0


def test_verdicts_reach_the_top_ops_and_levers(ctr):
    a, truth = ctr
    mm = next(o for o in a.top_ops if o.name in truth["counters"] and truth["counters"][o.name]["verdict"] == "mxu_bound")
    assert "counters:mxu_bound" in mm.tags and "mxu:72%" in mm.tags
    k = next(k for k in a.kernel_counters if k.op == mm.name)
    assert "FP8" in k.reason  # a bf16 kernel at 72% MXU: the next step is FP8
    dma = next(k for k in a.kernel_counters if k.verdict == "waiting_on_dma")
    assert "block sizes" in dma.reason and "scoped VMEM" in dma.reason


def test_quiet_without_counter_lines():
    a = run_analysis(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    assert a.kernel_counters is None
    assert not any(t.startswith("counters:") for o in a.top_ops for t in o.tags)


@pytest.mark.parametrize("names,has", [
    (("%fusion.1 = f32[8]{0} fusion()", "MXU"), True),
    (("Vector EUP",), True),
    (("%a = f32[8]{0} add()", "ep_wait_in"), True),
    (("%a = f32[8]{0} add(), metadata={op_name=\"MXU\"}", "step ep_wait"), False),  # a unit inside a text, a phase mid-name
    ((), False),
])
def test_counter_names_are_whole_names(names, has):
    """A table names a counter unit when some metadata name *is* the unit, or a pipeline phase when a name
    starts with `ep_wait`: what the counter and TraceMe lines' events are called."""
    assert _has_counter_names(names) is has


def test_synthesized_plane_peaks_are_the_table_and_say_so():
    a = run_analysis(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    note = next(n for n in a.notes if n.startswith("peaks from the device planes"))
    assert "the same as the hardware table" in note


def test_no_plane_peaks_no_note():
    tr = read_trace(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    bare = replace(tr, planes=tuple(replace(p, stats={k: v for k, v in p.stats.items() if not k.startswith("peak_")})
                                    for p in tr.planes))
    t2, note = with_device_peaks(bare)
    assert note == "" and t2.chip == tr.chip


@pytest.mark.skipif(not V6E.exists(), reason="../shared/real-traces v6e capture not present")
def test_real_v6e_peaks_come_from_its_planes():
    tr = read_trace(V6E)
    t2, note = with_device_peaks(tr)
    assert t2.chip.hbm_gbps == pytest.approx(1637.993152512) and tr.chip.hbm_gbps == pytest.approx(1638.0)
    assert "HBM 1637.99 GB/s" in note and "hardware table" in note
    a = run_analysis(V6E)
    assert a.hardware.hbm_gbps_per_chip == pytest.approx(1637.993152512)
    assert a.kernel_counters is None  # this capture was taken without the kernel-profiling flags


def test_notebook_frame_of_the_counters(ctr):
    pytest.importorskip("pandas")
    a, truth = ctr
    df = a.frames()["counters"]
    name = next(iter(truth["counters"]))
    rows = df[df.op == name]
    assert set(rows.unit) == set(truth["counters"][name]["utilisation"])
    assert set(rows.verdict) == {truth["counters"][name]["verdict"]}


def test_counters_in_the_roofline_and_top_ops_of_every_renderer(ctr):
    from profanalyzer.report.html import render_html
    from profanalyzer.report.opviews import counter_use_text, roofline_view
    from profanalyzer.report.terminal import format_summary

    a, truth = ctr
    kc = {k.op: k for k in a.kernel_counters}
    rv = roofline_view(a)
    plotted = [(i, o) for i, o in enumerate(a.top_ops, 1) if o.name in kc and o.intensity and o.tflops_per_s]
    assert plotted, "a kernel with counters is plotted"
    i, op = plotted[0]
    use = counter_use_text(kc[op.name])
    t = truth["counters"][op.name]
    assert f"MXU {t['utilisation']['MXU']:.0%}" in use and t["verdict"] in use
    assert any(f.label.startswith(f"#{i} ") and f.value == use for f in rv.counters)
    assert f"counters: {use}" in str(rv.chart)
    html = render_html(a, None, command_line="profanalyze report", input_sha256="0" * 64)
    assert 'id="roofline-counters"' in html and use in html
    term = format_summary(a, top=len(a.top_ops))
    row = next(ln for ln in term.splitlines() if op.name[:60] in ln and "counters:" in ln)
    assert f"counters:{t['verdict']}" in row and f"mxu:{t['utilisation']['MXU'] * 100:.0f}%" in row


def test_no_counter_table_in_the_roofline_without_counters():
    from profanalyzer.report.opviews import roofline_view

    a = run_analysis(ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz")
    rv = roofline_view(a)
    assert rv.counters == () and "counters:" not in str(rv.chart)


def test_the_kernel_counters_sample_shows_counters_phases_and_the_custom_matmul():
    import json

    base = ROOT / "sample_traces" / "pallas_kernel_counters"
    truth = json.loads(Path(f"{base}.truth.json").read_text())
    a = run_analysis(Path(f"{base}.xplane.pb.gz"))
    got = {k.op: k for k in a.kernel_counters}
    for name, t in truth["counters"].items():
        assert got[name].verdict == t["verdict"]
        assert got[name].ep_wait_fraction == pytest.approx(t["ep_wait_fraction"], abs=0.02)  # emit_pipeline phases
    by_name = {o.name: o for o in list(a.top_ops) + list(a.kernel_ops)}
    for name, t in truth["custom_kernels"].items():
        assert by_name[name].bucket == t["bucket"] and "kernel:pallas_matmul" in by_name[name].tags
        assert f"counters:{truth['counters'][name]['verdict']}" in by_name[name].tags
