"""The self-contained HTML report.

    render_html(analysis, findings, command_line=..., input_sha256=...) -> str

One file, no external requests: CSS, SVG charts and a few lines of vanilla JS
are inline; no fonts, images or CDNs. jinja2 autoescape is on for every
template and the template only formats a typed `ReportContext`
(`profanalyzer.report.context`). Output is deterministic: the same inputs give
the same bytes (no timestamp unless one is passed).
"""

from __future__ import annotations

from dataclasses import replace

import contextlib
import hashlib
import importlib.util
import marshal
import os
import tempfile
import types
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import jinja2
import jinja2.bccache

from profanalyzer.analysis import Analysis
from profanalyzer.findings import Findings, RuleDoc, rule_docs
from profanalyzer.report.context import ReportContext, build_context
from profanalyzer.userdirs import cache_dir

TEMPLATE = "report.html.j2"
TEMPLATE_DIR = Path(__file__).with_name("templates")

_OPTIONS = dict(
    # Autoescape every template, whatever its extension (.html.j2 is not
    # recognised by select_autoescape's defaults).
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=False,
    lstrip_blocks=False,
    keep_trailing_newline=True,
)


class TemplateCache(jinja2.BytecodeCache):
    """Compiled report templates kept in the user cache dir, so that a run
    loads the template's code (about 1 ms) instead of compiling its source
    (about 45 ms for the report), as Python keeps .pyc files.

    An entry is used only when its header matches: this format, the Python
    bytecode magic, the jinja2 version and jinja2's checksum of the template
    source; anything else (an edited template, another Python, a damaged or
    foreign file) is compiled again. Entries are written to a temporary file
    and renamed (concurrent runs never read half a file); a cache dir that
    cannot be written only costs the compile. Nothing here changes output."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _file(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.directory / f"{bucket.key}.code"

    @staticmethod
    def _header(bucket: jinja2.bccache.Bucket) -> bytes:
        return b"profanalyzer-template-v1\0" + importlib.util.MAGIC_NUMBER + f"\0{jinja2.__version__}\0{bucket.checksum}\0".encode()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._file(bucket).read_bytes()
        except OSError:
            return
        head = self._header(bucket)
        if not data.startswith(head):
            return
        try:
            code = marshal.loads(data[len(head):])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(code, types.CodeType):
            bucket.code = code

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.code is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(self._header(bucket) + marshal.dumps(bucket.code))
                os.replace(tmp, self._file(bucket))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            pass


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The environment of every report template (HTML report, diff, fleet).
    Each template is compiled from its source on first use (~45 ms), or
    loaded compiled from the user cache dir (`TemplateCache`);
    ``PROFANALYZER_TEMPLATE_CACHE=0`` turns that cache off."""
    cache = None if os.environ.get("PROFANALYZER_TEMPLATE_CACHE", "1") == "0" else TemplateCache(cache_dir() / "templates")
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), bytecode_cache=cache, **_OPTIONS)


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
    `docs`: rule docs by code (default: the registered rules' docs of the
    recommendations shown). `trace_markers`: per rule code, where the trace
    export (`--trace-out`) put its marker (shown on its card).
    """
    if docs is None and findings is not None and findings.recommendations:
        docs = rule_docs(f.code for f in findings.recommendations)
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
    # Large chunks into one reused buffer: hashlib releases the GIL while it
    # hashes each chunk, so hashing on a thread barely slows the analysis, and
    # memory stays at one chunk (a memory map would count the whole file in RSS).
    buf = bytearray(8 << 20)
    view = memoryview(buf)

    def add(f: Path) -> None:
        with open(f, "rb") as fh:
            while n := fh.readinto(buf):
                h.update(view[:n])

    if p.is_dir():
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(str(f.relative_to(p).as_posix()).encode() + b"\0")
            add(f)
    else:
        add(p)
    return h.hexdigest()


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
