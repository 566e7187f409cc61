"""The self-contained HTML report.

    render_html(analysis, findings, command_line=..., input_sha256=...) -> str

One file, no external requests: CSS, SVG charts and a few lines of vanilla JS
are inline; no fonts, images or CDNs. jinja2 autoescape is on for every
template and the template only formats a typed `ReportContext`
(`profanalyzer.report.context`). Output is deterministic: the same inputs give
the same bytes (no timestamp unless one is passed).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import jinja2

from profanalyzer.model import Analysis, Findings, RuleDoc
from profanalyzer.report import templating
from profanalyzer.report.context import build_context
from profanalyzer.report.views import ReportContext

TEMPLATE = "report.html.j2"
TEMPLATE_DIR = templating.TEMPLATE_DIR


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The environment of every report template (HTML report, diff, fleet),
    with their code compiled at install time (`templating`)."""
    return templating.environment()


def render_context(ctx: ReportContext) -> str:
    return environment().get_template(TEMPLATE).render(r=ctx)


def render_html(
    analysis: Analysis,
    findings: Findings | None,
    *,
    command_line: str,
    input_sha256: str,
    timestamp: str | None = None,
    docs: Mapping[str, RuleDoc] | None = None,
    trace_markers: Mapping[str, str] | None = None,
) -> str:
    """The report as one HTML document (str).

    `findings` None: the recommendations section says they were not computed.
    `docs`: rule docs by code, overriding the doc each finding carries
    (Finding.doc, set by its rule). `trace_markers`: per rule code, where the trace
    export (`--trace-out`) put its marker (shown on its card).
    """
    ctx = build_context(analysis, findings, command_line=command_line, input_sha256=input_sha256, timestamp=timestamp, docs=docs)
    if trace_markers:
        cards = tuple(replace(c, trace_marker=trace_markers.get(c.code, "")) for c in ctx.recs.cards)
        ctx = replace(ctx, recs=replace(ctx.recs, cards=cards))
    return render_context(ctx)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of an input file, or of a folder's files (sorted relative paths
    and contents) for a run folder / log dir."""
    p = Path(path)
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)

    def add(f: Path) -> None:
        with open(f, "rb") as fh:
            if not _add_mapped(h, fh):
                view = memoryview(buf)
                while n := fh.readinto(buf):
                    h.update(view[:n])

    if p.is_dir():
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(str(f.relative_to(p).as_posix()).encode() + b"\0")
            add(f)
    else:
        add(p)
    return h.hexdigest()


#: Bytes hashed at a time. hashlib releases the GIL while it hashes each
#: chunk, so hashing on a thread barely slows the analysis.
_CHUNK = 8 << 20


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
        for off in range(0, len(mm), _CHUNK):
            with memoryview(mm)[off:off + _CHUNK] as view:
                h.update(view)
            mm.madvise(mmap.MADV_DONTNEED, off, min(_CHUNK, len(mm) - off))
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
