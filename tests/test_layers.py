"""Every import points down: read -> model -> analyze -> findings -> render.

Each module of the core has a floor; a module imports (at module level or
inside a function) only from its own floor or below, and never a private
`_name` of another module. The rules (heuristics/) import the core's lower
floors, never the findings stage that runs them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: floor of each module (lower imports nothing from higher)
FLOORS = {
    "profanalyzer": 0, "profanalyzer.errors": 0, "profanalyzer.outputs": 0, "profanalyzer.vocab": 0, "profanalyzer.format": 0, "profanalyzer.stats": 0,
    "profanalyzer.records": 1, "profanalyzer.parts": 1, "profanalyzer.hardware": 1, "profanalyzer.model": 1,
    "profanalyzer.invariants": 1, "profanalyzer.documents": 1,
    "profanalyzer.xspace": 2, "profanalyzer.trace": 2, "profanalyzer.xspace.build": 2, "profanalyzer.classify": 2,
    # issue #25: compiled programs (HLO text / HloProto / dump folders), the input floor
    "profanalyzer.hlo": 2, "profanalyzer.hlo.compiled": 2,
    "profanalyzer.analyze.attribution": 3, "profanalyzer.analyze.opgroups": 3,
    "profanalyzer.analyze.overlap": 4, "profanalyzer.analyze.sparsecore": 4,
    "profanalyzer.analyze.timeline": 5, "profanalyzer.analyze.scopes": 5, "profanalyzer.analyze.idle": 5, "profanalyzer.analyze.memory": 5, "profanalyzer.analyze.stepclass": 5, "profanalyzer.analyze.hostplanes": 5, "profanalyzer.analyze.expected": 5,
    "profanalyzer.analyze.analysis": 6, "profanalyzer.analyze.workload": 6,
    "profanalyzer.rules": 7,
    "profanalyzer.heuristics": 8,
    "profanalyzer.findings": 9, "profanalyzer.verify": 9, "profanalyzer.whatif": 9,
    "profanalyzer.compare": 10, "profanalyzer.opmatch": 10, "profanalyzer.budget": 10,
    "profanalyzer.report": 11,
    # issue #17: the interfaces for notebooks, URLs, trace viewers and agents
    "profanalyzer.shell": 0,
    "profanalyzer.version": 0, "profanalyzer.parallel": 0, "profanalyzer.arrays": 0, "profanalyzer.frames": 1, "profanalyzer.schema": 1, "profanalyzer.xspace.sources": 2,
    "profanalyzer.perfetto": 6, "profanalyzer.explain": 10, "profanalyzer.notebook": 12, "profanalyzer.mcp_server": 13,
}
CHECKED = [
    "profanalyzer/outputs.py", "profanalyzer/vocab.py", "profanalyzer/format.py", "profanalyzer/hardware.py", "profanalyzer/records.py", "profanalyzer/parts.py", "profanalyzer/model.py", "profanalyzer/invariants.py", "profanalyzer/documents.py", "profanalyzer/rules.py",
    "profanalyzer/analyze/workload.py", "profanalyzer/analyze/attribution.py", "profanalyzer/analyze/overlap.py", "profanalyzer/analyze/sparsecore.py", "profanalyzer/analyze/opgroups.py", "profanalyzer/analyze/timeline.py", "profanalyzer/analyze/scopes.py", "profanalyzer/analyze/idle.py", "profanalyzer/analyze/memory.py", "profanalyzer/analyze/stepclass.py", "profanalyzer/analyze/hostplanes.py",
    "profanalyzer/analyze/analysis.py", "profanalyzer/hlo/compiled.py", "profanalyzer/analyze/expected.py", "profanalyzer/findings.py", "profanalyzer/compare.py", "profanalyzer/opmatch.py", "profanalyzer/budget.py",
    "profanalyzer/verify.py",
    "profanalyzer/shell.py",
    "profanalyzer/version.py", "profanalyzer/parallel.py", "profanalyzer/arrays.py", "profanalyzer/frames.py", "profanalyzer/schema.py", "profanalyzer/xspace/sources.py",
    "profanalyzer/perfetto.py", "profanalyzer/explain.py", "profanalyzer/notebook.py", "profanalyzer/mcp_server.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "heuristics").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profanalyzer" / "hlo").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profanalyzer" / "report").glob("*.py") if p.name != "fleet_html.py"),
]


def floor(module: str) -> int | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        f = FLOORS.get(".".join(parts[:n]))
        if f is not None:
            return f
    return None


def module_of(path: str) -> str:
    """The module a file installs as (heuristics/ is profanalyzer.heuristics)."""
    name = path[:-3].replace("/", ".").removesuffix(".__init__")
    return "profanalyzer." + name if name.split(".")[0] == "heuristics" else name


def imports(path: str):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


@pytest.mark.parametrize("path", CHECKED)
def test_imports_point_down(path):
    me = floor(module_of(path))
    assert me is not None, path
    up = []
    for mod, names in imports(path):
        if not mod.startswith("profanalyzer"):
            continue
        targets = [mod] + [f"{mod}.{n}" for n in names]  # `from profanalyzer.report import svg`
        f = min((x for x in (floor(t) for t in targets) if x is not None), default=None)
        if mod in ("profanalyzer", "profanalyzer.report") and names:
            f = max(floor(t) or 0 for t in targets[1:])
        if f is not None and f > me:
            up.append(mod)
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{path} imports private {private} from {mod}"
    assert not up, f"{path} (floor {me}) imports upward: {up}"


def test_heuristics_never_import_findings():
    for p in (ROOT / "heuristics").glob("*.py"):
        mods = {m for m, _ in imports(str(p.relative_to(ROOT)))}
        assert "profanalyzer.findings" not in mods, p.name
