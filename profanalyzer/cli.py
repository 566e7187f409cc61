"""The `profanalyze` command line: thin. Parses options, calls the library,
prints, and maps typed errors to exit codes (see profanalyzer.errors)."""

from __future__ import annotations

import contextlib
import json
import re
import sys

import click

from profanalyzer import __version__
from profanalyzer.errors import EXIT_INPUT, EXIT_INTERNAL, OutputError, ProfanalyzerError

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _echo(text: str, err: bool = False) -> None:
    """Print trace-derived text with terminal control characters neutralised."""
    click.echo(_CONTROL.sub("\ufffd", text), err=err)


class DefaultGroup(click.Group):
    """`profanalyze TRACE` runs `analyze TRACE`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


chip_option = click.option(
    "--chip",
    type=click.Choice(["tpu7x", "v6e", "v5p"], case_sensitive=False),
    default=None,
    help="Chip generation; overrides the trace's device_type_string.",
)
trace_argument = click.argument("trace", type=click.Path(dir_okay=True, file_okay=True))
jobs_option = click.option("-j", "--jobs", type=click.IntRange(1, 512), default=None, help="Host files decoded in parallel (default: one per core).")


def _progress(quiet: bool):
    """A one-line progress indicator on stderr; off when quiet or not a TTY."""
    if quiet or not sys.stderr.isatty():
        return None

    def report(done: int, total: int, label: str) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r\x1b[Kreading host files {done}/{total}: {_CONTROL.sub('?', label)[:60]}{end}")
        sys.stderr.flush()

    return report


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="profanalyze")
def cli() -> None:
    """Where did the TPU7x step go, and which tuning lever to pull next.

    TRACE is a .xplane.pb[.gz] file, a profile run folder
    (plugins/profile/<run>/, one file per host) or a log dir.
    `profanalyze TRACE` is `profanalyze analyze TRACE`.
    """


@cli.command()
@trace_argument
@chip_option
@jobs_option
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write the summary as JSON (- for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No progress indicator.")
def info(trace: str, chip: str | None, jobs: int | None, json_out: str | None, quiet: bool) -> None:
    """Hosts, planes, chip, lines and event counts, steps, programs, time span."""
    from profanalyzer.info import format_info, trace_info
    from profanalyzer.trace import load_trace

    ti = trace_info(load_trace(trace, chip=chip, jobs=jobs, progress=_progress(quiet)))
    if json_out:
        _write_json(ti.to_dict(), json_out)
        if json_out == "-":
            return
    _echo(format_info(ti))


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


@cli.command()
@trace_argument
@chip_option
@jobs_option
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write the analysis + recommendations JSON (- for stdout).")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0, 1000), help="Top ops shown in the terminal summary.")
@click.option("--select", default="", help="Only rules whose code starts with one of these comma-separated prefixes (e.g. SC,RM001).")
@click.option("--ignore", default="", help="Skip rules whose code starts with one of these comma-separated prefixes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="HTML report path (default ./<trace-stem>.report.html).")
@click.option("--no-html", is_flag=True, help="Do not write the HTML report.")
@click.option("--markdown", "md_out", type=click.Path(dir_okay=False, allow_dash=True), default=None, help="Write a Markdown summary for tickets (- for stdout).")
@click.option("--timestamp", is_flag=True, help="Stamp the HTML report with the current UTC time (off: reports are byte-identical).")
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@_no_cyclic_gc()
def analyze(trace: str, chip: str | None, jobs: int | None, json_out: str | None, top: int, select: str, ignore: str,
            output: str | None, no_html: bool, md_out: str | None, timestamp: bool, quiet: bool) -> None:
    """Attribute step time, analyse overlap, rank recommendations, write the HTML report."""
    from profanalyzer.analysis import AnalysisOptions, analyze_trace, read_trace
    from profanalyzer.findings import run_rules
    from profanalyzer.report.terminal import format_summary

    _refuse_overwriting_input(trace, json_out, md_out, None if no_html else output)
    options = AnalysisOptions(chip=chip, jobs=jobs, progress=_progress(quiet))
    model = read_trace(trace, options)
    # The input's hash (report footer) runs on a second core during the
    # single-threaded analysis; during the read both cores decode.
    digest = None if no_html else _hash_in_background(trace)
    a = analyze_trace(model, options)
    del model
    f = run_rules(a, select=_codes(select), ignore=_codes(ignore))
    to_stdout = json_out == "-" or md_out == "-"
    if json_out:
        _write_json(result_dict(a, f), json_out)
    if md_out:
        from profanalyzer.report.markdown import render_markdown

        _write_text(render_markdown(a, f), md_out)
    if not no_html:
        from profanalyzer.report.html import default_output_path, render_html

        stamp = None
        if timestamp:
            from datetime import datetime, timezone

            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        html = render_html(a, f, command_line=_command_line(), input_sha256=digest(), timestamp=stamp)
        dest = output or str(default_output_path(trace))
        _write_text(html, dest, announce=False)
        click.echo(f"report: {dest}", err=to_stdout)
    if not quiet and not to_stdout:
        _echo(format_summary(a, top=top, findings=f))


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


def _command_line() -> str:
    import shlex

    return "profanalyze " + shlex.join(sys.argv[1:]) if sys.argv else "profanalyze"


def _write_text(text: str, dest: str, announce: bool = True) -> None:
    if dest == "-":
        sys.stdout.write(text)
        return
    try:
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise OutputError(f"{dest}: cannot write: {e.strerror or e}") from None
    if announce:
        click.echo(f"wrote {dest}", err=True)


def _refuse_overwriting_input(trace: str, *outputs: str | None) -> None:
    """An output path must never be (or be inside) the input."""
    import os

    src = os.path.realpath(trace)
    for out in outputs:
        if not out or out == "-":
            continue
        dst = os.path.realpath(out)
        if dst == src or (os.path.isdir(src) and dst.startswith(src.rstrip(os.sep) + os.sep)):
            raise OutputError(f"{out}: refusing to write over (or inside) the input {trace}")


def _codes(text: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in text.split(",") if c.strip())


def result_dict(a, f) -> dict:
    """The JSON document (see profanalyzer.findings.result_document)."""
    from profanalyzer.findings import result_document

    return result_document(a, f)


@cli.command()
@click.argument("scenario")
@click.option("-o", "--output", required=True, type=click.Path(), help="Output .xplane.pb[.gz] file, or a folder when --hosts > 1.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--hosts", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--steps", default=None, type=click.IntRange(1, 100000), help="Steps to synthesize (scenario default otherwise).")
def synth(scenario: str, output: str, seed: int, hosts: int, steps: int | None) -> None:
    """Write a synthesized TPU7x capture of SCENARIO (and its ground truth)."""
    from profanalyzer.synth import SCENARIOS, write_scenario

    if scenario not in SCENARIOS:
        raise click.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(sorted(SCENARIOS))}", param_hint="SCENARIO")
    write_scenario(scenario, output, seed=seed, hosts=hosts, steps=steps)
    click.echo(output)


from profanalyzer.cli_fleet import fleet  # noqa: E402  (imports click only; Dask loads when the command runs)
cli.add_command(fleet)


from profanalyzer.cli_compare import check, compare  # noqa: E402  (deferred imports of this module inside)

cli.add_command(compare)
cli.add_command(check)


def _write_json(obj, dest: str) -> None:
    _write_text(json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n", dest)


def main(argv: list[str] | None = None) -> int:
    import os

    # numpy's OpenBLAS starts a pool of spinning threads at import; nothing
    # here uses BLAS (they cost ~8% of the CPU time of an analysis).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        rv = cli.main(args=argv, prog_name="profanalyze", standalone_mode=False)
    except ProfanalyzerError as e:
        _echo(f"profanalyze: error: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        _echo("profanalyze: aborted", err=True)
        return EXIT_INPUT
    except click.ClickException as e:
        e.show()
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: one line, not a traceback (PROFANALYZE_DEBUG=1 shows it)
        if os.environ.get("PROFANALYZE_DEBUG"):
            raise
        _echo(f"profanalyze: internal error: {type(e).__name__}: {e} (set PROFANALYZE_DEBUG=1 for a traceback)", err=True)
        return EXIT_INTERNAL
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
