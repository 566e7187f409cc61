"""Issue 23 §3: picoseconds are integers. The schema types every picosecond
field (named `ps` or `*_ps`) as an integer, and the JSON of every sample and
of both real captures validates against it with no float in any such field."""

from __future__ import annotations

import json

import pytest
import realcap
from conftest import sample_doc, sample_names

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the [test] extra")


def _is_ps(name: str) -> bool:
    return name == "ps" or name.endswith("_ps")


def _walk_schema(node, defs, path, seen, out):
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                _walk_schema(defs[name], defs, name, seen, out)
            return
        for k, v in (node.get("properties") or {}).items():
            if _is_ps(k):
                out.append((f"{path}.{k}", v))
            _walk_schema(v, defs, f"{path}.{k}", seen, out)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                _walk_schema(node[key], defs, path, seen, out)
        for key in ("anyOf", "prefixItems"):
            for v in node.get(key) or ():
                _walk_schema(v, defs, path, seen, out)


def _types(s: dict) -> set:
    """The JSON types of a field's values (of its items / mapping values for
    an array or object of picoseconds)."""
    if s.get("type") == "object" and isinstance(s.get("additionalProperties"), dict):
        return _types(s["additionalProperties"])
    if s.get("type") == "array" and isinstance(s.get("items"), dict):
        return _types(s["items"])
    if "anyOf" in s:
        return set().union(*(_types(x) for x in s["anyOf"]))
    t = s.get("type")
    return set(t) if isinstance(t, list) else {t}


def test_schema_types_every_ps_field_as_integer():
    from profanalyzer.api.schema import document_schema

    schema = document_schema()
    found: list = []
    _walk_schema(schema, schema["$defs"], "", set(), found)
    assert len(found) > 30  # the records have many picosecond fields
    wrong = [p for p, s in found if "number" in _types(s) or "integer" not in _types(s)]
    assert wrong == []


def _float_ps(x, path="", out=None):
    out = [] if out is None else out
    if isinstance(x, dict):
        for k, v in x.items():
            vals = v.values() if isinstance(v, dict) else (v if isinstance(v, list) else [v])
            if _is_ps(k) and any(isinstance(x, float) for x in vals):
                out.append(f"{path}.{k}={v!r}")
            _float_ps(v, f"{path}.{k}", out)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _float_ps(v, f"{path}[{i}]", out)
    return out


@pytest.fixture(scope="module")
def validator():
    from profanalyzer.api.schema import document_schema

    return jsonschema.Draft202012Validator(document_schema())


@pytest.mark.parametrize("name", sample_names())
def test_sample_ps_fields_are_integers(validator, name):
    doc = sample_doc(name)
    assert _float_ps(doc) == []
    assert [e.message for e in validator.iter_errors(doc)] == []


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_real_capture_ps_fields_are_integers(validator, name):
    from profanalyzer.findings.engine import run_rules
    from profanalyzer.model.documents import result_document
    from profanalyzer.pipeline.run import run_analysis

    a = run_analysis(realcap.real_path(name))
    doc = json.loads(json.dumps(result_document(a, run_rules(a))))
    assert _float_ps(doc) == []
    assert [e.message for e in validator.iter_errors(doc)] == []
