"""Find and read compiled programs: one `read_program(path)` for

* HLO text (`*.txt`, any file whose text has an `HloModule` line);
* an HloProto / HloModuleProto (`*.hlo_proto.pb` as XProf run folders keep
  them, `*.hlo.pb` from `--xla_dump_hlo_as_proto`, or either `.gz`);
* an XLA dump folder (`--xla_dump_to`), or a `.tar.gz` / `.tgz` / `.tar` of
  one: per module its final stage (`after_codegen` where present, else
  `after_optimizations`, else the proto), plus the dump's `compile.log`,
  buffer assignment, memory-usage report and `flagfile` for the memory check;
* the HloProtos inside a capture's `/host:metadata` plane (`*.xplane.pb[.gz]`).

The main module is the one with the most compiler-estimated cycles, then
instructions (`Program.why_main` says which and why). Bad input raises
profanalyzer.core.errors.InputError (one line).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import HLO_PROTO_STAT
from profanalyzer.read.hlo.model import DumpFiles, Module, Program, pick_main
from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes
from profanalyzer.read.hlo.text import looks_like_hlo_text, parse_text

__all__ = ["read_program", "read_trace_program", "is_program_path", "STAGES"]

#: Stages of a module in a dump folder, final first.
STAGES = ("after_codegen", "after_optimizations")
PROTO_SUFFIXES = (".hlo_proto.pb", ".hlo.pb", ".hlo_proto.pb.gz", ".hlo.pb.gz")
TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
#: Largest member / file read (bytes, decompressed).
MAX_BYTES = 1 << 30
_MODULE_FILE = re.compile(r"^(module_\d+\.[^/]*?)\.(after_codegen|after_optimizations|before_optimizations)"
                          r"(\.txt|\.hlo\.pb|\.pb)$")


def is_program_path(path: str | os.PathLike, head: bytes | None = None) -> bool:
    """Whether `path` names a compiled program this module reads (not a
    capture: captures go through the trace reader). `head`: the first bytes
    of the file's content when the caller read them (a Source: no open here)."""
    p = Path(path)
    name = p.name.lower()
    if p.is_dir():
        try:
            names = list(_dump_members(p))
        except OSError:
            return False
        if any(n.endswith((".xplane.pb", ".xplane.pb.gz")) for n in names):
            return False  # a capture's run folder
        return bool(_choose(names))
    if name.endswith(PROTO_SUFFIXES) or name.endswith(TAR_SUFFIXES):
        return True
    if name.endswith((".txt", ".txt.gz")) and p.is_file():
        if head is not None:
            return looks_like_hlo_text(head[:4096].decode("utf-8", "replace"))
        try:
            with (gzip.open(p, "rb") if name.endswith(".gz") else open(p, "rb")) as f:
                return looks_like_hlo_text(f.read(4096).decode("utf-8", "replace"))
        except (OSError, EOFError):
            return False
    return False


def _gunzip(data: bytes, what: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            out = g.read(MAX_BYTES + 1)
    except (OSError, EOFError) as e:
        raise InputError(f"{what}: not a readable gzip file ({e})") from None
    if len(out) > MAX_BYTES:
        raise InputError(f"{what}: more than {MAX_BYTES >> 20} MiB decompressed")
    return out


def _module_from_bytes(data: bytes, what: str, stage: str = "") -> Module:
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, what)
    head = data[:4096].decode("utf-8", "replace")
    if looks_like_hlo_text(head):
        try:
            return parse_text(data.decode("utf-8", "replace"), what, stage or _stage_of(what))
        except ValueError as e:
            raise InputError(f"{what}: {e}") from None
    try:
        return parse_hlo_proto_bytes(data, what)
    except ValueError as e:
        from profanalyzer.read.xspace.wire import plain_decode_error

        raise InputError(f"{what}: neither HLO text nor an HloProto ({plain_decode_error(e)})") from None


def _stage_of(name: str) -> str:
    for s in STAGES + ("before_optimizations",):
        if f".{s}." in name or name.endswith(f".{s}"):
            return s
    return ""


def _dump_members(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def _choose(names: list[str]) -> list[tuple[str, str]]:
    """(member name, stage) of each module's final stage among a dump's file names."""
    by_mod: dict[str, dict[str, str]] = {}
    for n in names:
        base = n.rsplit("/", 1)[-1]
        m = _MODULE_FILE.match(base)
        if m:
            kind = "text" if m.group(3) == ".txt" else "proto"
            by_mod.setdefault(m.group(1), {})[f"{m.group(2)}:{kind}"] = n
    out = []
    for mod in sorted(by_mod):
        got = by_mod[mod]
        # the final stage first (it carries the compiler's estimated_cycles), text before proto within a stage
        for key in ("after_codegen:text", "after_codegen:proto", "after_optimizations:text",
                    "after_optimizations:proto"):
            if key in got:
                out.append((got[key], key.split(":")[0]))
                break
    if not out:  # no dump naming: every HLO proto file (an XProf run folder)
        out = [(n, "proto") for n in sorted(names) if n.lower().endswith(PROTO_SUFFIXES)]
    return out


def _aux(names: list[str], read, chosen: list[tuple[str, str]]) -> DumpFiles:
    def first(pred) -> str:
        for n in sorted(names):
            if pred(n.rsplit("/", 1)[-1]):
                data = read(n)
                return data.decode("utf-8", "replace") if data is not None else ""
        return ""

    # a module read at its after_codegen stage has no buffer assignment: its after_optimizations proto has
    protos = []
    picked = {n for n, _ in chosen}
    for n in sorted(names):
        if n not in picked and n.endswith(".after_optimizations.hlo.pb"):
            data = read(n)
            if data is not None:
                protos.append(data)
    return DumpFiles(
        compile_log=first(lambda b: b == "compile.log"),
        buffer_assignment=first(lambda b: b.endswith("after_optimizations-buffer-assignment.txt")),
        memory_report=first(lambda b: b.endswith("memory-usage-report.txt")),
        flagfile=first(lambda b: b.endswith(".flagfile")),
        target_arguments=first(lambda b: b.endswith("target_arguments.txt")),
        live_range=first(lambda b: b.endswith("after_optimizations-live-range.txt")),
        assignment_protos=tuple(protos),
    )


def _program(modules: list[Module], source: str, notes: list[str], files: DumpFiles | None = None) -> Program:
    if not modules:
        raise InputError(f"{source}: no HLO module found (expected HLO text, an HloProto, an XLA dump folder "
                         "or a capture with /host:metadata)")
    mods = tuple(modules)
    k, why = pick_main(mods)
    return Program(mods, k, source, f"{mods[k].name}: {why}", tuple(notes), files or DumpFiles())


def _read_folder(folder: Path) -> Program:
    members = _dump_members(folder)
    names = list(members)

    def read(n: str) -> bytes | None:
        p = members[n]
        if p.stat().st_size > MAX_BYTES:
            return None
        return p.read_bytes()

    chosen = _choose(names)
    mods = []
    for n, stage in chosen:
        data = read(n)
        if data is not None:
            mods.append(_module_from_bytes(data, str(members[n]), stage))
    return _program(mods, str(folder), [f"{folder.name}: stage {s} of {n}" for n, s in chosen], _aux(names, read, chosen))


def _read_tar(path: Path, data: bytes | None = None) -> Program:
    """The modules of a dump archived as a tar, streamed from `path` (one open), or read from `data` (its
    bytes, when the caller read them to tell a gzipped tar from a gzipped program)."""
    try:
        tf = tarfile.open(path, "r:*") if data is None else tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InputError(f"{path}: not a readable tar archive ({e})") from None
    with tf:
        infos = {m.name: m for m in tf.getmembers() if m.isfile() and m.size <= MAX_BYTES}

        def read(n: str) -> bytes | None:
            f = tf.extractfile(infos[n])
            return f.read() if f is not None else None

        names = list(infos)
        chosen = _choose(names)
        mods = []
        for n, stage in chosen:
            data = read(n)
            if data is not None:
                mods.append(_module_from_bytes(data, f"{path.name}:{n}", stage))
        return _program(mods, str(path), [f"stage {s} of {n}" for n, s in chosen], _aux(names, read, chosen))


def _read_capture(file: Any, programs: Collection[str] | None = None) -> Program:
    """The HloProtos of a capture's `/host:metadata` planes: all of them, or
    only those of `programs` (the others' bytes are dropped unparsed:
    xspace.metadata). `file`: a path, or a Source's CaptureFile (its bytes as read)."""
    from profanalyzer.read.xspace import capturefile, reader, xplane_pb2
    from profanalyzer.read.xspace.metadata import program_plane, program_trim

    def trim(r: reader.PlaneRef) -> reader.FieldTrim | None:
        return program_trim(programs) if programs is not None and r.kind == "metadata" else None

    path = file.path if isinstance(file, capturefile.CaptureFile) else Path(file)
    buf, index = reader.open_space(file, want=lambda r: r.kind == "metadata", trim=trim)
    metas = [p for p in index.planes if p.kind == "metadata" and p.held]
    mods: list[Module] = []
    notes: list[str] = []
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    for ref in metas:
        try:
            if programs is not None:
                plane = program_plane(buf, ref.offset, ref.offset + ref.length, programs)
            else:
                plane = xplane_pb2.XPlane.FromString(  # type: ignore[attr-defined]
                    bytes(buf[ref.offset:ref.offset + ref.length]))
        except DecodeError as e:
            notes.append(f"/host:metadata plane not readable ({e})")
            continue
        sid = {k for k, v in plane.stat_metadata.items() if v.name == HLO_PROTO_STAT}
        for key in sorted(plane.event_metadata):
            em = plane.event_metadata[key]
            for s in em.stats:
                if s.metadata_id in sid and s.WhichOneof("value") == "bytes_value" and s.bytes_value:
                    try:
                        m = parse_hlo_proto_bytes(s.bytes_value, f"{path.name}:/host:metadata:{em.name}")
                    except ValueError as e:
                        notes.append(f"HLO proto of {em.name} not readable ({e})")
                        continue
                    mods.append(replace(m, stage="capture"))
    if not metas:
        notes.append("no /host:metadata plane")
    return _program(mods, str(path), notes)


def read_program(path: str | os.PathLike, programs: Collection[str] | None = None, data: bytes | None = None) -> Program:
    """Every module `path` holds, and which is the main one; of a capture,
    only the programs named in `programs` when given (those that ran).
    `data`: the file's bytes when the caller read them (a Source: no open here)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or folder")
    name = p.name.lower()
    try:
        if p.is_dir():
            return _read_folder(p)
        if name.endswith(".xplane.pb") or name.endswith(".xplane.pb.gz"):
            return _read_capture(p, programs)
        if name.endswith(TAR_SUFFIXES):
            return _read_tar(p)
        if p.stat().st_size > MAX_BYTES:
            raise InputError(f"{p}: larger than {MAX_BYTES >> 20} MiB")
        if data is None:
            data = p.read_bytes()  # the one read of the file: a gzip is inflated, a tar opened, from these bytes
    except OSError as e:
        raise InputError(f"{p}: cannot read: {e.strerror or e}") from None
    plain = _gunzip(data, str(p)) if data[:2] == b"\x1f\x8b" else data
    if _is_tar(plain):  # a gzipped tar not named as one
        return _read_tar(p, data)
    return _program([_module_from_bytes(plain, str(p))], str(p), [],
                    DumpFiles(compiler_json=_compiler_json(p), assignment_protos=_assignment_siblings(p)))


#: File endings of one program's files (tools/compile_corpus.py), longest first.
_PROGRAM_ENDINGS = (".after_codegen.hlo.pb.gz", ".after_codegen.hlo.pb", ".hlo_proto.pb.gz", ".hlo_proto.pb",
                    ".hlo.pb.gz", ".hlo.pb", ".hlo.txt.gz", ".hlo.txt", ".txt.gz", ".txt")


def _beside(p: Path, end: str, other: str, limit: int) -> bytes | None:
    """The bytes of the file beside `p` named with `other` in place of its
    ending `end` (None when `p` does not end so, or that file is absent, unreadable
    or over `limit` bytes)."""
    if not p.name.endswith(end):
        return None
    side = p.with_name(p.name[: -len(end)] + other)
    try:
        if side.is_file() and side.stat().st_size <= limit:
            return side.read_bytes()
    except OSError:
        pass
    return None


def _compiler_json(p: Path) -> str:
    """The `NAME.compiler.json` beside a program file `NAME.<ending>` (the
    compiler's own memory and cost analysis), or ""."""
    end = next((e for e in _PROGRAM_ENDINGS if p.name.endswith(e)), None)
    data = _beside(p, end, ".compiler.json", (1 << 20) - 1) if end else None
    return data.decode("utf-8", "replace") if data is not None else ""


#: A final-stage program file -> the file beside it whose HloProto carries the buffer assignment.
_ASSIGNMENT_SIBLINGS = ((".after_codegen.hlo.pb.gz", ".hlo.pb.gz"), (".after_codegen.hlo.pb", ".hlo.pb"),
                        (".after_codegen.hlo.pb", ".after_optimizations.hlo.pb"))


def _assignment_siblings(p: Path) -> tuple[bytes, ...]:
    """The after-optimizations HloProto beside an after_codegen one (the
    corpus' `NAME.hlo.pb.gz`, a dump's `*.after_optimizations.hlo.pb`): the
    final stage carries no buffer assignment."""
    out = []
    for end, other in _ASSIGNMENT_SIBLINGS:
        data = _beside(p, end, other, MAX_BYTES)
        if data is None:
            continue
        try:
            out.append(_gunzip(data, p.name) if data[:2] == b"\x1f\x8b" else data)
        except InputError:
            continue
    return tuple(out)


def _is_tar(data: bytes) -> bool:
    """A (decompressed) tar archive: the POSIX/GNU magic of its first header (offset 257)."""
    return data[257:262] == b"ustar"


def read_trace_program(file: Any, programs: Collection[str] | None = None) -> tuple[Program | None, str]:
    """The programs a trace's host file carries (its `/host:metadata` HloProtos,
    or the compiled program it was replayed from) and, when there are none or
    they cannot be read, why ("no HLO: ..."): a capture the analysis read stays
    analysable without them."""
    from profanalyzer.read.xspace.capturefile import CaptureFile

    if not file:
        return None, "no host files"
    try:
        if isinstance(file, CaptureFile):  # a Source's host file: its bytes as read
            return with_dump_literals(_read_capture(file, programs), file.path), ""
        return with_dump_literals(read_program(file, programs), Path(file)), ""
    except InputError as e:
        return None, f"no HLO: {e}"
    except Exception as e:  # noqa: BLE001 - a corrupt HLO proto: no source lines, no anti-patterns, no expectations
        return None, f"no HLO: the program could not be decoded ({type(e).__name__})"


#: How many folders up from a capture's host file a dump of the same program is looked for
#: (`RUN/logdir/plugins/profile/<run>/<host>.xplane.pb` beside `RUN/dump/`).
DUMP_SEARCH_LEVELS = 5


def _stripped_constants(m: Module) -> bool:
    """The module has 8-bit integer constants whose values it does not carry (a capture's HloProto)."""
    return any(i.opcode == "constant" and i.shape.dtype in ("s8", "u8") and not i.literal_stats and len(i.shape.dims) >= 2
               for c in m.computations for i in c.instructions)


def _dump_twin(main: Module, host_file: Path) -> tuple[Module, Path] | None:
    """The same compiled program in an XLA dump near the capture: a `module_*.<name>.*` proto of the main
    module's name in a folder at most DUMP_SEARCH_LEVELS up, whose instructions are the capture's, name
    for name (the same compile, not another program of that name)."""
    want = {i.name for c in main.computations for i in c.instructions}
    for up in list(host_file.parents)[:DUMP_SEARCH_LEVELS]:
        try:
            folders = sorted(d for d in up.iterdir() if d.is_dir())
        except OSError:
            continue
        for d in folders:
            for f in sorted(d.glob(f"module_*.{main.name}.*after_optimizations.hlo.pb")):
                try:
                    twin = parse_hlo_proto_bytes(f.read_bytes(), str(f))
                except (OSError, ValueError):
                    continue
                if {i.name for c in twin.computations for i in c.instructions} == want:
                    return twin, f
    return None


def with_dump_literals(program: Program, host_file: Path) -> Program:
    """A capture's program with the constant values its HloProto leaves out (kernels' block masks), taken
    from an XLA dump of the same compile beside the capture when there is one (a note says which)."""
    if not program.modules or not host_file.is_file() or not _stripped_constants(program.main):
        return program
    found = _dump_twin(program.main, host_file)
    if found is None:
        return program
    twin, path = found
    stats = {i.name: i.literal_stats for c in twin.computations for i in c.instructions if i.literal_stats}
    main = program.main
    comps = tuple(replace(c, instructions=tuple(
        replace(i, literal_stats=stats[i.name]) if i.opcode == "constant" and i.name in stats else i
        for i in c.instructions)) for c in main.computations)
    modules = tuple(replace(m, computations=comps) if k == program.main_index else m
                    for k, m in enumerate(program.modules))
    return replace(program, modules=modules, literal_source=path.name)
