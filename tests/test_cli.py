"""CLI behaviour: output, exit codes, one-line errors, determinism."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from conftest import run_cli, sample_names, sample_path, truth_of
from test_reader import _basic_space

run = run_cli


@pytest.fixture()
def basic(tmp_path):
    p = tmp_path / "h0.xplane.pb"
    p.write_bytes(_basic_space())
    return p


def test_info_on_hand_built(capsys, basic):
    rc, out, err = run(capsys, "info", str(basic))
    assert rc == 0, err
    assert "chip: TPU7x (Ironwood) (from device_type_string \"TPU v7x\")" in out
    assert "/device:TPU:0 [tensorcore] Steps 2, XLA Modules 3, XLA Ops 5" in out
    assert "steps: 2 (source: Steps line), numbers 0..1" in out


@pytest.mark.parametrize("name", sample_names())
def test_info_on_every_sample(capsys, name):
    truth = truth_of(name)
    rc, out, err = run(capsys, "info", "--json", "-", str(sample_path(name)))
    assert rc == 0, err
    info = json.loads(out)
    assert info["chip"] == "TPU7x (Ironwood)"
    assert info["tensorcores"] == truth["config"].get("cores_per_host", 8) * truth["hosts"]
    assert info["steps_count"] == len(truth["steps"]["numbers"])
    want_source = "Steps line" if truth["config"].get("steps_line", True) else "XLA Modules: "
    assert all(s.startswith(want_source) for s in info["steps_source"])
    kinds = {p["kind"] for p in info["planes"]}
    assert kinds <= {"tensorcore", "sparsecore"}
    assert info["device_events"] == truth["counts"]["device_events"]
    rc, text, _ = run(capsys, "info", str(sample_path(name)))
    assert rc == 0 and "programs (first TensorCore, XLA Modules):" in text


def test_default_command_is_analyze(capsys, basic, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default report path is ./<stem>.report.html
    rc, out, err = run(capsys, str(basic))
    assert rc == 0, err
    assert "bucket" in out and "matmul_bf16" in out and "idle" in out
    assert (tmp_path / "h0.report.html").exists()


def test_outputs_never_overwrite_the_input(capsys, basic):
    before = basic.read_bytes()
    for opt in ("--json", "--markdown", "-o"):
        rc, _, err = run(capsys, "analyze", str(basic), opt, str(basic))
        assert rc == 2 and "refusing to write over" in err
    assert basic.read_bytes() == before


def test_unwritable_output_is_one_line_exit_2(capsys, basic, tmp_path):
    rc, _, err = run(capsys, "analyze", str(basic), "-o", str(tmp_path / "no" / "such" / "r.html"))
    assert rc == 2 and "cannot write" in err and len(err.strip().splitlines()) == 1


def test_json_is_deterministic(capsys, basic):
    rc, a, _ = run(capsys, "analyze", str(basic), "--json", "-", "--no-html")
    rc2, b, _ = run(capsys, "analyze", str(basic), "--json", "-", "--no-html")
    assert rc == rc2 == 0 and a == b
    d = json.loads(a)
    assert list(d) == sorted(d)
    assert d["schema_version"] == 1
    assert d["steps"]["count"] == 2 and d["steps"]["source"] == "Steps line"
    assert abs(sum(v["fraction"] for v in d["breakdown"].values()) - 1) < 1e-6
    for k in ("median", "min", "max"):
        assert k in d["steps"]["step_time_ps"]
    assert {"ps", "fraction"} <= set(d["remat"])
    assert d["top_ops"] and {"name", "bucket", "tags", "self_ps", "count", "flops", "bytes", "intensity", "bound_by"} <= set(d["top_ops"][0])


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty file"),
        (b'{"traceEvents": []}', "JSON"),
        (bytes(range(256)) * 8, "profanalyze: error:"),
        (gzip.compress(b"\x00" * 10, mtime=0)[:-4], "gzip"),
    ],
    ids=["empty", "json", "random", "truncated-gzip"],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, content, needle):
    p = tmp_path / "bad.xplane.pb"
    p.write_bytes(content)
    before = p.read_bytes()
    for cmd in (["info"], ["analyze"], []):
        rc, out, err = run(capsys, *cmd, str(p))
        assert rc == 2
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err
    assert p.read_bytes() == before, "input must not be modified"
    assert sorted(os.listdir(tmp_path)) == ["bad.xplane.pb"], "nothing written next to the input"


def test_missing_file_exit_2(capsys, tmp_path):
    rc, _, err = run(capsys, "info", str(tmp_path / "nope.xplane.pb"))
    assert rc == 2 and "no such file" in err


def test_unknown_scenario_is_usage_error(capsys, tmp_path):
    rc, _, err = run(capsys, "synth", "nope", "-o", str(tmp_path / "x.xplane.pb"))
    assert rc == 2 and "unknown scenario" in err


def test_analyze_leaves_the_garbage_collector_as_it_found_it(capsys, tmp_path):
    # The analyze command runs without cyclic GC passes; an in-process caller
    # (a notebook, this suite) gets its collector back, also after an error.
    import gc

    assert gc.isenabled()
    rc, _, _ = run_cli(capsys, sample_path("dense_short_fsdp"), "--no-html", "-q")
    assert rc == 0 and gc.isenabled()
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff")
    rc, _, err = run_cli(capsys, bad, "--no-html", "-q")
    assert rc == 2 and "error" in err and gc.isenabled()
    gc.disable()
    try:
        run_cli(capsys, sample_path("dense_short_fsdp"), "--no-html", "-q")
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["serving_tp2_w4", "offload_off"])
def test_analyze_a_saved_json_renders_what_the_trace_did(capsys, tmp_path, name):
    saved = tmp_path / "saved.json"
    rc, _, err = run(capsys, "analyze", str(sample_path(name)), "--json", str(saved), "--no-html", "-q")
    assert rc == 0, err
    outs = []
    for src in (sample_path(name), saved):
        md = tmp_path / f"{src.name}.md"
        rc, out, err = run(capsys, "analyze", str(src), "--no-html", "--markdown", str(md))
        assert rc == 0, err
        outs.append((out, md.read_text()))
    assert outs[0] == outs[1]  # the saved document names the trace it came from


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_a_rule_prefix_that_names_no_rule_is_a_usage_error(capsys, tmp_path, option):
    """A typo in a CI gate's rule filter (`--select ZZ`) must not pass green with no rule run: exit 2, one
    error line naming the prefix; known prefixes in any case still work."""
    rc, _out, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), option, "FP,ZZ", "--no-html")
    assert rc == 2 and "ZZ names no rule" in err and "FP001" in err
    rc, out, _err = run_cli(capsys, "analyze", sample_path("bf16_dense"), option, "fp,rm", "--no-html",
                            "--json", tmp_path / "a.json")
    assert rc == 0


def test_two_documents_on_stdout_are_refused(capsys):
    """`--json - --markdown -` would interleave two documents on one stream: one error line, exit 2,
    nothing written."""
    rc, out, err = run_cli(capsys, "analyze", sample_path("bf16_dense"), "--json", "-", "--markdown", "-", "--no-html")
    assert rc == 2 and out == "" and "--json and --markdown both write to stdout" in err


def test_errors_are_one_plain_line(tmp_path, capsys):
    """#32 item 12: a corrupt file's error has no protobuf jargon; a JSON array is not guessed to be a
    trace-viewer file; a click usage error is one line with where the help is; all exit 2."""
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0b\x0c\x0dgarbage")
    rc, _, err = run_cli(capsys, "analyze", bad)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "wire type" not in err and "not an XSpace profile" in err
    arr = tmp_path / "a.json"
    arr.write_text("[1, 2, 3]")
    rc, _, err = run_cli(capsys, "analyze", arr)
    assert rc == 2 and "this is JSON" in err and "trace viewer" not in err
    viewer = tmp_path / "v.json"
    viewer.write_text('{"traceEvents": []}')
    rc, _, err = run_cli(capsys, "analyze", viewer)
    assert rc == 2 and "trace viewer" in err
    rc, _, err = run_cli(capsys, "analyze", "--no-such-option", bad)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("profanalyze: error:") and "profanalyze analyze --help" in err


def test_info_on_a_compiled_program_answers(capsys, tmp_path):
    """`info` on a compiled program says what it is (modules, chip) and what to run; plurals agree."""
    from pathlib import Path

    program = Path(__file__).resolve().parents[1] / "sample_traces" / "compiled" / "dense_fsdp.after_codegen.hlo.pb.gz"
    rc, out, err = run_cli(capsys, "info", program)
    assert rc == 0 and "no TPU device planes" not in err
    assert "jit_train_step" in out and "2,607 instructions" in out and "next: profanalyze analyze" in out
    js = tmp_path / "i.json"
    rc, _, _ = run_cli(capsys, "info", program, "--json", js)
    doc = json.loads(js.read_text())
    assert rc == 0 and doc["input_kind"] == "compiled_program" and doc["modules"][0]["instructions"] == 2607
    rc, out, _ = run_cli(capsys, "info", sample_path("dense_short_fsdp"))
    assert rc == 0 and " 1 runs" not in out
