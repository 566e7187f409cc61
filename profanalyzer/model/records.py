"""The JSON form of the frozen records: `Record` (`to_dict` / `from_dict`,
driven by the type hints), `to_jsonable`, `round_number`.

The records themselves are in profanalyzer.model.analysis, .findings and
.parts; what is checked about them in .invariants. Imports: vocab only.
"""

from __future__ import annotations

import collections.abc
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Union

from profanalyzer.core.vocab import MAPPING_ORDERS

# ---------------------------------------------------------------------------
# JSON form
# ---------------------------------------------------------------------------


#: Significant digits of the JSON's non-integer numbers: enough that a saved
#: analysis renders every number the reports show exactly as the trace did
#: (they show at most 6 digits; 6 here let 3230.6458 FLOP/B print as 3,230.7
#: from the JSON and 3,230.6 from the trace), few enough that the last bits of
#: floating-point sums do not make the JSON differ between platforms.
SIGNIFICANT_DIGITS = 12


def is_ps_field(name: str) -> bool:
    """A field in picoseconds: named `ps` or `*_ps`. Such fields hold whole
    picoseconds (an int) from the moment their record is built (`Record`
    rounds them), and the schema types them `integer`."""
    return name == "ps" or name.endswith("_ps")


def whole_ps(x):
    """`x` picoseconds as an int (nearest; half to even), or `x` unchanged when it is not a finite float
    (None, an int, a non-finite value: written as null)."""
    if isinstance(x, float) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") == "f"):
        x = float(x)
        return int(round(x)) if math.isfinite(x) else x
    return x


def round_number(x: float | None):
    """Stable JSON numbers: large values (picoseconds, bytes, FLOPs) as
    integers, others to SIGNIFICANT_DIGITS significant digits; None for a
    missing or non-finite value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if abs(x) >= 1e6:
        return int(round(x))
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def to_jsonable(obj: Any) -> Any:
    """A record (or any mix of dataclasses, mappings, sequences, numpy
    scalars) as plain JSON values: dicts with sorted string keys, lists,
    rounded numbers (`round_number`)."""
    t = type(obj)  # the plain leaves first, by exact type: most values of a document are
    if t is str or obj is None or t is int or t is bool:
        return obj
    if t is float:
        return round_number(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_jsonable(getattr(obj, name)) for name in json_fields(type(obj))}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bool) or type(obj).__name__ == "bool_":
        return bool(obj)
    if isinstance(obj, int) or (hasattr(obj, "dtype") and getattr(obj.dtype, "kind", "") in "iu"):
        return int(obj)
    if isinstance(obj, float) or (hasattr(obj, "dtype") and getattr(obj.dtype, "kind", "") == "f"):
        return round_number(float(obj))
    return obj


def named_tuple_types(tp: Any) -> tuple[Any, ...] | None:
    """The field types of a NamedTuple class (a fixed tuple in JSON, e.g. findings.Claim); None otherwise."""
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        hints = typing.get_type_hints(tp)
        return tuple(hints[f] for f in tp._fields)
    return None


class SchemaError(ValueError):
    """A JSON value does not have the type its record field declares."""


def _class_fact(cls: type, attr: str, make: Callable[[type], Any]) -> Any:
    """`make(cls)`, worked out once per class and kept on the class itself
    (`attr` in its own __dict__, never inherited): facts of a class's
    definition, not of any data, living as long as the class."""
    v = cls.__dict__.get(attr)
    if v is None:
        v = make(cls)
        setattr(cls, attr, v)
    return v


def _make_hints(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING)
        for f in fields(cls) if f.metadata.get("json", True)
    )


def _hints(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, resolved type, required) of each field of a record class."""
    return _class_fact(cls, "__record_hints__", _make_hints)


def json_fields(cls: type) -> tuple[str, ...]:
    """The fields of a record class that its JSON holds: all but those
    declared with `metadata={"json": False}` (what travels with a record in
    memory only, e.g. a finding's rule doc)."""
    return _class_fact(cls, "__record_json_fields__",
                       lambda c: tuple(f.name for f in fields(c) if f.metadata.get("json", True)))


def _key(tp: Any, k: str) -> Any:
    if tp is int:
        try:
            return int(k)
        except ValueError:
            raise SchemaError(f"key {k!r} is not an integer") from None
    return k


def _canonical_order(keys: list) -> list:
    """Keys in the order the analysis builds its mappings: integers ascending;
    names in their vocabulary order (vocab.MAPPING_ORDERS) when all of them
    belong to one; else as they come (the JSON's sorted order)."""
    if keys and all(isinstance(k, int) for k in keys):
        return sorted(keys)
    for order in MAPPING_ORDERS:
        rank = {k: i for i, k in enumerate(order)}
        if all(k in rank for k in keys):
            return sorted(keys, key=rank.__getitem__)
    return keys


def from_jsonable(tp: Any, v: Any, where: str = "") -> Any:
    """The value of type `tp` that `to_jsonable` turned into `v`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return v
    if origin is Union or origin is types.UnionType:
        if v is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for a in options:
            try:
                return from_jsonable(a, v, where)
            except SchemaError as e:
                errors.append(str(e))
        raise SchemaError(errors[0] if errors else f"{where}: no type fits")
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(v, Mapping):
            raise SchemaError(f"{where or tp.__name__}: expected an object, got {type(v).__name__}")
        return _record_from(tp, v, where)
    named = named_tuple_types(tp)
    if named is not None:
        return tp(*from_jsonable(tuple[named], v, where))  # type: ignore[valid-type]  # a type built at run time
    if origin in (collections.abc.Mapping, dict):
        if not isinstance(v, Mapping):
            raise SchemaError(f"{where}: expected an object, got {type(v).__name__}")
        kt, vt = args if args else (str, Any)
        out = {_key(kt, k): from_jsonable(vt, x, f"{where}.{k}") for k, x in v.items()}
        return {k: out[k] for k in _canonical_order(list(out))}
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise SchemaError(f"{where}: expected a list, got {type(v).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], x, f"{where}[{i}]") for i, x in enumerate(v))
        if len(args) != len(v):
            raise SchemaError(f"{where}: expected {len(args)} items, got {len(v)}")
        return tuple(from_jsonable(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, v, strict=True)))
    if tp is float:
        if v is None:
            return math.nan  # to_jsonable writes a non-finite float as null
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {type(v).__name__}")
        return float(v)
    if tp is bool:
        if not isinstance(v, bool):
            raise SchemaError(f"{where}: expected true/false, got {type(v).__name__}")
        return v
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise SchemaError(f"{where}: expected an integer, got {v!r}")
        return int(v)
    if tp is str:
        if not isinstance(v, str):
            raise SchemaError(f"{where}: expected a string, got {type(v).__name__}")
        return v
    return v


def _record_from(cls: type, d: Mapping, where: str) -> Any:
    kw = {}
    for name, tp, required in _hints(cls):
        if name not in d:
            if required:
                raise SchemaError(f"{(where + '.') if where else ''}{name}: missing")
            continue
        kw[name] = from_jsonable(tp, d[name], f"{(where + '.') if where else ''}{name}")
    return cls(**kw)


def _ps_fields(cls: type) -> tuple[str, ...]:
    """The picosecond fields of a record class (worked out once per class)."""
    return _class_fact(cls, "__record_ps_fields__", lambda c: tuple(f.name for f in fields(c) if is_ps_field(f.name)))


class Record:
    """Mixin of the frozen records: `to_dict()` and `from_dict()`. A field in
    picoseconds (`is_ps_field`) is rounded to whole picoseconds when the
    record is built, so the analysis holds, renders and writes the same
    integers (docs/json.md: picoseconds are integers)."""

    def __post_init__(self) -> None:
        for name in _ps_fields(type(self)):
            v = getattr(self, name)
            if isinstance(v, Mapping):
                w: Any = {k: whole_ps(x) for k, x in v.items()}
            elif isinstance(v, tuple):
                w = tuple(whole_ps(x) for x in v)
            else:
                w = whole_ps(v)
            if w is not v:
                object.__setattr__(self, name, w)

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping):
        """The record that `to_dict` wrote as `d` (keys not in the record are
        ignored: a findings document holds the analysis's keys too). Raises
        SchemaError naming the first field that does not fit."""
        return _record_from(cls, d, "")
