"""profanalyzer: where did the TPU7x step go, and which tuning lever to pull next."""

import os as _os
import sys as _sys

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


def __getattr__(name: str):
    """`profanalyzer.load` (the notebook API, profanalyzer.api.notebook) and
    `profanalyzer.show_cards` (profanalyzer.api.cards), imported on first use:
    `import profanalyzer` stays light for the command line."""
    if name == "load":
        from profanalyzer.api.notebook import load

        return load
    if name == "show_cards":
        from profanalyzer.api.cards import show_cards

        return show_cards
    raise AttributeError(f"module 'profanalyzer' has no attribute {name!r}")


if "IPython" in _sys.modules:  # a notebook: its display shows the records as their cards (api/cards.py)
    from profanalyzer.api.cards import show_cards as _show_cards

    _show_cards()
