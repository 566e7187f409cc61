"""`open_source(path) -> Source`: the input of one run, opened once.

A Source owns what the user passed: its label, its kind, and its bytes, each
file read once (`capturefile.CaptureFile`: a plain file mapped read-only, a `.gz`
held compressed and inflated from memory, streamed, by each reader). What it
is is told from those bytes, never by opening the file again:

* `document`: a saved `analyze --json` (its first non-space byte `{`, gzip
  or not, with a `schema_version`), parsed from the bytes read;
* `program`: a compiled program (HLO text or proto, an XLA dump folder or its
  tar): `program()` reads it (profanalyzer.read.hlo.load; the file's bytes as read);
* `capture`: an XSpace file, a run folder or a log dir
  (profanalyzer.read.xspace.inputs): `files` are its host files.

A capture's Source is the Trace's `reads` (profanalyzer.model.trace.CaptureReads):
the stages ask it for what the trace does not hold (a host file's programs,
counter lines, host lines, allocator activity) and it decodes them from the
same bytes, so no stage under analyze/ imports a reader. `sha256()` is the
input's hash for the report footer, of the same bytes.

What a Source holds for the run: a `.gz` capture's compressed bytes (a
plain file's map costs no memory of the process).

Imports: read.xspace (reader, inputs, counterlines, hostlines), read.allocator,
read.hlo.load, documents (records), errors.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profanalyzer.core.errors import InputError
from profanalyzer.model.documents import json_value
from profanalyzer.read.xspace import capturefile, inputs

__all__ = ["Source", "open_source", "capture_source", "SOURCE_KINDS"]

SOURCE_KINDS = ("document", "program", "capture")
#: Bytes of a file's head read to tell its kind (a JSON document, HLO text).
_HEAD = 4096


@dataclass(eq=False)
class Source:
    """One input, opened once (see the module doc)."""

    path: Path
    kind: str  # one of SOURCE_KINDS
    files: tuple[capturefile.CaptureFile, ...] = ()  # a capture's host files, in host order; a single-file input's file
    resolved: inputs.ResolvedInput | None = None  # a capture: how the path resolved (file, run folder, log dir)
    document: Any = None  # a saved document's JSON value
    _by_name: dict[str, capturefile.CaptureFile] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {str(f.path): f for f in self.files}

    @property
    def label(self) -> str:
        return str(self.path)

    def file(self, name: str) -> capturefile.CaptureFile:
        """The host file a HostInfo names (`HostInfo.file`): the one read, not a new one."""
        return self._by_name.get(str(name)) or capturefile.CaptureFile(name)

    # -- what the stages read beyond the trace's planes (profanalyzer.model.trace.CaptureReads)

    def programs(self, file: str | None, ran: Collection[str] | None = None) -> tuple[Any, str]:
        """The HLO programs a host file carries (only those in `ran` when given): (Program or None, why none)."""
        from profanalyzer.read.hlo.load import read_trace_program

        return read_trace_program(self.file(file) if file else None, ran)

    def counter_lines(self, file: str) -> dict:
        """The counter and pipeline-phase lines of a host file's TensorCore planes (xspace.counterlines)."""
        from profanalyzer.read.xspace.counterlines import read_counter_lines

        return read_counter_lines(self.file(file))

    def host_events(self, file: str, origin_ns: int) -> tuple:
        """The dispatch and input lines of a host file's host planes (xspace.hostlines)."""
        from profanalyzer.read.xspace.hostlines import read_host_events

        return read_host_events(self.file(file), origin_ns)

    def memory_sources(self, file: str, program: str) -> Any:
        """A host file's buffer assignment of `program` and allocator activity (read.allocator)."""
        from profanalyzer.read.allocator import read_sources

        return read_sources(self.file(file), program)

    def sha256(self) -> str:
        """SHA-256 of the input: a file's bytes, or a folder's files (sorted relative paths and contents);
        the capture files' bytes are those read (profanalyzer.core.outputs.file_sha256 hashes the same)."""
        from profanalyzer.core.outputs import add_file_to_hash

        h = hashlib.sha256()
        held = {f.path.resolve(): f for f in self.files}

        def add(f: Path) -> None:
            cf = held.get(f.resolve())
            if cf is not None:
                h.update(cf.raw())
            else:
                add_file_to_hash(h, f)

        if self.path.is_dir():
            for f in sorted(x for x in self.path.rglob("*") if x.is_file()):
                h.update(str(f.relative_to(self.path).as_posix()).encode() + b"\0")
                add(f)
        else:
            add(self.path)
        return h.hexdigest()


def _inflated_head(raw: Any) -> bytes:
    """The first bytes of a file's content (a gzip's inflated)."""
    head = bytes(raw[:_HEAD])
    if head[:2] != b"\x1f\x8b":
        return head
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bytes(raw[: 1 << 16]), _HEAD)
    except zlib.error:
        return b""


def open_source(path: str | os.PathLike) -> Source:
    """The Source of a user path (see the module doc). Bad input raises InputError (one line)."""
    from profanalyzer.read.hlo.load import is_program_path

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    if p.is_dir():
        return Source(p, "program") if is_program_path(p) else capture_source(p)
    resolved = inputs.resolve_input(p)
    cf = capturefile.CaptureFile(p)
    raw = cf.raw()  # the one open of the file
    head = _inflated_head(raw)
    if head.lstrip()[:1] == b"{":
        try:
            doc = json_value(bytes(raw), p)
        except InputError:
            doc = None
        if isinstance(doc, dict) and "schema_version" in doc:
            return Source(p, "document", (cf,), document=doc)
    if is_program_path(p, head):
        return Source(p, "program", (cf,))
    return Source(p, "capture", (cf,), resolved)


def capture_source(path: str | os.PathLike) -> Source:
    """The Source of a capture path (a file, a run folder, a log dir), its files not read yet."""
    p = Path(path)
    resolved = inputs.resolve_input(p)
    return Source(p, "capture", tuple(capturefile.CaptureFile(f) for f in resolved.files), resolved)
