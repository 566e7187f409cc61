"""One pipeline: `profanalyzer.pipeline.run.run` is what the CLI, the notebook API,
the MCP server, the fleet's per-file task and compare.load_document analyse
through, and they produce the same analysis document for a sample."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli, sample_path

from profanalyzer.analyze import analysis
from profanalyzer.pipeline.run import Run, RunOptions, run

#: RM001 fires and the capture holds a buffer assignment: the memory section is
#: read because a firing rule needs it (Rule.needs), on every entry point.
SAMPLE = "hlo_memory_dense"


@pytest.fixture(scope="module")
def through_run() -> Run:
    return run(sample_path(SAMPLE))


def _counting(monkeypatch) -> list[int]:
    """Count attributions: each entry point attributes the trace once, in run()."""
    calls: list[int] = []
    real = analysis.attribute
    monkeypatch.setattr(analysis, "attribute", lambda t, *a: calls.append(1) or real(t, *a))
    return calls


def test_every_entry_point_gives_the_run_document(through_run, monkeypatch, capsys, tmp_path):
    from profanalyzer.api.mcp_server import analyze_document
    from profanalyzer.api.notebook import load
    from profanalyzer.compare.comparison import load_document
    from profanalyzer.fleet.execute import analyse_host_file
    from profanalyzer.fleet.records import host_record

    want = through_run.document()
    assert want["memory"]["peak_bytes"] > 0 and any(r["code"] == "RM001" for r in want["recommendations"])
    calls = _counting(monkeypatch)
    out = tmp_path / "a.json"
    rc, _, err = run_cli(capsys, "analyze", sample_path(SAMPLE), "--json", out, "--no-html", "-q")
    assert rc == 0, err
    got = {
        "cli": json.loads(out.read_text()),
        "notebook": load(sample_path(SAMPLE)).to_dict(),
        "mcp": analyze_document(str(sample_path(SAMPLE))),
        "compare": load_document(sample_path(SAMPLE)),
    }
    rc, _, err = run_cli(capsys, "compare", sample_path(SAMPLE), sample_path(SAMPLE), "--json", tmp_path / "c.json")
    assert rc == 0, err
    cmp_doc = json.loads((tmp_path / "c.json").read_text())
    fleet = analyse_host_file(str(sample_path(SAMPLE)), cache_dir=str(tmp_path / "cache"), use_cache=False)
    for name, doc in got.items():
        assert json.loads(json.dumps(doc, sort_keys=True)) == json.loads(json.dumps(want, sort_keys=True)), name
    assert fleet["ok"] and fleet["record"] == host_record(through_run.analysis, through_run.findings)
    assert cmp_doc["step_time"]["base_ps"] == cmp_doc["step_time"]["new_ps"] == want["steps"]["step_time_ps"]["mean"]
    assert len(calls) == len(got) + 2 + 1  # cli, notebook, mcp, load_document; compare's two sides; fleet


def test_run_keeps_the_attribution_it_analysed(through_run):
    att = through_run.attributed
    assert att is not None and att.trace.source == through_run.analysis.source
    assert [w.plane.label for w in att.work] == [p.label for p in att.trace.tensorcores]
    assert att.kept_steps == {r.number for r in through_run.analysis.steps.table if r.kept}
    assert round(att.step_mean) == through_run.analysis.steps.step_time_ps["mean"]  # the record holds whole ps


def test_a_saved_document_and_a_compiled_program_are_inputs(through_run, tmp_path):
    saved = tmp_path / "a.json"
    saved.write_text(json.dumps(through_run.document()))
    again = run(saved)
    assert again.attributed is None and again.document() == through_run.document()
    # each finding carries its rule's doc, read back or built by the rule
    assert all(f.doc is not None for f in again.findings.recommendations)
    assert [f.doc for f in again.findings.recommendations] == [f.doc for f in through_run.findings.recommendations]
    sel = run(saved, RunOptions(select=("RM",)))
    assert {f.code for f in sel.findings.recommendations} <= {"RM001", "RM002"} and sel.findings.rules_run
    from conftest import SAMPLES

    prog = run(SAMPLES / "compiled" / "dense_fsdp.after_codegen.hlo.pb.gz")
    assert prog.analysis.input_kind == "compiled_program" and prog.attributed is not None


def test_memory_is_read_only_when_a_firing_rule_needs_it():
    from profanalyzer.findings.engine import all_rules

    quiet = run(sample_path("bf16_dense"))
    needing = {r.code for r in all_rules() if "memory" in r.needs}
    assert not needing & {f.code for f in quiet.findings.recommendations} and quiet.analysis.memory is None
    ignored = run(sample_path(SAMPLE), RunOptions(ignore=tuple(needing)))
    assert ignored.analysis.memory is None


def test_what_if_and_history_are_typed_fields_of_the_run(tmp_path):
    """Issue 33 item 3 (in part): `--what-if` and `--history` are RunOptions, computed by the run's extras
    phase into typed fields of the Run (WhatIf, Calibration), which every renderer reads; no untyped
    `extra` travels beside the run."""
    from profanalyzer.findings.verify import Calibration
    from profanalyzer.findings.whatif import WhatIf
    from profanalyzer.report.registry import RENDERERS

    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "2026-01-01.json").write_text(RENDERERS["json"].render(run(sample_path("fp8_remat_before"))))
    r = run(sample_path("fp8_remat_after"), RunOptions(what_if="fp8,remat", history=str(hist)))
    assert isinstance(r.what_if, WhatIf) and set(r.what_if.levers) == {"fp8", "remat"}
    assert isinstance(r.calibration, Calibration) and r.calibration.runs == ("2026-01-01", "fp8_remat_after.xplane.pb.gz")
    doc = json.loads(RENDERERS["json"].render(r))
    assert doc["what_if"] == r.what_if.to_dict() and doc["calibration"] == r.calibration.to_dict()
    from profanalyzer.report.extras_text import format_calibration, format_what_if

    lines = format_what_if(r.what_if) + format_calibration(r.calibration)
    assert RENDERERS["terminal"].render(r).endswith("\n".join(lines) + "\n")
    assert "\n".join(lines) in RENDERERS["markdown"].render(r)
    plain = run(sample_path("fp8_remat_after"))
    assert plain.what_if is None and plain.calibration is None
    assert "what_if" not in json.loads(RENDERERS["json"].render(plain))


def test_a_run_passes_through_its_named_phases_in_order(tmp_path, capsys):
    """`RunOptions.on_phase` sees each phase of PHASES as it ends, in order, with its seconds: a capture
    (remat_full: RM001 fires and needs the HBM use read), a compiled program and a saved document."""
    import time

    from profanalyzer.pipeline.run import PHASES

    def phases_of(src, **kw):
        seen: list[tuple[str, float]] = []
        start = time.perf_counter()
        r = run(src, RunOptions(on_phase=lambda name, s: seen.append((name, s)), **kw))
        wall = time.perf_counter() - start
        assert all(s >= 0 for _, s in seen) and sum(s for _, s in seen) <= wall
        return r, [n for n, _ in seen]

    r, names = phases_of(sample_path("remat_full"))
    assert names == list(PHASES)  # every phase, "needs" included: RM001 fired and its HBM use was read for it
    assert "RM001" in {f.code for f in r.findings.recommendations}
    program = sample_path("remat_full").parent / "compiled" / "bf16_mlp.hlo.pb.gz"
    assert phases_of(program)[1][:5] == ["open", "read", "attribute", "analyze", "rules"]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(r.document()))
    assert phases_of(saved)[1] == ["open", "read", "extras"]
    assert phases_of(saved, select=("RM",))[1] == ["open", "read", "rules", "extras"]
    # the command prints them, with its render
    rc, _, err = run_cli(capsys, "analyze", str(sample_path("remat_full")), "-q", "--no-html", "--timings")
    assert rc == 0
    line = next(x for x in err.splitlines() if x.startswith("timings: "))
    assert [p.split()[0] for p in line.removeprefix("timings: ").split("; ")[0].split(", ")] == [*PHASES, "render"]


def test_a_window_asked_of_a_saved_document_is_refused_at_once(tmp_path, capsys):
    from profanalyzer.core.errors import InputError

    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run(sample_path("remat_full")).document()))
    seen: list[str] = []
    with pytest.raises(InputError, match="needs the trace itself"):
        run(saved, RunOptions(trace_steps=(), on_phase=lambda name, s: seen.append(name)))
    assert seen == ["open"]  # refused before the document is read back
    rc, _, err = run_cli(capsys, "analyze", str(saved), "-q", "--no-html", "--trace-out", str(tmp_path / "t.json"))
    assert rc == 2 and "needs the trace itself" in err and not (tmp_path / "t.json").exists()


def test_timings_are_printed_when_a_phase_fails(capsys, tmp_path):
    """--steps naming a step the trace lacks fails in the extras phase: the phases up to it are printed."""
    rc, _, err = run_cli(capsys, "analyze", str(sample_path("remat_full")), "-q", "--no-html", "--timings",
                         "--trace-out", str(tmp_path / "t.json"), "--steps", "9999")
    assert rc == 2 and "no step 9999" in err
    line = next(x for x in err.splitlines() if x.startswith("timings: "))
    assert [p.split()[0] for p in line.removeprefix("timings: ").split("; ")[0].split(", ")][-1] == "extras"
    assert "render" not in line
