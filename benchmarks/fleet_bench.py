"""Fleet benchmark: 32 host files on a local Dask cluster.

    .venv/bin/python benchmarks/fleet_bench.py                 # 32 hosts, print the table
    .venv/bin/python benchmarks/fleet_bench.py --readme        # also update benchmarks/README.md

Synthesizes one run of HOSTS host files (``dense_short_fsdp``; ``--steps`` and
``--layers`` set the file size) and times ``profanalyzer.fleet.run_fleet`` end to
end (expansion, cluster start and stop, analysis, aggregation):

* 1 worker, no cache;
* all cores (one worker process per core), no cache;
* all cores, cold cache (analyse + store every record);
* all cores, cache-hit rerun (hash every file, load the records: all hits,
  so no cluster starts);
* in process (``--workers 0``, no Dask), no cache, for reference.

Every timed run must give the same fleet result (the ``cache`` counters aside);
the script checks it. Wall times are single runs (the cluster start is part of
each); the cache lives in a temporary folder, never the user's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = "<!-- fleet-bench:start -->"
END = "<!-- fleet-bench:end -->"


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _cluster_overhead(n: int) -> float:
    from dask.distributed import Client

    from profanalyzer.fleet import start_local_cluster

    t0 = time.perf_counter()
    cluster = start_local_cluster(n)
    client = Client(cluster)
    client.close()
    cluster.close()
    return time.perf_counter() - t0


def _burn(n: int) -> float:
    x = 0
    for i in range(n):
        x += i
    return float(x)


def _cpu_scaling(n: int, work: int = 15_000_000) -> float:
    """Throughput of n processes running a pure-Python loop, relative to one:
    the best speedup this machine's cores allow (n on dedicated cores)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(n) as pool:
        pool.map(_burn, [1000] * n)  # warm up the processes
        t0 = time.perf_counter()
        pool.map(_burn, [work])
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.map(_burn, [work] * n, chunksize=1)
        many = time.perf_counter() - t0
    return n * one / many


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--scenario", default="dense_short_fsdp")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="'all cores' worker count (default: os.cpu_count())")
    ap.add_argument("--out", default=None, help="folder for the synthesized run (default: a temporary folder, removed after)")
    ap.add_argument("--json", default=None, help="write the timings as JSON here")
    ap.add_argument("--readme", action="store_true", help="write the table into benchmarks/README.md (fleet section)")
    args = ap.parse_args(argv)

    import dask
    import distributed

    from profanalyzer import __version__
    from profanalyzer.fleet import run_fleet
    from profanalyzer.synth import write_scenario

    tmp = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    out = Path(args.out) if args.out else tmp / "logs"
    cache = tmp / "cache"
    try:
        t_synth, _ = _timed(lambda: write_scenario(args.scenario, out, hosts=args.hosts, seed=0, steps=args.steps, layers=args.layers))
        os.sync()  # the first timed run must not compete with the write-back of the new files
        files = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
        total_mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"synthesized {len(files)} host files ({total_mb:.0f} MB, {total_mb / len(files):.1f} MB each) in {t_synth:.1f} s", file=sys.stderr)
        paths = [str(out)]
        n = args.workers
        load = os.getloadavg()[0]
        runs = [
            ("in process (no Dask), no cache", dict(workers=0, use_cache=False)),
            ("1 worker, no cache", dict(workers=1, use_cache=False)),
            (f"{n} workers (all cores), no cache", dict(workers=n, use_cache=False)),
            (f"{n} workers, cold cache (analyse + store)", dict(workers=n, use_cache=True, cache_dir=cache)),
            (f"{n} workers, cache-hit rerun (hash + look up here; no cluster starts)", dict(workers=n, use_cache=True, cache_dir=cache)),
        ]
        rows = []
        ref = None
        for label, kw in runs:
            secs, res = _timed(lambda kw=kw: run_fleet(paths, **kw))
            if res.files_ok != len(files):
                raise SystemExit(f"'{label}': {res.files_failed} host files failed, e.g. {res.failures[0].error}")
            d = res.to_dict()
            c = d.pop("cache")
            if ref is None:
                ref = d
            elif d != ref:
                raise SystemExit(f"fleet result of '{label}' differs from the first run's")
            rows.append({"run": label, "seconds": round(secs, 2), "cache_hits": c["hits"], "analysed": c["analysed"]})
            print(f"{label:48s} {secs:7.2f} s  (hits {c['hits']}, analysed {c['analysed']})", file=sys.stderr)
        overhead = {1: _cluster_overhead(1), n: _cluster_overhead(n)}
        scaling = _cpu_scaling(n)
        base = rows[1]["seconds"]
        for r in rows:
            r["speedup_vs_1_worker"] = round(base / r["seconds"], 2) if r["seconds"] else None
        info = {
            "hosts": len(files),
            "scenario": args.scenario,
            "steps": args.steps,
            "layers": args.layers,
            "total_mb": round(total_mb, 1),
            "cpu_count": os.cpu_count(),
            "workers_all_cores": n,
            "python": platform.python_version(),
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "profanalyzer": __version__,
            "cluster_start_stop_s": {str(k): round(v, 2) for k, v in overhead.items()},
            "cpu_scaling": round(scaling, 2),
            "load_average_1min_at_start": round(load, 2),
            "runs": rows,
        }
        table = render_table(info)
        print(table)
        if args.json:
            Path(args.json).write_text(json.dumps(info, indent=2) + "\n")
        if args.readme:
            write_readme(ROOT / "benchmarks" / "README.md", table)
            print("updated benchmarks/README.md", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def render_table(info: dict) -> str:
    lines = [
        f"{info['hosts']} host files of `{info['scenario']}` (steps {info['steps']}, layers {info['layers']}; "
        f"{info['total_mb']:.0f} MB in all), {info['cpu_count']} CPU cores (1-minute load average "
        f"{info['load_average_1min_at_start']:.2f} at the start), Python {info['python']}, "
        f"dask/distributed {info['distributed']}, profanalyzer {info['profanalyzer']}. Wall time of "
        "`run_fleet` end to end (expand, start and stop the local cluster, analyse, aggregate), one run each:",
        "",
        "| Run | Wall time | vs 1 worker | Cache hits | Files analysed |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in info["runs"]:
        lines.append(f"| {r['run']} | {r['seconds']:.2f} s | {r['speedup_vs_1_worker']:.2f}x | {r['cache_hits']} | {r['analysed']} |")
    ov = info["cluster_start_stop_s"]
    lines += [
        "",
        "Starting and stopping the local cluster alone: "
        + ", ".join(f"{v:.2f} s with {k} worker{'s' if k != '1' else ''}" for k, v in ov.items())
        + f". CPU scaling of this machine: {info['workers_all_cores']} processes running a pure-Python loop "
        f"get {info['cpu_scaling']:.2f}x the throughput of one (the ceiling for the all-cores speedup). "
        "Every run above returned the same fleet result.",
    ]
    if info["cpu_scaling"] < 0.75 * info["workers_all_cores"]:
        lines += [
            "",
            f"**Caveat:** this machine's {info['cpu_count']} cores do not scale ({info['cpu_scaling']:.2f}x for "
            f"{info['workers_all_cores']} processes of pure CPU work, e.g. shared or hyper-threaded vCPUs, or other "
            "jobs running), so the all-cores rows cannot show the parallel speedup here; rerun "
            "`benchmarks/fleet_bench.py --readme` on a machine with dedicated cores.",
        ]
    return "\n".join(lines)


def write_readme(path: Path, table: str) -> None:
    section = (
        f"{START}\n## Fleet: 32 host files on a local Dask cluster\n\n"
        "`benchmarks/fleet_bench.py` (`.venv/bin/python benchmarks/fleet_bench.py --readme` rewrites this section).\n\n"
        f"{table}\n{END}\n"
    )
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
