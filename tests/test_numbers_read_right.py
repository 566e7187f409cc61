"""Issue 23 §3, "numbers that look wrong": each number on the page reads
right. One test per item, on the capture that showed it (the real captures
in ../shared/real-traces/, skipped when absent, and the samples); the HTML
ones parse the report into a DOM (tests/test_report_html.py's parser)."""

from __future__ import annotations

import functools

import pytest
import realcap
from conftest import analysis_of, findings_of, sample_path
from test_report_html import parse


@functools.cache
def real(name: str):
    from profanalyzer.pipeline.run import run_analysis

    return run_analysis(realcap.real_path(name))


@functools.cache
def real_findings(name: str):
    from profanalyzer.findings.engine import run_rules

    return run_rules(real(name))


def html_of(a, f):
    from profanalyzer.report.html import render_html

    return render_html(a, f, command_line="profanalyze t.xplane.pb", input_sha256="0" * 64)


@functools.cache
def real_dom(name: str):
    return parse(html_of(real(name), real_findings(name)))


def terminal_of(a, f=None, top=10) -> str:
    from profanalyzer.report.terminal import format_summary

    return format_summary(a, top=top, findings=f)


# --- 1. a rate over a (near-)zero duration is not a rate ---------------------


def test_no_rate_over_a_near_zero_duration():
    from profanalyzer.analyze.opstats import RATE_MIN_RUN_PS

    a = real(realcap.V6E)
    short = [op for op in a.top_ops if op.count and op.self_ps < RATE_MIN_RUN_PS * op.count]
    assert any(op.name.startswith("copy-start") for op in short)  # the 0.000 ms copy-starts of the capture
    assert all(op.gbps is None and op.tflops_per_s is None and op.roofline_fraction is None for op in short)
    timed = [op for op in a.top_ops if op.gbps is not None]
    assert timed and max(op.gbps for op in timed) < 10 * a.hardware.hbm_gbps_per_chip  # no 894,784,853 GB/s


def test_terminal_top_ops_lists_no_zero_time_op():
    text = terminal_of(real(realcap.V6E), top=10)
    rows = text.split("top ops (self time per step, per TensorCore):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert rows and all(" 0.000 ms" not in r for r in rows)


# --- 2. a utilisation above the physical peak carries its caveat where shown --


def test_mxu_above_peak_carries_its_caveat_in_the_header():
    a = real(realcap.VLLM)
    assert a.utilisation.mxu_matmul is not None and a.utilisation.mxu_matmul > 1.0  # 110.2% on this capture
    dd = real_dom(realcap.VLLM).by_id("fact-mxu").find("dd").norm_text()
    assert dd.startswith("110.2%") and "above the peak" in dd
    line = next(x for x in terminal_of(a).splitlines() if "MXU utilisation" in x)
    assert "110.2% (above the peak" in line


def test_mxu_below_peak_has_no_caveat():
    from profanalyzer.report.sections import mxu_text

    assert mxu_text(0.5) == "50.0%" and "above the peak" in mxu_text(1.02)


# --- 3. one number, one meaning: "together" is the what-if combination -------


def test_recommendations_together_is_the_what_if_combination():
    from profanalyzer.core.format import ms
    from profanalyzer.findings.whatif import what_if
    from profanalyzer.report.html import render_html

    a, f = analysis_of("dense_short_fsdp"), findings_of("dense_short_fsdp")
    levers = tuple(sorted({r.lever for r in f.recommendations}))
    assert levers == ("fp8", "remat")
    w = what_if(a, f, levers)
    summed = sum(r.estimated_saving_ps for r in f.recommendations)
    assert ms(w.saving_ps) != ms(summed)  # 26.394 vs 28.688 on this sample
    html = render_html(a, f, command_line="profanalyze t.xplane.pb", input_sha256="0" * 64)
    text = parse(html).by_id("recs-total").norm_text()
    assert f"together about {ms(w.saving_ps)} ms/step" in text
    assert f"add up to {ms(summed)} ms/step" in text and "sum of claims" in text
    assert "net of overlaps" not in text
    # the what-if output names the same two numbers the same way
    from profanalyzer.report.extras_text import format_what_if

    line = format_what_if(w)[0]
    assert f"saves {ms(w.saving_ps)} ms" in line and f"add up to {ms(summed)} ms" in line


# --- 4. the HTML's offload verdict says what the terminal says ---------------


def test_offload_verdict_without_sparsecore_planes_cannot_be_observed():
    a = real(realcap.VLLM)
    assert a.sparsecores == 0 and a.sparsecore_offload.verdict == "off"
    assert "SparseCore offload cannot be observed" in terminal_of(a)
    box = real_dom(realcap.VLLM).by_id("sc-verdict")
    assert "cannot be observed" in box.norm_text() and "not offloaded" not in box.norm_text()
    assert "tone-bad" not in box.attrs["class"]
    assert "Offloaded types" not in box.norm_text()  # no per-type "no" under a verdict that cannot be observed


# --- 5. no table of zero training phases on an inference run -----------------


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_no_training_phase_table_on_inference(name):
    a = real(name)
    assert a.run_kind.kind == "inference"
    dom = real_dom(name)
    assert dom.find(id="phase-table") is None
    assert "not a training run" in dom.by_id("phase-note").norm_text() or "inference run" in dom.by_id("phase-note").norm_text()


def test_training_phase_table_stays_on_training():
    a, f = analysis_of("dense_short_fsdp"), findings_of("dense_short_fsdp")
    assert a.run_kind.kind == "training"
    table = parse(html_of(a, f)).by_id("phase-table")
    assert "Backward" in table.norm_text()


# --- 6. the attention kernel's label follows its family ----------------------


def _attention_facts(dom) -> dict[str, str]:
    sec = dom.by_id("attention")
    return {d.find("dt").norm_text(): d.find("dd").norm_text() for d in sec.find_all("div") if d.find("dt") is not None}


def test_attention_kernel_label_follows_the_kernel_family():
    facts = _attention_facts(real_dom(realcap.VLLM))
    labels = [k for k in facts if k.startswith("In attention kernels")]
    assert labels == ["In attention kernels (Pallas: ragged paged attention)"]
    a, f = analysis_of("attention_splash"), findings_of("attention_splash")
    labels = [k for k in _attention_facts(parse(html_of(a, f))) if k.startswith("In attention kernels")]
    assert labels == ["In attention kernels (Pallas: splash)"]


# --- 7. the host-offload wait is not compute ---------------------------------


def test_compute_excludes_the_host_offload_wait():
    a = real(realcap.V6E)
    for c in a.per_core:
        waits = sum(v for k, v in c.buckets.items() if k in ("host_offload", "all_gather", "reduce_scatter", "all_reduce",
                                                             "all_to_all", "other_collective"))
        assert c.buckets["host_offload"] > 0.5 * c.step_ps  # the capture is mostly host DMA wait
        assert abs(c.compute_ps - (c.busy_ps - waits)) <= 1
    from profanalyzer.core.format import ms
    from profanalyzer.core.stats import median_of

    desc = real_dom(realcap.V6E).find("svg", class_="core-strip").find("desc").norm_text()
    med = median_of([c.compute_ps for c in a.per_core])
    assert med < 0.1 * a.steps.step_time_ps["median"]  # ~24 ms of compute in a 784 ms step, not 784.1
    assert f"median {ms(med)} ms" in desc


# --- 9. ticks, labels, counts ------------------------------------------------


def test_axis_tick_labels_are_distinct():
    from profanalyzer.report.svg import nice_ticks, tick_labels

    ticks = nice_ticks(61.1, 61.2, 6)
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels) == len(ticks)
    assert [float(x) for x in labels] == pytest.approx(ticks)
    assert tick_labels([0, 50, 100, 150]) == ["0", "50", "100", "150"]  # plain ticks keep their short labels


def _svg_texts(svg) -> list[str]:
    return [t.norm_text() for t in svg.find_all("text")]


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_rendered_axis_ticks_are_distinct(name):
    dom = real_dom(name)
    for cls in ("core-strip", "step-bars"):
        svg = dom.find("svg", class_=cls)
        ticks = [t.norm_text() for t in svg.find_all("text") if t.attrs.get("class") == "lbl"
                 and t.norm_text().replace(".", "", 1).isdigit() and (cls == "core-strip" or t.attrs.get("text-anchor") == "end")]
        assert len(ticks) == len(set(ticks)), (cls, ticks)


def test_median_label_is_not_drawn_over_the_bars():
    svg = real_dom(realcap.V6E).find("svg", class_="step-bars")
    label = next(t for t in svg.find_all("text") if "median of kept steps" in t.norm_text())
    bar_tops = [float(r.attrs["y"]) for r in svg.find_all("rect") if r.attrs.get("fill", "").startswith("#")]
    assert bar_tops and float(label.attrs["y"]) < min(bar_tops)


def test_diff_bars_scale_to_the_largest_change_on_the_page():
    from profanalyzer.compare.comparison import compare
    from profanalyzer.report.diff_html import build_diff_context

    b, n = "fp8_remat_before", "fp8_remat_after"
    c = compare((analysis_of(b), findings_of(b)), (analysis_of(n), findings_of(n)))
    ctx = build_diff_context(c)
    rows = list(ctx.buckets) + list(ctx.comm) + list(ctx.idle)
    widths = {(r.key, r.delta_ms): float((r.neg_w if r.delta_ms.startswith("-") else r.pos_w).rstrip("%")) for r in rows}
    top = max(abs(float(d)) for _, d in widths)
    for (key, d), w in widths.items():
        assert w == pytest.approx(min(100.0, abs(float(d)) / top * 100), abs=0.2), (key, d, w)
    tiny = [w for r in ctx.idle for (k, d), w in widths.items() if k == r.key and abs(float(d)) <= 0.001]
    assert tiny and max(tiny) < 1.0  # a 0.001 ms idle change is not a full-width bar


def test_counts_print_as_integers():
    from profanalyzer.core.format import count

    assert count(21.0) == "21" and count(20.5) == "20.5" and count(1234.0) == "1,234"
    dom = real_dom(realcap.VLLM)
    table = dom.find("table", id="comm-table") or dom.by_id("communication").find("table")
    cells = [tr.find_all("td")[1].norm_text() for tr in table.find_all("tr") if tr.attrs.get("data-type")]
    assert cells and all(not x.endswith(".0") for x in cells)


@pytest.mark.parametrize("name", [realcap.VLLM])
def test_one_kept_step_is_not_a_median_of_steps(name):
    a = real(name)
    assert a.steps.kept == 1
    dom = real_dom(name)
    text = dom.by_id("kpi-step-time").norm_text()
    assert "the one kept step" in text and "1 kept steps" not in text
    assert "median" not in dom.by_id("fact-step-time").norm_text()  # no median (and min-max range) of one step
    assert "1 kept steps" not in dom.norm_text()
    line = next(x for x in terminal_of(a).splitlines() if x.startswith("step time:"))
    assert line.startswith("step time: 65.493 ms (the one kept step)") and "median" not in line


# --- 8. a finding's lever is one thing: its rule's, in explain and on the page ----------


def test_host_offload_finding_keeps_its_rules_lever():
    """#32 item 6: HO001 is the remat lever (L4) in `explain` and on the page alike; where the buffers do not
    fit in HBM its estimate halves the bytes by narrower storage, which it says, never as FP8 on a chip whose
    FP8 peak is its BF16's (v6e)."""
    from profanalyzer.core.vocab import GUIDE_SECTIONS
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import RunOptions, run_analysis

    a = run_analysis(realcap.real_path(realcap.V6E), RunOptions(memory=True))
    ho = next(r for r in run_rules(a).recommendations if r.code == "HO001")
    assert any("do not fit in HBM" in x for x in ho.assumptions)
    assert ho.lever == "remat" and ho.guide_section == GUIDE_SECTIONS["remat"]
    assert "narrower" in ho.actions[0] and "FP8" not in " ".join(ho.actions)
    fits_unknown = next(r for r in findings_of("host_offload_loop").recommendations if r.code == "HO001")
    assert fits_unknown.lever == "remat"


# --- 10. info and analyze: one step time; the file size is the file's --------


def _info(path):
    from profanalyzer.api.info import trace_info
    from profanalyzer.read.trace import read_trace
    from profanalyzer.report.info_text import format_info

    i = trace_info(read_trace(path))
    return i, format_info(i)


def test_info_and_analyze_report_one_median_step():
    from profanalyzer.core.format import ms

    for path, a in ((sample_path("dense_short_fsdp"), analysis_of("dense_short_fsdp")),
                    (realcap.real_path(realcap.VLLM), real(realcap.VLLM))):
        i, text = _info(path)
        assert i.step_ps_median is not None
        assert ms(i.step_ps_median) == ms(a.steps.step_time_ps["median"])  # 87.293 and 65.493 ms
        assert f"median step {ms(a.steps.step_time_ps['median'])} ms" in text


def test_info_prints_the_file_size_on_disk():
    import os

    from profanalyzer.report.info_text import _size

    path = sample_path("dense_short_fsdp")
    i, text = _info(path)
    disk = os.stat(path).st_size
    assert i.hosts[0].file_bytes == disk and i.hosts[0].size_bytes > disk  # a .gz: smaller on disk
    assert f"({_size(disk)}, {_size(i.hosts[0].size_bytes)} uncompressed)" in text


def test_together_is_a_sum_of_claims_where_the_what_if_does_not_model_a_finding():
    # v6e: HO001 (host-offload wait, the remat lever) is not re-timed by a what-if: no "together about 0.000 ms"
    from profanalyzer.core.format import ms
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import RunOptions, run_analysis

    a = run_analysis(realcap.real_path(realcap.V6E), RunOptions(memory=True))  # as the CLI reads it
    f = run_rules(a)
    assert [r.lever for r in f.recommendations] == ["remat"]
    text = parse(html_of(a, f)).by_id("recs-total").norm_text()
    summed = sum(r.estimated_saving_ps for r in f.recommendations)
    assert "together about" not in text and "a sum of claims" in text and f"add up to {ms(summed)} ms/step" in text


def test_html_top_ops_lists_no_zero_time_op():
    sec = real_dom(realcap.V6E).by_id("top-ops")
    rows = [tr for tr in sec.find_all("tr") if tr.find("td") is not None]
    assert rows and all(tr.find_all("td")[3].norm_text() != "0.000" for tr in rows)
    assert "under 0.001 ms per step not listed" in sec.norm_text()


def test_the_rate_floor_is_stated():
    a = real(realcap.V6E)
    assert "at least 1 us on average" in a.definitions["op_rates"]
    assert "at least 1 us on average" in real_dom(realcap.V6E).norm_text()


def test_op_rate_above_the_peak_carries_its_caveat():
    a = real(realcap.VLLM)
    peak = a.hardware.peak_bf16_tflops_per_chip / a.hardware.planes_per_chip
    over = [op for op in a.top_ops if op.bucket == "matmul_bf16" and op.tflops_per_s and op.tflops_per_s > peak]
    assert over  # the w4a16 kernels run at 1,349 TFLOP/s per core against a 1,154 BF16 peak
    table = real_dom(realcap.VLLM).by_id("top-ops")
    cells = {tr.find_all("td")[1].attrs.get("title", "").split(" — ")[0]: tr.find_all("td")[7].norm_text()
             for tr in table.find_all("tr") if tr.find("td") is not None}
    for op in over:
        assert cells[op.name].endswith("(above the BF16 peak)"), (op.name, cells[op.name])


def test_timeline_sentence_without_windows_starts_with_a_capital():
    dom = real_dom(realcap.V6E)
    text = dom.by_id("timeline").norm_text()
    assert "No collective windows in this step." in text
    assert ". no collective" not in text


def test_a_loop_with_no_model_compute_is_no_models_step():
    """#32 item 6: the v6e host-offload loop (adds and transfers, no matmul, no attention) is no model's step,
    not "inference (dense)"."""
    from profanalyzer.analyze.workload import classify_workload
    from profanalyzer.pipeline.run import run_analysis

    wl = classify_workload(run_analysis(realcap.real_path(realcap.V6E)))
    assert wl.kind == "no model" and "dense" not in wl.row and wl.main_bottleneck == "host_offload"


def test_a_claim_whose_premise_the_evidence_contradicts_is_not_ranked():
    """#32 item 6: FP002 (serving matmuls on the BF16 MXU) is quiet where those matmuls measure above the BF16
    peak (vLLM on TPU7x: 110%): its own evidence says they do not run at BF16; it still fires on the sample whose
    matmuls run below it."""
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import run_analysis

    vllm = run_analysis(realcap.real_path(realcap.VLLM))
    mm = vllm.bucket_ops["matmul_bf16"]
    assert mm.flops / (mm.ps * 1e-12) > vllm.hardware.per_core.peak_bf16_tflops * 1e12
    assert "FP002" not in {r.code for r in run_rules(vllm).recommendations}
    assert "FP002" in {r.code for r in findings_of("serving_tp2_w4").recommendations}


def test_kernels_and_byte_movers_have_a_roofline():
    """#32 item 9: the vLLM capture's quantized matmul kernels (no bytes in the capture, no program beside it)
    get their bytes from the shapes their text prints, so they have a roofline; an op with bytes and no FLOPs
    (an elementwise fusion, a copy) is HBM-bound, never "unknown"."""
    a = real(realcap.VLLM)
    quant = [op for op in a.kernel_ops if "kernel:quantized_matmul" in op.tags]
    assert quant and all(op.bytes and op.roofline_fraction is not None for op in quant)
    movers = [op for op in a.top_ops if not op.flops and op.bytes and op.bucket in ("other_compute", "attention")
              and not any(t.startswith("kernel:") for t in op.tags)]
    assert movers and all(op.bound_by == "hbm" for op in movers)


def test_vmem_and_hbm_units_follow_the_chip_table():
    """#32 item 11: the scoped-VMEM advice follows the chip's own VMEM per TensorCore (TPU7x 64 MiB -> 48 MiB,
    v6e 128 MiB -> 96 MiB, MaxText's dense preset) and says per TensorCore; the chip's source says which table
    its HBM and VMEM units come from (GiB, per TensorCore) where the guide rounds them (GB, per chip)."""
    from profanalyzer.core.hardware import TPU7X

    for name, kib, mib in (("small_tiles", 49152, 64), ("small_tiles@v6e", 98304, 128)):
        vm = next(r for r in findings_of(name).recommendations if r.code == "VM001")
        assert vm.flags == (f"--xla_tpu_scoped_vmem_limit_kib={kib}",)
        assert any(f"of the {mib} MiB VMEM per TensorCore" in x for x in vm.assumptions)
    assert "192 GiB per chip" in TPU7X.source and "64 MiB per TensorCore" in TPU7X.source


def test_markdown_step_time_has_no_range_of_one_step():
    """#32 item 12: one kept step (a replayed compiled program) reads "the one kept step", not "0.799-0.799"."""
    from pathlib import Path

    from profanalyzer.pipeline.run import run_analysis
    from profanalyzer.report.markdown import render_markdown

    program = Path(__file__).resolve().parents[1] / "sample_traces" / "compiled" / "dense_fsdp.after_codegen.hlo.pb.gz"
    line = next(x for x in render_markdown(run_analysis(program), None).splitlines() if x.startswith("**Step time"))
    assert "(the one kept step)" in line and "–" not in line.split("·")[0]
