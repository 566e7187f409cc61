"""One vocabulary: every bucket, lever and chip is tied to what it needs
(label, colour, kind; guide section and a rule; chip spec and CLI choice),
and the modules that used to keep copies read the tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from profanalyzer.core import vocab
from profanalyzer.core.hardware import CHIPS
from profanalyzer.report import svg

GUIDE = Path(__file__).resolve().parent.parent.parent / "shared" / "guide" / "tpu7x-performance-guide.md"
HEX = re.compile(r"^#[0-9A-Fa-f]{6}$")


def test_every_bucket_has_label_colour_kind():
    assert len(set(vocab.BUCKETS)) == len(vocab.BUCKETS)
    for b in vocab.BUCKET_TABLE:
        assert b.label and b.label == vocab.BUCKET_LABELS[b.name]
        assert HEX.match(b.colour) and svg.colour(b.name) == b.colour
        assert b.kind in ("matmul", "compute", "collective", "transfer", "idle")
        assert (b.precision is not None) == (b.kind == "matmul"), b.name
    assert len({b.colour.upper() for b in vocab.BUCKET_TABLE}) == len(vocab.BUCKET_TABLE), "colours tell buckets apart"
    assert [b.name for b in vocab.BUCKET_TABLE if b.kind == "idle"] == ["idle"]


def test_bucket_kinds_partition_and_match_classification():
    from profanalyzer import classify

    kinds = (vocab.MATMUL_BUCKETS | vocab.COLLECTIVE_BUCKETS | (vocab.COMPUTE_BUCKETS - vocab.MATMUL_BUCKETS)
             | {b.name for b in vocab.BUCKET_TABLE if b.kind == "transfer"} | {"idle"})
    assert kinds == set(vocab.BUCKETS)
    assert not vocab.COLLECTIVE_BUCKETS & vocab.COMPUTE_BUCKETS
    # classify re-exports the same objects (no copy)
    assert classify.BUCKETS is vocab.BUCKETS and classify.COLLECTIVE_BUCKETS is vocab.COLLECTIVE_BUCKETS
    assert classify.COMPUTE_BUCKETS is vocab.COMPUTE_BUCKETS and classify.PHASES is vocab.PHASES
    # every collective kind maps to a collective bucket; every collective type has a kind or is unknown
    assert set(vocab.COLLECTIVE_KIND_BUCKET.values()) <= vocab.COLLECTIVE_BUCKETS
    assert set(classify.COLLECTIVES) | {"unknown"} == set(vocab.COLLECTIVE_TYPES)
    assert set(classify.COLLECTIVES) <= set(k for k in vocab.COLLECTIVE_KIND_BUCKET if k)
    assert list(vocab.COLLECTIVE_TYPE_LABELS) == list(vocab.COLLECTIVE_TYPES) and all(vocab.COLLECTIVE_TYPE_LABELS.values())
    assert set(vocab.OFFLOADABLE) <= set(vocab.COLLECTIVE_TYPES)


def test_matmul_precisions_have_peaks():
    chip = CHIPS["tpu7x"]
    for b in vocab.BUCKET_TABLE:
        if b.kind == "matmul" and b.precision != "other":
            assert getattr(chip, f"core_peak_{b.precision}_flops") > 0


def test_every_lever_has_section_label_and_rules():
    from profanalyzer.heuristics import LEVER_MODULES, registry

    rules = registry()
    assert [lv.section for lv in vocab.LEVER_TABLE] == [f"L{i}" for i in range(1, len(vocab.LEVER_TABLE) + 1)]
    assert set(LEVER_MODULES) == set(vocab.LEVERS)
    for lv in vocab.LEVER_TABLE:
        assert lv.label and lv.title
        assert any(r.lever == lv.id for r in rules), f"lever {lv.id} has no rule"
        assert vocab.GUIDE_SECTIONS[lv.id].startswith(f"{lv.section} — ")
    assert {r.lever for r in rules} <= set(vocab.LEVERS)


def test_every_rule_finding_cites_its_lever_section():
    from profanalyzer.heuristics import registry
    from profanalyzer.pipeline.run import run_analysis

    a = run_analysis(Path(__file__).resolve().parent.parent / "sample_traces" / "bf16_dense.xplane.pb.gz")
    for r in registry():
        f = r.finding(a, 0.0, ["e"], ["a"])
        assert f.guide_section == vocab.LEVER_BY_ID[r.lever].guide_section and f.lever == r.lever


@pytest.mark.skipif(not GUIDE.exists(), reason="the guide (../shared/guide/) is not in this checkout")
def test_lever_sections_exist_in_the_guide():
    headings = [line[3:].strip() for line in GUIDE.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    for lv in vocab.LEVER_TABLE:
        want = f"{lv.section} — {lv.title} (`{lv.id}`)"
        assert want in headings, f"guide has no heading {want!r}"


def test_every_chip_has_a_spec_and_a_cli_choice():
    assert set(vocab.CHIP_CHOICES) == set(CHIPS)
    for c in vocab.CHIP_TABLE:
        assert CHIPS[c.key].name == c.display
        assert c.key in vocab.CHIP_CHOICES


def test_cli_chip_options_offer_exactly_the_chips():
    import click

    from profanalyzer.cli import cli

    def walk(cmd):
        yield cmd
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)

    seen = 0
    for cmd in walk(cli):
        for p in cmd.params:
            if p.name == "chip":
                assert isinstance(p.type, click.Choice)
                assert sorted(p.type.choices) == sorted(vocab.CHIP_CHOICES), cmd.name
                seen += 1
    assert seen >= 1


def test_no_copies_of_the_tables_left():
    root = Path(__file__).resolve().parent.parent
    sources = [p for d in ("profanalyzer", "heuristics") for p in (root / d).rglob("*.py")
               if "templates_compiled" not in p.parts and p.name != "vocab.py" and "synth" not in p.parts]
    copies = {
        "bucket colour table": re.compile(r'"matmul_bf16":\s*"#'),
        "bucket label table": re.compile(r'"matmul_bf16":\s*"Matmul'),
        "lever label table": re.compile(r'"sc_offload":\s*"SparseCore offload"'),
        "guide section table": re.compile(r'"fp8":\s*"L1'),
        "compute bucket list": re.compile(r'\("matmul_bf16", "matmul_fp8", "matmul_other", "attention", "other_compute"'),
        "phase list": re.compile(r'\("forward", "backward", "optimizer"\)'),
    }
    found = [f"{p.relative_to(root)}: {what}" for p in sources for what, rx in copies.items() if rx.search(p.read_text(encoding="utf-8"))]
    assert not found, found
