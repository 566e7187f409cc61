"""`profanalyze analyze` (the default command: `profanalyze TRACE`) and
`profanalyze info`.

The analysis, the rules and the renderers are imported when a command runs:
importing the CLI costs click and nothing heavy.
"""

from __future__ import annotations

import contextlib
import sys

import click

from profanalyzer.cli._common import (
    chip_option,
    command_line,
    echo,
    jobs_option,
    neutralise,
    refuse_overwriting_input,
    trace_argument,
    utc_timestamp,
    write_json,
    write_text,
)

_CHIP_HELP = "Chip generation; overrides the trace's device_type_string."


def _progress(quiet: bool):
    """A one-line progress indicator on stderr; off when quiet or not a TTY."""
    if quiet or not sys.stderr.isatty():
        return None

    def report(done: int, total: int, label: str) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r\x1b[Kreading host files {done}/{total}: {neutralise(label, '?')[:60]}{end}")
        sys.stderr.flush()

    return report


@click.command()
@trace_argument
@chip_option(_CHIP_HELP)
@jobs_option
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write the summary as JSON (- for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress indicator.")
def info(trace: str, chip: str | None, jobs: int | None, json_out: str | None, quiet: bool) -> None:
    """Hosts, planes, chip, lines and event counts, steps, programs, time span."""
    from profanalyzer.info import format_info, trace_info
    from profanalyzer.trace import load_trace

    ti = trace_info(load_trace(trace, chip=chip, jobs=jobs, progress=_progress(quiet)))
    if json_out:
        write_json(ti.to_dict(), json_out)
        if json_out == "-":
            return
    echo(format_info(ti))


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
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write the analysis + recommendations JSON (- for stdout).")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0, 1000), help="Top ops shown in the terminal summary.")
@click.option("--select", default="", help="Only rules whose code starts with one of these comma-separated prefixes (e.g. SC,RM001).")
@click.option("--ignore", default="", help="Skip rules whose code starts with one of these comma-separated prefixes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="HTML report path (default ./<trace-stem>.report.html).")
@click.option("--no-html", is_flag=True, help="Do not write the HTML report.")
@click.option("--markdown", "md_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write a Markdown summary for tickets (- for stdout).")
@click.option("--timestamp", is_flag=True, help="Stamp the HTML report with the current UTC time (off: reports are byte-identical).")
@click.option("--by-scope", "by_scope", type=click.IntRange(1, 8), default=None, metavar="DEPTH",
              help="Add the time by JAX name scope (tf_op), collapsed to DEPTH components, to the terminal summary.")
@click.option("--memory", is_flag=True, help="Read HBM use: the dominant program's buffer assignment (HLO proto) and the allocator activity.")
@click.option("--host-activity", "host_act", is_flag=True, help="Read the host planes' dispatch and input-pipeline lines and name the host activity during host-caused idle.")
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@_no_cyclic_gc()
def analyze(trace: str, chip: str | None, jobs: int | None, json_out: str | None, top: int, select: str, ignore: str,
            output: str | None, no_html: bool, md_out: str | None, timestamp: bool, by_scope: int | None, memory: bool, host_act: bool, quiet: bool) -> None:
    """Attribute step time, analyse overlap, rank recommendations, write the HTML report."""
    from profanalyzer.analysis import AnalysisOptions, analyze_trace, read_trace
    from profanalyzer.findings import run_rules
    from profanalyzer.report.terminal import format_summary

    refuse_overwriting_input(trace, json_out, md_out, None if no_html else output)
    options = AnalysisOptions(chip=chip, jobs=jobs, progress=_progress(quiet), memory=memory, host_activity=host_act)
    model = read_trace(trace, options)
    # The input's hash (report footer) runs on a second core during the
    # single-threaded analysis; during the read both cores decode.
    digest = None if no_html else _hash_in_background(trace)
    a = analyze_trace(model, options)
    del model
    f = run_rules(a, select=_codes(select), ignore=_codes(ignore))
    to_stdout = json_out == "-" or md_out == "-"
    if json_out:
        write_json(result_dict(a, f), json_out)
    if md_out:
        from profanalyzer.report.markdown import render_markdown

        write_text(render_markdown(a, f), md_out)
    if digest is not None:
        from profanalyzer.report.html import default_output_path, render_html

        stamp = utc_timestamp() if timestamp else None
        html = render_html(a, f, command_line=command_line(), input_sha256=digest(), timestamp=stamp)
        dest = output or str(default_output_path(trace))
        write_text(html, dest, announce=False)
        click.echo(f"report: {dest}", err=to_stdout)
    if not quiet and not to_stdout:
        echo(format_summary(a, top=top, findings=f, by_scope=by_scope))


def _hash_in_background(trace: str):
    """Hash the input (for the report footer) on a thread: hashlib releases
    the GIL on large buffers. Returns a getter."""
    import threading

    from profanalyzer.report.html import file_sha256

    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["v"] = file_sha256(trace)
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


def result_dict(a, f) -> dict:
    """The JSON document (see profanalyzer.findings.result_document)."""
    from profanalyzer.findings import result_document

    return result_document(a, f)
