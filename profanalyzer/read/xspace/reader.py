"""Open and selectively decode XSpace files (which files a user path
names is `profanalyzer.read.xspace.inputs`).

The XSpace is never decoded as a whole. `scan_space` walks only its top-level
fields (a few hundred bytes of varints for a multi-GB file) and records where
each plane's bytes lie and what it is called; callers then decode just the
planes they need (`profanalyzer.read.xspace.build.build_plane`). Host thread planes and
`/host:metadata` (HLO protos) are the bulk of real files and are never decoded.

`open_space(path, want)` is the entry point: a plain file is mapped
(zero-copy, every plane held); a `.gz` file is inflated in bounded steps and
its top-level fields walked as the bytes arrive, so only the planes `want`
accepts are kept (copied into one compact buffer) and the others are skipped
without ever being held: peak memory is the wanted planes, not the
decompressed size.
"""

from __future__ import annotations

import io
import mmap
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import XPLANE_SUFFIXES
from profanalyzer.read.xspace import wire
from profanalyzer.read.xspace.capturefile import (
    CaptureFile,
    as_file,
    gunzip_chunks,
    read_bytes,
)
from profanalyzer.read.xspace.wire import plain_decode_error

_TC_RE = re.compile(r"^/device:TPU:(\d+)(?: \[\d+\])?$")
_SC_RE = re.compile(r"^/device:TPU:(\d+) SparseCore(?: \S+)? (\d+)(?: \[\d+\])?$")
_GPU_RE = re.compile(r"^/device:GPU:\d+")


def plane_kind(name: str) -> tuple[str, int | None, int | None]:
    """Classify a plane by name -> (kind, device id, sparsecore index).

    kind is one of 'tensorcore', 'sparsecore', 'gpu', 'host', 'metadata',
    'chip', 'task_env', 'other'.
    """
    m = _TC_RE.match(name)
    if m:
        return "tensorcore", int(m.group(1)), None
    m = _SC_RE.match(name)
    if m:
        return "sparsecore", int(m.group(1)), int(m.group(2))
    if _GPU_RE.match(name):
        return "gpu", None, None
    if name.startswith("/host:metadata"):
        return "metadata", None, None
    if name.startswith("/host:"):
        return "host", None, None
    if name.startswith("#Chip"):
        return "chip", None, None
    if name.startswith("Task Environment"):
        return "task_env", None, None
    return "other", None, None


_PASS_XPLANE = (
    "pass the <host>.xplane.pb (or .xplane.pb.gz) file from the same plugins/profile/<run>/ folder, "
    "or the folder itself"
)


def _sniff_wrong_type(head: bytes, name: str) -> str | None:
    """A helpful message when the bytes are clearly something else."""
    s = head.lstrip()
    if s[:1] in (b"{", b"["):
        # a trace viewer file only on its own evidence: an object holding traceEvents, or an array of events
        viewer = b'"traceEvents"' in s[:4096] if s[:1] == b"{" else re.match(rb'\[\s*\{[^{}]*"ph"\s*:', s) is not None
        what = " (a trace viewer .trace.json)" if viewer else ""
        return f"{name}: this is JSON{what}, not an XSpace protobuf; {_PASS_XPLANE}"
    if s[:5].lower() in (b"<!doc", b"<html"):
        return f"{name}: this is an HTML page, not an XSpace protobuf (.xplane.pb); {_PASS_XPLANE}"
    if head[:2] == b"\x1f\x8b":
        return f"{name}: gzip data inside gzip data (compressed twice?): decompress it once and pass the result"
    return None


def _sniff_text_mangled(buf, name: str) -> str | None:
    """A message when a binary XSpace went through a text pipeline.

    Re-encoding binary bytes as UTF-8 (bytes read as latin-1 / cp1252 and
    written as UTF-8: a text-mode transfer, an editor, a git text filter)
    turns every byte >= 0x80 into two bytes; decoding them as UTF-8 with
    replacement turns them into U+FFFD. Only called once the file failed to
    parse, so the checks may cost a pass over it.
    """
    data = bytes(buf)
    fix = (
        f"{name}: this .xplane.pb went through a text conversion (its binary bytes were re-encoded as "
        "UTF-8, e.g. by a text-mode transfer, an editor or a git text filter), which corrupts it; "
        "copy the original file in binary mode"
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if data.count(b"\xef\xbf\xbd") >= 4:
        return fix + " (U+FFFD replacement characters: this copy cannot be repaired)"
    if not any(b >= 0x80 for b in data[:4096]) and data.isascii():
        return None
    for codec in ("latin-1", "cp1252"):
        try:
            orig = text.encode(codec)
        except UnicodeEncodeError:
            continue
        if orig[:2] == b"\x1f\x8b" and data[:2] != b"\x1f\x8b":  # a mangled .xplane.pb.gz
            return fix
        try:
            index = scan_space(orig, Path(name), _diagnose=False)
        except InputError:
            continue
        if index.planes:
            return fix
    return None


# ---------------------------------------------------------------------------
# Top-level wire scan
# ---------------------------------------------------------------------------


# The wire primitives live with the event decoder (one implementation).
_Truncated = wire.Truncated
_varint = wire.varint
_skip = wire.skip


@dataclass(frozen=True)
class PlaneRef:
    """Where one plane's bytes lie in the XSpace buffer."""

    index: int
    name: str
    id: int
    offset: int
    length: int
    kind: str
    device_id: int | None
    sc_index: int | None

    @property
    def held(self) -> bool:
        """Whether the buffer holds this plane's bytes (`open_space` skips
        the planes its caller does not want: offset -1)."""
        return self.offset >= 0


@dataclass(frozen=True)
class SpaceIndex:
    path: Path
    size: int
    planes: tuple[PlaneRef, ...]
    hostnames: tuple[str, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


def _plane_head(buf, start: int, end: int) -> tuple[str, int]:
    """Read a plane's id (field 1) and name (field 2) without decoding it."""
    try:
        return _plane_head_fields(buf, start, end)
    except _Truncated as e:  # inside a plane: corrupt, not a truncated file
        raise ValueError(f"corrupt plane header ({e})") from None


def _plane_head_fields(buf, start: int, end: int) -> tuple[str, int]:
    pos = start
    name = ""
    pid = 0
    found = 0
    while pos < end and found < 2:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 0:
            pid, pos = _varint(buf, pos, end)
            found += 1
        elif field == 2 and wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise ValueError("plane name runs past the end")
            name = bytes(buf[pos : pos + n]).decode("utf-8", errors="replace")
            pos += n
            found += 1
        else:
            pos = _skip(buf, pos, end, wire)
    return name, pid


def scan_space(buf, path: Path, _diagnose: bool = True) -> SpaceIndex:
    """Index the planes of an XSpace buffer by walking its top-level fields.

    Raises InputError with one line that says what the bytes are when they
    are not an XSpace (JSON, HTML, a text-mangled binary) or where they break.
    """
    end = len(buf)
    pos = 0
    tag_pos = 0
    planes: list[PlaneRef] = []
    strings: dict[int, list[str]] = {2: [], 3: [], 4: []}
    head = bytes(buf[:64])

    def diagnose() -> str | None:
        if not _diagnose:
            return None
        return _sniff_wrong_type(head, str(path)) or _sniff_text_mangled(buf, str(path))

    try:
        while pos < end:
            tag_pos = pos
            key, pos = _varint(buf, pos, end)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise ValueError("field number 0")
            if wire == 2:
                n, pos = _varint(buf, pos, end)
                if pos + n > end:
                    raise _Truncated(f"the file ends at byte {end}, inside a field of {n} bytes starting at byte {pos}")
                if field == 1:
                    name, pid = _plane_head(buf, pos, pos + n)
                    kind, dev, sc = plane_kind(name)
                    planes.append(PlaneRef(len(planes), name, pid, pos, n, kind, dev, sc))
                elif field in strings:
                    strings[field].append(bytes(buf[pos : pos + n]).decode("utf-8", errors="replace"))
                pos += n
            elif wire in (3, 4):
                raise ValueError("group wire types are not used by XSpace")
            else:
                pos = _skip(buf, pos, end, wire)
    except ValueError as e:
        wrong = diagnose()
        if wrong:
            raise InputError(wrong) from None
        truncated = isinstance(e, _Truncated)
        if planes and truncated:
            raise InputError(
                f"{path}: truncated or corrupt: {e} ({len(planes)} plane(s) read before it; "
                "an incomplete download or copy?)"
            ) from None
        if planes:
            raise InputError(f"{path}: truncated or corrupt: {plain_decode_error(e)} at byte {tag_pos} "
                             f"(after {len(planes)} plane(s))") from None
        raise InputError(f"{path}: not an XSpace profile (.xplane.pb), or truncated/corrupt: {plain_decode_error(e)} "
                         f"at byte {tag_pos}") from None
    if not planes:
        wrong = diagnose()
        if wrong:
            raise InputError(wrong)
        raise InputError(f"{path}: no planes found: not an XSpace profile (.xplane.pb)")
    return SpaceIndex(
        path=path,
        size=end,
        planes=tuple(planes),
        hostnames=tuple(strings[4]),
        errors=tuple(strings[2]),
        warnings=tuple(strings[3]),
    )


# ---------------------------------------------------------------------------
# Streamed, selective open
# ---------------------------------------------------------------------------

#: Which planes a caller keeps (by name and kind: offset and length are not
#: known to it yet).
PlaneFilter = Callable[[PlaneRef], bool]

#: Per field of a held plane, while it streams: (field number, the field's
#: bytes from its tag on, where its payload starts in them) -> the bytes to
#: hold instead (None: drop the field). The view is valid during the call only.
FieldTrim = Callable[[int, memoryview, int], "bytes | memoryview | None"]

_COLLECT, _KEEP, _SKIP, _TRIM = 1, 2, 3, 4


def _plane_head_prefix(buf, end: int) -> tuple[str, int] | None:
    """A plane's (name, id) from its first `end` bytes, or None when they do
    not reach both fields yet (the same walk as `_plane_head_fields`)."""
    try:
        pos, name, pid, found = 0, "", 0, 0
        while pos < end and found < 2:
            key, pos = _varint(buf, pos, end)
            field, wt = key >> 3, key & 7
            if field == 1 and wt == 0:
                pid, pos = _varint(buf, pos, end)
                found += 1
            elif field == 2 and wt == 2:
                n, pos = _varint(buf, pos, end)
                if pos + n > end:
                    return None
                name = bytes(buf[pos : pos + n]).decode("utf-8", errors="replace")
                pos += n
                found += 1
            else:
                pos = _skip(buf, pos, end, wt)
    except _Truncated:
        return None
    return (name, pid) if found == 2 else None


class _PlaneFields:
    """Cuts a plane's bytes, as they arrive, into whole fields and holds what
    a FieldTrim keeps of each: memory is the largest field, not the plane."""

    def __init__(self, trim: FieldTrim) -> None:
        self.trim = trim
        self.pending = bytearray()
        self.kept = bytearray()

    def feed(self, data) -> None:
        p = self.pending
        p += data
        pos, end = 0, len(p)
        mv = memoryview(p)
        try:
            while pos < end:
                try:
                    key, q = _varint(p, pos, end)
                    wt = key & 7
                    if key >> 3 == 0:
                        raise ValueError("field number 0")
                    if wt == 2:
                        n, start = _varint(p, q, end)
                        stop = start + n
                        if stop > end:
                            break
                    else:
                        start, stop = q, _skip(p, q, end, wt)
                except _Truncated:
                    break
                keep = self.trim(key >> 3, mv[pos:stop], start - pos)
                if keep:
                    self.kept += keep
                keep = None  # may be a view of `p`: released before `p` is cut
                pos = stop
        finally:
            mv.release()
        del p[:pos]

    def close(self) -> bytearray:
        if self.pending:
            raise _Truncated("the plane ends inside a field")
        return self.kept


class _SpaceStream:
    """Walks an XSpace's top-level fields over its bytes as they arrive
    (`feed`), keeping the wanted planes in one compact buffer (`out`) and
    indexing every plane. Any irregularity raises ValueError: the caller
    then re-reads the file the simple way for the exact message."""

    def __init__(self, want: PlaneFilter, trim: Callable[[PlaneRef], FieldTrim | None] | None = None) -> None:
        self.want = want
        self.trim = trim
        self._fields: _PlaneFields | None = None
        self.out = bytearray()
        self.planes: list[PlaneRef] = []
        self.strings: dict[int, list[str]] = {2: [], 3: [], 4: []}
        self.size = 0
        self._carry = b""  # an incomplete field header
        self._mode = 0  # 0: at a field boundary; else how the current payload is consumed
        self._field = 0
        self._n = 0  # the current payload's length
        self._left = 0  # its bytes still to come
        self._got = bytearray()  # its bytes collected so far (_COLLECT)

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        if self._carry:
            data = self._carry + data
            self._carry = b""
        mv = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if self._mode:
                k = min(self._left, end - pos)
                if self._mode == _KEEP:
                    self.out += mv[pos : pos + k]
                elif self._mode == _COLLECT:
                    self._got += mv[pos : pos + k]
                elif self._fields is not None:
                    self._fields.feed(mv[pos : pos + k])
                pos += k
                self._left -= k
                if self._mode == _COLLECT:
                    self._collected()
                elif not self._left:
                    self._end_plane()
                continue
            try:
                key, p = _varint(data, pos, end)
                field, wt = key >> 3, key & 7
                if field == 0:
                    raise ValueError("field number 0")
                if wt in (3, 4):
                    raise ValueError("group wire types are not used by XSpace")
                if wt != 2:
                    pos = _skip(data, p, end, wt)
                    continue
                n, p = _varint(data, p, end)
            except _Truncated:
                self._carry = bytes(mv[pos:])
                return
            pos = p
            self._field, self._n, self._left = field, n, n
            self._mode = _COLLECT if field == 1 or field in self.strings else _SKIP
            self._got = bytearray()
            if self._mode == _COLLECT:
                self._collected()
            elif not n:
                self._mode = 0

    def _collected(self) -> None:
        got, n = self._got, self._n
        if self._field != 1:  # a string field
            if len(got) == n:
                self.strings[self._field].append(bytes(got).decode("utf-8", errors="replace"))
                self._mode = 0
            return
        head = _plane_head(got, 0, n) if len(got) == n else _plane_head_prefix(got, len(got))
        if head is None:
            return
        name, pid = head
        kind, dev, sc = plane_kind(name)
        ref = PlaneRef(len(self.planes), name, pid, -1, n, kind, dev, sc)
        self._got = bytearray()
        self._mode = _SKIP
        if self.want(ref):
            trim = self.trim(ref) if self.trim is not None else None
            if trim is not None:
                self._fields = _PlaneFields(trim)
                self._fields.feed(got)
                self._mode = _TRIM
            else:
                ref = PlaneRef(ref.index, name, pid, len(self.out), n, kind, dev, sc)
                self.out += got
                self._mode = _KEEP
        self.planes.append(ref)
        if not self._left:
            self._end_plane()

    def _end_plane(self) -> None:
        if self._fields is not None:  # a trimmed plane: what was kept of it
            kept = self._fields.close()
            self._fields = None
            r = self.planes[-1]
            self.planes[-1] = PlaneRef(r.index, r.name, r.id, len(self.out), len(kept), r.kind, r.device_id, r.sc_index)
            self.out += kept
        self._mode = 0

    def finish(self, path: Path) -> SpaceIndex:
        if self._mode or self._carry:
            raise _Truncated("the stream ends inside a field")
        if not self.planes:
            raise ValueError("no planes")
        return SpaceIndex(
            path=path,
            size=self.size,
            planes=tuple(self.planes),
            hostnames=tuple(self.strings[4]),
            errors=tuple(self.strings[2]),
            warnings=tuple(self.strings[3]),
        )


def _all_planes(ref: PlaneRef) -> bool:
    return True


def open_space(
    file: CaptureFile | str | Path, want: PlaneFilter | None = None, trim: Callable[[PlaneRef], FieldTrim | None] | None = None
) -> tuple[bytes | bytearray | mmap.mmap, SpaceIndex]:
    """(buffer, index) of an XSpace file (a CaptureFile: its bytes read once
    for every call; a path: read now), holding at least the planes `want`
    accepts (default: all); the index lists every plane, its offsets point
    into the buffer, and a plane not held (`PlaneRef.held` false) has offset -1.

    A plain file is mapped read-only and holds every plane whole. A .gz file
    is streamed: inflated in bounded steps, its top-level fields walked as
    they arrive, only the wanted planes copied out; `SpaceIndex.size` is
    still the decompressed size. `trim(ref)` may return a FieldTrim for a
    wanted plane of a streamed file: the plane is then held as the fields it
    keeps (`PlaneRef.length` is theirs), never whole; a caller that trims
    must read whole planes too (plain files, or a .gz read the simple way
    after an irregularity). Bad input raises the same one-line InputError as
    `read_bytes` + `scan_space` (on any irregularity the file is re-read
    that way for the message)."""
    cf = as_file(file)
    want = want or _all_planes
    if cf.gzipped:
        stream = _SpaceStream(want, trim)
        try:
            for chunk in gunzip_chunks(io.BytesIO(cf.raw()), cf.path):
                stream.feed(chunk)
            return stream.out, stream.finish(cf.path)
        except ValueError:  # not an InputError: those carry their message already
            pass  # the simple path below says what is wrong
    buf = read_bytes(cf)
    return buf, scan_space(buf, cf.path)


def host_name(index: SpaceIndex) -> str:
    """The host's name: XSpace.hostnames, else the file name without suffix."""
    if index.hostnames:
        return index.hostnames[0]
    name = index.path.name
    for suf in XPLANE_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name
