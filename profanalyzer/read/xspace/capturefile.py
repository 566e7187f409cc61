"""One capture file, opened once (`CaptureFile`): a plain file mapped
read-only, a `.gz` held as its compressed bytes and inflated from memory in
bounded steps (`gunzip_chunks`) under a decompressed-size cap (the gzip bomb
guard), with one clear error line for a corrupt, truncated or empty file.
`profanalyzer.read.xspace.reader` scans and decodes what these bytes hold.
"""

from __future__ import annotations

import gzip
import io
import mmap
import zlib
from collections.abc import Iterator
from pathlib import Path

from profanalyzer.core.errors import InputError

#: Decompressed size cap for .gz inputs (a gzip bomb guard). Real single-host
#: captures are at most a few GB.
MAX_DECOMPRESSED_BYTES = 16 * 1024**3

def size_text(n: int) -> str:
    for unit, k in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n} bytes"



class CaptureFile:
    """One capture file of a Source, opened once (`raw`): a plain file mapped
    read-only, a `.gz` held as its compressed bytes. Every reader of the file
    (`open_space`: the trace, its programs, counter lines, host lines,
    allocator events) starts from these bytes; a `.gz` is inflated from
    memory, streamed, never held whole. The file is never written."""

    __slots__ = ("path", "_raw")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._raw: bytes | mmap.mmap | None = None

    def raw(self) -> bytes | mmap.mmap:
        """The file's bytes as read (the one open of the file)."""
        if self._raw is None:
            self._raw = _read_raw(self.path)
        return self._raw

    @property
    def gzipped(self) -> bool:
        return self.raw()[:2] == b"\x1f\x8b"


def _read_raw(path: Path) -> bytes | mmap.mmap:
    try:
        size = path.stat().st_size
        if size == 0:
            raise InputError(f"{path}: empty file")
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                f.seek(0)
                return f.read()
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # mmap of a file that shrank to nothing meanwhile
        raise InputError(f"{path}: cannot read: {e}") from None


def as_file(file: CaptureFile | str | Path) -> CaptureFile:
    return file if isinstance(file, CaptureFile) else CaptureFile(file)


def read_bytes(file: CaptureFile | str | Path) -> bytes | bytearray | mmap.mmap:
    """Return the raw XSpace bytes of a file (.gz decompressed, capped).

    Never writes: plain files are mapped read-only, .gz files decompressed in
    memory (up to MAX_DECOMPRESSED_BYTES, then refused)."""
    cf = as_file(file)
    raw = cf.raw()
    return _gunzip(io.BytesIO(raw), cf.path) if cf.gzipped else raw


_CHUNK = 1 << 20
#: Most decompressed bytes produced per inflate step of a streamed .gz.
_OUT_CHUNK = 4 << 20


def _bomb(path: Path, limit: int) -> InputError:
    return InputError(
        f"{path}: decompresses to more than {size_text(limit)}; refusing (gzip bomb guard; "
        "a genuine capture this large: decompress it and pass the .xplane.pb)"
    )


def _gunzip(f, path: Path) -> bytearray:
    """Decompress a (possibly multi-member) gzip file whole, refusing more
    than MAX_DECOMPRESSED_BYTES of output (a gzip bomb guard; the checks and
    messages of `gunzip_chunks`, whose bounded steps it joins)."""
    out = bytearray()
    for chunk in gunzip_chunks(f, path):
        out += chunk
    return out


def gunzip_chunks(f, path: Path) -> Iterator[bytes]:
    """The decompressed bytes of a (possibly multi-member) gzip file, in
    steps of at most _OUT_CHUNK bytes; the same checks and messages as
    `_gunzip` (bomb guard, trailing garbage, corrupt, truncated), raised when
    the stream reaches them."""
    limit = MAX_DECOMPRESSED_BYTES
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    try:
        while True:
            data = pending or f.read(_CHUNK)
            pending = b""
            if not data:
                break
            if d.eof:  # between members: another member, or NUL padding
                if not data.strip(b"\0"):
                    continue
                if len(data) < 2:
                    data += f.read(_CHUNK)
                if data[:2] != b"\x1f\x8b":
                    raise InputError(f"{path}: corrupt gzip file (unexpected data after the compressed stream)")
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                out = d.decompress(data, _OUT_CHUNK)
                total += len(out)
                if total > limit:
                    raise _bomb(path, limit)
                if out:
                    yield out
                data = d.unconsumed_tail
                if not data and len(out) < _OUT_CHUNK:
                    break
            if d.eof and d.unused_data:
                pending = d.unused_data
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: corrupt gzip data ({e})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if not d.eof:
        raise InputError(f"{path}: truncated gzip file (incomplete download or copy?)")
    if not total:
        raise InputError(f"{path}: empty after decompression")
