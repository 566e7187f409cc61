"""profanalyzer: where did the TPU7x step go, and which tuning lever to pull next."""

import os as _os

from profanalyzer.core.version import __version__

# The rules live in the top-level heuristics/ folder (the product's layout names it) and install as
# profanalyzer.heuristics (pyproject.toml's package-dir), so nothing named `heuristics` lands in
# site-packages. Run from a source tree (no install, or an editable one), that folder is found by
# searching the tree's root too, after this package's own folder (only names this package lacks).
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "heuristics")) and _os.path.isfile(
        _os.path.join(_os.path.dirname(_here), "heuristics", "__init__.py")):
    __path__.append(_os.path.dirname(_here))

__all__ = ["__version__", "load", "show_cards"]


def show_cards(ipython=None) -> bool:
    """Show every Analysis and Finding as its HTML card (report/registry.py's NOTEBOOK_RENDERERS and
    FINDING_RENDERERS) in `ipython`'s display, by default the running IPython's; called on import when
    IPython is running. False when there is none. The types are named, not imported: `import
    profanalyzer` stays light."""
    import sys

    if ipython is None:
        mod = sys.modules.get("IPython")
        ipython = mod.get_ipython() if mod is not None else None
    if ipython is None:
        return False
    html = ipython.display_formatter.formatters["text/html"]
    html.for_type_by_name("profanalyzer.model.analysis", "Analysis", _analysis_card)
    html.for_type_by_name("profanalyzer.model.findings", "Finding", _finding_card)
    return True


def _analysis_card(a) -> str:
    from profanalyzer.report.registry import NOTEBOOK_RENDERERS

    if hasattr(a, "_repr_html_"):  # profanalyzer.load's LoadedAnalysis: with its findings
        return a._repr_html_()
    return NOTEBOOK_RENDERERS["card"].render(_Bare(a))


def _finding_card(f) -> str:
    from profanalyzer.report.registry import FINDING_RENDERERS

    return FINDING_RENDERERS["card"].render(f)


class _Bare:
    """An analysis without findings, as a renderer reads a run (report.registry.Rendered)."""

    def __init__(self, analysis) -> None:
        self.analysis, self.findings, self.what_if, self.calibration = analysis, None, None, None


def __getattr__(name: str):
    """`profanalyzer.load` (the notebook API, profanalyzer.api.notebook), imported
    on first use: `import profanalyzer` stays light for the command line."""
    if name == "load":
        from profanalyzer.api.notebook import load

        return load
    raise AttributeError(f"module 'profanalyzer' has no attribute {name!r}")


show_cards()
