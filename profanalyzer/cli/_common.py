"""What the `profanalyze` commands share: options, output writing, terminal
echo, and the mapping of typed errors to exit codes (see profanalyzer.core.errors).

Imports click, the standard library and profanalyzer's light modules only:
every command module imports this one, and `profanalyze analyze` must not pay
for pandas or Dask.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC
from typing import Any

import click

from profanalyzer.core import outputs
from profanalyzer.core.errors import EXIT_INPUT, EXIT_INTERNAL, ProfanalyzerError
from profanalyzer.core.vocab import CHIP_CHOICES

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: The --chip choices, in the order `--help` shows them.

#: The context settings of every command (`-h` works as `--help`).
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


def neutralise(text: str, replacement: str = "\ufffd") -> str:
    """`text` with terminal control characters replaced."""
    return _CONTROL.sub(replacement, text)


def echo(text: str, err: bool = False) -> None:
    """Print trace-derived text with terminal control characters neutralised."""
    click.echo(neutralise(text), err=err)


def chip_option(help: str) -> Callable:
    """The --chip option (one list of chips, each command its own help text)."""
    return click.option("--chip", type=click.Choice(CHIP_CHOICES, case_sensitive=False), default=None, help=help)


#: The type of every output option: a path (or - for stdout) that the output
#: layer checks (a folder, a missing folder, an input: one error line).
OUTPUT_FILE = click.Path(allow_dash=True)

trace_argument = click.argument("trace", type=click.Path(dir_okay=True, file_okay=True))
jobs_option = click.option("-j", "--jobs", type=click.IntRange(1, 512), default=None, help="Host files decoded in parallel (default: one per core).")


def write_text(text: str, dest: str, announce: bool = True) -> None:
    """Write `text` to `dest` (- for stdout) through the output layer
    (profanalyzer.core.outputs: atomic, a temporary file then a rename);
    OutputError when it cannot be written. Every command checks its outputs
    with `check_outputs` before any work."""
    if dest == "-":
        sys.stdout.write(text)
        return
    outputs.write_text(text, dest)
    if announce:
        click.echo(f"wrote {dest}", err=True)


def write_json(obj: object, dest: str, announce: bool = True) -> None:
    """Write `obj` as deterministic JSON (sorted keys, indented) to `dest` (- for stdout)."""
    write_text(json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n", dest, announce)


#: Refuse, before any work, the outputs that would touch an input or cannot be
#: written (profanalyzer.core.outputs.check_outputs: inputs, (option, path) pairs).
check_outputs = outputs.check_outputs


def command_line(default: str = "profanalyze") -> str:
    """This process's command line as the report footer shows it."""
    import shlex

    return "profanalyze " + shlex.join(sys.argv[1:]) if sys.argv else default


def utc_timestamp() -> str:
    """Now, UTC, ISO 8601 to the second (the --timestamp stamp)."""
    from datetime import datetime

    return datetime.now(UTC).isoformat(timespec="seconds")


def run_command(group: click.Command, argv: list[str] | None) -> int:
    """Run the click command and map every outcome to an exit code: typed errors
    and usage errors are one line on stderr, never a traceback."""
    # numpy's OpenBLAS starts a pool of spinning threads at import; nothing
    # here uses BLAS (they cost ~8% of the CPU time of an analysis).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        rv = group.main(args=argv, prog_name="profanalyze", standalone_mode=False)
    except ProfanalyzerError as e:
        echo(f"profanalyze: error: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        echo("profanalyze: aborted", err=True)
        return EXIT_INPUT
    except click.UsageError as e:  # one line, as every other error: what is wrong and where the help is
        where = e.ctx.command_path if e.ctx is not None else "profanalyze"
        echo(f"profanalyze: error: {e.format_message()} (see '{where} --help')", err=True)
        return EXIT_INPUT
    except click.ClickException as e:
        echo(f"profanalyze: error: {e.format_message()}", err=True)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: one line, not a traceback (PROFANALYZE_DEBUG=1 shows it)
        if os.environ.get("PROFANALYZE_DEBUG"):
            raise
        echo(f"profanalyze: internal error: {type(e).__name__}: {e} (set PROFANALYZE_DEBUG=1 for a traceback)", err=True)
        return EXIT_INTERNAL
    return rv if isinstance(rv, int) else 0
