"""`profanalyze compare` and `profanalyze check` (registered in profanalyzer.cli).

    profanalyze compare BASE NEW [-o diff.html] [--json FILE|-] [--markdown FILE|-]
    profanalyze check TRACE_OR_JSON [--budget profanalyze.toml] [--baseline PATH] [--junit FILE] [--json FILE|-]

BASE, NEW and TRACE_OR_JSON are traces (file, run folder, log dir) or analysis
JSON files written by `profanalyze analyze --json`.

Exit codes: 0 pass (compare: always, unless the input is bad), 1 a budget,
regression or fail_on check failed, 2 usage or input error (bad budget file,
unknown budget key, unreadable trace).

The comparison, the budget and the renderers are imported when a command runs.
"""

from __future__ import annotations

import click

from profanalyzer.cli._common import (
    OUTPUT_FILE,
    check_outputs,
    chip_option,
    echo,
    write_text,
)
from profanalyzer.core.errors import EXIT_GATE_FAILED, EXIT_OK
from profanalyzer.read.sources import is_url

_chip_option = chip_option("Chip generation for inputs that are traces; overrides the trace's device_type_string.")


@click.command()
@click.argument("base", type=click.Path(dir_okay=True, file_okay=True))
@click.argument("new", type=click.Path(dir_okay=True, file_okay=True))
@_chip_option
@click.option("-o", "--output", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the comparison as a self-contained HTML page.")
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the comparison JSON (- for stdout).")
@click.option("--markdown", "md_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write a Markdown summary (- for stdout).")
@click.option("--memory", is_flag=True, help="Read HBM use of inputs that are traces (as analyze --memory) and compare it.")
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
def compare(base: str, new: str, chip: str | None, output: str | None, json_out: str | None, md_out: str | None, memory: bool, quiet: bool) -> int:
    """Compare two runs: step-time delta with a noise estimate, per-bucket and
    exposed-communication deltas, remat, new/vanished findings, slower/faster ops.

    BASE and NEW are traces or `profanalyze analyze --json` files."""
    check_outputs([base, new], [("-o", output), ("--json", json_out), ("--markdown", md_out)])
    from profanalyzer.compare.comparison import compare as run_compare
    from profanalyzer.report.registry import COMPARISON_RENDERERS as OUT

    c = run_compare(_document(base, chip, memory), _document(new, chip, memory), base_label=base, new_label=new)
    to_stdout = json_out == "-" or md_out == "-"
    if json_out:
        write_text(OUT["json"].render(c), json_out)
    if md_out:
        write_text(OUT["markdown"].render(c), md_out)
    if output:
        write_text(OUT["html"].render(c), output, announce=False)
        click.echo(f"diff: {output}", err=to_stdout)
    if not quiet and not to_stdout:
        echo(OUT["terminal"].render(c).removesuffix("\n"))
    return EXIT_OK


def _document(path: str, chip: str | None, memory: bool = False) -> dict:
    """The analysis document of a path or URL (profanalyzer.api.notebook.document)."""
    from profanalyzer.api.notebook import document

    return document(path, chip, memory)


@click.command()
@click.argument("trace", metavar="TRACE_OR_JSON", type=click.Path(dir_okay=True, file_okay=True))
@click.option("--budget", "budget_path", type=click.Path(dir_okay=False), default=None,
              help="Budget file: a profanalyze.toml, or a pyproject.toml with [tool.profanalyze] (default: ./profanalyze.toml, else ./pyproject.toml).")
@click.option("--baseline", type=click.Path(dir_okay=True, file_okay=True), default=None,
              help="Baseline trace or analysis JSON for [max_regression] (overrides the budget's baseline).")
@_chip_option
@click.option("--junit", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the checks as JUnit XML (one testcase per check).")
@click.option("--json", "json_out", type=OUTPUT_FILE, metavar="FILE", default=None, help="Write the check results as JSON (- for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the failing checks and the summary line.")
def check(trace: str, budget_path: str | None, baseline: str | None, chip: str | None, junit: str | None, json_out: str | None, quiet: bool) -> int:
    """Gate CI: check a run against a performance budget.

    Exit 0 when every check passes, 1 when a check fails (each failing check
    is printed on its own line), 2 on a bad budget file or input."""
    from profanalyzer.compare.budget import (
        BudgetError,
        evaluate,
        find_budget,
        load_budget,
    )

    if budget_path is None:
        found = find_budget(".")
        if found is None:
            raise click.UsageError("no budget: pass --budget FILE (or add ./profanalyze.toml, or [tool.profanalyze] in ./pyproject.toml)")
        budget_path = str(found)
    outputs = [("--junit", junit), ("--json", json_out)]
    check_outputs([trace, budget_path, baseline], outputs)
    budget = load_budget(budget_path)
    base_path = baseline if baseline is not None else (str(budget.baseline) if budget.baseline is not None else None)
    if baseline is None and budget.baseline_text and is_url(budget.baseline_text):  # a URL is not relative to the budget file
        base_path = budget.baseline_text
    if budget.regressions and base_path is None:
        raise BudgetError(f"{budget_path}: [max_regression] needs a baseline (baseline = \"path\" in the budget file, or --baseline)")
    if base_path is not None and base_path != baseline:  # the budget's baseline is an input too
        check_outputs([base_path], outputs)
    base_doc = None
    if base_path is not None:
        from pathlib import Path

        if not is_url(base_path) and not Path(base_path).exists():
            origin = "--baseline" if baseline is not None else f"baseline = {budget.baseline_text!r} in {budget_path}"
            raise BudgetError(f"baseline not found: {base_path} ({origin})")
        memory = any(m.startswith("memory.") for m in (*(x.metric for x in budget.limits), *(x.metric for x in budget.regressions)))
        base_doc = _document(base_path, chip, memory)
    memory = any(m.startswith("memory.") for m in (*(x.metric for x in budget.limits), *(x.metric for x in budget.regressions)))
    doc = _document(trace, chip, memory)
    report = evaluate(budget, doc, base_doc, trace=trace, baseline=base_path)

    from profanalyzer.report.registry import CHECK_RENDERERS

    to_stdout = json_out == "-"
    if json_out:
        write_text(CHECK_RENDERERS["json"].render(report), json_out)
    if junit:
        write_text(CHECK_RENDERERS["junit"].render(report), junit)
    for c in report.checks:
        if c.passed and quiet:
            continue
        echo(f"{'ok  ' if c.passed else 'FAIL'} {c.message}", err=to_stdout)
    if report.comparison:
        echo(f"vs baseline: {report.comparison}", err=to_stdout)
    n, bad = len(report.checks), len(report.failed)
    summary = f"profanalyze check: all {n} checks passed" if not bad else f"profanalyze check: {bad} of {n} checks failed"
    echo(f"{summary} ({report.budget})", err=to_stdout)
    return EXIT_OK if report.passed else EXIT_GATE_FAILED
