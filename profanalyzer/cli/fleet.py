"""`profanalyze fleet`: many hosts and many runs on a Dask cluster.

Registered in profanalyzer.cli with ``cli.add_command(fleet)``. This module
imports only click (and profanalyzer.cli._common) at import time: Dask (the optional ``[fleet]`` extra), the
analysis and the report load when the command runs, so the single-trace
commands never import Dask.
"""

from __future__ import annotations

import sys

import click

from profanalyzer.cli._common import (
    CONTEXT_SETTINGS,
    OUTPUT_FILE,
    check_outputs,
    chip_option,
    command_line,
    echo,
    utc_timestamp,
    write_text,
)


def _progress_printer(enabled: bool):
    if not enabled:
        return None

    def show(done: int, total: int) -> None:
        click.echo(f"\ranalysed {done}/{total} host files", err=True, nl=done == total)

    return show


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, required=True)
@click.option("--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler address (e.g. tcp://10.0.0.5:8786); default: start a local cluster.")
@click.option("--workers", type=click.IntRange(0, 4096), default=None, help="Worker processes of the local cluster (default: one per core); 0: analyse in this process, without Dask.")
@chip_option("Chip generation; overrides the traces' device_type_string.")
@click.option("-o", "--output", type=OUTPUT_FILE, metavar="FILE", default="fleet.html", show_default=True, help="Fleet HTML report path.")
@click.option("--no-html", is_flag=True, help="Do not write the HTML report.")
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the fleet result as JSON (- for stdout).")
@click.option("--no-cache", is_flag=True, help="Analyse every file; do not read or write the per-file cache.")
@click.option("--cache-dir", type=click.Path(), metavar="DIR", default=None, help="Per-file cache folder (default: $PROFANALYZER_CACHE_DIR, $XDG_CACHE_HOME/profanalyzer or ~/.cache/profanalyzer).")
@click.option("--timestamp", is_flag=True, help="Stamp the HTML report with the current UTC time (off: reports are byte-identical).")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no terminal summary.")
def fleet(paths: tuple[str, ...], scheduler: str | None, workers: int | None, chip: str | None, output: str, no_html: bool,
          json_out: str | None, no_cache: bool, cache_dir: str | None, timestamp: bool, quiet: bool) -> int:
    """Analyse many hosts and many runs on a Dask cluster: pod view per run,
    straggler hosts, trend and regressions across runs.

    PATHS are run folders (<run>/<host>.xplane.pb), log dirs (every
    plugins/profile/<run>/ under them), host files or globs; local paths, or
    fsspec URLs (gs://... needs gcsfs). Each host file is one task; results are
    cached per file content in the user cache dir.
    """
    from profanalyzer.core.errors import EXIT_INPUT
    from profanalyzer.fleet import FleetOptions, run_fleet

    if scheduler and workers is not None:
        raise click.UsageError("--scheduler and --workers are exclusive: the scheduler's cluster has its own workers")
    from profanalyzer.fleet import default_cache_dir
    from profanalyzer.fleet.paths import expand_paths

    # The inputs, as the run reads them: PATHS, the run folders and host
    # files they expand to (globs included). The per-file cache is an output
    # folder: never inside an input folder.
    exp = expand_paths(paths)
    inputs = [*paths, *(r.path for r in exp.runs), *exp.files]
    remote = bool(scheduler) and workers != 0
    cache = None if no_cache or (remote and cache_dir is None) else (cache_dir or str(default_cache_dir()))
    check_outputs(inputs, [("-o", None if no_html else output), ("--json", json_out)],
                  caches=[("--cache-dir" if cache_dir else "the fleet cache", cache)])
    to_stdout = json_out == "-"
    progress = _progress_printer(not quiet and sys.stderr.isatty())
    result = run_fleet(
        paths,
        options=FleetOptions(chip=chip.lower() if chip else None),
        scheduler=scheduler,
        workers=workers,
        use_cache=not no_cache,
        cache_dir=cache_dir,
        progress=progress,
    )
    if not no_cache:
        # The per-file cache is an output too: say where it lives.
        click.echo(f"cache: {cache_dir or default_cache_dir()}", err=True)
    from profanalyzer.report.registry import FLEET_RENDERERS, RenderOptions

    if json_out:
        write_text(FLEET_RENDERERS["json"].render(result), json_out)
    if not no_html:
        opts = RenderOptions(command_line=command_line("profanalyze fleet"), timestamp=utc_timestamp() if timestamp else None)
        write_text(FLEET_RENDERERS["html"].render(result, opts), output, announce=False)
        click.echo(f"report: {output}", err=to_stdout)
    if not quiet and not to_stdout:
        echo(FLEET_RENDERERS["terminal"].render(result).removesuffix("\n"))
    elif result.failures:
        for f in result.failures:
            echo(f"profanalyze: failed: {f.error}", err=True)
    return EXIT_INPUT if result.files_ok == 0 else 0
