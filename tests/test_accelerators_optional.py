"""The C accelerators and the build-time compiled templates are optional:
with every one of them off, the analysis document and the HTML report are
the same, byte for byte, on samples and both real captures."""

from __future__ import annotations

import json

import pytest
import realcap
from conftest import sample_path

NAMES = ["dense_short_fsdp", "moe_large_pp", "serving_tp2_w4", "zero_timestamps"]


def _document(path, monkeypatch, off: bool) -> tuple[str, str]:
    import profanalyzer.analyze.attribution as A
    import profanalyzer.classify as C
    import profanalyzer.model.trace as T
    import profanalyzer.read.hlo.proto as P
    import profanalyzer.read.xspace.wire as W
    import profanalyzer.report.html as H
    import profanalyzer.report.templating as RT
    from profanalyzer.cli.analyze import result_dict
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.pipeline.run import run_analysis

    with monkeypatch.context() as m:
        if off:
            for mod, name in ((W, "_accel"), (T, "_nest"), (A, "_windows"), (C, "_canon"), (P, "_accel")):
                m.setattr(mod, name, None)
            m.setattr(H, "environment", lambda: RT.environment(None))  # templates compiled from their sources
        a = run_analysis(path)
        f = run_rules(a)
        html = H.render_html(a, f, command_line="x", input_sha256="0")
        return json.dumps(result_dict(a, f), sort_keys=True), html


def _check(path, monkeypatch) -> None:
    on, off = _document(path, monkeypatch, False), _document(path, monkeypatch, True)
    assert on[0] == off[0]
    assert on[1] == off[1]


@pytest.mark.parametrize("name", NAMES)
def test_samples_same_without_accelerators(name, monkeypatch):
    _check(sample_path(name), monkeypatch)


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_real_captures_same_without_accelerators(name, monkeypatch):
    _check(realcap.real_path(name), monkeypatch)
