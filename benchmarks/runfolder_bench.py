"""Run-folder benchmark: a ~1 GB capture of 8 hosts' device planes in one
run folder, analysed end to end (issue #15: <= 10 s wall on 2 cores).

    python benchmarks/runfolder_bench.py [--keep DIR] [--hosts 8] [--target-mb 1024] [--layers 48]
                                         [--tasks ...] [--gz] [--before SRC_TREE]

Builds (once; reused from --keep, default /tmp/profanalyzer-runfolder) a run
folder `<keep>/<hosts>x<mb>/run/` of `dense_short_fsdp` host files from the
synthesizer (`synthesize(..., hosts=N)`: device planes plus the scenario's
small host and metadata planes), with as many steps as it takes to reach
--target-mb in all; with --gz also `<keep>/<hosts>x<mb>/run_gz/` holding the
same files gzipped (level 1). Each task runs in a fresh interpreter
(`_harness.py`): seconds inside the task, wall including start-up, and peak
RSS (VmHWM of the task's process; for the tasks that decode in worker
processes, the largest worker's peak as well, from RUSAGE_CHILDREN). Tasks:

  touch_floor   as in `e2e_bench.py` (XSpace.FromString + reading each device
                event's three fields in Python), over every host file, one
                process: the floor the ratios are against
  profanalyze   `profanalyze RUN -o x.html -q`, as a user runs it
  stages        the same steps in process, each timed: read (load_trace, host
                files in worker processes), analysis, rules, HTML (including
                the wait for the input hash)
  read_threads  load_trace alone, as profanalyze runs it (planes of --jobs
                files at a time on one pool of threads, in process)
  read_processes  the previous mechanism, for comparison: _load_host of each
                file in 2 worker processes, planes pickled back
  read_jobs     load_trace alone with jobs 1, 2 and 3 in one interpreter
  before        `profanalyze RUN -o x.html -q` with the package of --before
                (a source tree of an earlier commit, e.g. from `git archive`)
  pickle        one host file's decoded planes: _load_host, then pickle
                (what a worker sends back) and unpickle, bytes and seconds

No timing is asserted anywhere; numbers go into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, warm_up  # noqa: E402
from e2e_bench import TASKS as E2E_TASKS  # noqa: E402

_CHILDREN = (
    "import resource\n"
    "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
)

TASKS = {
    "touch_floor": (
        "from pathlib import Path\n"
        "from profanalyzer.read.xspace import xplane_pb2 as pb\n"
        "n = 0\n"
        "for f in sorted(Path(PATH).iterdir()):\n"
        "    sp = pb.XSpace.FromString(open(f, 'rb').read())\n"
        "    for p in sp.planes:\n"
        "        if p.name.startswith('/device:'):\n"
        "            for ln in p.lines:\n"
        "                for e in ln.events:\n"
        "                    a = e.metadata_id; b = e.offset_ps; c = e.duration_ps; n += 1\n"
        "    del sp\n"
        "note = n\n"
    ),
    "profanalyze": (
        "import sys\n"
        "if len(sys.argv) > 3: sys.path.insert(0, sys.argv[3])\n"
        "from profanalyzer.cli import main\n"
        "rc = main([PATH, '-o', OUT, '-q'])\n"
        + _CHILDREN
        + "note = f'rc {rc}; largest worker {kids / 1024:.0f} MiB'\n"
    ),
    "stages": (
        "import gc\n"
        "from profanalyzer.analyze.analysis import AnalysisOptions, analyze_trace\n"
        "from profanalyzer.read.trace import read_trace\n"
        "from profanalyzer.findings.engine import run_rules\n"
        "from profanalyzer.report.html import render_html\nfrom profanalyzer.core.outputs import file_sha256\n"
        "opts = AnalysisOptions()\n"
        "gc.disable()\n"
        "t = [time.perf_counter()]\n"
        "model = read_trace(PATH); t.append(time.perf_counter())\n"
        "a = analyze_trace(model, opts); t.append(time.perf_counter())\n"
        "f = run_rules(a); t.append(time.perf_counter())\n"
        "html = render_html(a, f, command_line='bench', input_sha256='-'); t.append(time.perf_counter())\n"
        "digest = file_sha256(PATH); t.append(time.perf_counter())\n"
        + _CHILDREN
        + "names = ['read', 'analysis', 'rules', 'html', 'sha256 (a thread in the CLI)']\n"
        "ev = sum(p.n_events for p in model.planes)\n"
        "note = '; '.join(f'{n} {b - a:.2f} s' for n, a, b in zip(names, t, t[1:]))"
        " + f'; {len(model.hosts)} hosts, {len(model.planes)} planes, {ev:,} events; largest worker {kids / 1024:.0f} MiB'\n"
    ),
    "read_processes": (
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from pathlib import Path\n"
        "from profanalyzer.model.trace import ANALYSIS_LINES\n"
        "from profanalyzer.read.xspace.build import _load_host\n"
        "files = sorted(Path(PATH).iterdir())\n"
        "with ProcessPoolExecutor(max_workers=2) as pool:\n"
        "    res = list(pool.map(_load_host, files, [True] * len(files), [ANALYSIS_LINES] * len(files)))\n"
        + _CHILDREN
        + "note = f'{len(res)} hosts; largest worker {kids / 1024:.0f} MiB'\n"
    ),
    "read_threads": (
        "from profanalyzer.model.trace import ANALYSIS_LINES\n"
        "from profanalyzer.read.xspace.build import load_trace\n"
        "tr = load_trace(PATH, lines=ANALYSIS_LINES)\n"
        "note = f'{len(tr.hosts)} hosts'\n"
    ),
    "read_jobs": (
        "from profanalyzer.model.trace import ANALYSIS_LINES\n"
        "from profanalyzer.read.xspace.build import load_trace\n"
        "out = []\n"
        "for jobs in (1, 2, 3):\n"
        "    t1 = time.perf_counter()\n"
        "    tr = load_trace(PATH, jobs=jobs, lines=ANALYSIS_LINES)\n"
        "    out.append(f'jobs={jobs} {time.perf_counter() - t1:.2f} s')\n"
        "    del tr\n"
        "note = '; '.join(out)\n"
    ),
    "pickle": (
        "import pickle\n"
        "from pathlib import Path\n"
        "from profanalyzer.model.trace import ANALYSIS_LINES\n"
        "from profanalyzer.read.xspace.build import _load_host\n"
        "f = sorted(Path(PATH).iterdir())[0]\n"
        "t1 = time.perf_counter(); res = _load_host(f, True, ANALYSIS_LINES); t2 = time.perf_counter()\n"
        "blob = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL); t3 = time.perf_counter()\n"
        "back = pickle.loads(blob); t4 = time.perf_counter()\n"
        "note = (f'{f.name}: decode {t2 - t1:.2f} s, pickle {t3 - t2:.3f} s ({len(blob) / 1e6:.0f} MB), '\n"
        "        f'unpickle {t4 - t3:.3f} s')\n"
    ),
}


def build(run: Path, hosts: int, target_mb: int, layers: int) -> None:
    from profanalyzer.synth import synthesize

    probe, _ = synthesize("dense_short_fsdp", steps=4, layers=layers, hosts=1)
    per_step = len(probe[0][1]) / 4
    steps = max(2, math.ceil(target_mb * 1e6 / hosts / per_step))
    files, truth = synthesize("dense_short_fsdp", steps=steps, layers=layers, hosts=hosts)
    run.mkdir(parents=True, exist_ok=True)
    for name, data in files:
        (run / f"{name}.xplane.pb").write_bytes(data)
    total = sum(len(d) for _, d in files)
    print(f"built {run}: {hosts} host files, {total / 1e6:.0f} MB, {steps} steps, "
          f"{truth['counts']['device_events']:,} device events in all")


def gzip_copy(run: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(run.iterdir()):
        with open(f, "rb") as src, gzip.open(dest / (f.name + ".gz"), "wb", compresslevel=1) as out:
            while chunk := src.read(1 << 24):
                out.write(chunk)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=Path("/tmp/profanalyzer-runfolder"),
                    help="folder to build the run folder in (reused when present)")
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--target-mb", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--tasks", default="touch_floor,profanalyze,before,stages,read_threads,read_processes,pickle")
    ap.add_argument("--gz", action="store_true", help="also run profanalyze and stages on a gzipped copy")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--before", type=Path, default=None, help="source tree of an earlier version (task before)")
    args = ap.parse_args()
    root = args.keep / f"{args.hosts}x{args.target_mb}"
    run = root / "run"
    if not run.exists():
        t0 = time.perf_counter()
        build(run, args.hosts, args.target_mb, args.layers)
        print(f"(build took {time.perf_counter() - t0:.0f} s)")
    inputs = {"": run}
    if args.gz:
        gz = root / "run_gz"
        if not gz.exists():
            gzip_copy(run, gz)
        inputs["gz "] = gz
    out = root / "report.html"
    warm_up()
    load = os.getloadavg()[0]
    results: dict[str, dict] = {}
    for name in args.tasks.split(","):
        for tag, folder in inputs.items():
            if tag and name not in ("profanalyze", "stages", "before"):
                continue
            if name == "before":
                if args.before:
                    results[tag + name] = best_of(TASKS["profanalyze"], args.repeat, str(folder), str(out), str(args.before))
                continue
            body = TASKS.get(name) or E2E_TASKS[name]
            results[tag + name] = best_of(body, args.repeat, str(folder), str(out))
    floor = results.get("touch_floor", {}).get("seconds")
    size = sum(f.stat().st_size for f in run.iterdir())
    print(f"\nrun folder: {len(list(run.iterdir()))} host files, {size / 1e6:.0f} MB; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} CPUs; 1-min load average {load:.2f} at the start")
    if args.gz:
        gsize = sum(f.stat().st_size for f in inputs["gz "].iterdir())
        print(f"gzipped copy: {gsize / 1e6:.0f} MB")
    print(f"{'task':<16}{'seconds':>9}{'wall':>8}{'peak RSS MiB':>14}{'x touch floor':>15}  note")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<16}{'-':>9}{r['wall']:>8.1f}{'-':>14}{'-':>15}  error: {r['error']}")
            continue
        ratio = f"{r['seconds'] / floor:.2f}" if floor else "-"
        print(f"{name:<16}{r['seconds']:>9.2f}{r['wall']:>8.1f}{r['maxrss_kib'] / 1024:>14.0f}{ratio:>15}  {r['note']}")
    print(json.dumps({k: {kk: v for kk, v in r.items()} for k, r in results.items()}))


if __name__ == "__main__":
    main()
