"""`profanalyze analyze` (the default command: `profanalyze TRACE`) and
`profanalyze info`.

The analysis, the rules and the renderers are imported when a command runs:
importing the CLI costs click and nothing heavy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from profanalyzer.cli._common import (
    OUTPUT_FILE,
    check_outputs,
    chip_option,
    command_line,
    echo,
    jobs_option,
    neutralise,
    trace_argument,
    utc_timestamp,
    write_text,
)
from profanalyzer.core.errors import InputError
from profanalyzer.read.sources import is_url

if TYPE_CHECKING:
    from profanalyzer.pipeline.run import RunOptions

_CHIP_HELP = "Chip generation; overrides the trace's device_type_string."


def _progress(quiet: bool, trace: str | None = None):
    """A progress bar on stderr while the host files are read: files done of
    the total, bytes (of `trace`'s host files, when they can be listed),
    elapsed seconds, the file just read. Redrawn in place after each host
    file, ended by a newline after the last; off when quiet or when stderr is
    not a TTY."""
    if quiet or not sys.stderr.isatty():
        return None
    import os
    import time

    start = time.monotonic()
    state: dict = {"sizes": None, "bytes": 0}

    def sizes() -> dict[str, int]:
        if state["sizes"] is None:
            state["sizes"] = {}
            if trace is not None:
                from profanalyzer.core.errors import ProfanalyzerError
                from profanalyzer.read.xspace.inputs import resolve_input

                try:
                    state["sizes"] = {f.name: f.stat().st_size for f in resolve_input(trace).files}
                except (ProfanalyzerError, OSError):
                    pass
        return state["sizes"]

    def mb(n: int) -> str:
        return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"

    def report(done: int, total: int, label: str) -> None:
        known = sizes()
        state["bytes"] += known.get(label, 0)
        total_bytes = sum(known.values())
        frac = state["bytes"] / total_bytes if total_bytes else done / max(total, 1)
        width = 24
        fill = min(width, int(width * frac))
        text = f"reading host files [{'#' * fill}{'.' * (width - fill)}] {done}/{total} files"
        if total_bytes:
            text += f", {mb(state['bytes'])} of {mb(total_bytes)}"
        text += f", {time.monotonic() - start:.1f} s: "
        try:
            cols = os.get_terminal_size(sys.stderr.fileno()).columns
        except (OSError, ValueError, AttributeError):
            cols = 120
        name, room = neutralise(label, "?"), max(cols - 1 - len(text), 12)
        text += name if len(name) <= room else name[: room - 3] + "..."
        sys.stderr.write("\r\x1b[K" + text[: max(cols - 1, 20)] + ("\n" if done >= total else ""))
        sys.stderr.flush()

    return report


def _stage(bar, text: str) -> None:
    """With the progress bar on: a one-line status on stderr for the stage
    after the read (redrawn in place; "" clears it before any output)."""
    if bar is None:
        return
    sys.stderr.write("\r\x1b[K" + text)
    sys.stderr.flush()


@click.command()
@trace_argument
@chip_option(_CHIP_HELP)
@jobs_option
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the summary as JSON (- for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress indicator.")
def info(trace: str, chip: str | None, jobs: int | None, json_out: str | None, quiet: bool) -> None:
    """Hosts, planes, chip, lines and event counts, steps, programs, time span."""
    from profanalyzer.api.info import trace_info
    from profanalyzer.read.xspace.build import load_trace
    from profanalyzer.report.registry import INFO_RENDERERS, PROGRAM_INFO_RENDERERS

    check_outputs([trace], [("--json", json_out)])
    from profanalyzer.read.hlo.load import is_program_path

    if not is_url(trace) and is_program_path(trace):  # a compiled program: its modules and chip, and what to run
        from profanalyzer.api.info import program_info

        pi = program_info(trace, chip)
        if json_out:
            write_text(PROGRAM_INFO_RENDERERS["json"].render(pi), json_out)
            if json_out == "-":
                return
        echo(PROGRAM_INFO_RENDERERS["terminal"].render(pi).removesuffix("\n"))
        return
    with _local(trace, selective=False) as local:
        ti = trace_info(load_trace(local, chip=chip, jobs=jobs, progress=_progress(quiet, local)))
    if local != trace:  # a URL: name it, not the temporary copy
        ti = dataclasses.replace(ti, source=trace)
    if json_out:
        write_text(INFO_RENDERERS["json"].render(ti), json_out)
        if json_out == "-":
            return
    echo(INFO_RENDERERS["terminal"].render(ti).removesuffix("\n"))


@contextlib.contextmanager
def _no_cyclic_gc():
    """One analysis per command, its data in numpy arrays and frozen records:
    cyclic garbage-collection passes find nothing to free and cost ~5% of the
    time. Reference counting still frees everything."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@click.command()
@trace_argument
@chip_option(_CHIP_HELP)
@jobs_option
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the analysis + recommendations JSON (- for stdout).")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0, 1000), help="Top ops shown in the terminal summary.")
@click.option("--select", default="", callback=lambda _c, p, v: _known_prefixes(p, v),
              help="Only rules whose code starts with one of these comma-separated prefixes (e.g. SC,RM001).")
@click.option("--ignore", default="", callback=lambda _c, p, v: _known_prefixes(p, v),
              help="Skip rules whose code starts with one of these comma-separated prefixes.")
@click.option("-o", "--output", type=OUTPUT_FILE, metavar="FILE", default=None, help="HTML report path (default ./<trace-stem>.report.html).")
@click.option("--no-html", is_flag=True, help="Do not write the HTML report.")
@click.option("--markdown", "md_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write a Markdown summary for tickets (- for stdout).")
@click.option("--timestamp", is_flag=True, help="Stamp the HTML report with the current UTC time (off: reports are byte-identical).")
@click.option("--by-scope", "by_scope", type=click.IntRange(1, 8), default=None, metavar="DEPTH",
              help="Add the time by JAX name scope (tf_op), collapsed to DEPTH components, to the terminal summary.")
@click.option("--memory", is_flag=True, help="Read HBM use: the dominant program's buffer assignment (HLO proto) and the allocator activity (read anyway when HO001, RM001 or SH003 fires).")
@click.option("--host-activity", "host_act", is_flag=True, help="Read the host planes' dispatch and input-pipeline lines and name the host activity during host-caused idle.")
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@click.option("--what-if", "what_if_levers", metavar="LEVERS", default=None,
              help="Re-time the step with these levers applied together (comma-separated: fp8,sc_offload,remat); JSON key what_if.")
@click.option("--history", "history", type=click.Path(file_okay=False), default=None,
              help="Folder of earlier `analyze --json` files (name order = time order): per rule, predicted vs observed over the changes; JSON key calibration.")
@click.option("--trace-out", type=OUTPUT_FILE, metavar="FILE", default=None,
              help="Write the analysed window as an annotated Chrome/Perfetto trace (FILE.json.gz or FILE.json).")
@click.option("--steps", "trace_steps", default=None, metavar="STEPS",
              help="Steps --trace-out exports, e.g. 3 or 3,5-7 (default: the representative step).")
@click.option("--write", "writes", multiple=True, metavar="FORMAT=FILE", callback=lambda c, p, v: _writes(v),
              help="Write the output of a renderer (json, markdown, html, terminal) to FILE (- for stdout); repeatable.")
@click.option("--timings", is_flag=True,
              help="Print the wall-clock seconds of each phase of the run (open, read, attribute, analyze, rules, ..., render) to stderr.")
@_no_cyclic_gc()
def analyze(trace: str, chip: str | None, jobs: int | None, json_out: str | None, top: int, select: str, ignore: str,
            output: str | None, no_html: bool, md_out: str | None, timestamp: bool, by_scope: int | None, memory: bool,
            host_act: bool, quiet: bool, what_if_levers: str | None = None, history: str | None = None,
            trace_out: str | None = None, trace_steps: str | None = None,
            writes: tuple[tuple[str, str], ...] = (), timings: bool = False) -> None:
    """Attribute step time, analyse overlap, rank recommendations, write the HTML report."""
    if trace_steps is not None and not trace_out:
        raise click.UsageError("--steps selects what --trace-out exports: pass --trace-out FILE.json.gz too")
    if not no_html and output is None:
        from profanalyzer.core.outputs import default_output_path

        output = str(default_output_path(trace))
    check_outputs([trace, history], [("--json", json_out), ("--markdown", md_out),
                                     ("-o", None if no_html else output), ("--trace-out", trace_out),
                                     *(("--write", d) for _, d in writes)])
    from profanalyzer.pipeline.run import RunOptions

    with _local(trace) as local:
        _analyze(AnalyzeRequest(local, trace, RunOptions(chip=chip, jobs=jobs, memory=memory, host_activity=host_act,
                                                         select=_codes(select), ignore=_codes(ignore), label=trace,
                                                         what_if=what_if_levers, history=history),
                                json_out, md_out, None if no_html else output, writes, trace_out, trace_steps,
                                top, by_scope, timestamp, quiet, timings))


@dataclass(frozen=True)
class AnalyzeRequest:
    """What `analyze` was asked for, checked: the input, how to run it, and where each output goes."""

    trace: str  # the local path read (a URL's temporary copy)
    label: str  # the input as the user named it
    run: RunOptions  # chip, jobs, memory, host activity, rule selection, label, --what-if, --history
    # (progress and on_read set later)
    json_out: str | None = None
    md_out: str | None = None
    html_out: str | None = None  # None: no HTML report (--no-html)
    writes: tuple[tuple[str, str], ...] = ()  # --write (renderer, path)
    trace_out: str | None = None
    trace_steps: str | None = None
    top: int = 10
    by_scope: int | None = None
    timestamp: bool = False
    quiet: bool = False
    timings: bool = False  # --timings: each phase's seconds to stderr


def _writes(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--write FORMAT=FILE values as (renderer name, path); a usage error
    names the renderers when FORMAT is not one (report.registry.RENDERERS)."""
    from profanalyzer.report.registry import RENDERERS

    out = []
    for v in values:
        name, sep, dest = v.partition("=")
        if not sep or not dest or name not in RENDERERS:
            raise click.BadParameter(f"{v!r}: expected FORMAT=FILE, FORMAT one of {', '.join(RENDERERS)}", param_hint="--write")
        out.append((name, dest))
    return tuple(out)


def _local(trace: str, selective: bool = True):
    """The trace itself, or a temporary local copy of a URL (profanalyzer.read.sources)."""
    if not is_url(trace):
        return contextlib.nullcontext(trace)
    from profanalyzer.read.sources import local_copy

    return local_copy(trace, selective=selective)


def parse_steps(text: str) -> tuple[int, ...]:
    """`--steps` text: step numbers and ranges, e.g. `3` or `3,5-7`."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise InputError(f"--steps: {part!r} is not a step number or a range like 3-5") from None
        if b < a or b - a > 10000:
            raise InputError(f"--steps: {part!r} is not a range of at most 10000 steps")
        out.extend(range(a, b + 1))
    return tuple(out)


def _analyze(req: AnalyzeRequest) -> None:
    from profanalyzer.pipeline.run import Run, run
    from profanalyzer.report.registry import RENDERERS, RenderOptions

    trace, label, quiet, trace_out = req.trace, req.label, req.quiet, req.trace_out
    no_html, json_out, md_out, writes = req.html_out is None, req.json_out, req.md_out, req.writes
    markers: dict[str, str] | None = None
    wanted = parse_steps(req.trace_steps or "") if trace_out else None
    progress = _progress(quiet, trace)
    hashed: dict = {}

    def on_read(model) -> None:
        _stage(progress, f"analysing {len(model.tensorcores)} TensorCores, "
                         f"{sum(p.n_events for p in model.planes):,} events ...")
        # The input's hash (report footer) runs on a second core during the
        # single-threaded analysis; during the read both cores decode.
        if not no_html:
            hashed["get"] = (_hash_in_background(model.reads) if label == trace and model.reads is not None
                             else (lambda: "not computed (a URL input, read through a partial copy)"))

    phases: list[tuple[str, float]] = []
    rendering: float | None = None
    try:
        r = run(trace, dataclasses.replace(req.run, progress=progress, on_read=on_read, trace_steps=wanted,
                                           on_phase=(lambda name, s: phases.append((name, s))) if req.timings else None))
        rendering = time.perf_counter()
        a, f = r.analysis, r.findings
        if r.attributed is None:  # a saved `--json` document: rendered again without the trace
            digest = None if no_html or r.source is None else _hash_in_background(r.source)
        else:
            _stage(progress, "")
            digest = hashed.get("get")
            if trace_out:  # Run.window: asked through RunOptions.trace_steps
                from profanalyzer.core.outputs import write_text_gz
                from profanalyzer.report.registry import (
                    WINDOW_RENDERERS,
                    window_markers,
                )

                write_text_gz(WINDOW_RENDERERS["perfetto"].render(r), trace_out)
                markers = window_markers(r, trace_out)
                click.echo(f"trace: {trace_out}", err=True)
        done = Run(a, f, what_if=r.what_if, calibration=r.calibration)
        del r  # the trace and its attribution are freed before the outputs render
        to_stdout = json_out == "-" or md_out == "-" or any(d == "-" for _, d in writes)
        opts = RenderOptions(top=req.top, by_scope=req.by_scope, trace_markers=markers)
        if json_out:
            write_text(RENDERERS["json"].render(done, opts), json_out, announce=json_out != "-")
        if md_out:
            write_text(RENDERERS["markdown"].render(done, opts), md_out)
        if digest is not None:
            from profanalyzer.core.outputs import default_output_path

            html_opts = dataclasses.replace(opts, command_line=command_line(), input_sha256=digest(),
                                            timestamp=utc_timestamp() if req.timestamp else None)
            dest = req.html_out or str(default_output_path(label))
            write_text(RENDERERS["html"].render(done, html_opts), dest, announce=False)
            click.echo(f"report: {dest}", err=to_stdout)
        for name, dest in writes:  # --write FORMAT=FILE: any renderer of the registry
            write_text(RENDERERS[name].render(done, dataclasses.replace(opts, command_line=command_line())), dest)
        if not quiet and not to_stdout:
            echo(RENDERERS["terminal"].render(done, opts).removesuffix("\n"))
    finally:  # printed when the run or an output fails too: the phases up to the failure
        if req.timings:
            if rendering is not None:
                phases.append(("render", time.perf_counter() - rendering))
            click.echo("timings: " + ", ".join(f"{name} {s:.3f} s" for name, s in phases)
                       + f"; total {sum(s for _, s in phases):.3f} s", err=True)


def _hash_in_background(source):
    """Hash the input (for the report footer; its Source: the bytes the run read) on a thread: hashlib
    releases the GIL on large buffers. Returns a getter."""
    import threading

    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["v"] = source.sha256()
        except OSError as e:  # the analysis reports unreadable input itself
            box["v"] = f"unavailable ({e.strerror or e})"

    t = threading.Thread(target=work, daemon=True)
    t.start()

    def get() -> str:
        t.join()
        return str(box.get("v", "unavailable"))

    return get


def _codes(text: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in text.split(",") if c.strip())


def _known_prefixes(param, value: str) -> str:
    """--select / --ignore as given, when each prefix names at least one rule: a typo in a CI gate must
    not pass green with no rule run (a usage error, exit 2)."""
    from profanalyzer.findings.explain import known_codes

    codes = known_codes()
    unknown = [p for p in _codes(value or "") if not any(c.startswith(p) for c in codes)]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)} names no rule; the rules are {', '.join(codes)}", param=param)
    return value


def result_dict(a, f) -> dict:
    """The JSON document (see profanalyzer.findings.engine.result_document)."""
    from profanalyzer.model.documents import result_document

    return result_document(a, f)
