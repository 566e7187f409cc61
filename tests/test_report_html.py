"""The HTML report: rendered for every sample trace and checked with the
stdlib HTML parser (sections, numbers equal to the Analysis/JSON, cards,
escaping, self-containment, size, determinism, reports/ up to date).

Analyses come from conftest's session caches (`analysis_of`, `findings_of`);
renders are cached here per module, so the file stays fast.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest
from conftest import ROOT, analysis_of, findings_of, sample_names, sample_path

from profanalyzer.classify import BUCKETS
from profanalyzer.core.outputs import file_sha256
from profanalyzer.core.shell import finding_lines
from profanalyzer.model.analysis import Analysis
from profanalyzer.model.findings import Finding, Findings, RuleDoc, WorkloadClass
from profanalyzer.report.html import render_html
from profanalyzer.report.terminal import ms, pct

XSS = "<script>alert(1)</script>"
MAX_BYTES = 2 * 1024 * 1024
SECTIONS = ("summary", "recommendations", "breakdown", "timeline", "communication", "remat", "attention", "roofline", "top-ops", "cores")

ANALYSES_IDS: list[str] = sample_names()


def _load_tool():
    spec = importlib.util.spec_from_file_location("make_reports", ROOT / "tools" / "make_reports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_reports = _load_tool()


@functools.cache
def findings_or_none(name: str) -> Findings | None:
    try:
        return findings_of(name)
    except Exception:  # noqa: BLE001 - the rules are another stage; the report must render without them
        return None


@functools.cache
def render_case(name: str) -> str:
    """The report of a sample trace exactly as reports/ holds it."""
    html, _ = make_reports.render_sample(sample_path(name), analysis_of(name), findings_or_none(name))
    return html


@functools.cache
def markdown_case(name: str) -> str:
    _, md = make_reports.render_sample(sample_path(name), analysis_of(name), findings_or_none(name))
    return md


# ---------------------------------------------------------------------------
# A small DOM from html.parser
# ---------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None):
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[Node | str] = []

    @property
    def text(self) -> str:
        out = []
        for c in self.children:
            out.append(c if isinstance(c, str) else c.text)
        return "".join(out)

    def norm_text(self) -> str:
        return " ".join(self.text.split())

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs) -> list[Node]:
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            ok = True
            for k, v in attrs.items():
                k = k.rstrip("_").replace("_", "-")
                have = n.attrs.get(k)
                if k == "class":
                    if have is None or v not in have.split():
                        ok = False
                elif have != v:
                    ok = False
            if ok:
                out.append(n)
        return out

    def find(self, tag: str | None = None, **attrs) -> Node | None:
        r = self.find_all(tag, **attrs)
        return r[0] if r else None

    def by_id(self, id_: str) -> Node:
        n = self.find(id=id_)
        assert n is not None, f"no element with id={id_!r}"
        return n


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        n = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is None or n.parent is None:
            self.errors.append(f"stray </{tag}>")
            return
        if n is not self.cur:
            self.errors.append(f"</{tag}> closes unclosed <{self.cur.tag}>")
        self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse(html: str) -> Node:
    tb = TreeBuilder()
    tb.feed(html)
    tb.close()
    assert not tb.errors, tb.errors[:5]
    assert tb.cur is tb.root, f"unclosed <{tb.cur.tag}>"
    return tb.root


@functools.cache
def dom_case(name: str) -> Node:
    return parse(render_case(name))


# ---------------------------------------------------------------------------
# Hand-made findings (independent of the rules being written in parallel)
# ---------------------------------------------------------------------------


def handmade_findings(a: Analysis) -> tuple[Findings, dict[str, RuleDoc]]:
    step = a.steps.step_time_ps["mean"]
    f1 = Finding(
        code="RM001",
        lever="remat",
        title="Recompute is a large share of a compute-bound step",
        severity="high",
        estimated_saving_ps=0.12 * step,
        estimated_saving_fraction=0.12,
        evidence=(f"recomputed ops take {ms(a.remat.ps)} ms per step", f"recomputed: {XSS} | *x*"),
        actions=("remat_policy=minimal", "# or: remat_policy=save_dot_with_context_except_mlp"),
        assumptions=("HBM headroom for the saved activations",),
        guide_section="L4 — Activation rematerialisation (remat)",
    )
    f2 = Finding(
        code="SC001",
        lever="sc_offload",
        title="Offload all-gather to SparseCore",
        severity="medium",
        estimated_saving_ps=0.04 * step,
        estimated_saving_fraction=0.04,
        evidence=("all-gather exposed",),
        actions=('LIBTPU_INIT_ARGS="--xla_tpu_enable_all_gather_offload=true"',),
        assumptions=(),
        guide_section="L3 — Communication optimisation: SparseCore collective offload (sc_offload)",
        merged_note="saving reduced: bucket:all_gather already claimed by a higher-ranked finding",
    )
    wl = WorkloadClass("dense", "short", "dense, short sequence", "FSDP", "TP", "compute", ("no experts",))
    docs = {
        "RM001": RuleDoc("time re-running forward ops <b>", "remat trades HBM for FLOPs", "pick a lighter remat_policy"),
        "SC001": RuleDoc("exposed all-gather", "the core waits", "enable offload"),
    }
    return Findings((f1, f2), wl, ("RM001", "SC001")), docs


def _render(a: Analysis, f: Findings | None, **kw) -> str:
    return render_html(a, f, command_line=kw.pop("command_line", "profanalyze t.xplane.pb"), input_sha256=kw.pop("input_sha256", "0" * 64), **kw)


# ---------------------------------------------------------------------------
# Every sample trace
# ---------------------------------------------------------------------------

pytestmark = pytest.mark.skipif(not ANALYSES_IDS, reason="no sample traces in sample_traces/")


@pytest.mark.parametrize("name", ANALYSES_IDS)
def test_structure_sections_and_numbers(name):
    a = analysis_of(name)
    doc = dom_case(name)
    html = render_case(name)
    assert html.startswith("<!DOCTYPE html>")
    for s in SECTIONS:
        sec = doc.by_id(s)
        assert sec.tag == "section", s
        assert sec.find("h1") or sec.find("h2"), f"section {s} has no heading"
    # Header: step time, steps used, chip, cores, MFU, definitions.
    t = a.steps.step_time_ps
    assert doc.by_id("kpi-step-time").find(class_="kpi-value").norm_text() == f"{ms(t['median'])} ms"
    assert doc.by_id("fact-steps").find("dd").norm_text().startswith(f"{a.steps.kept} of {a.steps.count} ")
    assert a.hardware.name in doc.by_id("fact-chip").norm_text()
    assert f"{a.tensorcores} TensorCores" in doc.by_id("fact-cores").norm_text()
    low = " *" if a.utilisation.low_confidence else ""  # MFU resting on part of the FLOPs is marked
    assert doc.by_id("kpi-mfu").find(class_="kpi-value").norm_text() == pct(a.utilisation.mfu) + low
    assert a.steps.source in doc.by_id("def-step").norm_text()
    assert "Exposed communication" in doc.by_id("def-exposed").norm_text()
    exp = a.communication
    assert doc.by_id("kpi-exposed").find(class_="kpi-value").norm_text() == pct(exp.exposed_total_fraction)

    # Bucket table equals the JSON numbers as displayed (ms/step, share).
    j = json.loads(json.dumps(a.to_dict()))
    table = doc.by_id("bucket-table")
    shown = {}
    for tr in table.find("tbody").find_all("tr"):
        b = tr.attrs["data-bucket"]
        shown[b] = (tr.find("td", class_="ms").norm_text(), tr.find("td", class_="pct").norm_text())
    assert list(shown) == [b for b in BUCKETS if b in a.breakdown]
    for b, (shown_ms, shown_pct) in shown.items():
        assert shown_ms == ms(j["breakdown"][b]["ps"]), b
        assert shown_pct == pct(j["breakdown"][b]["fraction"]), b
    assert abs(sum(float(p.rstrip("%")) for _, p in shown.values()) - 100.0) < 0.1 * len(shown)
    remat = table.find("tr", data_bucket="remat")
    assert remat.find("td", class_="pct").norm_text() == pct(j["remat"]["fraction"])

    # Step bars: one column group per step, dropped ones marked.
    bars = doc.by_id("breakdown").find("svg")
    groups = [g for g in bars.find_all("g") if g.attrs.get("class") in ("kept", "dropped")]
    assert len(groups) == len(a.steps.table)
    assert sum(g.attrs["class"] == "dropped" for g in groups) == len(a.steps.dropped)
    for d in a.steps.dropped:
        assert f"step {d.number}" in doc.by_id("dropped").norm_text()

    # Timeline: one lane per engine, windows listed.
    if a.timeline is not None:
        tl = doc.by_id("timeline")
        svg = tl.find("svg")
        assert svg.attrs.get("role") == "img" and svg.find("title") and svg.find("desc")
        lanes = [n for n in svg.find_all("rect", class_="lane")]
        assert len(lanes) == len(a.timeline.lanes)
        assert len(svg.find_all("rect", class_="win")) == len(a.timeline.windows)

    # Communication: per type exposed ms; SparseCore verdict.
    assert doc.by_id("sc-verdict").attrs["data-verdict"] == a.sparsecore_offload.verdict
    ct = doc.find(id="collective-table")
    present = [t for t in a.collectives.values() if t.count > 0 or t.exposed_ps > 0 or t.window_ps > 0]
    if present:
        rows = {tr.attrs["data-type"]: tr for tr in ct.find("tbody").find_all("tr")}
        assert set(rows) == {t.type for t in present}
        for t in present:
            assert rows[t.type].find("td", class_="exposed").norm_text() == ms(t.exposed_ps)

    # Top ops: rows in rank order, the first one is the Analysis' first.
    ops = doc.by_id("top-ops-table")
    trs = ops.find("tbody").find_all("tr")
    # rows that would read 0.000 ms are not listed (issue 23)
    assert len(trs) == sum(1 for o in a.top_ops[:30] if ms(o.self_ps) != ms(0))
    if a.top_ops:
        first = trs[0].find_all("td")
        assert first[1].attrs["title"].startswith(a.top_ops[0].name)
        assert first[3].norm_text() == ms(a.top_ops[0].self_ps)
        assert ops.find_all("th", data_sort="n"), "sortable headers"

    # Per-core table and stragglers.
    ct = doc.by_id("core-table")
    assert len(ct.find("tbody").find_all("tr")) == len(a.per_core)
    stragglers = [c.core for c in a.per_core if c.straggler]
    assert len(ct.find_all("tr", class_="straggler-row")) == len(stragglers)
    for s in stragglers:
        assert s in doc.by_id("core-spread").norm_text()

    # Roofline: ridge lines for BF16 and FP8 when any op has FLOP/byte counts.
    roof = doc.by_id("roofline").find("svg")
    if any(o.intensity and o.tflops_per_s for o in a.top_ops):
        assert roof is not None
        assert len(roof.find_all("line", class_="ridge")) == 2
        assert len(roof.find_all("circle")) == sum(1 for o in a.top_ops if o.intensity and o.tflops_per_s)

    # Footer.
    assert doc.by_id("tool-version").norm_text() == a.tool_version
    assert doc.by_id("input-sha256").norm_text() == file_sha256(sample_path(name))
    assert doc.by_id("command-line").norm_text().startswith("profanalyze sample_traces/")


@pytest.mark.parametrize("name", ANALYSES_IDS)
def test_recommendation_cards(name):
    f = findings_or_none(name)
    doc = dom_case(name)
    if f is None:
        assert doc.by_id("recs-status").attrs["data-status"] == "unavailable"
        return
    cards = doc.find_all("article", class_="card")
    assert len(cards) == len(f.recommendations)
    if not f.recommendations:
        assert doc.by_id("recs-status").attrs["data-status"] == "empty"
    for card, rec in zip(cards, f.recommendations, strict=True):
        _check_card(card, rec)


def _check_card(card: Node, rec: Finding, doc: RuleDoc | None = None) -> None:
    assert card.attrs["data-code"] == rec.code
    assert card.find(data_field="lever").norm_text(), "lever"
    assert card.find(data_field="code").norm_text() == rec.code
    saving = card.find(data_field="saving").norm_text()
    assert ms(rec.estimated_saving_ps) in saving and pct(rec.estimated_saving_fraction) in saving
    code = card.find(data_field="actions").find("code")
    assert code is not None and code.text == "\n".join(finding_lines(rec))
    assert rec.actions or rec.flags, f"{rec.code}: a recommendation without a change"
    assert card.find(data_field="guide").norm_text() == rec.guide_section
    ev = card.find("ul", class_="evidence")
    assert [li.norm_text() for li in ev.find_all("li")] == [" ".join(e.split()) for e in rec.evidence]
    if doc is not None:
        dd = [d.norm_text() for d in card.find("details", class_="doc").find_all("dd")]
        assert dd == [doc.detects, doc.why, doc.change]


@pytest.mark.parametrize("name", ANALYSES_IDS)
def test_self_contained_and_small(name):
    html = render_case(name)
    doc = dom_case(name)
    assert len(html.encode("utf-8")) < MAX_BYTES
    for n in doc.iter():
        for k, v in n.attrs.items():
            assert not k.startswith("on"), f"inline event handler {k} on <{n.tag}>"
            if k in ("src", "href", "xlink:href", "action", "formaction", "poster", "srcset", "data"):
                assert v is not None and v.startswith("#"), f"<{n.tag} {k}={v!r}>: only in-page references allowed"
    assert not doc.find_all("link") and not doc.find_all("img") and not doc.find_all("iframe")
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "src" not in scripts[0].attrs
    styles = "".join(s.text for s in doc.find_all("style"))
    assert "@import" not in styles and "@font-face" not in styles
    assert not re.search(r"url\(\s*['\"]?(?!#)", styles + "".join(str(n.attrs) for n in doc.iter()))
    for m in re.finditer(r"(?:src|href)\s*=\s*['\"]?\s*(https?:)?//", html, re.I):
        pytest.fail(f"external reference: {html[m.start(): m.start() + 80]!r}")


def _assert_text_only(html: str) -> Node:
    """XSS appears only escaped: never raw, never inside the one <script>."""
    assert XSS not in html
    doc = parse(html)
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "alert(" not in scripts[0].text
    return doc


def _texts_with(doc: Node, needle: str) -> list[Node]:
    return [n for n in doc.iter() if any(isinstance(c, str) and needle in c for c in n.children)]


def test_xss_scenario_op_renders_as_text():
    """The synthesized xss_names trace: its op named custom-call.7<script>... is
    drawn in the timeline; the name must be SVG <title> text, not markup."""
    if "xss_names" not in ANALYSES_IDS:
        pytest.skip("no xss_names sample trace")
    a = analysis_of("xss_names")
    doc = _assert_text_only(render_case("xss_names"))
    assert any(XSS in s.label for ln in a.timeline.lanes for s in ln.spans), "xss op not in the timeline sample"
    assert any(n.tag == "title" for n in _texts_with(doc, XSS)), "op name not shown as SVG <title> text"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in render_case("xss_names")


def test_xss_everywhere_trace_text_is_shown():
    """Hostile names in every place trace text reaches: top ops (table cell,
    tooltip attribute, roofline <title>), remat/attention tables, windows,
    cores, the trace path, findings evidence/actions and rule docs."""
    name = ANALYSES_IDS[0]
    a = analysis_of(name)
    evil = XSS + ' | *x* "q" \'s\' & <img src=x onerror=alert(2)>'
    ops = tuple(replace(o, name=evil if i == 0 else o.name, tf_op=evil) for i, o in enumerate(a.top_ops))
    remat = tuple(replace(o, name=evil) for o in a.remat_ops)
    wins = tuple(replace(w, name=evil, core=evil) for w in a.communication.top_exposed)
    comm = replace(a.communication, top_exposed=wins)
    cores = tuple(replace(c, core=evil) for c in a.per_core)
    tl = a.timeline
    if tl is not None:
        lanes = tuple(replace(ln, name=evil, spans=tuple(replace(s, label=evil) for s in ln.spans)) for ln in tl.lanes)
        tl = replace(tl, core=evil, lanes=lanes, windows=tuple(replace(w, name=evil) for w in tl.windows))
    bad = replace(a, source=f"/tmp/{evil}.xplane.pb", top_ops=ops, remat_ops=remat, communication=comm, per_core=cores, timeline=tl)
    f, docs = handmade_findings(a)
    f = replace(f, recommendations=tuple(replace(r, evidence=(evil,), actions=(evil,), title=evil) for r in f.recommendations))
    docs = {k: RuleDoc(evil, evil, evil) for k in docs}
    html = render_html(bad, f, command_line=f"profanalyze {evil}", input_sha256=evil, docs=docs)
    doc = _assert_text_only(html)
    assert "<img" not in html and "onerror=alert" not in html.replace("onerror=alert(2)&gt;", "")
    tags = {n.tag for n in _texts_with(doc, evil)}
    assert {"td", "title", "li", "code", "h3", "dd"} <= tags, tags
    assert any(evil == (n.attrs.get("title") or "").split(" — ")[0] for n in doc.find_all("td")), "tooltip attribute"
    for n in doc.iter():
        assert not any(k.startswith("on") for k in n.attrs), n.tag


def test_handmade_findings_cards_and_docs():
    name = ANALYSES_IDS[0]
    a = analysis_of(name)
    f, docs = handmade_findings(a)
    doc = parse(_render(a, f, docs=docs))
    cards = doc.find_all("article", class_="card")
    assert [c.attrs["data-code"] for c in cards] == ["RM001", "SC001"]
    for c, rec in zip(cards, f.recommendations, strict=True):
        _check_card(c, rec, docs[rec.code])
    assert cards[1].find("p", class_="note").norm_text() == f.recommendations[1].merged_note
    assert "dense, short sequence" in doc.by_id("workload").norm_text()
    assert doc.by_id("kpi-top-saving").find(class_="kpi-value").norm_text() == f"−{ms(f.recommendations[0].estimated_saving_ps)} ms"
    assert "RM001" in doc.by_id("first-action").norm_text()
    # Cards come right after the summary: the first screen answers "what to change first".
    sections = [n.attrs["id"] for n in doc.find_all("section")]
    assert sections[:2] == ["summary", "recommendations"]


def test_without_findings_and_with_none():
    a = analysis_of(ANALYSES_IDS[0])
    doc = parse(_render(a, None))
    assert doc.by_id("recs-status").attrs["data-status"] == "unavailable"
    assert not doc.find_all("article")
    empty = Findings((), None, ("RM001",))
    doc = parse(_render(a, empty))
    assert doc.by_id("recs-status").attrs["data-status"] == "empty"


def test_deterministic_and_timestamp_only_when_given():
    a = analysis_of(ANALYSES_IDS[0])
    f, docs = handmade_findings(a)
    h1 = _render(a, f, docs=docs)
    assert h1 == _render(a, f, docs=docs)
    assert 'id="timestamp"' not in h1
    h2 = _render(a, f, docs=docs, timestamp="2026-01-02T03:04:05Z")
    assert parse(h2).by_id("timestamp").norm_text() == "2026-01-02T03:04:05Z"


def test_missing_timeline_and_ops_render():
    """Degenerate analyses (no timeline, no ops, no collectives) still render."""
    a = analysis_of(ANALYSES_IDS[0])
    bare = replace(a, timeline=None, top_ops=(), remat_ops=(), kernel_ops=(), collectives={}, per_core=())
    doc = parse(_render(bare, None))
    assert doc.by_id("timeline").find("svg") is None
    assert doc.by_id("roofline").find("svg") is None
    assert not doc.by_id("top-ops-table").find("tbody").find_all("tr")


def test_reports_folder_is_current():
    """reports/ holds the report of every sample trace (`make reports`)."""
    stale = []
    for name in ANALYSES_IDS:
        for suffix, text in ((".report.html", render_case(name)), (".report.md", markdown_case(name))):
            p = ROOT / "reports" / f"{name}{suffix}"
            if not p.exists() or p.read_text(encoding="utf-8") != text:
                stale.append(p.name)
    assert not stale, f"reports/ is stale, run `make reports` (python tools/make_reports.py): {stale}"


def test_output_path_and_input_hash(tmp_path):
    from profanalyzer.core.outputs import default_output_path, trace_stem

    assert str(default_output_path("sample_traces/x.xplane.pb.gz")) == "x.report.html"
    assert trace_stem("a/b.xplane.pb") == "b"
    assert trace_stem("runs/plugins/profile/2024_01_01/") == "2024_01_01"
    run = tmp_path / "run"
    run.mkdir()
    (run / "h1.xplane.pb").write_bytes(b"b")
    (run / "h0.xplane.pb").write_bytes(b"a")
    h = file_sha256(run)
    assert len(h) == 64 and h == file_sha256(run)
    (run / "h0.xplane.pb").write_bytes(b"c")
    assert file_sha256(run) != h


def test_file_sha256_mapped_and_read_agree(tmp_path, monkeypatch):
    """The memory-mapped hash (chunk by chunk, pages dropped once hashed)
    and the plain read give hashlib's digest: several chunks, an empty file,
    a folder of both."""
    import hashlib

    import profanalyzer.core.outputs as H

    monkeypatch.setattr(H, "_HASH_CHUNK", 1 << 16)  # several chunks, the last one short
    big = tmp_path / "run" / "a.xplane.pb"
    big.parent.mkdir()
    data = bytes(range(256)) * 1000 + b"tail"
    big.write_bytes(data)
    (tmp_path / "run" / "empty.xplane.pb").write_bytes(b"")
    want_dir = hashlib.sha256(b"a.xplane.pb\0" + data + b"empty.xplane.pb\0").hexdigest()
    for mapped in (True, False):
        if not mapped:
            monkeypatch.setattr(H, "_add_mapped", lambda h, fh: False)
        assert H.file_sha256(big) == hashlib.sha256(data).hexdigest()
        assert H.file_sha256(tmp_path / "run" / "empty.xplane.pb") == hashlib.sha256(b"").hexdigest()
        assert H.file_sha256(tmp_path / "run") == want_dir
