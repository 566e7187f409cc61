"""The `profanalyze` command line: thin. Parses options, calls the library,
prints, and maps typed errors to exit codes (see profanalyzer.core.errors).

    __init__   the group (`profanalyze TRACE` is `profanalyze analyze TRACE`) and main
    _common    shared options, output writing, echo, errors -> exit codes
    analyze    analyze, info
    compare    compare, check
    fleet      fleet (Dask loads only when it runs)
    synth      synth
    api        schema, explain, mcp (interfaces for programs and agents)
"""

from __future__ import annotations

import click

from profanalyzer.cli._common import CONTEXT_SETTINGS, run_command
from profanalyzer.cli.analyze import analyze, info, result_dict
from profanalyzer.cli.api import explain, mcp, schema
from profanalyzer.cli.compare import check, compare
from profanalyzer.cli.fleet import fleet
from profanalyzer.cli.synth import synth
from profanalyzer.core.version import __version__

__all__ = ["cli", "main", "result_dict"]

#: The command `profanalyze TRACE` runs.
DEFAULT_COMMAND = "analyze"


class DefaultGroup(click.Group):
    """`profanalyze TRACE` runs `analyze TRACE`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="profanalyze")
def cli() -> None:
    """Where did the TPU7x step go, and which tuning lever to pull next.

    TRACE is a .xplane.pb[.gz] file, a profile run folder
    (plugins/profile/<run>/, one file per host) or a log dir.
    `profanalyze TRACE` is `profanalyze analyze TRACE`.
    """


cli.add_command(analyze)
cli.add_command(info)
cli.add_command(compare)
cli.add_command(check)
cli.add_command(fleet)
cli.add_command(synth)
cli.add_command(schema)
cli.add_command(explain)
cli.add_command(mcp)


def main(argv: list[str] | None = None) -> int:
    """The console script: runs the group, returns the exit code."""
    return run_command(cli, argv)
