"""Guide-lever rules: one module per lever of the TPU7x performance guide.

Each lever module exposes `RULES` (a tuple of `profanalyzer.findings.Rule`).
`registry()` returns all of them, ordered by code.
"""

from __future__ import annotations

LEVER_MODULES = ("fp8", "sharding", "sc_offload", "remat", "scoped_vmem", "tokamax")


def registry():
    import importlib

    rules = []
    for name in LEVER_MODULES:
        mod = importlib.import_module(f"heuristics.{name}")
        rules.extend(mod.RULES)
    codes = [r.code for r in rules]
    if len(set(codes)) != len(codes):
        raise RuntimeError(f"duplicate rule codes: {sorted(codes)}")
    return tuple(sorted(rules, key=lambda r: r.code))
