"""`profanalyze synth`: write a synthesized TPU7x capture of a scenario."""

from __future__ import annotations

import os

import click

from profanalyzer.cli._common import check_outputs

_SINGLE = (".xplane.pb", ".xplane.pb.gz")


@click.command()
@click.argument("scenario")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Output .xplane.pb[.gz] file (its truth next to it as .truth.json), or a folder "
                   "(OUT/plugins/profile/<run>/<host>.xplane.pb and OUT/truth.json; needed when --hosts > 1). "
                   "The folder that holds it must exist.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--hosts", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--steps", default=None, type=click.IntRange(1, 100000), help="Steps to synthesize (scenario default otherwise).")
def synth(scenario: str, output: str, seed: int, hosts: int, steps: int | None) -> None:
    """Write a synthesized TPU7x capture of SCENARIO (and its ground truth);
    prints every file it writes, one per line."""
    from profanalyzer.synth import SCENARIOS, truth_path_for, write_scenario

    if scenario not in SCENARIOS:
        raise click.BadParameter(f"unknown scenario {scenario!r}; known: {', '.join(sorted(SCENARIOS))}", param_hint="SCENARIO")
    single = output.endswith(_SINGLE)
    if single and hosts != 1:
        raise click.BadParameter("a .xplane.pb[.gz] file holds one host; give a folder for --hosts > 1", param_hint="-o")
    truth_file = str(truth_path_for(output))
    if single:
        check_outputs([], [("-o", output), ("its truth", truth_file)])
    else:
        check_outputs([], folders=[("-o", output)])
    truth = write_scenario(scenario, output, seed=seed, hosts=hosts, steps=steps)
    written = [output] if single else [os.path.join(output, *f.split("/")) for f in truth["files"]]
    for path in [*written, truth_file]:
        click.echo(path)
