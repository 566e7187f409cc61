"""Guide-lever rules: one module per lever of the TPU7x performance guide.

Each lever module exposes `RULES` (a tuple of `profanalyzer.findings.rules.Rule`) and
imports only the core's lower floors (rules, model, vocab, format, workload).
`registry()` returns all of them, ordered by code.
"""

from __future__ import annotations

from profanalyzer.core.vocab import LEVERS

#: One module per guide lever, named by the lever id.
LEVER_MODULES = LEVERS


def registry():
    import importlib

    rules = []
    for name in LEVER_MODULES:
        mod = importlib.import_module(f".{name}", __name__)
        rules.extend(mod.RULES)
    codes = [r.code for r in rules]
    if len(set(codes)) != len(codes):
        raise RuntimeError(f"duplicate rule codes: {sorted(codes)}")
    return tuple(sorted(rules, key=lambda r: r.code))
