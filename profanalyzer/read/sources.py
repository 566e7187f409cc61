"""Inputs that are URLs: `gs://`, `s3://`, `file://`, any fsspec URL, naming
a host file, a run folder or a log dir (the newest run of it is fetched, as
for a local log dir). The file(s) are copied into a private temporary folder
with the local layout (`<run>/<host>.xplane.pb[.gz]`, or
`<logdir>/plugins/profile/<run>/...`) and the local reader runs on it; the
folder is removed afterwards.

Selective fetch: an uncompressed `.xplane.pb` is read by ranges. Its
top-level fields are walked without downloading them (a few bytes per plane
header); the device planes (TensorCore, SparseCore) and every plane under
SKIP_PLANE_BYTES come whole, a larger plane of another kind (e.g. the
`/host:metadata` HLO-proto bulk, host threads) comes as a stub holding its id
and name only, so the file still lists every plane. A `.gz` file allows no
ranges: it is streamed. `info` asks for everything (`selective=False`).

fsspec is imported only for a URL (`open_fsspec`);
`gs://` needs gcsfs (the `[gcs]` extra), which honours STORAGE_EMULATOR_HOST.
Every failure is an InputError with one line (exit 2): no such object,
permission denied, unreachable store.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

from profanalyzer.core.errors import InputError, ProfanalyzerError
from profanalyzer.core.vocab import XPLANE_SUFFIXES

__all__ = ["is_url", "is_xplane_name", "open_fsspec", "local_copy", "fetch", "SKIP_PLANE_BYTES", "DEVICE_KINDS"]

_FORBIDDEN = re.compile(r"\b(403|Forbidden|AccessDenied|Access Denied|permission)\b", re.I)
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

#: Plane kinds (xspace.reader.plane_kind) that the analysis decodes: always fetched.
DEVICE_KINDS = ("tensorcore", "sparsecore")
#: Other planes larger than this are fetched as a stub (id and name only).
SKIP_PLANE_BYTES = 1 << 20
_CHUNK = 1 << 22
_HEAD = 4096  # bytes read to find a plane's id and name
_BLOCK = 1 << 16  # read-ahead of a ranged read


def is_url(path: object) -> bool:
    """Whether `path` is a URL (`scheme://...`), not a local path."""
    return bool(_URL_RE.match(str(path)))


def is_xplane_name(name: str) -> bool:
    return name.endswith(XPLANE_SUFFIXES)


def open_fsspec(url: str):
    """(filesystem, stripped path) for a URL; InputError when fsspec or the protocol's package is missing."""
    try:
        from fsspec.core import url_to_fs  # type: ignore[import-untyped]  # optional: only URLs need it (no stubs)
    except ImportError:
        raise InputError(f"{url}: URLs need fsspec (pip install fsspec, plus gcsfs for gs://)") from None
    try:
        return url_to_fs(url)
    except ImportError as e:
        raise InputError(f"{url}: this protocol needs an extra package: {e}") from None
    except (ValueError, OSError) as e:
        raise InputError(f"{url}: cannot open: {e}") from None


@contextlib.contextmanager
def local_copy(source: str, *, selective: bool = True) -> Iterator[str]:
    """A local path for `source`: itself when it is not a URL, else a
    temporary copy (see `fetch`), removed when the block ends."""
    if not is_url(source):
        yield source
        return
    tmp = tempfile.mkdtemp(prefix="profanalyzer-url-")
    try:
        local = fetch(source, tmp, selective=selective)
        top = os.path.join(tmp, os.path.relpath(local, tmp).split(os.sep)[0])
        try:
            yield local
        except ProfanalyzerError as e:  # name the URL, not the temporary copy
            msg = str(e).replace(top, source.rstrip("/"))
            if msg == str(e):
                raise
            raise type(e)(msg) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(url: str, dest: str, *, selective: bool = True) -> str:
    """Copy what `url` names (host file, run folder, or the newest run of a
    log dir) under `dest`; return the local path to analyse."""
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        # An emulator speaks the JSON API only: gcsfs's gRPC bucket-type probe
        # (on by default) would wait for its timeout on every bucket.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    fs, root = open_fsspec(url)
    try:
        return _fetch(fs, url, root.rstrip("/"), dest, selective)
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{url}: no such file or directory") from None
    except PermissionError as e:
        raise InputError(f"{url}: permission denied ({_one_line(e)})") from None
    except Exception as e:  # the store's own errors (HTTP 403, unreachable host, ...)
        if _FORBIDDEN.search(str(e)):
            raise InputError(f"{url}: permission denied ({_one_line(e)})") from None
        raise InputError(f"{url}: cannot read: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:300]


def _name(p: str) -> str:
    return p.rstrip("/").rsplit("/", 1)[-1]


def _is_host_file(name: str) -> bool:
    return is_xplane_name(name)


def _fetch(fs, url: str, root: str, dest: str, selective: bool) -> str:
    kind = fs.info(root).get("type")  # raises: missing (FileNotFoundError), forbidden (OSError)
    if kind == "file":
        out = os.path.join(dest, _safe(_name(root)))
        _copy(fs, root, out, selective and _is_host_file(root))
        return out
    if kind != "directory":
        raise InputError(f"{url}: not a file or directory ({kind})")
    hosts = [e["name"] for e in fs.ls(root, detail=True) if e.get("type") == "file" and _is_host_file(e["name"])]
    if hosts:
        run = os.path.join(dest, _safe(_name(root)) or "run")
        _copy_run(fs, hosts, run, selective)
        return run
    # A log dir: run folders holding host files under plugins/profile/.
    rx = re.compile(r"(^|/)plugins/profile/([^/]+)/[^/]+$")
    runs: dict[str, list[str]] = {}
    for p in fs.find(root):
        m = rx.search(p)
        if m and _is_host_file(p):
            runs.setdefault(p.rsplit("/", 1)[0], []).append(p)
    if not runs:
        raise InputError(f"{url}: no *.xplane.pb files here or under plugins/profile/<run>/ "
                         "(pass a .xplane.pb[.gz] file, a run folder or a log dir)")
    # Newest run, as the local reader picks it: run folder names are
    # timestamps (YYYY_MM_DD_HH_MM_SS).
    newest = max(runs, key=lambda r: (_name(r), r))
    rel = newest[len(root):].strip("/")
    top = os.path.join(dest, _safe(_name(root)) or "logdir")
    _copy_run(fs, runs[newest], os.path.join(top, *[_safe(x) for x in rel.split("/")]), selective)
    return top


def _safe(name: str) -> str:
    """A path component from a store's name (no separators, no dot-dot)."""
    name = name.replace("\\", "_").replace("/", "_")
    return "_" if name in ("", ".", "..") else name


def _copy_run(fs, files: list[str], folder: str, selective: bool) -> None:
    os.makedirs(folder, exist_ok=True)
    for f in sorted(files):
        _copy(fs, f, os.path.join(folder, _safe(_name(f))), selective)


def _copy(fs, src: str, out: str, selective: bool) -> None:
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    ranges = selective and not src.endswith(".gz")
    # By ranges: small read-ahead blocks (a plane header costs one), not the store's default (MiBs).
    with fs.open(src, "rb", **({"block_size": _BLOCK} if ranges else {})) as fh, open(out, "wb") as w:
        if ranges:
            _copy_selective(fh, w, fs.size(src))
        else:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                w.write(chunk)


def _varint_at(head: bytes, pos: int) -> tuple[int, int]:
    from profanalyzer.read.xspace.wire import varint

    return varint(head, pos, len(head))


def _copy_selective(fh, w, size: int) -> None:
    """Walk the XSpace's top-level fields by ranges; write each field whole,
    except large non-device planes, written as a stub (id + name)."""
    from profanalyzer.read.xspace.reader import plane_kind

    pos = 0
    while pos < size:
        fh.seek(pos)
        head = fh.read(min(20, size - pos))
        try:
            key, p = _varint_at(head, 0)
            n, p = _varint_at(head, p) if key & 7 == 2 else (0, p)
        except ValueError:
            key = 0
        if key & 7 != 2 or key >> 3 == 0:  # not an XSpace field: copy the rest as it is (the reader judges it)
            fh.seek(pos)
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                w.write(chunk)
            return
        body_at = pos + p
        end = min(body_at + n, size)
        if key >> 3 == 1 and n > SKIP_PLANE_BYTES:
            fh.seek(body_at)
            plane_head = fh.read(min(_HEAD, n))
            name, pid = _plane_name_id(plane_head)
            if name is not None and plane_kind(name)[0] not in DEVICE_KINDS:
                w.write(_field(1, _stub_plane(pid, name)))
                pos = end
                continue
        fh.seek(pos)
        left = end - pos
        while left > 0:
            chunk = fh.read(min(_CHUNK, left))
            if not chunk:
                break
            w.write(chunk)
            left -= len(chunk)
        pos = end


def _plane_name_id(head: bytes) -> tuple[str | None, int]:
    """(name, id) of a plane from its first bytes; name None when they do not hold it."""
    pos, pid, name = 0, 0, None
    try:
        while pos < len(head) and name is None:
            key, pos = _varint_at(head, pos)
            field, wt = key >> 3, key & 7
            if wt == 0:
                v, pos = _varint_at(head, pos)
                if field == 1:
                    pid = v
            elif wt == 2:
                n, pos = _varint_at(head, pos)
                if pos + n > len(head):
                    return None, pid
                if field == 2:
                    name = head[pos:pos + n].decode("utf-8", errors="replace")
                pos += n
            else:
                return None, pid
    except ValueError:
        return None, pid
    return name, pid


def _field(number: int, body: bytes) -> bytes:
    from profanalyzer.read.xspace.wire import encode_varint

    return encode_varint(number << 3 | 2) + encode_varint(len(body)) + body


def _stub_plane(pid: int, name: str) -> bytes:
    from profanalyzer.read.xspace.wire import encode_varint

    return encode_varint(1 << 3 | 0) + encode_varint(pid & 0xFFFFFFFFFFFFFFFF) + _field(2, name.encode("utf-8"))
