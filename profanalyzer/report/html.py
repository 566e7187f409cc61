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
import json
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import jinja2

from profanalyzer.analysis import Analysis
from profanalyzer.findings import Findings, RuleDoc, rule_docs
from profanalyzer.report.context import ReportContext, build_context

TEMPLATE = "report.html.j2"
TEMPLATE_DIR = Path(__file__).with_name("templates")
#: The templates compiled to Python modules (`make templates`): loading them
#: skips jinja2's lexer, parser and code generator on every run (~70 ms).
#: Used only while its manifest matches the installed jinja2 and the template
#: sources byte for byte; otherwise the templates compile at run time.
COMPILED_DIR = Path(__file__).with_name("templates_compiled")
MANIFEST = "manifest.json"

_OPTIONS = dict(
    # Autoescape every template, whatever its extension (.html.j2 is not
    # recognised by select_autoescape's defaults).
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=False,
    lstrip_blocks=False,
    keep_trailing_newline=True,
)


def template_digests() -> dict[str, str]:
    """SHA-256 of every template source, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(TEMPLATE_DIR.iterdir()) if p.is_file()}


def _manifest() -> dict:
    return {"jinja2": jinja2.__version__, "options": sorted(f"{k}={v!r}" for k, v in _OPTIONS.items()), "templates": template_digests()}


def compiled_templates_current() -> bool:
    """True when COMPILED_DIR was compiled from these sources by this jinja2."""
    try:
        return json.loads((COMPILED_DIR / MANIFEST).read_text(encoding="utf-8")) == _manifest()
    except (OSError, ValueError):
        return False


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    if compiled_templates_current():
        return jinja2.Environment(loader=jinja2.ModuleLoader(str(COMPILED_DIR)), **_OPTIONS)
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), **_OPTIONS)


def compile_templates(target: Path) -> None:
    """Compile every template into `target` (modules + manifest); `make templates`."""
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("tmpl_*.py"):
        old.unlink()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), **_OPTIONS)
    env.compile_templates(str(target), zip=None, ignore_errors=False)
    (target / MANIFEST).write_text(json.dumps(_manifest(), indent=2, sort_keys=True) + "\n", encoding="utf-8")


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
) -> str:
    """The report as one HTML document (str).

    `findings` None: the recommendations section says they were not computed.
    `docs`: rule docs by code (default: the registered rules' docs of the
    recommendations shown).
    """
    if docs is None and findings is not None and findings.recommendations:
        docs = rule_docs(f.code for f in findings.recommendations)
    ctx = build_context(analysis, findings, command_line=command_line, input_sha256=input_sha256, timestamp=timestamp, docs=docs)
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
