"""`profanalyze schema`, `profanalyze explain` and `profanalyze mcp`: the
interfaces for programs (the JSON Schema of `--json`, a rule's documentation,
the MCP server for agents). Each imports its module when it runs.
"""

from __future__ import annotations

import click

from profanalyzer.cli._common import (
    OUTPUT_FILE,
    check_outputs,
    echo,
    write_json,
    write_text,
)


@click.command()
@click.option("-o", "--output", "out", type=OUTPUT_FILE, metavar="FILE", default="-", show_default=True,
              help="Write the schema to this file (- for stdout).")
def schema(out: str) -> None:
    """Print the JSON Schema of the `analyze --json` document (generated from
    the typed records; versioned by schema_version)."""
    from profanalyzer.api.schema import document_schema

    check_outputs([], [("-o", out)])
    write_json(document_schema(), out)


@click.command()
@click.argument("code")
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None,
              help="Write the explanation as JSON (- for stdout).")
def explain(code: str, json_out: str | None) -> None:
    """Explain a rule CODE: what it detects, why it costs time, what to
    change, and the guide section it is tied to (CODE e.g. SC001)."""
    from profanalyzer.findings.explain import explain as explain_code
    from profanalyzer.report.registry import EXPLANATION_RENDERERS

    check_outputs([], [("--json", json_out)])
    e = explain_code(code)
    if json_out:
        write_text(EXPLANATION_RENDERERS["json"].render(e), json_out)
        if json_out == "-":
            return
    echo(EXPLANATION_RENDERERS["terminal"].render(e).removesuffix("\n"))


@click.command()
def mcp() -> None:
    """Serve the tools analyze, compare, check, explain and top_ops to agents
    over the Model Context Protocol (stdio); needs the [mcp] extra."""
    from profanalyzer.api.mcp_server import serve_stdio

    serve_stdio()
