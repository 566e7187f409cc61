"""`profanalyze mcp`: the analysis as tools for agents, over the Model
Context Protocol (stdio), with the official SDK (`pip install
'profanalyzer[mcp]'`, mcp 2.x: `mcp.server.mcpserver.MCPServer`).

Tools (each returns the JSON document the command line writes):

    analyze(trace, chip?, select?, ignore?)   `profanalyze analyze TRACE --json -`
    compare(base, new, chip?)                 `profanalyze compare BASE NEW --json -`
    check(trace, budget, baseline?, chip?)    `profanalyze check TRACE --budget B --json -`
    explain(code)                             `profanalyze explain CODE --json -`
    top_ops(trace, n?, chip?)                 the `top_ops` of the analyze document (first n), with its source and step time
    render(trace, format?, chip?, ...)        the analysis in one format of the renderer registry (report.registry)

Paths are local paths or URLs (profanalyzer.read.sources). Bad input is a tool
error carrying the one line the command line prints.
"""

from __future__ import annotations

from typing import Any

from profanalyzer.core.errors import ProfanalyzerError
from profanalyzer.core.version import __version__

__all__ = ["build_server", "serve_stdio", "TOOLS"]

#: The tools the server offers, in the order it lists them.
TOOLS = ("analyze", "compare", "check", "explain", "top_ops", "render")

_INSTRUCTIONS = (
    "profanalyze reads XProf profiles (.xplane.pb[.gz] files, run folders, log dirs, local or gs:// URLs) of TPU runs "
    "and says where the step time went and which tuning lever to pull next. Start with `analyze` (or `top_ops` for "
    "the op table only); `explain` a recommendation's code for its rationale and guide section; `compare` two runs; "
    "`check` a run against a budget file. Times are picoseconds per step, averaged over TensorCores."
)


def _codes(text: str) -> tuple[str, ...]:
    return tuple(c.strip().upper() for c in text.split(",") if c.strip())


def analyze_document(trace: str, chip: str | None = None, select: str = "", ignore: str = "") -> dict:
    from profanalyzer.api.notebook import load

    return load(trace, chip=chip, select=_codes(select), ignore=_codes(ignore)).to_dict()


def compare_document(base: str, new: str, chip: str | None = None) -> dict:
    from profanalyzer.api.notebook import document
    from profanalyzer.compare.comparison import compare

    return compare(document(base, chip), document(new, chip), base_label=base, new_label=new).to_dict()


def check_document(trace: str, budget: str, baseline: str | None = None, chip: str | None = None) -> dict:
    from profanalyzer.api.notebook import document
    from profanalyzer.compare.budget import BudgetError, evaluate, load_budget
    from profanalyzer.read.sources import is_url

    b = load_budget(budget)
    base_path = baseline if baseline is not None else (str(b.baseline) if b.baseline is not None else None)
    if baseline is None and b.baseline_text and is_url(b.baseline_text):  # a URL is not relative to the budget file
        base_path = b.baseline_text
    if b.regressions and base_path is None:
        raise BudgetError(f"{budget}: [max_regression] needs a baseline (baseline = \"path\" in the budget file, or baseline)")
    base_doc = document(base_path, chip) if base_path is not None else None
    return evaluate(b, document(trace, chip), base_doc, trace=trace, baseline=base_path).to_dict()


def explain_document(code: str) -> dict:
    from profanalyzer.findings.explain import explain

    return explain(code).to_dict()


def render_document(trace: str, format: str = "markdown", chip: str | None = None, select: str = "", ignore: str = "") -> dict:
    """The analysis of `trace` in one output format of the renderer registry."""
    from profanalyzer.api.notebook import load
    from profanalyzer.core.errors import InputError
    from profanalyzer.report.registry import RENDERERS

    if format not in RENDERERS:
        raise InputError(f"format {format!r}: one of {', '.join(RENDERERS)}")
    text = load(trace, chip=chip, select=_codes(select), ignore=_codes(ignore)).render(format)
    return {"source": trace, "format": format, "text": text}


def top_ops_document(trace: str, n: int = 10, chip: str | None = None) -> dict:
    doc = analyze_document(trace, chip)
    return {"source": doc["source"], "step_time_ps": doc["steps"]["step_time_ps"], "top_ops": doc["top_ops"][: max(0, n)]}


def build_server() -> Any:
    """The MCP server (not started). Raises ProfanalyzerError when the SDK is missing."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise ProfanalyzerError("profanalyze mcp needs the MCP SDK 2.x: pip install 'profanalyzer[mcp]'") from None

    server = MCPServer("profanalyze", version=__version__, instructions=_INSTRUCTIONS)

    def tool_error(e: ProfanalyzerError) -> ToolError:
        return ToolError(str(e))

    @server.tool(name="analyze", structured_output=True, description="Analyse a profile (file, run folder, log dir, or URL): the `profanalyze analyze --json` document "
                                           "(step breakdown by bucket, top ops, collectives, ranked recommendations). select/ignore: "
                                           "comma-separated rule code prefixes.")
    def analyze(trace: str, chip: str | None = None, select: str = "", ignore: str = "") -> dict[str, Any]:
        try:
            return analyze_document(trace, chip, select, ignore)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    @server.tool(name="compare", structured_output=True, description="Compare two runs (profiles or saved analysis JSON): the `profanalyze compare --json` document "
                                           "(step-time delta with a noise estimate, bucket deltas, new/vanished findings, slower/faster ops).")
    def compare(base: str, new: str, chip: str | None = None) -> dict[str, Any]:
        try:
            return compare_document(base, new, chip)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    @server.tool(name="check", structured_output=True, description="Check a run against a performance budget file (profanalyze.toml): the `profanalyze check --json` "
                                         "document (each check, passed or not). baseline: a profile or analysis JSON for [max_regression].")
    def check(trace: str, budget: str, baseline: str | None = None, chip: str | None = None) -> dict[str, Any]:
        try:
            return check_document(trace, budget, baseline, chip)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    @server.tool(name="explain", structured_output=True, description="Explain a rule code (e.g. SC001): what it detects, why it costs time, what to change, "
                                           "its lever and guide section (`profanalyze explain CODE --json`).")
    def explain(code: str) -> dict[str, Any]:
        try:
            return explain_document(code)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    @server.tool(name="top_ops", structured_output=True, description="The n ops that take the most self time per step in a profile (the analyze document's "
                                           "top_ops: bucket, self_ps, fraction, FLOPs, bytes, roofline), with the step time.")
    def top_ops(trace: str, n: int = 10, chip: str | None = None) -> dict[str, Any]:
        try:
            return top_ops_document(trace, n, chip)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    from profanalyzer.report.registry import RENDERERS

    @server.tool(name="render", structured_output=True, description="The analysis of a profile in one output format: "
                                          f"{', '.join(RENDERERS)} (the text that output writes).")
    def render(trace: str, format: str = "markdown", chip: str | None = None, select: str = "",
               ignore: str = "") -> dict[str, Any]:
        try:
            return render_document(trace, format, chip, select, ignore)
        except ProfanalyzerError as e:
            raise tool_error(e) from None

    return server


def serve_stdio() -> None:
    """Serve the tools over stdio until the client closes the stream."""
    build_server().run("stdio")
