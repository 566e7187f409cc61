"""The notebook API: `profanalyzer.load(source)` -> the analysis of a run,
with its findings, as DataFrames and as an HTML card.

    import profanalyzer
    a = profanalyzer.load("gs://bucket/logs/")   # path, URL, bytes, run folder, log dir or saved JSON
    a                                             # the summary card (Jupyter)
    frames = a.frames()                           # steps, buckets, ops, windows, findings
    a.findings.recommendations[0]                 # a card too

The cards are renderers (report/registry.py: NOTEBOOK_RENDERERS,
FINDING_RENDERERS); `import profanalyzer` under IPython registers them with its
HTML display for every Analysis and Finding (`profanalyzer.api.cards.show_cards`).

`load` returns a `LoadedAnalysis`: an `Analysis` (every field, every method)
that also holds its `Findings`; its `to_dict()` is the `analyze --json`
document. Sits at the top, beside the CLI: it runs the whole pipeline.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from profanalyzer.api.cards import Shown, show_cards
from profanalyzer.core.errors import InputError
from profanalyzer.core.vocab import BUCKETS
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.documents import read_document, result_document
from profanalyzer.model.findings import Findings
from profanalyzer.model.frames import analysis_frames
from profanalyzer.model.records import Record
from profanalyzer.pipeline.run import Run, RunOptions, run
from profanalyzer.read.sources import is_url, local_copy

__all__ = ["CoreStep", "LoadedAnalysis", "load", "document"]


@dataclass(frozen=True)
class CoreStep(Record):
    """One TensorCore's time in one step (integer ps, its buckets sum to it)."""

    core: str  # host:plane, as per_core names it
    step: int
    step_ps: int
    buckets: Mapping[str, int]


@dataclass(frozen=True)
class LoadedAnalysis(Analysis):
    """An Analysis with the findings of its rules (what `load` returns), and,
    when it was analysed from a trace, each TensorCore's time per step
    (`core_steps`: a saved document does not hold them)."""

    findings: Findings | None = None
    core_steps: tuple[CoreStep, ...] = ()

    def frames(self, findings: Findings | None = None) -> dict:
        """pandas DataFrames: steps, buckets, ops, windows, findings (see
        profanalyzer.model.frames for the columns)."""
        return analysis_frames(self, findings if findings is not None else self.findings, self.core_steps or None)

    def render(self, format: str = "markdown", **options) -> str:
        """The analysis in one output format of the renderer registry
        (profanalyzer.report.registry: json, markdown, html, terminal);
        `options` are RenderOptions fields (e.g. top=5)."""
        from profanalyzer.report.registry import RenderOptions, renderer

        return renderer(format).render(Shown(analysis_of(self), self.findings), RenderOptions(**options))

    def to_dict(self) -> dict:
        """The `profanalyze analyze --json` document."""
        a = analysis_of(self)
        return result_document(a, self.findings) if self.findings is not None else a.to_dict()

    def _repr_html_(self) -> str:
        from profanalyzer.report.registry import NOTEBOOK_RENDERERS

        return NOTEBOOK_RENDERERS["card"].render(Shown(analysis_of(self), self.findings))


def analysis_of(x: Analysis) -> Analysis:
    """The plain Analysis of a LoadedAnalysis (the record, without findings)."""
    return Analysis(**{f.name: getattr(x, f.name) for f in dataclasses.fields(Analysis)})


def _loaded(a: Analysis, f: Findings | None, source: str | None = None, core_steps: tuple[CoreStep, ...] = ()) -> LoadedAnalysis:
    kw = {fl.name: getattr(a, fl.name) for fl in dataclasses.fields(Analysis)}
    if source is not None:
        kw["source"] = source
    return LoadedAnalysis(**kw, findings=f, core_steps=core_steps)


def _analyze_path(path: Path, options: RunOptions) -> tuple[Analysis, Findings, tuple[CoreStep, ...]]:
    """run(path), plus each TensorCore's time per step when `path` is a
    trace (read from the run's attributed trace)."""
    r = run(path, options)
    return r.analysis, r.findings, core_steps(r)


def core_steps(r: Run) -> tuple[CoreStep, ...]:
    """Each TensorCore's time per step (none for a saved document)."""
    steps: list[CoreStep] = []
    for w in r.attributed.work if r.attributed is not None else ():
        att = w.attribution
        for i, n in enumerate(att.step_numbers.tolist()):
            steps.append(CoreStep(w.plane.label, int(n), int(att.step_ps[i]),
                                  {b: int(v) for b, v in zip(BUCKETS, att.buckets[i].tolist(), strict=True)}))
    return tuple(steps)


def load(source: str | os.PathLike | bytes | bytearray | memoryview, *, chip: str | None = None,
         select: Iterable[str] = (), ignore: Iterable[str] = ()) -> LoadedAnalysis:
    """The analysis of `source` and the findings of its rules.

    `source`: a `.xplane.pb[.gz]` file, a run folder, a log dir (its newest
    run), a saved `analyze --json` document (gzipped or not), any of these as
    an fsspec URL (`gs://`, `s3://`, `file://`...), or the bytes of a host
    file or of a saved document. `chip`, `select`, `ignore` as on the
    command line. Raises a ProfanalyzerError (InputError for bad input)."""
    show_cards()  # IPython started after `import profanalyzer`: its display shows the cards from now on
    options = RunOptions(chip=chip, select=tuple(select), ignore=tuple(ignore))
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _load_bytes(bytes(source), options)
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"profanalyzer.load: a path, URL or bytes, not {type(source).__name__}")
    text = os.fspath(source)
    if is_url(text):
        with local_copy(text) as local:
            a, f, cs = _analyze_path(Path(local), options)
        return _loaded(a, f, source=text if a.source.startswith(local) else None, core_steps=cs)
    a, f, cs = _analyze_path(Path(text), options)
    return _loaded(a, f, core_steps=cs)


def _load_bytes(data: bytes, options: RunOptions) -> LoadedAnalysis:
    head = data[:4096]
    gz = head[:2] == b"\x1f\x8b"
    if gz:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
                head = g.read(4096)
        except (OSError, EOFError):
            raise InputError("profanalyzer.load: the bytes are a broken gzip stream") from None
    saved = head.lstrip()[:1] == b"{"
    if saved:  # a saved document: checked here, so that errors name the bytes, then run() reads it back
        import json

        try:
            doc = json.loads(gzip.decompress(data) if gz else data)
        except (ValueError, OSError, EOFError) as e:
            raise InputError(f"profanalyzer.load: the bytes are not valid JSON ({e})") from None
        read_document(doc, "<bytes>")
    name = ("analysis.json" if saved else "host.xplane.pb") + (".gz" if gz else "")
    with tempfile.TemporaryDirectory(prefix="profanalyzer-bytes-") as d:
        p = Path(d) / name
        p.write_bytes(data)
        a, f, cs = _analyze_path(p, options)
    return _loaded(a, f) if saved else _loaded(a, f, source="<bytes>", core_steps=cs)


def document(path: str, chip: str | None = None, memory: bool = False) -> dict:
    """The analysis document of a path or URL, as `compare` and `check` read
    it (compare.load_document: a saved `--json` file, or a trace analysed now
    with the default rules); a URL is read through a temporary local copy."""
    from profanalyzer.compare.comparison import load_document

    if not is_url(path):
        return load_document(path, chip=chip, memory=memory)
    with local_copy(path) as local:
        doc = load_document(local, chip=chip, memory=memory)
    if isinstance(doc.get("source"), str) and doc["source"].startswith(local):  # analysed now: name the URL
        doc["source"] = path
    return doc
