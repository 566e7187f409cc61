"""`analyze --trace-out`: the annotated Chrome/Perfetto trace of the
analysed window (profanalyzer.analyze.window, profanalyzer.report.perfetto): its structure, and its content
checked against the analysis."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import SAMPLES, analysis_of, findings_of, run_cli, sample_path

from profanalyzer.report.perfetto import CLASS_COLOURS


def _export(capsys, tmp_path, src, *extra, name="t.json.gz"):
    dest = tmp_path / name
    rc, out, err = run_cli(capsys, "analyze", src, "-q", "--no-html", "--trace-out", dest, *extra)
    assert rc == 0, err
    raw = dest.read_bytes()
    return json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw), raw


def _structure(doc):
    ev = doc["traceEvents"]
    meta = [e for e in ev if e["ph"] == "M"]
    body = [e for e in ev if e["ph"] != "M"]
    assert ev[: len(meta)] == meta, "metadata first"
    ts = [e["ts"] for e in body]
    assert ts == sorted(ts), "events sorted by time"
    assert all(e["dur"] >= 0 for e in body if e["ph"] == "X")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    for e in body:
        assert (e["pid"], e["tid"]) in threads, e
        assert e["pid"] in procs
    assert all(isinstance(n, str) and n for n in threads.values())
    return meta, body, threads, procs


@pytest.mark.parametrize("name", ["offload_on", "moe_short_fsdp_ep", "remat_full"])
def test_trace_export_structure_and_content(capsys, tmp_path, name):
    a, f = analysis_of(name), findings_of(name)
    doc, raw = _export(capsys, tmp_path, sample_path(name))
    meta, body, threads, procs = _structure(doc)
    assert doc["otherData"]["steps"] == [a.timeline.step]
    names = list(threads.values())
    assert sum(n.endswith(" ops") and "SparseCore" not in n for n in names) == a.tensorcores
    assert sum(n.endswith(" buckets") for n in names) == a.tensorcores
    assert sum(n.endswith(" collectives") for n in names) == a.tensorcores
    assert sum("SparseCore" in n for n in names) == a.sparsecores
    # The first TensorCore's bucket track is the timeline's lane, bucket by bucket.
    first = a.timeline.core.split(":", 1)[1]
    tid = next(t for (p, t), n in threads.items() if n == f"{first} buckets" and procs[p].endswith(a.timeline.core.split(":")[0]))
    got = defaultdict(int)
    for e in body:
        if e["ph"] == "X" and e["tid"] == tid and e["cat"] == "bucket" and procs[e["pid"]] == f"host {a.timeline.core.split(':')[0]}":
            got[e["name"]] += e["args"]["ps"]
    want = defaultdict(int)
    for sp in a.timeline.lanes[0].spans:
        want[sp.bucket] += sp.end_ps - sp.start_ps
    if not a.timeline.coalesced:
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    assert sum(got.values()) == sum(want.values())
    # Collective windows: shaded by class, hidden + exposed = the window.
    colls = [e for e in body if e.get("cat") == "collective"]
    for e in colls:
        assert e["cname"] == CLASS_COLOURS[e["args"]["class"]]
        assert e["args"]["hidden_ps"] + e["args"]["exposed_ps"] == pytest.approx(e["dur"] * 1e6, abs=2)
        assert e["name"].startswith(e["args"]["class"])
    # One marker per finding, inside the exported step.
    marks = [e for e in body if e.get("cat") == "finding"]
    assert sorted(m["args"]["code"] for m in marks) == sorted(x.code for x in f.recommendations)
    steps = [e for e in body if e.get("cat") == "step"]
    lo = min(s["ts"] for s in steps)
    hi = max(s["ts"] + s["args"]["step_ps"] / 1e6 for s in steps)
    for m in marks:
        assert lo - 1e-6 <= m["ts"] <= hi + 1e-6
    # Deterministic bytes.
    again, raw2 = _export(capsys, tmp_path, sample_path(name), name="u.json.gz")
    assert raw2 == raw


def test_trace_export_steps_and_hosts(capsys, tmp_path):
    src = SAMPLES / "dense_short_fsdp_2hosts"
    a = analysis_of("dense_short_fsdp")  # only for a step number that exists
    kept = [r.number for r in a.steps.table if r.kept][:2]
    doc, _ = _export(capsys, tmp_path, src, "--steps", ",".join(map(str, kept)), name="t.json")
    meta, body, threads, procs = _structure(doc)
    assert doc["otherData"]["steps"] == kept
    assert sum(n.startswith("host ") for n in procs.values()) == 2
    assert {e["args"]["step"] for e in body if e.get("cat") == "step"} == set(kept)


def test_trace_export_bad_steps_are_one_line(capsys, tmp_path):
    src = sample_path("offload_off")
    for args in (("--trace-out", tmp_path / "t.json.gz", "--steps", "9999"),
                 ("--trace-out", tmp_path / "t.json.gz", "--steps", "x")):
        rc, out, err = run_cli(capsys, "analyze", src, "-q", "--no-html", *args)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "--steps" in err, err
    rc, out, err = run_cli(capsys, "analyze", src, "-q", "--no-html", "--steps", "2")  # a usage error (click's form)
    assert rc == 2 and err.startswith("profanalyze: error: --steps selects what --trace-out exports")
    assert not (tmp_path / "t.json.gz").exists()


def test_report_cards_name_their_trace_marker(capsys, tmp_path):
    """With --trace-out, each recommendation card names the instant of its
    marker in the exported file; without it the report is unchanged."""
    src = sample_path("offload_off")
    html = tmp_path / "r.html"
    dest = tmp_path / "t.json.gz"
    rc, out, err = run_cli(capsys, "analyze", src, "-q", "-o", html, "--trace-out", dest)
    assert rc == 0, err
    page = html.read_text(encoding="utf-8")
    doc = json.loads(gzip.decompress(dest.read_bytes()))
    marks = {e["args"]["code"]: e["ts"] for e in doc["traceEvents"] if e.get("cat") == "finding"}
    assert marks
    for code, ts in marks.items():
        assert f"marker \u201c{code}\u201d at {ts:,.3f} \u00b5s" in page
    assert page.count('data-field="trace"') == len(marks)
    plain = tmp_path / "p.html"
    rc, out, err = run_cli(capsys, "analyze", src, "-q", "-o", plain)
    assert 'data-field="trace"' not in plain.read_text(encoding="utf-8")


def test_the_window_is_a_typed_extra_of_the_run_and_its_renderer_writes_what_the_cli_writes(capsys, tmp_path):
    """`RunOptions.trace_steps` -> `Run.window` (analyze.window); `WINDOW_RENDERERS["perfetto"]` renders it
    with the findings' markers, the bytes `--trace-out` writes."""
    from profanalyzer.pipeline.run import RunOptions, run
    from profanalyzer.report.registry import WINDOW_RENDERERS

    src = sample_path("offload_on")
    plain = run(src)
    assert plain.window is None  # not asked
    r = run(src, RunOptions(trace_steps=()))
    assert r.window is not None and r.window.steps == (r.analysis.timeline.step,)
    assert r.window.start_ps is not None and all(e.dur_ps is None or e.dur_ps >= 0 for e in r.window.events)
    text = WINDOW_RENDERERS["perfetto"].render(r)
    _, raw = _export(capsys, tmp_path, src, name="t.json")
    assert text.encode("utf-8") == raw
    with pytest.raises(ValueError, match="no exported window"):
        WINDOW_RENDERERS["perfetto"].render(plain)
