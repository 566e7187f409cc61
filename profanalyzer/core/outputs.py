"""The one output layer: every file a command writes goes through here.

Two halves, used in this order by every command:

* :func:`check_outputs`, before any work: each output path is refused (an
  OutputError: one line, exit 2, nothing written) when it is an input, the
  same file as an input by another name (a symlink, a hard link, ``./a`` and
  ``a``, a relative and an absolute path: files are compared by
  ``(st_dev, st_ino)``, not only by name), lies inside an input folder (a run
  folder, a log dir, a ``--history`` folder: every file and folder beneath it
  counts as input), names a folder, names a file another output names too, or
  would go into a folder that does not exist (commands never create the
  folder that holds an output; the user creates it).
* :func:`write_bytes` / :func:`write_text` / :func:`atomic_open`: atomic
  writes, a temporary file in the destination's folder then ``os.replace``,
  so a failed or interrupted run leaves no half-written file. A destination
  that is a symlink is written through: its target is replaced.

Inputs and outputs that are URLs (``gs://...``) or ``-`` (stdout) are not
local files and are not checked here.

Also the outputs' names and the input's hash: `default_output_path` (`./<trace-stem>.report.html`)
and `file_sha256` (a file, or a folder's files, memory-mapped chunk by chunk).

Imports the standard library and profanalyzer.core.errors only (floor 0).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from profanalyzer.core.errors import OutputError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

#: (st_dev, st_ino): a file's identity, whatever name reaches it.
FileId = tuple[int, int]


def _is_local(path: str | os.PathLike | None) -> bool:
    return path is not None and str(path) not in ("", "-") and not _URL.match(str(path))


def _file_id(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino)


@dataclass
class Inputs:
    """What a command reads, as the file system knows it: every input file
    (and every file beneath an input folder) by identity, and every input
    folder (and every folder beneath it) by identity and real path."""

    files: dict[FileId, tuple[str, str]] = field(default_factory=dict)  # id -> (the input as given, the file's path)
    folders: dict[FileId, str] = field(default_factory=dict)
    folder_paths: dict[str, str] = field(default_factory=dict)  # realpath -> the input (as given)

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike | None]) -> Inputs:
        """The inputs of a command (paths that do not exist, URLs and ``-``
        are skipped: reading them fails, or is not local)."""
        inputs = cls()
        for p in paths:
            if _is_local(p):
                inputs.add(str(p))
        return inputs

    def add(self, given: str) -> None:
        try:
            st = os.stat(given)
        except (OSError, ValueError):
            return
        if not stat.S_ISDIR(st.st_mode):
            self.files.setdefault(_file_id(st), (given, given))
            return
        # A folder: every file and folder beneath it is input (symlinked
        # folders are followed, as the readers follow them; each once).
        self.folders.setdefault(_file_id(st), given)
        self.folder_paths.setdefault(os.path.realpath(given), given)
        for top, dirs, names in os.walk(given, followlinks=True):
            keep = []
            for d in dirs:
                try:
                    dst = os.stat(os.path.join(top, d))
                except OSError:
                    continue
                if _file_id(dst) not in self.folders:
                    self.folders[_file_id(dst)] = given
                    self.folder_paths.setdefault(os.path.realpath(os.path.join(top, d)), given)
                    keep.append(d)
            dirs[:] = keep
            for n in names:
                try:
                    fst = os.stat(os.path.join(top, n))
                except OSError:  # a dangling symlink: nothing to protect
                    continue
                self.files.setdefault(_file_id(fst), (given, os.path.join(top, n)))

    def folder_holding(self, real: str) -> str | None:
        """The input folder `real` (a resolved path) lies in, by identity of
        each existing ancestor or by path; None when it lies in none."""
        head = os.path.dirname(real)
        while True:
            given = self.folder_paths.get(head)
            if given is not None:
                return given
            try:
                given = self.folders.get(_file_id(os.stat(head)))
            except OSError:
                given = None
            if given is not None:
                return given
            up = os.path.dirname(head)
            if up == head:
                return None
            head = up


def _stat_output(what: str, out: str) -> os.stat_result | None:
    """The output path's stat, None when it does not exist yet; OutputError when it cannot be looked at."""
    try:
        return os.stat(out)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise OutputError(f"{what}: cannot write: {getattr(e, 'strerror', None) or e}") from None


def _describe(label: str | None, path: str) -> str:
    return f"{label} {path}" if label else path


def check_outputs(
    inputs: Iterable[str | os.PathLike | None],
    files: Iterable[tuple[str | None, str | os.PathLike | None]] = (),
    folders: Iterable[tuple[str | None, str | os.PathLike | None]] = (),
    caches: Iterable[tuple[str | None, str | os.PathLike | None]] = (),
) -> None:
    """Refuse, before any work, every output that would touch an input or
    cannot be written: an OutputError naming the first.

    `files` and `folders` are ``(option, path)`` pairs (option: how the
    message names it, e.g. ``"--json"``; path None or ``-``: not a file).
    A folder output (synth's run folder) may exist or not; it must not be or
    lie inside an input folder, and its parent must exist. A cache folder is
    checked the same way, except that it and its parents may be missing (the
    cache creates them).
    """
    files, folders, caches = list(files), list(folders), list(caches)
    stdout = [label or "an output" for label, raw in files if raw is not None and str(raw) == "-"]
    if len(stdout) > 1:  # two documents on one stream: neither could be read back
        raise OutputError(f"{' and '.join(stdout)} both write to stdout (-): send one of them to a file")
    if not any(_is_local(raw) for _, raw in [*files, *folders, *caches]):
        return  # stdout only: nothing to check, no folder to walk
    ins = Inputs.of(inputs)
    seen: dict[FileId | str, str] = {}
    for label, raw in files:
        if not _is_local(raw):
            continue
        out = str(raw)
        what = _describe(label, out)
        real = os.path.realpath(out)
        st: os.stat_result | None = _stat_output(what, out)
        if st is not None:
            hit = ins.files.get(_file_id(st))
            if hit is not None:
                source, found = hit
                other = "" if os.path.abspath(out) == os.path.abspath(found) else " (the same file by another name)"
                if source == found:
                    raise OutputError(f"{what}: refusing to write over the input {source}{other}")
                raise OutputError(f"{what}: refusing to write over {found}, a file of the input folder {source}{other}")
            if stat.S_ISDIR(st.st_mode):
                given = ins.folders.get(_file_id(st))
                if given is not None:
                    raise OutputError(f"{what}: refusing to write over the input {given} (it is an input folder)")
                raise OutputError(f"{what}: cannot write: it is a folder, not a file")
        holder = ins.folder_holding(real)
        if holder is not None:
            raise OutputError(f"{what}: refusing to write over the input: it lies inside the input folder {holder}")
        _parent_must_exist(what, real, out)
        if st is not None and not os.access(real, os.W_OK):
            raise OutputError(f"{what}: cannot write: permission denied")
        key: FileId | str = _file_id(st) if st is not None else real
        if key in seen:
            raise OutputError(f"{what}: cannot write: {seen[key]} names the same file")
        seen[key] = what
    marked = [(label, raw, False) for label, raw in folders] + [(label, raw, True) for label, raw in caches]
    for label, raw, cache in marked:
        if not _is_local(raw):
            continue
        out = str(raw)
        what = _describe(label, out)
        real = os.path.realpath(out)
        st = _stat_output(what, out)
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                hit = ins.files.get(_file_id(st))
                if hit is not None:
                    raise OutputError(f"{what}: refusing to write over the input {hit[0]}")
                raise OutputError(f"{what}: cannot write: it is a file, not a folder")
            given = ins.folders.get(_file_id(st))
            if given is not None:
                raise OutputError(f"{what}: refusing to write inside the input folder {given}")
        holder = ins.folder_holding(real)
        if holder is not None:
            raise OutputError(f"{what}: refusing to write inside the input folder {holder}")
        if st is None and not cache:
            _parent_must_exist(what, real, out)


def _parent_must_exist(what: str, real: str, out: str) -> None:
    parent = os.path.dirname(real)
    shown = os.path.dirname(out) or "."
    if not os.path.isdir(parent):
        raise OutputError(f"{what}: cannot write: the folder {shown} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what}: cannot write: the folder {shown} is not writable")


# ---------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------


def _temp_name(final: str) -> str:
    folder, name = os.path.split(final)
    return os.path.join(folder, f".{name[:200]}.{os.urandom(4).hex()}.tmp")


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file to write `dest`'s new content into: a temporary file next to
    it, moved over `dest` when the block ends without an exception, removed
    when it raises. OutputError when it cannot be written."""
    dest = str(dest)
    final = os.path.realpath(dest)  # through a symlink: its target is what the user named
    try:
        mode = stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        mode = 0o666  # the umask applies, as for open(dest, "w")
    else:
        if not os.access(final, os.W_OK):  # a write-protected file stays as it is
            raise OutputError(f"{dest}: cannot write: permission denied")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    tmp = ""
    try:
        for _ in range(16):
            tmp = _temp_name(final)
            try:
                fd = os.open(tmp, flags, mode)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free temporary name next to {dest}")
    except OSError as e:
        raise OutputError(f"{dest}: cannot write: {getattr(e, 'strerror', None) or e}") from None
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, final)
        done = True
    except OSError as e:
        raise OutputError(f"{dest}: cannot write: {e.strerror or e}") from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_bytes(data: bytes, dest: str | os.PathLike) -> None:
    """Write `data` to `dest` atomically."""
    with atomic_open(dest) as f:
        f.write(data)


def write_text(text: str, dest: str | os.PathLike) -> None:
    """Write `text` (UTF-8, newlines as given) to `dest` atomically."""
    write_bytes(text.encode("utf-8"), dest)


def write_text_gz(text: str, dest: str | os.PathLike) -> None:
    """Write `text` (UTF-8) to `dest` atomically, gzipped when its name ends in .gz (mtime 0: the same
    text writes the same bytes)."""
    data = text.encode("utf-8")
    if not str(dest).endswith(".gz"):
        write_bytes(data, dest)
        return
    import gzip

    with atomic_open(dest) as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0, filename="") as f:
        f.write(data)


# ---------------------------------------------------------------------------
# Naming and hashing: the default output path of an input, and the input's SHA-256 (the report footer)
# ---------------------------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    """SHA-256 of an input file, or of a folder's files (sorted relative paths
    and contents) for a run folder / log dir."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_dir():
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(str(f.relative_to(p).as_posix()).encode() + b"\0")
            add_file_to_hash(h, f)
    else:
        add_file_to_hash(h, p)
    return h.hexdigest()


def add_file_to_hash(h, f: Path) -> None:
    """Feed a file's contents to hash `h` (memory-mapped chunk by chunk; read when it cannot be mapped)."""
    with open(f, "rb") as fh:
        if not _add_mapped(h, fh):
            buf = bytearray(_HASH_CHUNK)
            view = memoryview(buf)
            while n := fh.readinto(buf):
                h.update(view[:n])


#: Bytes hashed at a time. hashlib releases the GIL while it hashes each
#: chunk, so hashing on a thread barely slows the analysis.
_HASH_CHUNK = 8 << 20


def _add_mapped(h, fh) -> bool:
    """Hash the open file through a read-only memory map, chunk by chunk,
    each chunk's pages dropped from this process once hashed (they stay in
    the page cache): no copy into a buffer, and resident memory stays at
    one chunk. False when the file cannot be mapped (empty, a pipe, no
    madvise): the caller reads it instead."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return False
    try:
        size = os.fstat(fh.fileno()).st_size
        if size <= 0:
            return False
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return False
    try:
        for off in range(0, len(mm), _HASH_CHUNK):
            with memoryview(mm)[off:off + _HASH_CHUNK] as view:
                h.update(view)
            mm.madvise(mmap.MADV_DONTNEED, off, min(_HASH_CHUNK, len(mm) - off))
    finally:
        mm.close()
    return True


_TRACE_SUFFIXES = (".xplane.pb.gz", ".xplane.pb", ".pb.gz", ".pb", ".gz")


def trace_stem(trace: str | Path) -> str:
    """`runs/a/h0.xplane.pb.gz` -> `h0`; a run folder or log dir -> its name."""
    name = Path(str(trace).rstrip("/\\")).name or "trace"
    for s in _TRACE_SUFFIXES:
        if name.endswith(s) and len(name) > len(s):
            return name[: -len(s)]
    return name


def default_output_path(trace: str | Path, suffix: str = ".report.html") -> Path:
    """The CLI's default report path: `./<trace-stem>.report.html`."""
    return Path(f"{trace_stem(trace)}{suffix}")
