"""Read benchmark: profanalyzer's reader vs a bare protobuf parse, same run.

    python benchmarks/read_bench.py [--steps N] [--layers L] [--repeat R] [--keep DIR]

Synthesizes one large single-host TPU7x capture (>= 1.5M device events by
default), then times, each in a fresh subprocess (so peak RSS is per task):

  bare_parse   XSpace.FromString(file bytes): the whole message, all planes
  read         profanalyzer.read.xspace.build.load_trace (scan + device planes + columns)
  analyze      load_trace + classification + attribution + roofline

and prints wall seconds (best of R), peak RSS and the ratios to bare_parse.
No timing is asserted anywhere; numbers go into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, warm_up  # noqa: E402

TASKS = {
    "bare_parse": (
        "from profanalyzer.read.xspace import xplane_pb2 as pb\n"
        "data = open(PATH, 'rb').read()\n"
        "sp = pb.XSpace.FromString(data)\n"
        "note = sum(len(l.events) for p in sp.planes if p.name.startswith('/device:TPU') for l in p.lines)\n"
    ),
    "read": (
        "from profanalyzer.read.xspace.build import load_trace\n"
        "tr = load_trace(PATH)\n"
        "note = sum(p.n_events for p in tr.planes)\n"
    ),
    "analyze": (
        "from profanalyzer.analyze.analysis import analyze\n"
        "a = analyze(PATH)\n"
        "note = a.steps.kept\n"
    ),
}

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="dense_short_fsdp")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="folder to keep the synthesized trace in (reused when present)")
    ap.add_argument("--tasks", default="bare_parse,read,analyze")
    args = ap.parse_args()

    from profanalyzer.synth import write_scenario

    folder = args.keep or Path(tempfile.mkdtemp(prefix="profanalyzer-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{args.scenario}-s{args.steps}-l{args.layers}.xplane.pb"
    if not path.exists():
        t0 = time.perf_counter()
        write_scenario(args.scenario, path, seed=0, steps=args.steps, layers=args.layers)
        print(f"synthesized {path} in {time.perf_counter() - t0:.1f} s")
    size_mb = path.stat().st_size / 1e6
    warm_up()
    results = {name: best_of(TASKS[name], args.repeat, str(path)) for name in args.tasks.split(",")}
    base = results.get("bare_parse")
    print(f"\ntrace: {path.name}, {size_mb:.1f} MB, python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"{'task':<12}{'seconds':>10}{'peak RSS MiB':>14}{'events/steps':>14}{'x bare_parse':>14}")
    for name, r in results.items():
        ratio = f"{r['seconds'] / base['seconds']:.2f}" if base else "-"
        print(f"{name:<12}{r['seconds']:>10.2f}{r['maxrss_kib'] / 1024:>14.0f}{int(r['note']):>14,}{ratio:>14}")
    if args.keep is None:
        path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
