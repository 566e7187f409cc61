"""The notebook's cards in Jupyter: `show_cards()` registers the card
renderers of report/registry.py (NOTEBOOK_RENDERERS for an analysis,
FINDING_RENDERERS for a finding) with IPython's HTML display, by type name, so
every `Analysis` and `Finding` shows as its card; the records themselves import
no renderer. `import profanalyzer` calls it when IPython is running, and
`profanalyzer.load` again (IPython started later). Light: nothing is imported
until a card is shown.

`Shown`: an analysis and its findings as a renderer reads a run
(report.registry.Rendered), without extras.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profanalyzer.model.analysis import Analysis
    from profanalyzer.model.findings import Finding, Findings

__all__ = ["Shown", "show_cards"]


@dataclass(frozen=True)
class Shown:
    """What a renderer of a run reads (report.registry.Rendered): an analysis, its findings (None when it
    has none) and no extras (the notebook renders none)."""

    analysis: Analysis
    findings: Findings | None
    what_if: None = None
    calibration: None = None


def show_cards(ipython: Any = None) -> bool:
    """Show every Analysis and Finding as its HTML card in `ipython`'s display (by default the running
    IPython's); False when there is none. A `LoadedAnalysis` (profanalyzer.load) shows its own card, its
    findings' titles included; other notebook front ends, which call `_repr_html_`, show that one too."""
    if ipython is None:
        mod = sys.modules.get("IPython")
        ipython = mod.get_ipython() if mod is not None else None
    if ipython is None:
        return False
    html = ipython.display_formatter.formatters["text/html"]
    html.for_type_by_name("profanalyzer.model.analysis", "Analysis", _analysis_card)
    html.for_type_by_name("profanalyzer.model.findings", "Finding", _finding_card)
    return True


def _analysis_card(a: Analysis) -> str:
    from profanalyzer.report.registry import NOTEBOOK_RENDERERS

    shown = getattr(a, "_repr_html_", None)
    if shown is not None:  # profanalyzer.load's LoadedAnalysis: with its findings
        return shown()
    return NOTEBOOK_RENDERERS["card"].render(Shown(a, None))


def _finding_card(f: Finding) -> str:
    from profanalyzer.report.registry import FINDING_RENDERERS

    return FINDING_RENDERERS["card"].render(f)
