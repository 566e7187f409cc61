"""Minimal protobuf wire encoding for XSpace containers.

Leaf messages (XEventMetadata, XStatMetadata, plane XStats, CoreDetails) are built with
``profanalyzer.read.xspace.xplane_pb2`` and serialized by protobuf; the containers (XSpace,
XPlane, XLine and the XEvents) are written here so that

* map fields (``event_metadata``, ``stat_metadata``) are emitted in ascending key order
  (byte-for-byte deterministic output, independent of the protobuf runtime's map order);
* millions of XEvents can be encoded with numpy instead of one message object per event.

The output parses with ``xplane_pb2.XSpace.FromString``. Fields are written in
field-number order except that an XLine's repeated ``events`` come after its scalar
fields (field order does not matter on the wire).
"""

from __future__ import annotations

import struct

import numpy as np

from profanalyzer.read.xspace.wire import encode_varint

# XStat value field numbers (all varint-encoded except double/str/bytes)
V_DOUBLE, V_UINT64, V_INT64, V_STR, V_BYTES, V_REF = 2, 3, 4, 5, 6, 7


def key(field: int, wire: int) -> bytes:
    return encode_varint((field << 3) | wire)


def f_varint(field: int, v: int) -> bytes:
    return key(field, 0) + encode_varint(int(v))


def f_bytes(field: int, b: bytes | str) -> bytes:
    if isinstance(b, str):
        b = b.encode("utf-8")
    return key(field, 2) + encode_varint(len(b)) + b


def f_double(field: int, x: float) -> bytes:
    return key(field, 1) + struct.pack("<d", float(x))


def stat_bytes(metadata_id: int, kind: int, value) -> bytes:
    """One serialized XStat."""
    out = f_varint(1, metadata_id)
    if kind == V_DOUBLE:
        return out + f_double(2, value)
    if kind in (V_STR, V_BYTES):
        return out + f_bytes(kind, value)
    return out + f_varint(kind, value)


# ---------------------------------------------------------------------------
# vectorized event encoding
# ---------------------------------------------------------------------------

def _varint_matrix(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint bytes of each value: (n, 10) uint8 matrix and (n,) lengths."""
    v = np.asarray(vals).astype(np.uint64, copy=True)
    n = v.shape[0]
    mat = np.zeros((n, 10), dtype=np.uint8)
    lens = np.ones(n, dtype=np.int64)
    seven = np.uint64(7)
    mask7 = np.uint64(0x7F)
    for j in range(10):
        low = (v & mask7).astype(np.uint8)
        v = v >> seven
        more = v != 0
        mat[:, j] = low | (more.astype(np.uint8) << 7)
        if j < 9:
            lens += more
        if not more.any():
            break
    return mat, lens


class _Pieces:
    def __init__(self, n: int):
        self.n = n
        self.items: list[tuple[np.ndarray, np.ndarray]] = []

    def const(self, b: bytes, mask: np.ndarray | None = None) -> None:
        mat = np.broadcast_to(np.frombuffer(b, dtype=np.uint8), (self.n, len(b)))
        lens = np.full(self.n, len(b), dtype=np.int64)
        if mask is not None:
            lens = np.where(mask, lens, 0)
        self.items.append((mat, lens))

    def var(self, vals: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        mat, lens = _varint_matrix(vals)
        if mask is not None:
            lens = np.where(mask, lens, 0)
        self.items.append((mat, lens))
        return lens

    def total_lens(self) -> np.ndarray:
        tot = np.zeros(self.n, dtype=np.int64)
        for _, lens in self.items:
            tot += lens
        return tot

    def assemble(self, row_start: np.ndarray, buf: np.ndarray) -> None:
        pos = row_start.copy()
        for mat, lens in self.items:
            width = mat.shape[1]
            for j in range(width):
                m = lens > j
                if not m.any():
                    break
                buf[pos[m] + j] = mat[m, j] if mat.strides[0] else mat[0, j]
            pos += lens


def encode_events(
    metadata_ids: np.ndarray,
    offsets: np.ndarray,
    durations: np.ndarray,
    stats: list[tuple[int, int, np.ndarray, np.ndarray | None]] = (),
    table_stats: list[tuple[list[bytes], np.ndarray]] = (),
) -> bytes:
    """Encode XEvents as repeated XLine field 4 records.

    ``stats``: (stat metadata id, value kind V_UINT64/V_INT64/V_REF, values, mask or None);
    a stat is written for the rows where mask is true (all rows when mask is None).
    ``table_stats``: (list of serialized XStats, per-row index into it) -- for string stats.
    """
    n = int(len(metadata_ids))
    if n == 0:
        return b""
    ev = _Pieces(n)
    ev.const(b"\x08")
    ev.var(metadata_ids)
    ev.const(b"\x10")
    ev.var(offsets)
    ev.const(b"\x18")
    ev.var(durations)
    for smid, kind, vals, mask in stats:
        # XStat: 0x08 varint(smid) key(kind,0) varint(val); its length fits one byte
        sm = encode_varint(smid)
        vmat, vlens = _varint_matrix(vals)
        stat_len = 1 + len(sm) + 1 + vlens
        ev.const(b"\x22", mask)
        lens_piece = stat_len.astype(np.uint8).reshape(-1, 1)
        l1 = np.ones(n, dtype=np.int64) if mask is None else mask.astype(np.int64)
        ev.items.append((lens_piece, l1))
        ev.const(b"\x08" + sm + bytes([(kind << 3) | 0]), mask)
        ev.items.append((vmat, vlens if mask is None else np.where(mask, vlens, 0)))
    for table, idx in table_stats:
        recs = [f_bytes(4, t) for t in table]
        w = max(len(r) for r in recs)
        tmat = np.zeros((len(recs), w), dtype=np.uint8)
        tlen = np.array([len(r) for r in recs], dtype=np.int64)
        for i, r in enumerate(recs):
            tmat[i, : len(r)] = np.frombuffer(r, dtype=np.uint8)
        idx = np.asarray(idx, dtype=np.int64)
        ev.items.append((tmat[idx], tlen[idx]))
    body_len = ev.total_lens()
    hdr = _Pieces(n)
    hdr.const(b"\x22")
    hdr.var(body_len)
    hdr_len = hdr.total_lens()
    row_len = hdr_len + body_len
    row_start = np.zeros(n, dtype=np.int64)
    np.cumsum(row_len[:-1], out=row_start[1:])
    total = int(row_start[-1] + row_len[-1])
    buf = np.zeros(total, dtype=np.uint8)
    hdr.assemble(row_start, buf)
    ev.assemble(row_start + hdr_len, buf)
    return buf.tobytes()


def encode_event_py(metadata_id: int, offset: int, duration: int, stats: list[bytes]) -> bytes:
    """One XEvent (as an XLine field 4 record) from pre-serialized XStats."""
    body = f_varint(1, metadata_id) + f_varint(2, offset) + f_varint(3, duration)
    for s in stats:
        body += f_bytes(4, s)
    return f_bytes(4, body)


def encode_line(line_id: int, name: str, timestamp_ns: int, duration_ps: int, events: bytes,
                display_name: str = "", display_id: int = 0) -> bytes:
    out = f_varint(1, line_id) + f_bytes(2, name)
    if timestamp_ns:
        out += f_varint(3, timestamp_ns)
    if duration_ps:
        out += f_varint(9, duration_ps)
    if display_id:
        out += f_varint(10, display_id)
    if display_name:
        out += f_bytes(11, display_name)
    return out + events


def encode_plane(plane_id: int, name: str, lines: list[bytes], event_metadata: dict[int, bytes],
                 stat_metadata: dict[int, bytes], stats: list[bytes]) -> bytes:
    """XPlane from encoded lines, serialized metadata messages (maps in ascending key order)."""
    parts = [f_varint(1, plane_id) if plane_id else b"", f_bytes(2, name)]
    for ln in lines:
        parts.append(f_bytes(3, ln))
    for k in sorted(event_metadata):
        parts.append(f_bytes(4, f_varint(1, k) + f_bytes(2, event_metadata[k])))
    for k in sorted(stat_metadata):
        parts.append(f_bytes(5, f_varint(1, k) + f_bytes(2, stat_metadata[k])))
    for s in stats:
        parts.append(f_bytes(6, s))
    return b"".join(parts)


def encode_space(planes: list[bytes], hostnames: list[str]) -> bytes:
    parts = [f_bytes(1, p) for p in planes]
    parts += [f_bytes(4, h) for h in hostnames]
    return b"".join(parts)
