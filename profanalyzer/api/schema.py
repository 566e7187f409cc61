"""The JSON Schema (draft 2020-12) of the `profanalyze analyze --json`
document, generated from the typed records (`model.Analysis` and
`model.Findings`, whose `to_dict()` together make the document) by walking
their dataclass type hints: nothing here is written by hand per field, so a
field added to a record is in the schema at once.

How a type hint maps (the inverse of `records.to_jsonable`):

    int                  -> integer
    float                -> number, or null (a non-finite value is written as null)
    bool / str           -> boolean / string
    X | None             -> X or null
    tuple[X, ...]        -> array of X
    tuple[X, Y]          -> array of exactly [X, Y]
    Mapping[str, X]      -> object of X
    Mapping[int, X]      -> object of X whose keys are integers as text
    a field named `ps` or `*_ps` (picoseconds): its float is an integer
                         (records.Record rounds it to whole picoseconds when
                         the record is built; the promise of docs/json.md)
    a record             -> {"$ref": "#/$defs/<Record>"}: an object with its
                            fields, those without a default required, no others

The document is versioned by `schema_version` (`model.SCHEMA_VERSION`, an
integer that is the major version: a reader refuses another one, see
`documents.validate_document`). Imports: model and records only.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Union

from profanalyzer.model.analysis import SCHEMA_VERSION, Analysis
from profanalyzer.model.findings import Findings
from profanalyzer.model.records import is_ps_field, named_tuple_types

__all__ = ["document_schema", "SCHEMA_ID"]

#: The schema's `$id` (names the major version it describes).
SCHEMA_ID = f"https://profanalyzer.invalid/schema/analysis-v{SCHEMA_VERSION}.json"


def _type_schema(tp: Any, defs: dict[str, dict]) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return {}
    if origin is Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        schemas = [_type_schema(a, defs) for a in options]
        if type(None) in args:
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if isinstance(tp, type) and is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: a record may refer to itself
            defs[name] = _record_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    named = named_tuple_types(tp)
    if named is not None:  # a NamedTuple (findings.Claim): the fixed tuple of its fields
        return _type_schema(tuple[named], defs)  # type: ignore[valid-type]  # a type built at run time
    if origin in (collections.abc.Mapping, dict):
        kt, vt = args if args else (str, Any)
        out: dict[str, Any] = {"type": "object", "additionalProperties": _type_schema(vt, defs)}
        if kt is int:
            out["propertyNames"] = {"pattern": r"^-?[0-9]+$"}
        return out
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0], defs)}
        return {"type": "array", "prefixItems": [_type_schema(a, defs) for a in args], "items": False,
                "minItems": len(args), "maxItems": len(args)}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": ["number", "null"]}
    if tp is str:
        return {"type": "string"}
    raise TypeError(f"no JSON Schema for the type {tp!r}")


def _whole_ps(tp: Any) -> Any:
    """The type a picosecond field is written as: its float an int (records.Record rounds it when built)."""
    if tp is float:
        return int
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_whole_ps(a) for a in args)]  # noqa: UP007 - a union built at run time from its members
    if origin in (collections.abc.Mapping, dict) and len(args) == 2:
        return typing.Mapping[args[0], _whole_ps(args[1])]  # type: ignore[valid-type, misc]  # a type built at run time
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple[_whole_ps(args[0]), ...]  # type: ignore[misc]  # a type built at run time
    return tp


def _fields(cls: type, defs: dict[str, dict]) -> tuple[dict[str, dict], list[str]]:
    hints = typing.get_type_hints(cls)
    props: dict[str, dict] = {}
    required: list[str] = []
    for f in fields(cls):
        if not f.metadata.get("json", True):
            continue
        tp = hints[f.name]
        props[f.name] = _type_schema(_whole_ps(tp) if is_ps_field(f.name) else tp, defs)
        if f.default is MISSING and f.default_factory is MISSING:
            required.append(f.name)
    return props, required


def _record_schema(cls: type, defs: dict[str, dict]) -> dict:
    props, required = _fields(cls, defs)
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(cls.__name__ + "("):  # not the dataclass's generated signature
        out["description"] = " ".join(doc.split())
    return out


def document_schema() -> dict:
    """The JSON Schema of the `--json` document: the Analysis's fields and
    the Findings' side by side in one object (`documents.result_document`)."""
    defs: dict[str, dict] = {}
    props: dict[str, dict] = {}
    required: list[str] = []
    for cls in (Analysis, Findings):
        p, r = _fields(cls, defs)
        props.update(p)
        required.extend(x for x in r if x not in required)
    props["schema_version"] = {"const": SCHEMA_VERSION}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "profanalyze analyze --json document",
        "description": (
            f"The analysis (profanalyzer.model.analysis.Analysis) and its findings (profanalyzer.model.findings.Findings) of one run, "
            f"schema_version {SCHEMA_VERSION}. Picoseconds are per kept step and averaged over TensorCores unless a "
            "field says otherwise; a number that was not finite is written as null."
        ),
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
        "$defs": dict(sorted(defs.items())),
    }
