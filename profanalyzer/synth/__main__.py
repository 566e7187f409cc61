"""``python -m profanalyzer.synth``: list scenarios or write one.

    python -m profanalyzer.synth list
    python -m profanalyzer.synth SCENARIO -o OUT.xplane.pb.gz [--seed N] [--hosts N] [--steps N] [--layers N]
"""

from __future__ import annotations

import argparse
import sys

from . import SCENARIOS, write_scenario


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["list"]:
        w = max(len(n) for n in SCENARIOS)
        for name, s in SCENARIOS.items():
            pair = f" pair={s.pair}({s.role})" if s.pair else ""
            print(f"{name:<{w}}  workload={s.workload or '-'}  lever={s.stresses or '-'}{pair}")
        return 0
    ap = argparse.ArgumentParser(prog="python -m profanalyzer.synth", description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("-o", "--out", required=True, help="FILE.xplane.pb[.gz] (one host) or a run directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    a = ap.parse_args(argv)
    truth = write_scenario(a.scenario, a.out, seed=a.seed, hosts=a.hosts, steps=a.steps, layers=a.layers)
    sm = truth["summary"]
    print(f"wrote {', '.join(truth['files'])}: {truth['counts']['xla_ops_events']} XLA Ops events, "
          f"median step {sm['step_time_ps_median'] / 1e9:.3f} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
