"""Saved documents: the JSON that `analyze --json` writes (`result_document`)
and reading one back (`read_json`, `validate_document`, `read_document`:
validated, converted to the records, self-checked), and telling a saved
document from a trace (`is_json_document`, `is_analysis_document`).

Bad documents are one InputError line. Imports: model, invariants, records
and errors (the records floor).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any, TypeGuard

from profanalyzer.core.errors import InputError
from profanalyzer.model.analysis import READS_SCHEMA, Analysis
from profanalyzer.model.findings import Findings
from profanalyzer.model.invariants import check_analysis, check_findings
from profanalyzer.model.records import SchemaError

REQUIRED_KEYS = ("schema_version", "steps", "breakdown", "remat", "collectives", "communication", "utilisation", "top_ops")
STEPS_KEYS = ("table", "step_time_ps", "kept", "count")
_HINT = "write one with `profanalyze analyze TRACE --json FILE`"


def is_finite_number(x: Any) -> TypeGuard[int | float]:
    """A JSON number a document may carry: an int or float, finite, not a bool."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_document(doc: Any, label: str = "analysis") -> None:
    """Check that `doc` is an analysis document this version reads; raise
    InputError with one line naming what is wrong."""
    if not isinstance(doc, dict):
        raise InputError(f"{label}: not a profanalyze analysis JSON (a JSON {type(doc).__name__}, not an object; {_HINT})")
    if "schema_version" not in doc:
        raise InputError(f"{label}: not a profanalyze analysis JSON (no schema_version; {_HINT})")
    v = doc["schema_version"]
    if not isinstance(v, int) or isinstance(v, bool) or v not in READS_SCHEMA:
        raise InputError(
            f"{label}: analysis schema_version {v!r}, this profanalyze reads {', '.join(map(str, READS_SCHEMA))}; "
            f"re-run `profanalyze analyze --json` with this version"
        )
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise InputError(f"{label}: not a complete profanalyze analysis JSON (missing keys: {', '.join(missing)}; {_HINT})")
    steps = doc["steps"]
    if not isinstance(steps, dict) or any(k not in steps for k in STEPS_KEYS):
        raise InputError(f"{label}: malformed analysis JSON (steps needs {', '.join(STEPS_KEYS)})")
    if not isinstance(steps["table"], list) or not all(isinstance(r, dict) and "step_ps" in r and "kept" in r for r in steps["table"]):
        raise InputError(f"{label}: malformed analysis JSON (steps.table must be a list of steps with step_ps and kept)")
    for key in ("breakdown", "collectives", "utilisation", "remat", "communication"):
        if not isinstance(doc[key], dict):
            raise InputError(f"{label}: malformed analysis JSON ({key} must be an object)")
    for b, s in doc["breakdown"].items():
        if not isinstance(s, dict) or not is_finite_number(s.get("ps")) or not is_finite_number(s.get("fraction")):
            raise InputError(f"{label}: malformed analysis JSON (breakdown.{b} needs numeric ps and fraction)")
    if not is_finite_number(steps["step_time_ps"].get("mean") if isinstance(steps["step_time_ps"], dict) else None):
        raise InputError(f"{label}: malformed analysis JSON (steps.step_time_ps.mean must be a number)")
    if not isinstance(doc["top_ops"], list):
        raise InputError(f"{label}: malformed analysis JSON (top_ops must be a list)")


def read_document(doc: Any, label: str = "analysis") -> tuple[Analysis, Findings | None]:
    """The typed analysis (and findings, when the document holds them) of a
    saved document: validated, converted, self-checked. InputError (one line)
    when it does not fit."""
    validate_document(doc, label)
    try:
        a = Analysis.from_dict(doc)
        f = Findings.from_dict(doc) if "recommendations" in doc and "rules_run" in doc else None
    except SchemaError as e:
        raise InputError(f"{label}: malformed analysis JSON ({e})") from None
    except TypeError as e:  # a record's own checks
        raise InputError(f"{label}: malformed analysis JSON ({e})") from None
    problems = check_analysis(a) + (check_findings(f, a) if f is not None else [])
    if problems:
        raise InputError(f"{label}: the analysis contradicts itself ({problems[0]})")
    return a, f


def result_document(analysis: Analysis, findings: Findings) -> dict:
    """The JSON document `analyze --json` writes: the analysis plus the
    findings stage's sections (recommendations, workload, rules run)."""
    d = analysis.to_dict()
    d.update(findings.to_dict())
    return d


def is_json_document(path: str | Path) -> bool:
    """Whether `path` is a file whose first non-space byte (after gunzip,
    when gzipped) is `{`: a saved document, not a trace (an XSpace protobuf
    never starts with that byte)."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:  # one open: a gzip is inflated from the same handle
            head = fh.read(4096)
            if head[:2] == b"\x1f\x8b":
                fh.seek(0)
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    head = gz.read(4096)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return False
    return head.lstrip()[:1] == b"{"


def is_analysis_document(path: str | Path) -> bool:
    """A saved profanalyze document (JSON with a `schema_version`), not a
    trace nor another tool's JSON (a trace viewer's .trace.json)."""
    if not is_json_document(path):
        return False
    try:
        doc = read_json(path)
    except InputError:
        return False
    return isinstance(doc, dict) and "schema_version" in doc


def read_json(path: str | Path) -> Any:
    """The JSON value of a file (gzipped or not); InputError with one line
    when it cannot be read or parsed."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    return json_value(data, path)


def json_value(data: bytes, path: str | Path) -> Any:
    """The JSON value of a document's bytes (gzipped or not), read by the caller; InputError (one line)
    when they are not JSON."""
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return json.loads(data.decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the analysis JSON ({e})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
