"""Every `--xla_*` flag the rules and reports can print exists in the flag
list libtpu writes into a real dump (`*.flagfile` of the MaxText TPU7x
dump, libtpu 0.0.50.1): a rule that prints an unknown flag fails here.
Flags are collected from the source (string literals and f-string
templates, placeholders matching any flag-name part) and, for the flag
builders, from their output."""

from __future__ import annotations

import ast
import re
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DUMP = ROOT.parent / "shared" / "real-programs" / "maxtext_llama3.1-8b_tpu7x-16_fsdp_remat_full.tar.gz"
FLAG = re.compile(r"--(xla_[A-Za-z0-9_]*)")


def _flagfile() -> set[str]:
    with tarfile.open(DUMP) as tf:
        m = next(m for m in tf.getmembers() if m.name.endswith(".flagfile"))
        f = tf.extractfile(m)
        assert f is not None
        text = f.read().decode()
    return {m.group(1) for m in re.finditer(r"^--(xla_[A-Za-z0-9_]+)=", text, re.M)}


def _templates() -> list[tuple[str, str]]:
    """(file, regex of the flag name) for every flag text in the rules and the product."""
    out = []
    for f in sorted([*(ROOT / "heuristics").glob("*.py"), *(ROOT / "profanalyzer").rglob("*.py")]):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if id(node) in docs:  # docstrings and bare strings are prose, never printed
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "\x00"
                               for v in node.values)
                for m in re.finditer(r"--(xla_(?:[A-Za-z0-9_]|\x00)*)", text):
                    rx = "[a-z0-9_]+".join(re.escape(piece) for piece in m.group(1).split("\x00"))
                    if rx.endswith("_"):
                        continue  # a prefix in prose, not a flag
                    out.append((f.name, rx))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in FLAG.finditer(node.value):
                    if not m.group(1).endswith("_"):
                        out.append((f.name, re.escape(m.group(1))))
    return out


@pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")
def test_every_printed_flag_exists_in_libtpu():
    known = _flagfile()
    assert len(known) > 500
    templates = _templates()
    assert any("sparse_core" in rx for _, rx in templates)
    unknown = sorted({(f, rx) for f, rx in templates if not any(re.fullmatch(rx, k) for k in known)})
    assert not unknown, f"flags printed that libtpu does not know: {unknown}"


@pytest.mark.skipif(not DUMP.exists(), reason="../shared/real-programs MaxText dump not present")
def test_the_flag_builders_print_known_flags():
    from heuristics.sc_offload import enable_flags
    from profanalyzer.vocab import OFFLOADABLE, SPARSECORE_CAPTURE_HINT

    known = _flagfile()
    printed = " ".join(enable_flags(OFFLOADABLE)) + " " + SPARSECORE_CAPTURE_HINT
    names = {m.group(1) for m in FLAG.finditer(printed)}
    assert names and names <= known, sorted(names - known)
