"""The records' JSON form: a saved analysis reads back to the same records,
passes its self-check, and renders the same reports as the trace."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from profanalyzer.core.errors import InputError, InvariantError
from profanalyzer.findings.engine import load_analysis, run_rules
from profanalyzer.model.analysis import Analysis, BucketShare
from profanalyzer.model.documents import result_document
from profanalyzer.model.findings import Findings
from profanalyzer.model.invariants import check_analysis, check_findings
from profanalyzer.model.records import SchemaError, round_number
from profanalyzer.pipeline.run import RunOptions, run, run_analysis
from profanalyzer.report.html import render_html
from profanalyzer.report.markdown import render_markdown
from profanalyzer.report.terminal import format_summary

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
# Folders: the run folders (plugins/profile/); compiled/ holds compiled programs, not captures.
TRACES = sorted(p for p in SAMPLES.iterdir() if p.name.endswith(".xplane.pb.gz") or (p.is_dir() and (p / "plugins" / "profile").is_dir()))


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".")[0])
def analysed(request):
    a = run_analysis(request.param)
    return request.param, a, run_rules(a)


def test_round_trip_every_sample(analysed):
    _, a, f = analysed
    d = a.to_dict()
    b = Analysis.from_dict(d)
    assert b.to_dict() == d
    # to_dict rounds (12 significant digits; integers from 1e6): what is read
    # back is a fixed point of the round trip.
    assert Analysis.from_dict(b.to_dict()) == b
    assert isinstance(b.per_core[0].buckets, dict) and isinstance(b.top_ops, tuple)
    b.self_check()
    a.self_check()
    fd = f.to_dict()
    g = Findings.from_dict(fd)
    assert g.to_dict() == fd and Findings.from_dict(g.to_dict()) == g
    assert check_findings(g, b) == []


def test_saved_json_renders_like_the_trace(analysed, tmp_path):
    path, a, f = analysed
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(result_document(a, f), indent=2, sort_keys=True))
    r = run(saved)
    b, g = r.analysis, r.findings
    assert format_summary(b, 10, g) == format_summary(a, 10, f)
    assert render_markdown(b, g) == render_markdown(a, f)
    kw = dict(command_line="profanalyze analyze x", input_sha256="0" * 64)
    # The HTML tables' sort keys (data-v) carry full precision, the JSON 12
    # significant digits: compared at the JSON's precision. Everything shown
    # is the same.
    assert _sort_keys_rounded(render_html(b, g, **kw)) == _sort_keys_rounded(render_html(a, f, **kw))


def _sort_keys_rounded(html: str) -> str:
    return re.sub(r'data-v="(-?[0-9.e+-]+)"', lambda m: f'data-v="{round_number(float(m.group(1)))}"', html)


def test_run_reads_traces_and_gzipped_json(tmp_path):
    trace = SAMPLES / "offload_off.xplane.pb.gz"
    r = run(trace)
    a, f = r.analysis, r.findings
    z = tmp_path / "saved.json.gz"
    z.write_bytes(gzip.compress(json.dumps(result_document(a, f)).encode()))
    r = run(z)
    b, g = r.analysis, r.findings
    assert b.to_dict() == a.to_dict() and g.to_dict() == f.to_dict()
    # rule selection applies to a saved document too
    only = run(z, RunOptions(select=("SC",))).findings
    assert only.rules_run and all(c.startswith("SC") for c in only.rules_run)


def test_analysis_without_findings_gets_rules_run(tmp_path):
    a = run_analysis(SAMPLES / "bf16_dense.xplane.pb.gz")
    p = tmp_path / "a.json"
    p.write_text(json.dumps(a.to_dict()))
    b, g = load_analysis(p)
    f = run_rules(a)
    assert [x.code for x in g.recommendations] == [x.code for x in f.recommendations] and g.rules_run == f.rules_run
    assert g.recommendations, "the sample has findings"
    for x, y in zip(g.recommendations, f.recommendations, strict=True):
        assert x.estimated_saving_ps == pytest.approx(y.estimated_saving_ps, rel=1e-9, abs=1.0)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "not an object"),
        ('{"schema_version": 1}', "missing keys"),
        ("{", "not valid JSON"),
    ],
)
def test_bad_documents_are_one_line_input_errors(tmp_path, text, message):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        load_analysis(p)
    assert "\n" not in str(e.value)


def test_wrong_types_name_the_field(tmp_path):
    a = run_analysis(SAMPLES / "bf16_dense.xplane.pb.gz")
    d = a.to_dict()
    d["per_core"][0]["steps_kept"] = "three"
    with pytest.raises(SchemaError, match=r"per_core\[0\]\.steps_kept"):
        Analysis.from_dict(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match="steps_kept"):
        load_analysis(p)


def test_self_check_catches_contradictions():
    a = run_analysis(SAMPLES / "offload_off.xplane.pb.gz")
    core = a.per_core[0]
    bad_core = replace(core, buckets={**core.buckets, "idle": core.buckets["idle"] + 1e6})
    assert any("buckets sum" in p for p in check_analysis(replace(a, per_core=(bad_core, *a.per_core[1:]))))
    ag = a.collectives["all_gather"]
    bad_coll = {**a.collectives, "all_gather": replace(ag, exposed_ps=ag.exposed_ps + 1e6)}
    assert any("all_gather" in p for p in check_analysis(replace(a, collectives=bad_coll)))
    # cores that kept different numbers of steps: the two means legitimately differ
    uneven = (replace(core, steps_kept=core.steps_kept + 1), *a.per_core[1:])
    assert not any("all_gather" in p for p in check_analysis(replace(a, collectives=bad_coll, per_core=uneven)))
    bd = {**a.breakdown, "idle": BucketShare(a.breakdown["idle"].ps, a.breakdown["idle"].fraction + 0.5)}
    with pytest.raises(InvariantError, match="fractions sum"):
        replace(a, breakdown=bd).self_check()


def test_finding_claiming_more_than_its_bucket_is_caught():
    a = run_analysis(SAMPLES / "offload_off.xplane.pb.gz")
    f = run_rules(a)
    assert f.recommendations
    x = f.recommendations[0]
    step = a.steps.step_time_ps["mean"]
    too_much = replace(x, estimated_saving_ps=2 * step)
    problems = check_findings(replace(f, recommendations=(too_much,)), a)
    assert any("exceeds the step" in p for p in problems)
    with pytest.raises(InvariantError, match="exceeds the step"):
        replace(f, recommendations=(too_much,)).self_check(a)
    greedy = replace(x, claims=(("bucket:idle", a.breakdown["idle"].ps + 1e6),))
    assert any("bucket:idle" in p for p in check_findings(replace(f, recommendations=(greedy,)), a))


def test_to_jsonable_is_not_imported_privately():
    root = Path(__file__).resolve().parent.parent
    offenders = [
        str(p.relative_to(root))
        for p in (root / "profanalyzer").rglob("*.py")
        if "templates_compiled" not in p.parts and re.search(r"import[^\n]*\b_jsonable\b", p.read_text())
    ]
    # fleet.py (the periphery's) still uses the old alias analysis._jsonable
    assert set(offenders) <= {"profanalyzer/fleet.py", "profanalyzer/fleet/__init__.py"}
