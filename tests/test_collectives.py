"""Per-collective diagnosis (issue 26): instances, bytes, achieved bandwidth
against the chip's ICI figure, exposed share, arrival spread, the core that
arrives last most often; the late-core finding LC001. Truth: the
synthesizer's straggler (`straggler_core`: the local TensorCore index that
runs slower)."""

from __future__ import annotations

import pytest

from profanalyzer.findings.engine import run_rules
from profanalyzer.pipeline.run import run_analysis
from profanalyzer.synth import SCENARIOS, write_scenario

SAMPLES = "sample_traces"


def _run(path):
    a = run_analysis(path)
    return a, run_rules(a)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """A balanced run and the same run with TensorCore 2 slower (not the sample's 5)."""
    d = tmp_path_factory.mktemp("coll")
    out = {}
    for name, core in (("balanced", None), ("late2", 2)):
        spec = SCENARIOS["dense_short_fsdp"].with_(name=name, straggler_core=core)
        truth = write_scenario(spec, d / f"{name}.xplane.pb", steps=4, layers=2)
        out[name] = (*_run(d / f"{name}.xplane.pb"), truth)
    return out


def test_the_slow_core_is_the_one_that_arrives_last(synth):
    a, findings, truth = synth["late2"]
    slow = truth["planes"]["tensorcore"][truth["config"]["straggler_core"]]
    d = a.collective_diagnosis
    assert d.last_core.endswith(slow) and d.last_core_share > 0.9
    assert [f for f in findings.recommendations if f.code == "LC001"]
    f = next(f for f in findings.recommendations if f.code == "LC001")
    assert slow in f.evidence[0] and f.estimated_saving_ps > 0


def test_balanced_run_names_no_late_core(synth):
    a, findings, _ = synth["balanced"]
    assert not [f for f in findings.recommendations if f.code == "LC001"]
    d = a.collective_diagnosis
    assert d is not None and d.cores == 8
    # nobody is late by the rule's measure: either no distinct last core, or one too rarely / too little late
    step = a.steps.step_time_ps["mean"]
    assert d.last_core is None or d.last_core_share < 0.5 or d.last_core_lateness_ps < 0.005 * step


def test_sample_straggler_fires_and_base_is_quiet():
    a, f = _run(f"{SAMPLES}/straggler_core.xplane.pb.gz")
    lc = [x for x in f.recommendations if x.code == "LC001"]
    assert lc and a.collective_diagnosis.last_core.endswith("/device:TPU:5")
    _, f = _run(f"{SAMPLES}/dense_short_fsdp.xplane.pb.gz")
    assert not [x for x in f.recommendations if x.code == "LC001"]


def test_per_type_numbers_follow_the_windows(synth):
    a, _, truth = synth["late2"]
    d = a.collective_diagnosis
    link = a.hardware.ici_gbps_per_chip / a.hardware.planes_per_chip
    assert set(d.types) == {t for t, c in a.collectives.items() if c.count > 0}
    for t, x in d.types.items():
        c = a.collectives[t]
        assert x.per_step == pytest.approx(c.count)  # windows per step per core, as the overlap section counts them
        assert x.exposed_ps == pytest.approx(c.exposed_ps, abs=1)
        assert x.link_gbps == pytest.approx(link)
        assert x.window_p50_ps <= x.window_p90_ps
        if x.achieved_gbps is not None:
            assert x.link_fraction == pytest.approx(x.achieved_gbps / link)
        # the synthesizer counts each type's windows per step on every core
        n_truth = truth["per_core"]["/device:TPU:0"]["1"]["collectives"][t]["count"]
        assert x.per_step == pytest.approx(n_truth)


def test_quiet_without_collectives_or_with_two_cores():
    from dataclasses import replace

    from profanalyzer.heuristics.late_core import late_core

    a, _ = _run(f"{SAMPLES}/straggler_core.xplane.pb.gz")
    assert late_core.check(a)
    assert not late_core.check(replace(a, collective_diagnosis=None))
    assert not late_core.check(replace(a, collective_diagnosis=replace(a.collective_diagnosis, cores=2)))


def test_the_html_table_names_each_type_by_its_label():
    """The per-collective table reads 'All-gather', not the JSON key 'all_gather'."""
    from conftest import analysis_of, findings_of
    from test_report_html import parse

    from profanalyzer.core.vocab import COLLECTIVE_TYPE_LABELS
    from profanalyzer.report.html import render_html

    a = analysis_of("straggler_core")
    dom = parse(render_html(a, findings_of("straggler_core"), command_line="profanalyze t", input_sha256="0" * 64))
    rows = [tr for tr in dom.by_id("coll-diag").find_all("tr") if tr.find("td") is not None]
    assert rows
    shown = {tr.find("th").norm_text() for tr in rows}
    assert shown <= set(COLLECTIVE_TYPE_LABELS.values()), shown
    assert shown == {COLLECTIVE_TYPE_LABELS[t] for t in a.collective_diagnosis.types}
