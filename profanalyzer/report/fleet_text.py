"""The terminal summary of a fleet result (fleet.records.FleetResult): per run, hosts analysed, the step,
the slowest host, stragglers, the first regressions and the calibration (plain text)."""

from __future__ import annotations


def format_fleet_summary(result) -> str:
    """The terminal summary of a FleetResult (plain text)."""

    def ms(ps):
        return "—" if ps is None else f"{ps / 1e9:.3f} ms"

    lines = [
        f"fleet: {len(result.runs)} run(s), {result.files} host file(s): {result.files_ok} analysed, "
        f"{result.files_failed} failed"
        + (f"; cache {result.cache['hits']} hit(s), {result.cache['analysed']} analysed" if result.cache.get("enabled") else "; cache off")
    ]
    for r in result.runs:
        head = f"  {r.run} [{r.time or 'time unknown'}]: {r.hosts_ok}/{r.hosts_total} hosts"
        if r.step_ps is None:
            lines.append(head + ": no host analysed")
            continue
        head += f", step {ms(r.step_ps)} mean, slowest {r.slowest_host} {ms(r.step_max_ps)}"
        lines.append(head)
        if r.critical:
            lines.append(f"      critical: {r.critical.reason}")
        if r.stragglers:
            lines.append(f"      stragglers: {', '.join(r.stragglers)}")
    if result.trend.first_regression:
        lines.append("  first regressions:")
        for m, g in result.trend.first_regression.items():
            lines.append(f"      {m}: {g.run} (+{ms(g.delta_ps)} over the median {ms(g.baseline_ps)} of {g.baseline_runs} previous run(s))")
    elif len(result.runs) > 1:
        lines.append("  no regression across runs")
    if result.calibration:
        lines.append("  calibration (predicted vs observed over consecutive runs):")
        for c in result.calibration:
            lines.append(f"      {c.sentence} (ratio {c.low_ratio:.2f}-{c.high_ratio:.2f})")
    if result.failures:
        lines.append("  failures:")
        for f in result.failures:
            lines.append(f"      {f.error}")
    return "\n".join(lines)
