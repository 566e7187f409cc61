"""Write a large synthesized TPU7x capture for reader benchmarks.

    .venv/bin/python benchmarks/make_big_trace.py [OUT] [--events N] [--scenario NAME] [--layers L]

Picks the number of steps so that the one host file holds at least N XLA Ops events
(default 1.5M) and prints the counts and the time taken. Defaults: dense_short_fsdp,
48 layers, OUT = out/big_trace.xplane.pb (add .gz to compress).
"""

from __future__ import annotations

import argparse
import math
import time

from profanalyzer.synth import synthesize, write_scenario


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="out/big_trace.xplane.pb")
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--scenario", default="dense_short_fsdp")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    # measure events per step with a 2-step probe, then size the run
    _, probe = synthesize(a.scenario, steps=2, layers=a.layers, seed=a.seed)
    per_step = probe["counts"]["xla_ops_events"] / 2
    steps = max(2, math.ceil(a.events / per_step))
    t0 = time.perf_counter()
    truth = write_scenario(a.scenario, a.out, steps=steps, layers=a.layers, seed=a.seed)
    dt = time.perf_counter() - t0
    c = truth["counts"]
    print(f"{a.out}: scenario={a.scenario} layers={a.layers} steps={steps} "
          f"xla_ops_events={c['xla_ops_events']} device_events={c['device_events']} in {dt:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
