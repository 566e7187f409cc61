"""`compare`: deltas, noise, finding and op matching, inputs, renderers, CLI."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
from conftest import run_cli, sample_doc, sample_path

from profanalyzer.compare.comparison import (
    MIN_EFFECT,
    NOISE_K,
    compare,
    load_document,
    validate_document,
    verdict_of,
)
from profanalyzer.compare.opmatch import match_name
from profanalyzer.core.errors import InputError
from profanalyzer.report.diff import format_text, render_diff_markdown
from profanalyzer.report.diff_html import render_diff_html

doc = sample_doc  # a fresh copy of a sample's analysis document
run = run_cli


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Saved analysis JSONs of a few samples: name -> path."""
    d = tmp_path_factory.mktemp("analyses")
    out = {}
    for name in ("dense_short_fsdp", "offload_on", "offload_off", "remat_minimal", "remat_full"):
        p = d / f"{name}.json"
        p.write_text(json.dumps(sample_doc(name)))
        out[name] = p
    return out


def _all_deltas(c) -> list[float]:
    st = c.step_time
    vals = [st.delta_ps, st.median_delta_ps, c.remat.delta_ps, c.remat.delta_points]
    for s in c.buckets.values():
        vals += [s.delta_ps, s.delta_points]
    for e in c.exposed.values():
        vals += [e.exposed.delta_ps, e.exposed.delta_points]
    vals += [u.delta for u in c.utilisation.values() if u.delta is not None]
    return vals


def assert_zero(c) -> None:
    assert all(v == 0 for v in _all_deltas(c)), _all_deltas(c)
    assert c.step_time.verdict == "unchanged"
    assert {s.verdict for s in c.buckets.values()} == {"unchanged"}
    assert {e.exposed.verdict for e in c.exposed.values()} == {"unchanged"}
    assert c.remat.verdict == "unchanged"
    assert not c.new_findings and not c.vanished_findings
    assert all(f.status == "persisting" and f.base_saving_ps == f.new_saving_ps for f in c.findings)
    assert not (c.ops.slower or c.ops.faster or c.ops.entered or c.ops.left)


# ---------------------------------------------------------------------------
# Identity and noise
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dense_short_fsdp", "moe_large_pp"])
def test_self_comparison_is_exactly_zero(name):
    c = compare(doc(name), doc(name))
    assert_zero(c)
    assert c.step_time.noise_ps is not None and c.step_time.noise_ps > 0
    assert c.ops.matched > 0
    assert "unchanged" in c.headline
    d = c.to_dict()
    assert d == compare(doc(name), doc(name)).to_dict()  # deterministic
    assert json.loads(json.dumps(d)) == d


def test_trace_against_its_saved_json_is_zero(tmp_path, capsys):
    trace = sample_path("dense_short_fsdp")
    j = tmp_path / "a.json"
    rc, _, err = run(capsys, "analyze", trace, "--json", j, "--no-html", "-q")
    assert rc == 0, err
    rc, out, err = run(capsys, "compare", trace, j, "--json", "-")
    assert rc == 0, err
    d = json.loads(out)
    assert d["step_time"]["delta_ps"] == 0 and d["step_time"]["verdict"] == "unchanged"
    assert all(b["delta_ps"] == 0 and b["delta_points"] == 0 for b in d["buckets"].values())
    assert all(e["exposed"]["delta_ps"] == 0 for e in d["exposed"].values())
    assert d["ops"]["slower"] == d["ops"]["faster"] == d["ops"]["entered"] == d["ops"]["left"] == []


def test_noise_estimate_is_the_combined_standard_error():
    a, b = doc("offload_on"), doc("offload_off")
    c = compare(a, b)

    def sem(d):
        xs = [r["step_ps"] for r in d["steps"]["table"] if r["kept"]]
        m = sum(xs) / len(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))

    st = c.step_time
    assert st.base_sem_ps == pytest.approx(sem(a)) and st.new_sem_ps == pytest.approx(sem(b))
    assert st.noise_ps == pytest.approx(math.hypot(sem(a), sem(b)))
    assert st.threshold_ps == pytest.approx(max(NOISE_K * st.noise_ps, MIN_EFFECT * st.base_ps))
    assert st.z == pytest.approx(st.delta_ps / st.noise_ps)
    # the buckets' deltas add up to the step-time delta (both are means over kept steps)
    assert sum(s.delta_ps for s in c.buckets.values()) == pytest.approx(st.delta_ps, rel=1e-4)


def test_verdict_rule():
    step = 100e9
    assert verdict_of(0.0, 1e9, step) == "unchanged"
    assert verdict_of(2.9e9, 1e9, step) == "within noise"  # < 3 sigma
    assert verdict_of(3.1e9, 1e9, step) == "regression"
    assert verdict_of(-3.1e9, 1e9, step) == "improvement"
    assert verdict_of(0.4e9, 0.01e9, step) == "within noise"  # < 0.5% of the step
    assert verdict_of(0.6e9, None, step) == "regression"  # no noise estimate: the floor only
    assert verdict_of(-0.6e9, 0.01e9, step, higher_is_worse=False) == "regression"


def test_seed_to_seed_noise_stays_within_noise_and_passes_a_3pct_budget(tmp_path, capsys):
    from profanalyzer.synth import write_scenario

    paths = []
    for seed in (1, 2):
        p = tmp_path / f"dense_seed{seed}.xplane.pb.gz"
        write_scenario("dense_short_fsdp", p, seed=seed)
        paths.append(p)
    j1, j2 = tmp_path / "s1.json", tmp_path / "s2.json"
    for p, j in zip(paths, (j1, j2), strict=True):
        rc, _, err = run(capsys, "analyze", p, "--json", j, "--no-html", "-q")
        assert rc == 0, err
    c = compare(load_document(j1), load_document(j2))
    st = c.step_time
    assert st.delta_ps != 0  # different seeds do differ ...
    assert abs(st.relative) < 0.01  # ... by well under 1% ...
    assert abs(st.delta_ps) <= NOISE_K * st.noise_ps  # ... inside 3 sigma of the noise estimate
    assert st.verdict == "within noise"
    assert all(s.verdict in ("within noise", "unchanged") for s in c.buckets.values())
    assert not c.new_findings and not c.vanished_findings
    budget = tmp_path / "b.toml"
    budget.write_text('baseline = "s1.json"\n[max_regression]\nstep_time = "3%"\n')
    rc, out, err = run(capsys, "check", j2, "--budget", budget)
    assert rc == 0, out + err
    assert "all 1 checks passed" in out


# ---------------------------------------------------------------------------
# Regressions land in the right bucket with the right sign
# ---------------------------------------------------------------------------


def test_offload_turned_off_is_an_exposed_communication_regression():
    c = compare(doc("offload_on"), doc("offload_off"))
    assert c.step_time.verdict == "regression" and c.step_time.delta_ps > 0
    for t in ("all_gather", "reduce_scatter"):
        assert c.buckets[t].verdict == "regression" and c.buckets[t].delta_ps > 0 and c.buckets[t].delta_points > 0
        e = c.exposed[t]
        assert e.exposed.verdict == "regression" and e.exposed.delta_ps > 0
        assert (e.base_engine, e.new_engine) == ("SparseCore", "TensorCore")
    assert c.exposed["total"].exposed.delta_points > 0.05
    # compute did not change: the matmuls and attention stay within noise
    for b in ("matmul_bf16", "attention", "other_compute"):
        assert c.buckets[b].verdict == "within noise"
    assert c.remat.verdict == "within noise"
    assert [f.code for f in c.new_findings] == ["SC001"]
    assert c.base.offload == "on" and c.new.offload == "off"
    assert c.utilisation["mfu"].delta < 0

    back = compare(doc("offload_off"), doc("offload_on"))
    assert back.step_time.verdict == "improvement" and back.step_time.delta_ps < 0
    assert back.buckets["all_gather"].verdict == "improvement"
    assert [f.code for f in back.vanished_findings] == ["SC001"]


def test_heavier_remat_is_a_remat_regression():
    c = compare(doc("remat_minimal"), doc("remat_full"))
    assert c.step_time.verdict == "regression" and c.step_time.delta_ps > 0
    assert c.remat.verdict == "regression" and c.remat.delta_points > 0.15
    assert c.buckets["matmul_bf16"].delta_ps > 0  # recomputed matmuls
    assert c.exposed["total"].exposed.verdict == "within noise"
    assert "RM001" in [f.code for f in c.new_findings]
    # the recompute ops are new in the op lists (their tf_op has /rematted_computation/)
    assert any("rematted_computation" in o.tf_op for o in c.ops.entered)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """Regressed variants of dense_short_fsdp synthesized from Scenario specs."""
    from profanalyzer.synth import SCENARIOS, write_scenario
    from profanalyzer.synth.scenarios import _colls

    d = tmp_path_factory.mktemp("variants")
    base = SCENARIOS["dense_short_fsdp"]
    variants = {
        "ag_sync": base.with_(name="dense_short_fsdp_ag_sync", collectives=_colls(all_gather=("sync", "short"))),
        "remat_full": base.with_(name="dense_short_fsdp_remat_full", remat="full"),
    }
    out = {}
    for k, spec in variants.items():
        p = d / f"{k}.xplane.pb.gz"
        write_scenario(spec, p, seed=0)
        out[k] = load_document(p)
    return out


def test_synthesized_all_gather_without_offload(synthesized):
    c = compare(doc("dense_short_fsdp"), synthesized["ag_sync"])
    assert c.step_time.verdict == "regression"
    regressed = {b for b, s in c.buckets.items() if s.verdict == "regression"}
    assert regressed == {"all_gather"}
    assert c.exposed["all_gather"].exposed.delta_ps > 0
    assert c.exposed["all_gather"].new_engine == "TensorCore"
    assert c.exposed["reduce_scatter"].exposed.verdict == "within noise"
    assert "SC001" in [f.code for f in c.new_findings]


def test_synthesized_heavier_remat(synthesized):
    c = compare(doc("dense_short_fsdp"), synthesized["remat_full"])
    assert c.step_time.verdict == "regression"
    assert c.remat.verdict == "regression" and c.remat.delta_ps > 0
    assert c.exposed["total"].exposed.verdict == "within noise"


# ---------------------------------------------------------------------------
# Ops: matched across compiles
# ---------------------------------------------------------------------------


def _renumber(d: dict, shift: int) -> dict:
    d = copy.deepcopy(d)
    for lst in ("top_ops", "remat_ops", "kernel_ops"):
        for op in d[lst]:
            for k in ("name", "deduplicated_name"):
                if op[k]:
                    op[k] = re.sub(r"\.(\d+)", lambda m: f".{int(m.group(1)) + shift}", op[k])
    return d


def test_match_name_drops_instruction_numbers():
    assert match_name({"name": "fusion.325.remat", "deduplicated_name": ""}) == "fusion.remat"
    assert match_name({"name": "all-gather-start.3"}) == "all-gather-start"
    assert match_name({"name": "fusion.301", "deduplicated_name": "fusion.299"}) == "fusion"
    k = "vmap_splash_mha_dkv_segmented_block_kv_dkv_512"
    assert match_name({"name": k}) == k


def test_ops_matched_by_name_and_tf_op_not_instruction_number():
    base = doc("dense_short_fsdp")
    new = _renumber(base, 1000)  # a recompile: every instruction number changes
    assert_zero(compare(base, new))
    # one op gets 20% slower (in all its lists), the rest stays
    target = next(o for o in new["top_ops"] if o["name"].startswith("fusion.") and o["bucket"] == "matmul_bf16")
    for lst in ("top_ops", "remat_ops", "kernel_ops"):
        for o in new[lst]:
            if o["name"] == target["name"]:
                o["self_ps"] = o["self_ps"] * 1.2
    c = compare(base, new)
    assert len(c.ops.slower) == 1 and not c.ops.faster and not c.ops.entered and not c.ops.left
    s = c.ops.slower[0]
    assert s.tf_op == target["tf_op"] and s.match_name == "fusion" and s.bucket == "matmul_bf16"
    assert s.new_names and all(re.match(r"fusion\.1\d{3}", n) for n in s.new_names)
    assert s.delta_ps > 0 and s.delta_fraction > 0


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not an object"),
        ('{"a": 1}', "no schema_version"),
        ('{"schema_version": 99}', "schema_version 99"),
        ('{"schema_version": 1, "steps": {}}', "missing keys"),
    ],
)
def test_bad_analysis_json_is_an_input_error(tmp_path, capsys, saved, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(InputError, match=re.escape(needle)):
        load_document(p)
    rc, out, err = run(capsys, "compare", p, saved["offload_on"])
    assert rc == 2 and out == ""
    assert err.startswith("profanalyze: error:") and needle in err and err.count("\n") == 1


def test_malformed_sections_are_rejected():
    d = doc("offload_on")
    d["steps"]["table"] = "x"
    with pytest.raises(InputError, match="steps.table"):
        validate_document(d)
    d = doc("offload_on")
    d["breakdown"]["idle"] = {"ps": "a", "fraction": 0}
    with pytest.raises(InputError, match="breakdown.idle"):
        validate_document(d)


def test_info_json_is_not_an_analysis(tmp_path, capsys, saved):
    p = tmp_path / "info.json"
    rc, _, err = run(capsys, "info", sample_path("offload_on"), "--json", p)
    assert rc == 0, err
    rc, _, err = run(capsys, "compare", saved["offload_on"], p)
    assert rc == 2 and "not a profanalyze analysis JSON" in err


def test_missing_input(capsys, saved, tmp_path):
    rc, _, err = run(capsys, "compare", saved["offload_on"], tmp_path / "nope.xplane.pb.gz")
    assert rc == 2 and "no such file" in err


def test_gzipped_json_and_json_without_extension(tmp_path, saved):
    import gzip

    raw = saved["offload_on"].read_bytes()
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "analysis").write_bytes(raw)
    assert_zero(compare(load_document(tmp_path / "a.json.gz"), load_document(tmp_path / "analysis")))


def test_json_without_findings_compares_with_a_note():
    a, b = doc("offload_on"), doc("offload_off")
    del a["recommendations"]
    c = compare(a, b)
    assert c.findings == () and any("findings missing" in n for n in c.notes)


# ---------------------------------------------------------------------------
# Renderers and CLI
# ---------------------------------------------------------------------------


def test_compare_cli_outputs(tmp_path, capsys, saved):
    html, md, js = tmp_path / "d.html", tmp_path / "d.md", tmp_path / "d.json"
    rc, out, err = run(capsys, "compare", saved["offload_on"], saved["offload_off"], "-o", html, "--markdown", md, "--json", js)
    assert rc == 0, err
    assert "regression" in out and "all_gather" in out and "SparseCore -> TensorCore" in out
    assert "new       SC001" in out
    d = json.loads(js.read_text())
    assert d["step_time"]["verdict"] == "regression" and d["schema_version"] == 1
    assert [f["code"] for f in d["findings"] if f["status"] == "new"] == ["SC001"]
    assert d["method"]["op_match"].startswith("(tf_op")
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page and "https://" not in page
    assert 'data-key="all_gather" data-verdict="regression"' in page
    assert 'id="kpi-step"' in page and 'data-code="SC001" data-status="new"' in page
    text = md.read_text()
    assert "| Step time (mean, ms) |" in text and "**regression**" in text and "**new** SC001" in text
    # deterministic bytes
    html2 = tmp_path / "d2.html"
    rc, _, _ = run(capsys, "compare", saved["offload_on"], saved["offload_off"], "-o", html2, "-q")
    assert rc == 0 and html2.read_bytes() == html.read_bytes()


def test_compare_json_to_stdout_is_only_json(capsys, saved):
    rc, out, err = run(capsys, "compare", saved["remat_minimal"], saved["remat_full"], "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["remat"]["verdict"] == "regression"


def test_renderers_escape_trace_text():
    base = doc("dense_short_fsdp")
    new = copy.deepcopy(base)
    evil = "<script>alert(1)</script>|`*_"
    for lst in ("top_ops", "remat_ops", "kernel_ops"):
        for o in base[lst] + new[lst]:
            if o["name"] == base["top_ops"][0]["name"]:
                o["tf_op"] = evil
    for o in new["top_ops"]:
        if o["name"] == base["top_ops"][0]["name"]:
            o["self_ps"] *= 2
    c = compare(base, new, base_label="<b>base</b>", new_label="new")
    assert c.ops.slower and c.ops.slower[0].tf_op == evil
    page = render_diff_html(c)
    assert "<script>alert" not in page and "<b>base" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    md = render_diff_markdown(c)
    assert "<script>" not in md and "\\<script\\>" in md
    assert evil in format_text(c)


COMPILED = sample_path("dense_short_fsdp").parent / "compiled"


def test_a_prediction_is_never_compared_with_a_capture(tmp_path, capsys):
    """#32 item 2: a compiled program (predicted) against a capture (measured): the difference is the
    prediction's error, not a regression. compare and check --baseline refuse it with one line (exit 2)."""
    program = COMPILED / "dense_fsdp.after_codegen.hlo.pb.gz"
    capture = sample_path("dense_short_fsdp")
    rc, out, err = run(capsys, "compare", program, capture, "-q")
    assert rc == 2 and "a compiled program's prediction" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and "regression" not in out
    budget = tmp_path / "profanalyze.toml"
    budget.write_text("[max_regression]\nstep_time_ms = \"5%\"\n")
    rc, out, err = run(capsys, "check", capture, "--budget", budget, "--baseline", program)
    assert rc == 2 and "a compiled program's prediction" in err


def test_two_predictions_are_marked_predicted_in_every_format(tmp_path, capsys):
    """Two compiled programs compare as predictions: every format says PREDICTED (terminal, Markdown, HTML
    title and headline, JSON basis)."""
    a, b = COMPILED / "dense_fsdp.after_codegen.hlo.pb.gz", COMPILED / "bf16_mlp.after_codegen.hlo.pb.gz"
    md, html, js = tmp_path / "d.md", tmp_path / "d.html", tmp_path / "d.json"
    rc, out, _ = run(capsys, "compare", a, b, "--markdown", md, "-o", html, "--json", js)
    assert rc == 0 and "PREDICTED" in out
    assert "PREDICTED" in md.read_text()
    page = html.read_text()
    assert "(PREDICTED)</title>" in page and 'id="headline" data-verdict' in page
    assert re.search(r'id="headline"[^>]*>PREDICTED', page)
    doc_ = json.loads(js.read_text())
    assert doc_["basis"] == "predicted" and doc_["headline"].startswith("PREDICTED")
