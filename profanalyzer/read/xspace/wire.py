"""Vectorised decoding of XLine events straight from protobuf wire bytes.

Building one Python object per event is what makes XSpace readers slow (a
device plane holds millions of events). This module decodes a line's events
into numpy columns without touching events one by one in Python:

1. Tokenise the bytes of the line's run of events as varints: a varint ends
   at every byte below 0x80. As long as a region holds no raw bytes (strings,
   fixed64/fixed32 values), it is a sequence of varint tokens in which tags and
   values alternate — a length-delimited field is a tag, a length, then its
   contents, which again alternate. Tags are the even tokens.
2. Nesting comes from the length-delimited tags with field number 4 (XLine
   events and XEvent stats share that number): a tag lies inside an earlier
   one's range exactly when it starts before the running maximum of earlier
   range ends. Events are the uncontained field-4 tags, stats the contained
   ones.
3. Event fields (metadata_id, offset_ps, duration_ps) and stat fields
   (metadata_id and an integer or ref value) are scattered into columns.

Tokens stay correct up to the first raw-byte field, so the first tag whose
wire type or field says "raw bytes follow" (a string or double stat, say) is
detected reliably; such lines return None and the caller decodes them with
the protobuf runtime instead. Malformed regions also return None, never
raise: the runtime then reports the corruption.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# XLine fields
LINE_ID, LINE_NAME, LINE_TS, LINE_EVENTS, LINE_DUR, LINE_DISPLAY_ID, LINE_DISPLAY_NAME = 1, 2, 3, 4, 9, 10, 11


@dataclass(frozen=True, eq=False)
class RawEvents:
    """Columns of one line's events as stored (before device-time overrides)."""

    metadata_id: np.ndarray  # int64
    offset_ps: np.ndarray  # int64
    duration_ps: np.ndarray  # int64
    stat_event: np.ndarray  # int64: event index of each integer stat
    stat_id: np.ndarray  # int64: stat metadata id
    stat_value: np.ndarray  # int64 (uint64 values >= 2**63 wrap negative)
    stat_is_ref: np.ndarray  # bool: ref_value (value is a stat-metadata id)
    #: Decoded with `dense`: per wanted stat id with a value on some event,
    #: its value per event (-1 where none; the stat_* columns are then empty).
    dense: Mapping[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.metadata_id)


class Truncated(ValueError):
    """A field that runs past the end of the buffer."""


def encode_varint(n: int) -> bytes:
    """The varint bytes of `n` (a negative int as its 64-bit two's complement,
    as protobuf writes int64): the one encoder (memory's trimmed metadata,
    the URL fetch's plane stubs, the synthesizer)."""
    if n < 0:
        n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    """Read one varint at buf[pos]: (value, next position)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise Truncated("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def skip(buf, pos: int, end: int, wire: int) -> int:
    """Position after a field's payload of the given wire type."""
    if wire == 0:
        _, pos = varint(buf, pos, end)
    elif wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = varint(buf, pos, end)
        pos += n
    elif wire == 5:
        pos += 4
    else:
        raise ValueError(f"unsupported wire type {wire}")
    if pos > end:
        raise Truncated("field runs past the end")
    return pos


def iter_fields(buf, start: int, end: int):
    """Yield (field, wire, value, payload_start, payload_end, tag_pos) for each
    field in buf[start:end]. value is the varint for wire 0, else None."""
    pos = start
    while pos < end:
        tag_pos = pos
        key, pos = varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            v, pos = varint(buf, pos, end)
            yield field, wire, v, pos, pos, tag_pos
        elif wire == 2:
            n, pos = varint(buf, pos, end)
            if pos + n > end:
                raise ValueError("length-delimited field runs past the end")
            yield field, wire, None, pos, pos + n, tag_pos
            pos += n
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("truncated fixed64")
            yield field, wire, None, pos, pos + 8, tag_pos
            pos += 8
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("truncated fixed32")
            yield field, wire, None, pos, pos + 4, tag_pos
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _tokens(b: np.ndarray):
    """Varint tokens of a byte array: (starts, values) or None if it ends mid-varint."""
    ends = np.flatnonzero(b < 0x80)
    if len(ends) == 0 or ends[-1] != len(b) - 1:
        return None
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        return None
    vals = (b[starts] & 0x7F).astype(np.uint64)
    idx = np.flatnonzero(lengths > 1)
    k = 1
    while len(idx):
        vals[idx] |= (b[starts[idx] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        k += 1
        idx = idx[lengths[idx] > k]
    return starts, vals


try:  # the optional C accelerator (setup.py); same contract, one pass
    from profanalyzer.read.xspace import _wire as _accel  # type: ignore[attr-defined]  # a C extension: no stubs
except ImportError:  # no compiler at install time: the numpy decoder below
    _accel = None


def _want_bytes(want) -> bytes | None:
    return None if want is None else np.asarray(sorted(want), dtype=np.int64).tobytes()


def decode_event_run(buf, start: int, end: int, want=None, dense: bool = False) -> tuple[RawEvents, int] | None:
    """Decode the run of XLine.events fields beginning at buf[start] (C
    accelerator when built, else the numpy decoder). `want`: the stat
    metadata ids to keep (default: every integer stat). `dense` (with
    `want`, C accelerator only): the wanted stats as `RawEvents.dense`
    columns, made in the decoding pass."""
    if _accel is not None:
        if want is None:
            got = _accel.decode_event_run(buf, start, end)
        else:
            got = _accel.decode_event_run(buf, start, end, _want_bytes(want), dense)
        if got is None:
            return None
        columns = None
        if dense and want is not None:
            got, by_want = got
            columns = {sid: np.frombuffer(c, dtype=np.int64) for sid, c in zip(sorted(want), by_want, strict=True) if c is not None}
        cols = [np.frombuffer(c, dtype=np.int64) for c in got[:7]]
        return RawEvents(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6].astype(bool), columns), got[7]
    return decode_event_run_numpy(buf, start, end, want)


def decode_event_run_numpy(buf, start: int, end: int, want=None) -> tuple[RawEvents, int] | None:
    """Decode the run of XLine.events fields beginning at buf[start].

    Returns (events, stop) where stop is the absolute byte offset where the
    run of events ends (the next line-level field, or `end`), or None when the
    run holds raw-byte fields or is malformed (decode that line another way).
    """
    size = end - start
    if size <= 0:
        return None
    b = np.frombuffer(buf, dtype=np.uint8, count=size, offset=start)
    tok = _tokens(b)
    if tok is None:
        return None
    starts, vals = tok
    npairs = len(starts) // 2
    if npairs == 0:
        return None
    tag_pos = starts[0 : 2 * npairs : 2]
    tags = vals[0 : 2 * npairs : 2]
    v = vals[1 : 2 * npairs : 2]
    val_end = np.empty(npairs, dtype=np.int64)
    val_end[:-1] = tag_pos[1:]
    val_end[-1] = starts[2 * npairs] if len(starts) > 2 * npairs else size
    field = (tags >> np.uint64(3)).astype(np.int64)
    wire = (tags & np.uint64(7)).astype(np.int64)
    is4 = (field == LINE_EVENTS) & (wire == 2)
    vi = v.view(np.int64)
    rng_end = np.where(is4, val_end + vi, -1)
    prev_max = np.empty_like(rng_end)
    prev_max[0] = -1
    prev_max[1:] = np.maximum.accumulate(rng_end)[:-1]
    top = tag_pos >= prev_max
    # The run ends at the first top-level tag that is not an event.
    non_event_top = np.flatnonzero(top & ~is4)
    k_stop = int(non_event_top[0]) if len(non_event_top) else npairs
    run_end = int(tag_pos[k_stop]) if k_stop < npairs else size
    if k_stop == 0:
        return None
    field, wire, vi, tag_pos, is4, top, rng_end = (
        field[:k_stop], wire[:k_stop], vi[:k_stop], tag_pos[:k_stop], is4[:k_stop], top[:k_stop], rng_end[:k_stop]
    )
    ev_tag = np.flatnonzero(top)  # all top-level tags are events now
    # Events must tile [0, run_end) exactly.
    ev_start = tag_pos[ev_tag]
    ev_end = rng_end[ev_tag]
    if ev_start[0] != 0 or ev_end[-1] != run_end or np.any(ev_start[1:] != ev_end[:-1]) or np.any(vi[ev_tag] < 0):
        return None
    # Raw bytes anywhere (wire 1/5, or wire 2 that is not an event/stat) -> not for us.
    if np.any((wire != 0) & ~is4):
        return None
    st_mask = is4 & ~top
    st_tag = np.flatnonzero(st_mask)
    st_end = np.where(st_mask, rng_end, -1)
    st_prev = np.empty_like(st_end)
    st_prev[0] = -1
    st_prev[1:] = np.maximum.accumulate(st_end)[:-1]
    in_stat = tag_pos < st_prev
    if np.any(is4 & in_stat):  # a message nested in a stat: not an XStat
        return None
    # Tags are in stream order: everything after an event tag (and before the
    # next) belongs to that event; likewise for stats.
    ev_of_tag = np.cumsum(top) - 1
    n = len(ev_tag)
    cols = {}
    lvl1 = ~top & ~in_stat & ~is4
    for fnum in (1, 2, 3):
        col = np.zeros(n, dtype=np.int64)
        m = lvl1 & (field == fnum)
        col[ev_of_tag[m]] = vi[m]
        cols[fnum] = col
    ns = len(st_tag)
    stat_of_tag = np.cumsum(st_mask) - 1
    s_id = np.zeros(ns, dtype=np.int64)
    s_val = np.zeros(ns, dtype=np.int64)
    s_ref = np.zeros(ns, dtype=bool)
    s_has = np.zeros(ns, dtype=bool)
    if ns:
        m = in_stat & (field == 1)
        s_id[stat_of_tag[m]] = vi[m]
        for fnum in (3, 4, 7):
            m = in_stat & (field == fnum)
            s_val[stat_of_tag[m]] = vi[m]
            s_has[stat_of_tag[m]] = True
            if fnum == 7:
                s_ref[stat_of_tag[m]] = True
    s_event = ev_of_tag[st_tag]
    if want is not None:
        s_has &= np.isin(s_id, np.asarray(sorted(want), dtype=np.int64))
    return (
        RawEvents(cols[1], cols[2], cols[3], s_event[s_has], s_id[s_has], s_val[s_has], s_ref[s_has]),
        start + run_end,
    )


def scan_fields(buf, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The top-level fields of buf[start:end] as int64 columns: (field, wire,
    payload_start, payload_end, tag_pos). One C pass when the accelerator is
    built, else `iter_fields`; raises ValueError on malformed bytes either way
    (the message comes from `iter_fields`)."""
    if _accel is not None:
        got = _accel.scan_fields(buf, start, end)
        if got is not None:
            f, w, ps, pe, tp = (np.frombuffer(c, dtype=np.int64) for c in got)
            return f, w, ps, pe, tp
    rows = [(f, w, ps, pe, tp) for f, w, _, ps, pe, tp in iter_fields(buf, start, end)]
    arr = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3].copy(), arr[:, 4].copy()


@dataclass(frozen=True, eq=False)
class MetadataColumns:
    """XPlane.event_metadata map entries as columns (`decode_metadata`).

    Per entry, in stream order: map key, name and display_name byte spans
    (-1: absent). Per XStat of an entry, in stream order: its entry, stat
    metadata id, kind (0: no value, else the value's field number: 2 double,
    3 uint64, 4 int64, 5 string, 6 bytes, 7 ref), integer value (uint64 bits
    for 3 and 7, the double's bits for 2) and string byte span."""

    key: np.ndarray
    name_start: np.ndarray
    name_end: np.ndarray
    display_start: np.ndarray
    display_end: np.ndarray
    stat_entry: np.ndarray
    stat_id: np.ndarray
    stat_kind: np.ndarray
    stat_value: np.ndarray
    stat_start: np.ndarray
    stat_end: np.ndarray


def decode_metadata(buf, spans: np.ndarray) -> MetadataColumns | None:
    """Decode the event-metadata map entries whose payloads lie at `spans`
    (an (n, 2) int64 array of start, end) in one C pass; None without the
    accelerator or on anything the protobuf runtime would treat otherwise
    (malformed bytes, invalid UTF-8, a value given twice): the caller then
    decodes the entries with the runtime."""
    if _accel is None:
        return None
    got = _accel.decode_metadata(buf, np.ascontiguousarray(spans, dtype=np.int64).tobytes())
    if got is None:
        return None
    return MetadataColumns(*(np.frombuffer(c, dtype=np.int64) for c in got))


def utf8_strings(buf, starts: np.ndarray, ends: np.ndarray, share: bool = False) -> list[str]:
    """buf[start:end] decoded as strict UTF-8 for each pair ("" where start
    < 0): one C loop when the accelerator is built. `share`: equal strings
    are one object (for columns of few distinct values)."""
    if _accel is not None:
        return _accel.utf8_strings(buf, np.ascontiguousarray(starts, dtype=np.int64).tobytes(),
                                   np.ascontiguousarray(ends, dtype=np.int64).tobytes(), share)
    out = [str(buf[a:b], "utf-8") if a >= 0 else "" for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    if share:
        seen: dict[str, str] = {}
        out = [seen.setdefault(x, x) for x in out]
    return out


def metadata_entry(buf, start: int, end: int) -> tuple[int | None, str | None]:
    """(key, name) of one XPlane.event_metadata map entry in buf[start:end],
    read field by field (the last of each, as the protobuf runtime merges
    them); None where absent."""
    key, name = None, None
    for f, wt, v, a, b, _ in iter_fields(buf, start, end):
        if f == 1 and wt == 0:  # map key
            key = v
        elif f == 2 and wt == 2:  # map value: XEventMetadata
            for f2, wt2, _v2, a2, b2, _ in iter_fields(buf, a, b):
                if f2 == 2 and wt2 == 2:  # XEventMetadata.name
                    name = bytes(buf[a2:b2]).decode("utf-8", errors="replace")
    return key, name


def same_bytes(a, b) -> bool:
    """Whether two buffers hold the same bytes (one memcmp with the
    accelerator, else a comparison of their bytes)."""
    if _accel is not None:
        return bool(_accel.same_bytes(a, b))
    return len(a) == len(b) and bytes(a) == bytes(b)


@dataclass(frozen=True)
class LineHeader:
    id: int
    name: str
    display_name: str
    timestamp_ns: int
    duration_ps: int


def peek_line(buf, start: int, end: int) -> tuple[str, int, bool] | None:
    """(name, timestamp_ns, has_events) of one XLine from the fields before its
    first event, without decoding events; None when that does not settle the
    name (no `name` before the events: `display_name` may follow them) or the
    bytes are malformed (the caller then decodes the whole line)."""
    head = {LINE_NAME: "", LINE_DISPLAY_NAME: ""}
    ts = 0
    try:
        for field, wt, val, ps, pe, _ in iter_fields(buf, start, end):
            if field == LINE_EVENTS and wt == 2:
                name = head[LINE_NAME]
                return (name, ts, True) if name else None
            if field in head and wt == 2:
                head[field] = bytes(buf[ps:pe]).decode("utf-8", errors="replace")
            elif field == LINE_TS and wt == 0:
                ts = val - (1 << 64) if val >= 1 << 63 else val
    except ValueError:
        return None
    return head[LINE_NAME] or head[LINE_DISPLAY_NAME], ts, False


def decode_line(buf, start: int, end: int, want=None, dense: bool = False) -> tuple[LineHeader, RawEvents] | None:
    """Decode one XLine's header and events; None when the fast path does not
    apply or the bytes are malformed (never raises on bad bytes: the caller
    then lets the protobuf runtime decode the line and report the corruption)."""
    try:
        return _decode_line(buf, start, end, want, dense)
    except ValueError:  # a truncated or over-long varint
        return None


def _decode_line(buf, start: int, end: int, want=None, dense: bool = False) -> tuple[LineHeader, RawEvents] | None:
    nums = {"id": 0, "ts": 0, "dur": 0}
    texts = {"name": "", "display_name": ""}
    parts: list[RawEvents] = []
    pos = start
    while pos < end:
        tag_pos = pos
        key, pos = varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            return None
        if field == LINE_EVENTS and wire == 2:
            got = decode_event_run(buf, tag_pos, end, want, dense)
            if got is None:
                return None
            ev, pos = got
            parts.append(ev)
            continue
        if wire == 0:
            val, pos = varint(buf, pos, end)
            if val >= 1 << 63:
                val -= 1 << 64
            if field == LINE_ID:
                nums["id"] = val
            elif field == LINE_TS:
                nums["ts"] = val
            elif field == LINE_DUR:
                nums["dur"] = val
        elif wire == 2:
            n, pos = varint(buf, pos, end)
            if pos + n > end:
                return None
            if field in (LINE_NAME, LINE_DISPLAY_NAME):
                text = bytes(buf[pos : pos + n]).decode("utf-8", errors="replace")
                texts["name" if field == LINE_NAME else "display_name"] = text
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            return None
    if pos != end:
        return None
    header = LineHeader(nums["id"], texts["name"], texts["display_name"], nums["ts"], nums["dur"])
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return header, RawEvents(z, z, z, z, z, z, np.zeros(0, dtype=bool))
    if len(parts) == 1:
        return header, parts[0]
    offs = np.cumsum([0] + [len(p) for p in parts[:-1]])
    columns = None
    if any(p.dense is not None for p in parts):  # a stat column on any part: -1 on the parts without it
        ids = sorted({sid for p in parts for sid in (p.dense or {})})
        columns = {sid: np.concatenate([(p.dense or {}).get(sid, np.full(len(p), -1, dtype=np.int64)) for p in parts])
                   for sid in ids}
    return header, RawEvents(
        np.concatenate([p.metadata_id for p in parts]),
        np.concatenate([p.offset_ps for p in parts]),
        np.concatenate([p.duration_ps for p in parts]),
        np.concatenate([p.stat_event + o for p, o in zip(parts, offs, strict=True)]),
        np.concatenate([p.stat_id for p in parts]),
        np.concatenate([p.stat_value for p in parts]),
        np.concatenate([p.stat_is_ref for p in parts]),
        columns,
    )


# ---------------------------------------------------------------------------
# Why the protobuf runtime refused some bytes
# ---------------------------------------------------------------------------


def _wire_types():
    from google.protobuf.descriptor import FieldDescriptor as FD  # type: ignore[import-untyped]  # no stubs installed

    wt = {FD.TYPE_DOUBLE: 1, FD.TYPE_FIXED64: 1, FD.TYPE_SFIXED64: 1, FD.TYPE_FLOAT: 5, FD.TYPE_FIXED32: 5, FD.TYPE_SFIXED32: 5}
    wt.update({t: 2 for t in (FD.TYPE_STRING, FD.TYPE_BYTES, FD.TYPE_MESSAGE)})
    return wt, FD


def explain_decode_error(data: bytes, descriptor, _where: str = "") -> str | None:
    """One phrase saying why `data` is not a valid `descriptor` message (the
    protobuf runtime only says "Error parsing message"), or None when no
    reason is found. Walks the wire format against the schema: framing,
    wire types, field number 0 and UTF-8 in string fields."""
    wt_of, FD = _wire_types()
    where = _where or descriptor.name
    try:
        for field, wt, _, ps, pe, _tag in iter_fields(data, 0, len(data)):
            fd = descriptor.fields_by_number.get(field)
            if fd is None:
                continue  # unknown fields are legal
            name = f"{where}.{fd.name}"
            want = wt_of.get(fd.type, 0)
            packed = wt == 2 and want != 2 and fd.label == FD.LABEL_REPEATED
            if wt != want and not packed:
                return f"{name} has wire type {wt}, expected {want}"
            if fd.type == FD.TYPE_STRING:
                try:
                    bytes(data[ps:pe]).decode("utf-8")
                except UnicodeDecodeError:
                    return f"invalid UTF-8 in {name}"
            elif fd.type == FD.TYPE_MESSAGE:
                why = explain_decode_error(bytes(data[ps:pe]), fd.message_type, name)
                if why:
                    return why
    except ValueError as e:
        return f"{e} in {where}"
    return None


def plain_decode_error(e: Exception) -> str:
    """A decoder's complaint in a user's words: where the bytes stop making sense, not the wire format's terms."""
    text = str(e)
    if isinstance(e, Truncated) or "truncated" in text or "past the end" in text or "ends" in text:
        return "the data ends inside a record" if "the file ends" not in text else text
    return "bytes that are no part of an XSpace record"
