"""The run's extras as terminal / Markdown lines: `analyze --what-if` (findings.whatif.WhatIf, the levers
re-timed together) and `analyze --history` (findings.verify.Calibration, the rules' predictions over
past runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records it renders (built by profanalyzer.findings)
    from profanalyzer.findings.verify import Calibration
    from profanalyzer.findings.whatif import WhatIf


def format_what_if(w: WhatIf) -> list[str]:
    """Terminal / Markdown lines."""
    out = [
        f"what-if {'+'.join(w.levers)}: step {w.base_step_ps / 1e9:.3f} -> {w.step_time_ps / 1e9:.3f} ms "
        f"(range {w.low_ps / 1e9:.3f}-{w.high_ps / 1e9:.3f} ms; saves {w.saving_ps / 1e9:.3f} ms, "
        f"the findings' savings add up to {w.sum_of_claims_ps / 1e9:.3f} ms)"
    ]
    for lv, e in w.contributions.items():
        rules = ", ".join(e.rules) or "no finding"
        out.append(f"  {lv} ({rules}): claimed {e.claimed_ps / 1e9:.3f} ms, alone {e.alone_ps / 1e9:.3f} ms, "
                   f"in the combination {e.combined_ps / 1e9:.3f} ms{' (guide bound)' if e.bounded else ''}{'; ' + e.note if e.note else ''}")
    out += [f"  note: {n}" for n in w.notes]
    return out


def format_calibration(c: Calibration) -> list[str]:
    """Terminal / Markdown lines of `analyze --history`."""
    head = f"calibration over {len(c.runs)} runs ({c.history} + this trace):"
    out = [head if c.rows else head + " no lever pulled between consecutive runs"]
    for r in c.rows:
        out.append(f"  {r.sentence} (ratio {r.low_ratio:.2f}-{r.high_ratio:.2f}; predicted {r.predicted_ps / 1e9:.3f} ms, "
                   f"credited {r.observed_ps / 1e9:.3f} ms)")
    out += [f"  this run's {r.code} estimate, read with its history: x{r.median_ratio:.2f}"
            for r in c.rows if r.code in c.own]
    return out
