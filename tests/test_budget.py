"""`check` and budget files: every key, pyproject, bad files, exit codes, JUnit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, sample_doc, sample_path

from profanalyzer.compare.budget import (
    METRICS,
    REGRESSION_METRICS,
    BudgetError,
    evaluate,
    find_budget,
    load_budget,
    metric_value,
    parse_budget,
)
from profanalyzer.report.junit import junit_xml

doc = sample_doc  # a fresh copy of a sample's analysis document
run = run_cli


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("analyses")
    out = {}
    for name in ("offload_on", "offload_off", "moe_large_pp"):
        p = d / f"{name}.json"
        p.write_text(json.dumps(sample_doc(name)))
        out[name] = p
    return out


def budget_file(tmp_path: Path, text: str, name: str = "profanalyze.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------
# Every metric
# ---------------------------------------------------------------------------


def test_metric_values_come_from_the_analysis():
    d = doc("moe_large_pp")
    t = d["steps"]["step_time_ps"]
    assert metric_value(d, "step_time_ms") == pytest.approx(t["median"] / 1e9)
    assert metric_value(d, "step_time_mean_ms") == pytest.approx(t["mean"] / 1e9)
    assert metric_value(d, "step_time") == pytest.approx(t["mean"] / 1e9)
    assert metric_value(d, "mfu") == d["utilisation"]["mfu"]
    assert metric_value(d, "mxu_matmul") == d["utilisation"]["mxu_matmul"]
    assert metric_value(d, "remat.fraction") == d["remat"]["fraction"]
    assert metric_value(d, "remat.ms") == pytest.approx(d["remat"]["ps"] / 1e9)
    for b, s in d["breakdown"].items():
        assert metric_value(d, f"bucket.{b}.fraction") == s["fraction"]
        assert metric_value(d, f"bucket.{b}.ms") == pytest.approx(s["ps"] / 1e9)
    assert set(d["collectives"]) >= {"all_gather", "all_to_all", "collective_permute", "send_recv"}
    for ty, c in d["collectives"].items():
        assert metric_value(d, f"exposed.{ty}.fraction") == c["fraction_of_step"]
        assert metric_value(d, f"exposed.{ty}.ms") == pytest.approx(c["exposed_ps"] / 1e9)
    assert metric_value(d, "exposed.host_transfer.ms") == 0.0  # absent type: nothing exposed
    assert metric_value(d, "exposed.total.fraction") == d["communication"]["exposed_total_fraction"]
    assert metric_value(d, "exposed.total.ms") == pytest.approx(d["communication"]["exposed_total_ps"] / 1e9)


def test_every_metric_is_addressable():
    from profanalyzer.analyze.overlap import TYPES
    from profanalyzer.classify import BUCKETS

    want = {"step_time_ms", "step_time_mean_ms", "mfu", "mxu_matmul", "remat.fraction", "remat.ms"}
    want |= {f"bucket.{b}.{k}" for b in BUCKETS for k in ("fraction", "ms")}
    want |= {f"exposed.{t}.{k}" for t in (*TYPES, "total") for k in ("fraction", "ms")}
    want |= {f"idle.{c}.{k}" for c in ("host_dispatch", "host_wait", "peer_wait", "unexplained") for k in ("fraction", "ms")}
    want |= {"memory.peak_bytes"}  # read with --memory: tests/test_memory.py
    want |= {"program.hbm_peak_bytes", "program.hbm_fraction"}  # compiled programs: test_program_hbm_is_a_budget_metric
    assert set(METRICS) == want
    assert "bucket.idle.fraction" in METRICS and "exposed.all_gather.fraction" in METRICS
    assert set(REGRESSION_METRICS) == want | {"step_time"}


@pytest.mark.parametrize("metric", sorted(m for m in METRICS if not m.startswith(("memory.", "program."))))  # memory: tests/test_memory.py
def test_every_budget_key_passes_and_fails(metric):
    d = doc("moe_large_pp")
    v = metric_value(d, metric)
    assert v is not None
    m = METRICS[metric]
    hi = v if m.unit == "ms" else min(1.0, v)
    ok = parse_budget({"budget": {metric: {"max": hi, "min": v}}})
    r = evaluate(ok, d)
    assert r.passed and r.checks[0].name == f"budget.{metric}" and r.checks[0].value == pytest.approx(v)
    # fail: a max below the value, or (value 0) a min above it
    bound = {"max": v * 0.5} if v > 0 else {"min": 0.001}
    bad = evaluate(parse_budget({"budget": {metric: bound}}), d)
    assert not bad.passed and bad.failed == (f"budget.{metric}",)
    assert metric in bad.checks[0].message


def test_dotted_quoted_and_nested_keys_are_the_same(tmp_path):
    text = "\n".join(
        ["[budget]"]
        + [f'"{m}" = {{ max = 0.5 }}' if i % 3 == 0 else (f"{m} = {{ max = 0.5 }}") for i, m in enumerate(sorted(METRICS))]
    )
    b = load_budget(budget_file(tmp_path, text))
    assert {lim.metric for lim in b.limits} == set(METRICS)
    nested = load_budget(budget_file(tmp_path, "[budget.exposed.all_gather]\nfraction = { max = 0.03 }\n", "n.toml"))
    assert nested.limits[0].metric == "exposed.all_gather.fraction" and nested.limits[0].max == 0.03


@pytest.mark.parametrize("metric", sorted(m for m in REGRESSION_METRICS if not m.startswith(("memory.", "program."))))  # memory: tests/test_memory.py; program: tests/test_program_not_capture.py
def test_every_regression_key(metric):
    base, new = doc("offload_on"), doc("offload_off")
    key = "step_time_mean_ms" if metric == "step_time" else metric
    bv, nv = metric_value(base, metric), metric_value(new, metric)
    higher_better = METRICS[key].higher_is_better
    worse = (bv - nv) if higher_better else (nv - bv)
    loose = parse_budget({"baseline": "x", "max_regression": {metric: max(0.0, worse) + 1.0 if METRICS[key].unit == "ms" else 1.0}})
    assert evaluate(loose, new, base).passed
    if worse > 0:
        tight = parse_budget({"baseline": "x", "max_regression": {metric: "0%"}})
        r = evaluate(tight, new, base)
        assert r.failed == (f"max_regression.{metric}",)
    same = evaluate(parse_budget({"baseline": "x", "max_regression": {metric: "0%"}}), base, base)
    assert same.passed  # no change is never a regression


def test_regression_direction():
    base, new = doc("offload_on"), doc("offload_off")
    r = evaluate(parse_budget({"baseline": "x", "max_regression": {"step_time": "3%", "mfu": 0.01, "exposed": {"total": {"fraction": 0.01}}}}), new, base)
    assert set(r.failed) == {"max_regression.step_time", "max_regression.mfu", "max_regression.exposed.total.fraction"}
    back = evaluate(parse_budget({"baseline": "x", "max_regression": {"step_time": "3%", "mfu": 0.01, "exposed.total.fraction": 0.01}}), base, new)
    assert back.passed  # faster, higher MFU, less exposed: improvements pass
    step = next(c for c in r.checks if c.metric == "step_time")
    assert "noise ±" in step.message and "(regression)" in step.message


def test_tight_regression_limit_warns_about_noise():
    d = doc("offload_on")
    r = evaluate(parse_budget({"baseline": "x", "max_regression": {"step_time": "0.1%"}}), d, d)
    assert r.passed and "may flake" in r.checks[0].message


def test_fail_on_codes_and_prefixes():
    d = doc("offload_off")
    r = evaluate(parse_budget({"fail_on": ["SC001", "sc", "RM", "TK001"]}), d)
    assert r.failed == ("fail_on.SC001", "fail_on.SC", "fail_on.RM")
    assert "Offload" in r.checks[0].message
    assert evaluate(parse_budget({"fail_on": ["SC001"]}), doc("offload_on")).passed


def test_unavailable_metric_fails_its_check():
    d = doc("offload_on")
    d["utilisation"]["mfu"] = None
    r = evaluate(parse_budget({"budget": {"mfu": {"min": 0.1}}}), d)
    assert not r.passed and "not available" in r.checks[0].message
    del d["recommendations"]
    r = evaluate(parse_budget({"fail_on": ["SC001"]}), d)
    assert not r.passed and "no findings section" in r.checks[0].message


# ---------------------------------------------------------------------------
# check: exit codes, output, JUnit
# ---------------------------------------------------------------------------


def test_check_fails_on_the_regressed_run_and_passes_on_the_unchanged(tmp_path, capsys, saved):
    b = budget_file(
        tmp_path,
        f'baseline = "{saved["offload_on"]}"\nfail_on = ["SC001"]\n'
        "[budget]\nexposed.all_gather.fraction = { max = 0.03 }\nremat.fraction = { max = 0.2 }\n"
        '[max_regression]\nstep_time = "3%"\n',
    )
    junit, js = tmp_path / "j.xml", tmp_path / "c.json"
    rc, out, err = run(capsys, "check", saved["offload_off"], "--budget", b, "--junit", junit, "--json", js)
    assert rc == 1, err
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 3
    assert any("exposed.all_gather.fraction" in f for f in fails)
    assert any("max_regression.step_time" in f for f in fails)
    assert any("SC001" in f for f in fails)
    assert "ok   remat.fraction" in out and "3 of 4 checks failed" in out
    d = json.loads(js.read_text())
    assert d["passed"] is False and set(d["failed"]) == {"budget.exposed.all_gather.fraction", "max_regression.step_time", "fail_on.SC001"}
    assert d["comparison"].startswith("Step time") and "regression" in d["comparison"]
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 4 and suite.get("failures") == "3" and suite.get("tests") == "4"
    assert {c.get("name") for c in cases if c.find("failure") is not None} == set(d["failed"])

    rc, out, err = run(capsys, "check", saved["offload_on"], "--budget", b, "-q")
    assert rc == 0, out + err
    assert "all 4 checks passed" in out and "ok " not in out  # -q: only failures and the summary


def test_check_on_traces_with_the_example_budget(capsys):
    example = ROOT / "examples" / "profanalyze.toml"
    rc, out, err = run(capsys, "check", sample_path("dense_short_fsdp"), "--budget", example)
    assert rc == 0, out + err
    rc, out, err = run(capsys, "check", sample_path("offload_off"), "--budget", example)
    assert rc == 1, out + err
    assert "FAIL fail_on SC001" in out and "FAIL max_regression.step_time" in out


def test_check_baseline_override_and_json_stdout(tmp_path, capsys, saved):
    b = budget_file(tmp_path, '[max_regression]\nstep_time = "3%"\n')
    rc, out, err = run(capsys, "check", saved["offload_off"], "--budget", b, "--baseline", saved["offload_on"], "--json", "-")
    assert rc == 1
    d = json.loads(out)  # stdout is only JSON; the lines go to stderr
    assert d["failed"] == ["max_regression.step_time"] and d["baseline"] == str(saved["offload_on"])
    assert "FAIL max_regression.step_time" in err


def test_junit_is_escaped_and_valid():
    d = doc("offload_off")
    d["recommendations"][0]["title"] = "<b>&\x01</b>"
    r = evaluate(parse_budget({"fail_on": [d["recommendations"][0]["code"]]}), d, trace="<t>")
    root = ET.fromstring(junit_xml(r).encode())
    f = root.find("testsuite/testcase/failure")
    assert "<b>&\ufffd</b>" in f.get("message")


# ---------------------------------------------------------------------------
# pyproject.toml and discovery
# ---------------------------------------------------------------------------


def test_pyproject_section(tmp_path, capsys, saved, monkeypatch):
    (tmp_path / "base").mkdir()
    shutil.copy(saved["offload_on"], tmp_path / "base" / "good.json")
    pp = budget_file(
        tmp_path,
        '[project]\nname = "x"\n\n[tool.profanalyze]\nbaseline = "base/good.json"\nfail_on = ["SC"]\n\n'
        "[tool.profanalyze.budget]\nstep_time_ms = { max = 95 }\n\n[tool.profanalyze.max_regression]\nstep_time = \"3%\"\n",
        "pyproject.toml",
    )
    b = load_budget(pp)
    assert b.section == "[tool.profanalyze]" and b.baseline == tmp_path / "base" / "good.json"
    assert [lim.metric for lim in b.limits] == ["step_time_ms"] and b.fail_on == ("SC",)
    rc, out, err = run(capsys, "check", saved["offload_off"], "--budget", pp)
    assert rc == 1 and "3 of 3 checks failed" in out and "[tool.profanalyze]" in out
    # discovery: no --budget, pyproject.toml in the working directory
    monkeypatch.chdir(tmp_path)
    assert find_budget(".") == Path("pyproject.toml")
    rc, out, err = run(capsys, "check", saved["offload_on"])
    assert rc == 0, out + err
    # profanalyze.toml wins over pyproject.toml
    budget_file(tmp_path, "fail_on = [\"SC001\"]\n")
    assert find_budget(".") == Path("profanalyze.toml")


def test_no_budget_anywhere_is_a_usage_error(tmp_path, capsys, saved, monkeypatch):
    monkeypatch.chdir(tmp_path)
    budget_file(tmp_path, '[project]\nname = "x"\n', "pyproject.toml")
    rc, out, err = run(capsys, "check", saved["offload_on"])
    assert rc == 2 and "no budget" in err


# ---------------------------------------------------------------------------
# Bad budget files: exit 2, one line
# ---------------------------------------------------------------------------

BAD = [
    ("unknown_top", 'basline = "x"\n', "unknown key 'basline' (did you mean 'baseline'?); valid keys: baseline, fail_on, budget, max_regression"),
    ("unknown_metric", "[budget]\nstep_time = { max = 1 }\n", "unknown key 'step_time' in [budget] (did you mean 'step_time_ms'?); valid keys: step_time_ms, step_time_mean_ms, mfu"),
    ("unknown_nested", "[budget]\nbucket.matmul.fraction = { max = 1 }\n", "unknown key 'bucket.matmul.fraction' in [budget] (did you mean"),
    ("unknown_regression", '[max_regression]\nstep = "3%"\n', "unknown key 'step' in [max_regression]"),
    ("bare_number", "[budget]\nstep_time_ms = 950\n", "expected a table like step_time_ms = { max = N }, got 950"),
    ("bad_bound", "[budget]\nmfu = { low = 0.3 }\n", "bad bound 'low' for [budget] mfu: use max and/or min, e.g. mfu = { min = N }"),
    ("string_bound", '[budget]\nstep_time_ms = { max = "950" }\n', "step_time_ms.max: expected a number, got '950'"),
    ("bool_bound", "[budget]\nstep_time_ms = { max = true }\n", "expected a number, got True"),
    ("fraction_gt_1", "[budget]\nremat.fraction = { max = 15 }\n", "fractions are 0..1 (0.03 = 3%), got 15"),
    ("negative", "[budget]\nstep_time_ms = { max = -1 }\n", "max must be >= 0"),
    ("min_gt_max", "[budget]\nstep_time_ms = { max = 1, min = 2 }\n", "min 2 > max 1"),
    ("empty_table", "[budget]\nstep_time_ms = {}\n", "expected a table like"),
    ("budget_not_table", 'budget = "x"\n', "[budget] must be a table"),
    ("bad_percent", '[max_regression]\nstep_time = "3 percent"\n', 'expected "N%" or a number in ms'),
    ("regression_fraction_gt_1", "[max_regression]\nremat.fraction = 2\n", "fractions are 0..1"),
    ("regression_bool", "[max_regression]\nstep_time = false\n", 'expected "N%" or a number'),
    ("no_baseline", '[max_regression]\nstep_time = "3%"\n', "[max_regression] needs a baseline"),
    ("missing_baseline", 'baseline = "nope/good.json"\n[max_regression]\nstep_time = "3%"\n', "baseline not found"),
    ("baseline_not_string", "baseline = 3\nfail_on = [\"SC001\"]\n", "bad value for baseline: expected a path string, got 3"),
    ("fail_on_unknown", 'fail_on = ["XX9"]\n', "unknown finding code 'XX9' in fail_on; known codes: FP001"),
    ("fail_on_not_list", 'fail_on = "SC001"\n', "bad value for fail_on: expected a list of finding codes"),
    ("no_checks", 'baseline = "x.json"\n', "defines no checks"),
    ("malformed_toml", "[budget\nstep_time_ms = { max = 1 }\n", "malformed TOML: "),
    ("malformed_value", "[budget]\nstep_time_ms = { max = }\n", "malformed TOML: "),
]


@pytest.mark.parametrize("case, text, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_budget_files_exit_2_with_one_line(tmp_path, capsys, saved, case, text, needle):
    b = budget_file(tmp_path, text)
    rc, out, err = run(capsys, "check", saved["offload_on"], "--budget", b)
    assert rc == 2, (out, err)
    assert err.startswith("profanalyze: error: ") and err.count("\n") == 1, err
    assert needle in err, err


def test_unknown_key_lists_every_valid_key(tmp_path):
    with pytest.raises(BudgetError) as e:
        load_budget(budget_file(tmp_path, "[budget]\nnope = { max = 1 }\n"))
    msg = str(e.value)
    assert all(m in msg for m in METRICS)


def test_budget_file_not_found_and_pyproject_without_section(tmp_path, capsys, saved):
    rc, _, err = run(capsys, "check", saved["offload_on"], "--budget", tmp_path / "none.toml")
    assert rc == 2 and "budget file not found" in err
    pp = budget_file(tmp_path, '[project]\nname = "x"\n', "pyproject.toml")
    rc, _, err = run(capsys, "check", saved["offload_on"], "--budget", pp)
    assert rc == 2 and "no [tool.profanalyze] section" in err


def test_bad_budget_is_reported_before_the_trace_is_read(tmp_path, capsys):
    b = budget_file(tmp_path, "[budget]\nnope = 1\n")
    rc, _, err = run(capsys, "check", tmp_path / "missing.xplane.pb", "--budget", b)
    assert rc == 2 and "unknown key 'nope'" in err


def test_bad_trace_is_exit_2(tmp_path, capsys):
    b = budget_file(tmp_path, 'fail_on = ["SC001"]\n')
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    rc, _, err = run(capsys, "check", bad, "--budget", b)
    assert rc == 2 and "missing keys" in err


# ---------------------------------------------------------------------------
# The CI examples
# ---------------------------------------------------------------------------


def test_ci_gate_script(tmp_path):
    exe = Path(sys.executable).with_name("profanalyze")
    if not exe.exists():
        pytest.skip("profanalyze console script not installed next to the interpreter")
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    env = dict(os.environ, PROFANALYZE=str(exe), PROFANALYZE_OUT=str(tmp_path / "gate"))
    script = str(ROOT / "examples" / "ci_gate.sh")
    p = subprocess.run(["bash", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all 9 checks passed" in p.stdout
    for f in ("junit.xml", "check.json", "diff.html", "diff.md", "diff.json"):
        assert (tmp_path / "gate" / f).is_file(), f
    env["PROFANALYZE_OUT"] = str(tmp_path / "gate2")
    p = subprocess.run(["bash", script, "sample_traces/offload_off.xplane.pb.gz"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL" in p.stdout and (tmp_path / "gate2" / "diff.md").is_file()


def test_github_workflow_runs_the_gate():
    text = (ROOT / ".github" / "workflows" / "profanalyze-gate.yml").read_text()
    try:
        import yaml
    except ImportError:  # pragma: no cover
        pytest.skip("PyYAML not installed")
    wf = yaml.safe_load(text)
    steps = wf["jobs"]["perf-gate"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    assert "examples/ci_gate.sh" in runs
    env = wf["jobs"]["perf-gate"]["env"]
    assert (ROOT / env["TRACE"]).is_file() and (ROOT / env["BUDGET"]).is_file()
