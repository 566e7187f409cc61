"""`profanalyze mcp`: the tools over the Model Context Protocol, called with
the official SDK's client, in process and over stdio; each returns the JSON
document the command line writes."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from conftest import ROOT, run_cli, sample_path

pytest.importorskip("mcp.server.mcpserver", reason="the MCP SDK 2.x is the [mcp] extra")

from mcp import Client  # noqa: E402

from profanalyzer.api.mcp_server import TOOLS, build_server  # noqa: E402

TIMEOUT = 120


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def _cli_json(capsys, *args):
    rc, out, err = run_cli(capsys, *args, "--json", "-")
    assert rc in (0, 1), err
    return json.loads(out)


def test_tools_return_the_cli_documents(capsys, tmp_path):
    trace = str(sample_path("offload_off"))
    other = str(sample_path("offload_on"))
    budget = tmp_path / "profanalyze.toml"
    budget.write_text('fail_on = ["SC001"]\n[budget]\nmfu = { min = 0.1 }\n')

    async def calls():
        async with Client(build_server()) as c:
            listed = [t.name for t in (await c.list_tools()).tools]
            results = {
                "analyze": await c.call_tool("analyze", {"trace": trace}),
                "analyze_sel": await c.call_tool("analyze", {"trace": trace, "select": "SC"}),
                "compare": await c.call_tool("compare", {"base": trace, "new": other}),
                "check": await c.call_tool("check", {"trace": trace, "budget": str(budget)}),
                "explain": await c.call_tool("explain", {"code": "rm001"}),
                "top_ops": await c.call_tool("top_ops", {"trace": trace, "n": 3}),
                "render": await c.call_tool("render", {"trace": trace, "format": "markdown"}),
            }
            return listed, results

    listed, r = _run(calls())
    assert listed == list(TOOLS)
    for k, v in r.items():
        assert not v.is_error, (k, v.content)
        assert json.loads(v.content[0].text) == v.structured_content  # the text is the same document
    doc = _cli_json(capsys, "analyze", trace, "-q", "--no-html")
    assert r["analyze"].structured_content == doc
    from profanalyzer.pipeline.run import run
    from profanalyzer.report.registry import RENDERERS

    md = r["render"].structured_content
    assert md["format"] == "markdown" and md["text"] == RENDERERS["markdown"].render(run(trace))
    assert md["text"].startswith("#")  # a Markdown document, the one `--markdown` writes
    assert r["analyze_sel"].structured_content == _cli_json(capsys, "analyze", trace, "-q", "--no-html", "--select", "SC")
    assert r["compare"].structured_content == _cli_json(capsys, "compare", trace, other, "-q")
    check = _cli_json(capsys, "check", trace, "--budget", budget, "-q")
    assert r["check"].structured_content == check and check["passed"] is False  # SC001 fires on offload_off
    assert r["explain"].structured_content == _cli_json(capsys, "explain", "RM001")
    top = r["top_ops"].structured_content
    assert top["top_ops"] == doc["top_ops"][:3] and top["step_time_ps"] == doc["steps"]["step_time_ps"]


def test_bad_input_is_a_tool_error_with_the_cli_line(capsys, tmp_path):
    missing = str(tmp_path / "gone.xplane.pb")

    async def calls():
        async with Client(build_server()) as c:
            return [await c.call_tool("analyze", {"trace": missing}), await c.call_tool("explain", {"code": "ZZ1"})]

    for res, cmd in zip(_run(calls()), (("analyze", missing, "-q", "--no-html"), ("explain", "ZZ1")), strict=True):
        assert res.is_error
        rc, out, err = run_cli(capsys, *cmd)
        line = err.strip().removeprefix("profanalyze: error: ")
        assert rc == 2 and line in res.content[0].text


def test_stdio_server(tmp_path):
    """`profanalyze mcp` as a subprocess, spoken to over stdin/stdout."""
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "profanalyzer.cli", "mcp"], cwd=str(ROOT))

    async def calls():
        async with Client(params) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            return names, await c.call_tool("explain", {"code": "SC001"})

    names, res = _run(calls())
    assert names == list(TOOLS)
    assert not res.is_error and res.structured_content["code"] == "SC001"
