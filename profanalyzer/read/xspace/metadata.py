"""The `/host:metadata` plane without its bulk: the HloProtos of the programs
asked for, the others' stats (their protos) dropped before any of them is
parsed. Captures keep one HloProto per program ever compiled, often hundreds
of MB; the analysis wants those of the programs that ran (source lines,
anti-patterns, the compiler's expectations) and the memory section one.

A program is asked for by its name as XLA Modules shows it
(`jit_f(1219...)`) or by the name without its `(fingerprint)`.
"""

from __future__ import annotations

from collections.abc import Collection

from profanalyzer.read.xspace import wire, xplane_pb2
from profanalyzer.read.xspace.reader import FieldTrim

__all__ = ["program_trim", "program_plane", "program_base", "stripped_entry", "length_field", "wire_type",
           "PL_LINES", "PL_EVENT_METADATA"]

# XPlane, its event-metadata map entries, XEventMetadata
PL_LINES, PL_EVENT_METADATA = 3, 4
_ENTRY_VALUE = 2
_EM_METADATA, _EM_STATS = 3, 5


def program_base(name: str) -> str:
    """A program's name without its `(fingerprint)`."""
    return name.split("(", 1)[0]


def stripped_entry(buf, start: int, end: int) -> bytes:
    """A map entry without its value's stats and metadata bytes (id, name,
    display name kept: the map's keys and order stay as they were)."""
    out = bytearray()
    for f, wt, _v, a, b, tag in wire.iter_fields(buf, start, end):
        if f == _ENTRY_VALUE and wt == 2:
            value = bytearray()
            for f2, _wt2, _v2, _a2, b2, tag2 in wire.iter_fields(buf, a, b):
                if f2 not in (_EM_METADATA, _EM_STATS):
                    value += buf[tag2:b2]
            out += length_field(_ENTRY_VALUE, bytes(value))
        else:
            out += buf[tag:b]
    return bytes(out)


def length_field(num: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return wire.encode_varint((num << 3) | 2) + wire.encode_varint(len(payload)) + payload


def wire_type(raw, start: int) -> int:
    return wire.varint(raw, 0, start)[0] & 7


def program_trim(programs: Collection[str]) -> FieldTrim:
    """Per field of `/host:metadata`: lines dropped, event metadata of a
    program not asked for without its stats (its HLO proto: the bulk), the
    rest as it is."""
    names = set(programs)
    bases = {program_base(p) for p in names}

    def trim(f: int, raw, start: int):
        if f == PL_LINES:
            return None
        if f == PL_EVENT_METADATA and wire_type(raw, start) == 2:
            _, name = wire.metadata_entry(raw, start, len(raw))
            if name is not None and name not in names and program_base(name) not in bases:
                return length_field(PL_EVENT_METADATA, stripped_entry(raw, start, len(raw)))
        return raw

    return trim


def program_plane(buf, start: int, end: int, programs: Collection[str]) -> xplane_pb2.XPlane:  # type: ignore[name-defined]  # protoc's classes exist only at run time (no stubs)
    """The `/host:metadata` plane at buf[start:end] with only the asked-for
    programs' HloProtos (`program_trim`); a malformed plane is parsed whole
    (the runtime then says where it is broken)."""
    trim = program_trim(programs)
    out = bytearray()
    try:
        for f, _wt, _v, a, b, tag in wire.iter_fields(buf, start, end):
            keep = trim(f, memoryview(buf)[tag:b], a - tag)
            if keep:
                out += keep
    except ValueError:
        return xplane_pb2.XPlane.FromString(bytes(buf[start:end]))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
    return xplane_pb2.XPlane.FromString(bytes(out))  # type: ignore[attr-defined]  # protoc's classes exist only at run time (no stubs)
