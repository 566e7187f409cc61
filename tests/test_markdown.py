"""The Markdown summary: same headline, top recommendations and bucket table as
the HTML report; GFM tables stay well-formed whatever the op names contain."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from conftest import analysis_of, sample_names
from test_report_html import XSS, findings_or_none, handmade_findings, markdown_case

from profanalyzer.classify import BUCKETS
from profanalyzer.model.findings import Finding, Findings
from profanalyzer.report.markdown import md_escape, render_markdown
from profanalyzer.report.summary import headline
from profanalyzer.report.terminal import ms, pct

NAMES = sample_names()
#: "Small enough to paste into a ticket".
MAX_CHARS = 12_000

pytestmark = pytest.mark.skipif(not NAMES, reason="no sample traces in sample_traces/")


def _cells(row: str) -> list[str]:
    """Split a GFM table row on unescaped pipes."""
    assert row.startswith("|") and row.endswith("|"), row
    parts = re.split(r"(?<!\\)\|", row[1:-1])
    return [p.strip() for p in parts]


def _tables(md: str) -> list[list[list[str]]]:
    tables, cur = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            cur.append(_cells(line))
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


def _unescape(cell: str) -> str:
    return re.sub(r"\\(.)", r"\1", cell)


@pytest.mark.parametrize("name", NAMES)
def test_headline_recommendations_and_buckets(name):
    a = analysis_of(name)
    f = findings_or_none(name)
    md = markdown_case(name)
    assert len(md) < MAX_CHARS, len(md)
    assert f"**Step time {ms(a.steps.step_time_ps['median'])} ms**" in md
    assert md_escape(headline(a), line_start=True) in md
    tables = _tables(md)
    for t in tables:  # well-formed: every row as wide as the header
        assert len({len(r) for r in t}) == 1, t
    buckets = next(t for t in tables if t[0][0] == "Bucket")
    assert buckets[0] == ["Bucket", "ms/step", "Share"]
    rows = {r[0]: r for r in buckets[2:]}
    from profanalyzer.report.svg import BUCKET_LABELS

    for b in BUCKETS:
        s = a.breakdown[b]
        label = BUCKET_LABELS[b]
        if s.ps > 0 or b == "idle":
            assert rows[label][1:] == [ms(s.ps), pct(s.fraction)], b
        else:
            assert label not in rows
    assert rows["**Step (mean)**"][1] == f"**{ms(a.steps.step_time_ps['mean'])}**"
    if f is not None and f.recommendations:
        recs = tables[0]
        assert recs[0][:3] == ["#", "Lever", "Code"]
        shown = recs[2:]
        assert len(shown) == min(5, len(f.recommendations))
        for row, rec in zip(shown, f.recommendations, strict=False):  # the table shows the first 5
            assert row[2] == md_escape(rec.code)
            assert row[4] == ms(rec.estimated_saving_ps) and row[5] == pct(rec.estimated_saving_fraction)
            for action in rec.actions:
                assert " ".join(action.splitlines()) in md
    elif f is not None:
        assert "no change recommended" in md


def test_escaping_keeps_tables_and_text_intact():
    a = analysis_of(NAMES[0])
    evil = f"{XSS} | *bold* _it_ `code` [link](https://x) ![i](y) ~~s~~ # h & &lt; $x$"
    f, _ = handmade_findings(a)
    recs = tuple(replace(r, title=evil, code="RM|001", evidence=(evil, "- list? " + evil, "1. numbered"), actions=(evil, "```", "x")) for r in f.recommendations)
    md = render_markdown(replace(a, source=f"/tmp/{evil}.xplane.pb"), replace(f, recommendations=recs))
    # Outside code (fences and code spans render their content literally) no
    # raw markup survives.
    prose = re.sub(r"^(`{3,}).*?^\1$", "", md, flags=re.M | re.S)
    prose = re.sub(r"(?<!\\)(`+) ?.*? ?(?<!\\)\1", "", prose)
    assert XSS not in prose
    assert re.search(r"(?<!\\)<(?!/?sub>)", prose) is None, "unescaped < outside code"
    assert "<script" in md  # ...while the fenced action and the code-span name keep the text verbatim
    assert "](" not in prose.replace("\\](", "")  # no live link outside code
    for t in _tables(md):
        assert len({len(r) for r in t}) == 1, t
    recs_table = _tables(md)[0]
    assert _unescape(recs_table[2][3]) == " ".join(evil.split())
    assert _unescape(recs_table[2][2]) == "RM|001"
    # evidence list items: escaped text, no nested list created by a leading marker
    items = [l for l in md.splitlines() if l.startswith("- ")]
    assert f"- {md_escape(evil)}" in items
    assert "- \\- list? " + md_escape(evil) in items
    assert "- 1\\. numbered" in items
    # actions in a fence longer than any backtick run inside it
    fence = re.search(r"^(`{4,})$", md, re.M)
    assert fence, "actions containing ``` need a longer fence"
    # the trace name is a code span
    assert md.splitlines()[0].startswith("### profanalyze: `")


def test_md_escape_unit():
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("<b>") == "\\<b\\>"
    assert md_escape("x\ny") == "x y"
    assert md_escape("fusion.1") == "fusion.1"
    assert md_escape("- a", line_start=True) == "\\- a"
    assert md_escape("12) a", line_start=True) == "12\\) a"
    assert md_escape("41.9% slower") == "41.9% slower"
    assert md_escape("\\") == "\\\\"


def test_max_recommendations_and_no_findings():
    a = analysis_of(NAMES[0])
    step = a.steps.step_time_ps["mean"]
    many = tuple(
        Finding(f"X{i:03d}", "remat", f"finding {i}", "low", step * 0.01 * (10 - i), 0.01 * (10 - i), ("e",), ("flag=1",), (), "L4")
        for i in range(8)
    )
    md = render_markdown(a, Findings(many, None, ()), max_recommendations=3)
    assert len(_tables(md)[0]) == 2 + 3
    assert "5 more recommendations in the HTML report" in md
    md0 = render_markdown(a, None)
    assert "not computed" in md0
    assert render_markdown(a, None) == md0  # deterministic
    assert "no change recommended" in render_markdown(a, Findings((), None, ()))
