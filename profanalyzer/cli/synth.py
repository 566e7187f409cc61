"""`profanalyze synth`: write a synthesized TPU7x capture of a scenario."""

from __future__ import annotations

import click


@click.command()
@click.argument("scenario")
@click.option("-o", "--output", required=True, type=click.Path(), help="Output .xplane.pb[.gz] file, or a folder when --hosts > 1.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--hosts", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--steps", default=None, type=click.IntRange(1, 100000), help="Steps to synthesize (scenario default otherwise).")
def synth(scenario: str, output: str, seed: int, hosts: int, steps: int | None) -> None:
    """Write a synthesized TPU7x capture of SCENARIO (and its ground truth)."""
    from profanalyzer.synth import SCENARIOS, write_scenario

    if scenario not in SCENARIOS:
        raise click.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(sorted(SCENARIOS))}", param_hint="SCENARIO")
    write_scenario(scenario, output, seed=seed, hosts=hosts, steps=steps)
    click.echo(output)
