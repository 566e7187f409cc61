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
    "profanalyzer": 0, "profanalyzer.core.errors": 0, "profanalyzer.core.outputs": 0, "profanalyzer.core.vocab": 0, "profanalyzer.core.format": 0, "profanalyzer.core.stats": 0,
    "profanalyzer.model.records": 1, "profanalyzer.model.parts": 1, "profanalyzer.core.hardware": 1, "profanalyzer.model.analysis": 1,
    "profanalyzer.model.invariants": 1, "profanalyzer.model.documents": 1, "profanalyzer.model.findings": 1,
    "profanalyzer.read.xspace": 2, "profanalyzer.model.trace": 2, "profanalyzer.read.xspace.build": 2, "profanalyzer.classify": 2,
    # issue #25: compiled programs (HLO text / HloProto / dump folders), the input floor
    "profanalyzer.read": 2, "profanalyzer.read.hlo": 2, "profanalyzer.read.compiled": 2,
    "profanalyzer.analyze.attribution": 3, "profanalyzer.analyze.opgroups": 3, "profanalyzer.analyze.opfamilies": 3,
    "profanalyzer.analyze.overlap": 4, "profanalyzer.analyze.critical": 4, "profanalyzer.analyze.sparsecore": 4,
    "profanalyzer.analyze.timeline": 5, "profanalyzer.analyze.scopes": 5, "profanalyzer.analyze.idle": 5, "profanalyzer.analyze.memory": 5, "profanalyzer.analyze.stepclass": 5, "profanalyzer.analyze.hostplanes": 5, "profanalyzer.analyze.expected": 5,
    "profanalyzer.analyze.analysis": 6, "profanalyzer.analyze.workload": 6,
    "profanalyzer.findings.rules": 7,
    "profanalyzer.heuristics": 8,
    "profanalyzer.findings.engine": 9, "profanalyzer.findings.verify": 9, "profanalyzer.findings.whatif": 9,
    "profanalyzer.compare.comparison": 10, "profanalyzer.compare.opmatch": 10, "profanalyzer.compare.budget": 10,
    "profanalyzer.report": 11,
    # issue #17: the interfaces for notebooks, URLs, trace viewers and agents
    "profanalyzer.core.shell": 0,
    "profanalyzer.core.version": 0, "profanalyzer.core.parallel": 0, "profanalyzer.core.arrays": 0, "profanalyzer.model.frames": 1, "profanalyzer.api.schema": 1, "profanalyzer.read.sources": 2,
    "profanalyzer.analyze.window": 6, "profanalyzer.model.window": 1, "profanalyzer.findings.explain": 10, "profanalyzer.api.notebook": 12, "profanalyzer.api.mcp_server": 13,
}
CHECKED = [
    "profanalyzer/core/outputs.py", "profanalyzer/core/vocab.py", "profanalyzer/core/format.py", "profanalyzer/core/hardware.py", "profanalyzer/model/records.py", "profanalyzer/model/parts.py", "profanalyzer/model/analysis.py", "profanalyzer/model/findings.py", "profanalyzer/model/invariants.py", "profanalyzer/model/documents.py", "profanalyzer/findings/rules.py",
    "profanalyzer/analyze/workload.py", "profanalyzer/analyze/attribution.py", "profanalyzer/analyze/overlap.py", "profanalyzer/analyze/critical.py", "profanalyzer/analyze/sparsecore.py", "profanalyzer/analyze/opgroups.py", "profanalyzer/analyze/opfamilies.py", "profanalyzer/analyze/timeline.py", "profanalyzer/analyze/scopes.py", "profanalyzer/analyze/idle.py", "profanalyzer/analyze/memory.py", "profanalyzer/analyze/stepclass.py", "profanalyzer/analyze/hostplanes.py",
    "profanalyzer/analyze/analysis.py", "profanalyzer/read/compiled.py", "profanalyzer/analyze/expected.py", "profanalyzer/findings/engine.py", "profanalyzer/compare/comparison.py", "profanalyzer/compare/opmatch.py", "profanalyzer/compare/budget.py",
    "profanalyzer/findings/verify.py",
    "profanalyzer/core/shell.py",
    "profanalyzer/core/version.py", "profanalyzer/core/parallel.py", "profanalyzer/core/arrays.py", "profanalyzer/model/frames.py", "profanalyzer/api/schema.py", "profanalyzer/read/sources.py",
    "profanalyzer/analyze/window.py", "profanalyzer/model/window.py", "profanalyzer/findings/explain.py", "profanalyzer/api/notebook.py", "profanalyzer/api/mcp_server.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "heuristics").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profanalyzer" / "read" / "hlo").glob("*.py")),
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
        own = module_of(path).rpartition(".")[0]  # a private submodule of the importer's own package (a C
        # extension beside its Python path, e.g. read/hlo/_hlo.c) is the package's own
        private = [n for n in names if n.startswith("_") and not n.startswith("__")
                   and not (mod == own and any((ROOT / Path(path).parent).glob(n + ".*")))]
        assert not private, f"{path} imports private {private} from {mod}"
    assert not up, f"{path} (floor {me}) imports upward: {up}"


def test_heuristics_never_import_findings():
    for p in (ROOT / "heuristics").glob("*.py"):
        mods = {m for m, _ in imports(str(p.relative_to(ROOT)))}
        assert "profanalyzer.findings.engine" not in mods, p.name
