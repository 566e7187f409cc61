"""The published JSON Schema of `--json` (`profanalyze schema`) and the
refusal of another major schema version; `profanalyze explain`."""

from __future__ import annotations

import json

import pytest
import realcap
from conftest import run_cli, sample_doc, sample_names

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the [test] extra")


@pytest.fixture(scope="module")
def validator():
    from profanalyzer.api.schema import document_schema

    schema = document_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("name", sample_names())
def test_every_sample_document_fits_the_schema(validator, name):
    assert _errors(validator, sample_doc(name)) == []


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_real_capture_documents_fit_the_schema(validator, name):
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.model.documents import result_document
    from profanalyzer.pipeline.run import run_analysis

    a = run_analysis(realcap.real_path(name))
    doc = json.loads(json.dumps(result_document(a, run_rules(a))))
    assert _errors(validator, doc) == []


def test_schema_rejects_what_the_records_would_not_read(validator):
    doc = sample_doc("dense_short_fsdp")
    good = _errors(validator, doc)
    assert good == []
    wrong = [
        ("schema_version", 2),  # another major version
        ("tensorcores", "8"),  # a string where the record has an int
        ("hosts", "h0"),  # not a list
    ]
    for key, value in wrong:
        bad = dict(doc, **{key: value})
        assert _errors(validator, bad), key
    bad = dict(doc, surprise=1)  # a key no record has
    assert any("surprise" in e for e in _errors(validator, bad))
    bad = json.loads(json.dumps(doc))
    del bad["steps"]["table"][0]["kept"]
    assert any("kept" in e for e in _errors(validator, bad))
    bad = json.loads(json.dumps(doc))
    bad["communication"]["per_step_exposed"]["x"] = {}  # steps are integers
    assert _errors(validator, bad)


def test_schema_follows_the_records():
    """Every field of every record reachable from Analysis/Findings is in the
    schema, required exactly when it has no default."""
    import dataclasses
    import typing

    from profanalyzer.api.schema import document_schema
    from profanalyzer.model.analysis import Analysis
    from profanalyzer.model.findings import Findings

    s = document_schema()
    seen = set()

    def walk(cls, node):
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("json", True):  # travels in memory only (a finding's rule doc): not in the JSON
                assert f.name not in node["properties"], (cls.__name__, f.name)
                continue
            assert f.name in node["properties"], (cls.__name__, f.name)
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            assert (f.name in node["required"]) == required, (cls.__name__, f.name)
            for t in _records_in(hints[f.name]):
                walk(t, s["$defs"][t.__name__])

    walk(Analysis, s)
    walk(Findings, s)
    assert {c.__name__ for c in seen} - {"Analysis", "Findings"} == set(s["$defs"])


def _records_in(tp):
    import dataclasses
    import typing

    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        yield tp
    for a in typing.get_args(tp):
        yield from _records_in(a)


def test_cli_schema_prints_it(capsys, tmp_path):
    from profanalyzer.model.analysis import SCHEMA_VERSION

    rc, out, err = run_cli(capsys, "schema")
    assert rc == 0
    s = json.loads(out)
    assert s["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
    dest = tmp_path / "s.json"
    rc, _, _ = run_cli(capsys, "schema", "-o", dest)
    assert rc == 0 and json.loads(dest.read_text()) == s


def _write(tmp_path, doc, name):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_compare_and_check_refuse_another_major_version(capsys, tmp_path):
    good = sample_doc("dense_short_fsdp")
    v2 = _write(tmp_path, dict(good, schema_version=2), "v2.json")
    ok = _write(tmp_path, good, "v1.json")
    for args in (("compare", ok, v2), ("compare", v2, ok)):
        rc, out, err = run_cli(capsys, *args)
        assert rc == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "schema_version 2" in lines[0] and "Traceback" not in err
    budget = tmp_path / "profanalyze.toml"
    budget.write_text("[budget]\nmfu = { min = 0.0 }\n")
    rc, out, err = run_cli(capsys, "check", v2, "--budget", budget)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "schema_version 2" in err
    rc, out, err = run_cli(capsys, "check", ok, "--budget", budget)
    assert rc == 0, err


def test_explain_every_rule(capsys):
    from profanalyzer.core.vocab import GUIDE_SECTIONS
    from profanalyzer.findings.engine import all_rules

    for r in all_rules():
        rc, out, err = run_cli(capsys, "explain", r.code.lower())
        assert rc == 0, err
        assert out.startswith(f"{r.code}  {r.title}")
        assert GUIDE_SECTIONS[r.lever] in out
        for text in (r.doc.detects, r.doc.why, r.doc.change):
            assert text in out
        rc, out, err = run_cli(capsys, "explain", r.code, "--json", "-")
        d = json.loads(out)
        assert (d["code"], d["lever"], d["guide_section"]) == (r.code, r.lever, GUIDE_SECTIONS[r.lever])
        assert (d["fires_on"], d["quiet_on"]) == r.fixtures


def test_explain_unknown_code_is_one_line(capsys):
    rc, out, err = run_cli(capsys, "explain", "ZZ999")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "ZZ999" in err and "SC001" in err



def test_mcp_without_the_sdk_is_one_line(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # as if the [mcp] extra were not installed
    rc, out, err = run_cli(capsys, "mcp")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "pip install 'profanalyzer[mcp]'" in err
