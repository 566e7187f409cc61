"""`profanalyze explain CODE` as plain text: a rule's doc sections, lever, guide section, flags and
fixtures (findings.explain.RuleExplanation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from profanalyzer.core.shell import flags_block

if TYPE_CHECKING:  # the record it renders (built by profanalyzer.findings.explain)
    from profanalyzer.findings.explain import RuleExplanation


def format_explanation(e: RuleExplanation) -> str:
    """Plain text for the terminal."""
    return "\n".join([
        f"{e.code}  {e.title}",
        f"lever: {e.lever} — guide {e.guide_section}",
        "",
        "What it detects:", f"  {e.detects}",
        "",
        "Why it costs time:", f"  {e.why}",
        "",
        "What to change:", f"  {e.change}",
        *(["", "Flags (LIBTPU_INIT_ARGS; a finding sets those that apply to its trace):", *flags_block(e.flags)] if e.flags else []),
        "",
        f"fires on the sample {e.fires_on}; stays quiet on {e.quiet_on}",
    ])
